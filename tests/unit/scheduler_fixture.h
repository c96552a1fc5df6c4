// The scheduler test fixture: a Scheduler over an in-memory transport and a fake clock, with the
// test thread playing every node (scheduler_test.cc, scheduler_placement_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "cluster/scheduler.h"
#include "tests/support/fake_clock.h"
#include "tests/support/fake_transport.h"

namespace byteps::cluster {

using protocol::Header;
using protocol::Opcode;
using protocol::RegisterReply;
using protocol::RegisterRequest;
using testing::FakeClock;
using testing::FakeConnection;
using testing::FakeTransport;
using testing::SentFrame;
using Conn = std::shared_ptr<FakeConnection>;

inline bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

inline Header Hdr(Opcode op, uint64_t key = 0, uint16_t flags = 0, uint32_t arg = 0) {
  Header h;
  h.opcode = op;
  h.key = key;
  h.flags = flags;
  h.arg = arg;
  return h;
}

class SchedulerTest : public ::testing::Test {
 protected:
  void Start(int workers, int servers, double reconnect_timeout_s = 5) {
    SchedulerOptions o;
    Start(workers, servers, reconnect_timeout_s, o);
  }
  void Start(int workers, int servers, double reconnect_timeout_s, SchedulerOptions o) {
    num_workers_ = workers;
    num_servers_ = servers;
    o.num_workers = workers;
    o.num_servers = servers;
    o.start_timeout_s = 60;
    o.heartbeat_timeout_s = 15;
    o.reconnect_timeout_s = reconnect_timeout_s;
    o.clock = &clock_;
    auto t = std::make_unique<FakeTransport>();
    transport_ = t.get();
    auto s = Scheduler::Start(o, std::move(t));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    scheduler_ = std::move(s.value());
  }

  void TearDown() override { scheduler_.reset(); }

  RegisterRequest Request(const std::string& role, int rank, int pid) const {
    RegisterRequest r;
    r.role = role;
    r.requested_rank = rank;
    r.host = "10.0.0." + std::to_string(pid);
    r.port = role == "server" ? 9000 + pid : 0;
    r.pid = pid;
    r.num_workers = num_workers_;
    r.num_servers = num_servers_;
    r.instance = "node-" + std::to_string(pid);
    return r;
  }

  // A new connection that registers `r`.
  Conn Register(const RegisterRequest& r) {
    Conn c = transport_->Accept("peer-" + std::to_string(r.pid));
    EXPECT_TRUE(c->Deliver(Hdr(Opcode::kRegister), protocol::Encode(r)).ok());
    return c;
  }
  Conn Register(const std::string& role, int rank, int pid) { return Register(Request(role, rank, pid)); }

  // The next frame on c, which must be a RegisterReply.
  RegisterReply Reply(const Conn& c) {
    auto f = c->NextSent();
    if (!f || f->header.opcode != Opcode::kRegisterReply) {
      ADD_FAILURE() << "no RegisterReply on " << c->peer_name();
      return {};
    }
    auto r = protocol::DecodeRegisterReply(f->payload);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r.value() : RegisterReply{};
  }

  // The next frame on c, which must have opcode `op`.
  SentFrame Expect(const Conn& c, Opcode op) {
    auto f = c->NextSent();
    if (!f) {
      ADD_FAILURE() << "nothing sent on " << c->peer_name() << " (expected " << protocol::OpcodeName(op) << ")";
      return {};
    }
    EXPECT_EQ(f->header.opcode, op) << protocol::OpcodeName(f->header.opcode) << " instead";
    return *f;
  }

  // Registers workers w0..w(n-1) (arrival order = rank) and servers; every reply read.
  std::vector<Conn> StartJob() {
    std::vector<Conn> conns;
    for (int w = 0; w < num_workers_; ++w) conns.push_back(Register("worker", -1, 100 + w));
    for (int s = 0; s < num_servers_; ++s) conns.push_back(Register("server", -1, 200 + s));
    for (auto& c : conns) EXPECT_EQ(Reply(c).error, "");
    return conns;
  }

  FakeClock clock_;
  FakeTransport* transport_ = nullptr;  // owned by scheduler_
  std::unique_ptr<Scheduler> scheduler_;
  int num_workers_ = 0, num_servers_ = 0;
};

}  // namespace byteps::cluster
