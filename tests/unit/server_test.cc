// The server's request router against an in-memory connection: Hello and InitKey checks, pushes
// routed to their shard and answered, and a payload the server has no memory for failing only
// that request (an Error naming the tensor), never the connection or the server.
#include "server/server.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "protocol/control.h"
#include "protocol/error_frame.h"
#include "tests/support/fake_transport.h"
#include "tests/support/typed_values.h"

namespace byteps::server {
namespace {

using protocol::Header;
using protocol::Opcode;
using testing::FakeConnection;

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class ServerTest : public ::testing::Test {
 protected:
  ServerTest() : server_(Options()), conn_(std::make_shared<FakeConnection>("127.0.0.1:5000", &server_)) {}
  ~ServerTest() override { conn_->Close(Aborted("test over")); }

  static ServerOptions Options() {
    ServerOptions o;
    o.num_workers = 1;
    o.engine_threads = 2;
    return o;
  }

  static Header Hdr(Opcode op, uint64_t key = 0, uint32_t round = 0, uint64_t request_id = 0) {
    Header h;
    h.opcode = op;
    h.key = key;
    h.round = round;
    h.request_id = request_id;
    h.dtype = static_cast<uint8_t>(DataType::kFloat32);
    return h;
  }

  void Declare(uint64_t key, const std::string& name, uint64_t bytes) {
    protocol::KeyInit k{name, bytes, static_cast<int>(DataType::kFloat32), bytes, protocol::kOpSum, ""};
    ASSERT_TRUE(conn_->Deliver(Hdr(Opcode::kInitKey, key), protocol::Encode(k)).ok());
  }

  Server server_;
  std::shared_ptr<FakeConnection> conn_;
};

TEST_F(ServerTest, FramesBeforeHelloAreRefused) {
  Status st = conn_->Deliver(Hdr(Opcode::kPushPull, 1, 1, 1), "abcd");
  EXPECT_EQ(st.code(), StatusCode::kProtocol);
  EXPECT_TRUE(Has(st.message(), "before Hello")) << st.message();
  EXPECT_TRUE(conn_->closed());
}

TEST_F(ServerTest, AHelloFromAnUnknownRankIsRefused) {
  Header h = Hdr(Opcode::kHello);
  h.sender = 1;  // the job has one worker: rank 0
  ASSERT_TRUE(conn_->Deliver(h).ok());
  EXPECT_TRUE(conn_->closed());
}

TEST_F(ServerTest, PushesAreSummedAndAnswered) {
  ASSERT_TRUE(conn_->Deliver(Hdr(Opcode::kHello)).ok());
  EXPECT_TRUE(Has(conn_->peer_name(), "worker 0")) << conn_->peer_name();
  Declare(3, "w", 8);
  const auto data = testing::Encode(DataType::kFloat32, {1.5, -2});
  ASSERT_TRUE(conn_->Deliver(Hdr(Opcode::kPushPull, 3, 1, 17), std::string(data.begin(), data.end())).ok());
  auto f = conn_->NextSent();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->header.opcode, Opcode::kPushPullReply);
  EXPECT_EQ(f->header.request_id, 17u);
  EXPECT_EQ(f->payload, std::string(data.begin(), data.end()));  // one worker: the sum is its push
}

TEST_F(ServerTest, APayloadThatCannotBeAllocatedFailsOnlyThatRequest) {
  ASSERT_TRUE(conn_->Deliver(Hdr(Opcode::kHello)).ok());
  Declare(3, "embedding", 8);
  // As the transport would call the handler for a push the server cannot hold (past what any
  // allocation can give): the server asks for the payload to be dropped, then routes the failure.
  Header huge = Hdr(Opcode::kPushPull, 3, 1, 41);
  huge.payload_len = std::numeric_limits<uint64_t>::max();
  auto target = server_.OnHeader(*conn_, huge);
  ASSERT_TRUE(target.ok()) << target.status().ToString();
  ASSERT_TRUE(target->discard);
  server_.OnFrame(*conn_, huge, std::move(target.value()));
  auto f = conn_->NextSent();
  ASSERT_TRUE(f.has_value());
  ASSERT_EQ(f->header.opcode, Opcode::kError);
  EXPECT_EQ(f->header.request_id, 41u);
  Status st = protocol::StatusFromErrorFrame(f->header, f->payload);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Has(st.message(), "tensor 'embedding' key 3 round 1 from worker 0")) << st.message();
  EXPECT_TRUE(Has(st.message(), "cannot allocate")) << st.message();
  EXPECT_TRUE(Has(st.message(), "127.0.0.1:5000")) << st.message();
  // The connection and the server go on: the same round, sent again, is summed.
  EXPECT_FALSE(conn_->closed());
  const auto data = testing::Encode(DataType::kFloat32, {3, 4});
  ASSERT_TRUE(conn_->Deliver(Hdr(Opcode::kPushPull, 3, 1, 42), std::string(data.begin(), data.end())).ok());
  auto reply = conn_->NextSent();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->header.opcode, Opcode::kPushPullReply);
  EXPECT_EQ(reply->header.request_id, 42u);
}

}  // namespace
}  // namespace byteps::server
