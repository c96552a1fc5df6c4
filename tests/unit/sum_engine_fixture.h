// The SumEngine test fixture: one shard against in-memory connections, and the helpers that push
// small integers (exact in every dtype) and read back what the shard sent. Shared by the shard's
// test files (sum_engine_test.cc, sum_engine_members_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "protocol/error_frame.h"
#include "server/buffer_pool.h"
#include "server/sum_engine.h"
#include "tests/support/fake_transport.h"
#include "tests/support/typed_values.h"

namespace byteps::server::test {


using protocol::Header;
using protocol::KeyInit;
using protocol::Opcode;
using testing::FakeConnection;
using testing::SentFrame;
using Conn = std::shared_ptr<FakeConnection>;

inline bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

constexpr uint64_t kFenceKey = ~0ull;

class SumEngineTest : public ::testing::Test {
 protected:
  void Start(int num_workers) {
    for (int w = 0; w < num_workers; ++w) conns_.push_back(NewConn("worker " + std::to_string(w)));
    engine_ = std::make_unique<SumEngine>(0, num_workers);
  }
  void TearDown() override { engine_.reset(); }

  Conn NewConn(const std::string& name) { return std::make_shared<FakeConnection>(name, nullptr); }

  void Init(uint64_t key, int worker, const KeyInit& init) { engine_->Post(InitTask{key, worker, conns_[worker], init}); }
  void Init(uint64_t key, DataType dt, size_t count, const std::string& name = "grad",
            const std::string& op = protocol::kOpSum, const std::string& attrs = "") {
    KeyInit k{name, count * DataTypeSize(dt), static_cast<int>(dt), count * DataTypeSize(dt), op, attrs};
    for (int w = 0; w < static_cast<int>(conns_.size()); ++w) Init(key, w, k);
  }

  // A push of `bytes` (copied into a pooled buffer, as the server receives it).
  void Push(uint64_t key, uint32_t round, int worker, const std::vector<uint8_t>& bytes, DataType dt,
            uint64_t request_id = 0, Conn on = nullptr, uint64_t generation = 0, bool joined_share = false) {
    PushTask t;
    t.generation = generation;
    t.joined_share = joined_share;
    t.key = key;
    t.round = round;
    t.worker = worker;
    t.request_id = request_id != 0 ? request_id : 1000 * round + worker;
    t.dtype = static_cast<uint8_t>(dt);
    t.conn = on != nullptr ? on : conns_[worker];
    t.data = pool_.Get(bytes.size()).value();
    if (!bytes.empty()) std::memcpy(t.data.get(), bytes.data(), bytes.size());
    t.bytes = bytes.size();
    engine_->Post(std::move(t));
  }

  // Waits until the shard has handled everything posted so far.
  void Drain() {
    Conn fence = NewConn("fence");
    PushTask t;
    t.key = kFenceKey;
    t.round = 1;
    t.conn = fence;
    t.data = pool_.Get(0).value();
    engine_->Post(std::move(t));
    auto f = fence->NextSent();
    ASSERT_TRUE(f && f->header.opcode == Opcode::kError) << "the shard did not answer the fence";
  }

  static SentFrame Next(const Conn& c, Opcode op) {
    auto f = c->NextSent();
    if (!f) {
      ADD_FAILURE() << "nothing sent to " << c->peer_name() << " (expected " << protocol::OpcodeName(op) << ")";
      return {};
    }
    EXPECT_EQ(f->header.opcode, op) << protocol::OpcodeName(f->header.opcode) << ": " << f->payload;
    return *f;
  }
  static Status NextError(const Conn& c) {
    SentFrame f = Next(c, Opcode::kError);
    return protocol::StatusFromErrorFrame(f.header, f.payload);
  }

  BufferPool pool_;                  // outlives every buffer: declared first, destroyed last
  std::vector<Conn> conns_;          // worker w's data connection
  std::unique_ptr<SumEngine> engine_;
};

// Worker w's element i: small integers, so every sum is exact in every dtype.
inline double Value(int w, size_t i, uint32_t round) { return static_cast<double>((w + 1) * ((i + round) % 4)); }

inline std::vector<double> Values(int w, size_t n, uint32_t round) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = Value(w, i, round);
  return v;
}

inline std::vector<double> Sum(int workers, size_t n, uint32_t round) {
  std::vector<double> v(n, 0);
  for (int w = 0; w < workers; ++w)
    for (size_t i = 0; i < n; ++i) v[i] += Value(w, i, round);
  return v;
}

inline std::string Bytes(const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); }

}  // namespace byteps::server::test
