// libFuzzer target: the summation server's request handling (server::Server + its SumEngine
// shards), driven the way the TCP transport drives it but with fake connections, so workers'
// Hello / InitKey / PushPull frames from several connections interleave and rounds complete.
//
// Input layout (fuzz/README.md; fuzz/make_corpus.py writes seeds):
//   byte 0            config: num_workers = 1 + (b % 3); engine_threads = 1 + ((b >> 2) & 1)
//   then records of   [selector: 1 byte][header: 48 bytes][payload: header.payload_len bytes]
//   selector bits     0-1: connection slot (4 slots); 2: the slot's connection drops and a new one
//                     replaces it before this frame (a worker reconnecting); 3: complete every
//                     held send first (the network catches up)
// Per record, as tcp::TcpConnection does: a header that does not decode closes the connection
// (kMaxPayload is the configured BYTEPS_MAX_MESSAGE_BYTES); OnHeader's error closes it; the
// payload goes into the buffer OnHeader chose (or one the harness allocates); OnFrame follows.
// Input that ends inside a frame ends the run like a peer that went away mid-frame.
// One Server per input (1-2 shard threads + an idle event loop): Shutdown drains the shards, so
// every posted task has run before the input is done.
#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/logging.h"
#include "fake_connection.h"
#include "protocol/frame.h"
#include "server/server.h"

namespace {

using namespace byteps;
using fuzz::FakeConnection;
using protocol::Header;
using protocol::Opcode;

constexpr uint64_t kMaxPayload = 1u << 20;
constexpr size_t kSlots = 4;

// A server sends nothing but replies, and a reply's length is whole elements of its dtype (a
// compressed reply: at least a codec payload's header).
void CheckServerFrame(const Header& h, const std::vector<iovec>& payload) {
  FUZZ_CHECK(h.opcode == Opcode::kPushPullReply || h.opcode == Opcode::kError);
  if (h.opcode == Opcode::kPushPullReply) {
    auto dt = DataTypeFromCode(h.dtype);
    FUZZ_CHECK(dt.has_value());
    if (h.flags & protocol::kFlagCompressed) {
      FUZZ_CHECK(h.payload_len >= 16);
    } else {
      FUZZ_CHECK(h.payload_len % DataTypeSize(*dt) == 0);
    }
    FUZZ_CHECK(h.round >= 1);
  } else {
    FUZZ_CHECK(h.payload_len > 0);  // an Error always says why
  }
}

class Harness {
 public:
  Harness(int num_workers, int engine_threads) {
    server::ServerOptions o;
    o.num_workers = num_workers;
    o.engine_threads = engine_threads;
    o.transport.max_payload_bytes = kMaxPayload;
    server_ = std::make_unique<server::Server>(o);
    for (size_t i = 0; i < kSlots; ++i) slots_[i] = NewConnection();
  }

  ~Harness() {
    // Like process exit after the transport stopped: the shards drain (every task posted so far
    // runs, sending to connections still open), the network delivers, then connections go.
    server_->Shutdown();
    for (auto& c : all_) {
      c->CompleteAll();
      c->Detach();
    }
    all_.clear();
    server_.reset();  // the pool goes last: every buffer it lent has come back
  }

  // Feeds one record; returns false when the input is used up.
  bool Step(const uint8_t*& p, const uint8_t* end) {
    if (end - p < static_cast<ptrdiff_t>(1 + protocol::kHeaderSize)) return false;
    const uint8_t sel = *p++;
    const uint8_t* hdr = p;
    p += protocol::kHeaderSize;
    std::shared_ptr<FakeConnection>& conn = slots_[sel & 3];
    if (sel & 4) {
      conn->Close(Unavailable("connection reset by peer"));
      conn = NewConnection();
    }
    if (sel & 8) {
      for (auto& c : all_) c->CompleteAll();
    }

    auto h = protocol::DecodeHeader(hdr, protocol::kHeaderSize, kMaxPayload);
    if (!h.ok()) {
      conn->Close(h.status());
      return true;
    }
    const size_t len = static_cast<size_t>(h->payload_len);
    if (conn->closed()) {  // the real transport would never read this connection again
      p += std::min<size_t>(len, static_cast<size_t>(end - p));
      return true;
    }
    auto target = server_->OnHeader(*conn, h.value());
    if (!target.ok()) {
      FUZZ_CHECK(!target.status().message().empty());
      conn->Close(target.status());
      return true;
    }
    transport::RecvBuffer b = std::move(target.value());
    if (static_cast<size_t>(end - p) < len) return false;  // the peer went away mid-frame
    if (!b.discard && b.data == nullptr && len > 0) {  // the transport allocates
      auto owned = std::make_shared<std::vector<uint8_t>>(len);
      b.data = owned->data();
      b.size = len;
      b.owner = owned;
    }
    if (!b.discard) {
      // tcp::TcpConnection closes with Internal on a mismatch: the server must never cause it.
      FUZZ_CHECK(b.size == len);
      if (len > 0) std::memcpy(b.data, p, len);
    }
    p += len;
    server_->OnFrame(*conn, h.value(), std::move(b));
    return true;
  }

 private:
  std::shared_ptr<FakeConnection> NewConnection() {
    auto c = std::make_shared<FakeConnection>("fake-peer-" + std::to_string(all_.size()), server_.get(),
                                              &CheckServerFrame);
    all_.push_back(c);
    return c;
  }

  std::unique_ptr<server::Server> server_;
  std::shared_ptr<FakeConnection> slots_[kSlots];
  std::vector<std::shared_ptr<FakeConnection>> all_;  // every connection ever made, for teardown
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  byteps::log::SetLevel(byteps::log::Level::kFatal);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int num_workers = 1 + data[0] % 3;
  const int engine_threads = 1 + ((data[0] >> 2) & 1);
  const uint8_t* p = data + 1;
  const uint8_t* end = data + size;
  Harness harness(num_workers, engine_threads);
  while (harness.Step(p, end)) {
  }
  return 0;
}
