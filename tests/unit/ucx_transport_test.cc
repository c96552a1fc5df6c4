// The UCX backend's own pieces (the conformance suite in transport_test.cc runs every Transport
// test over ucx(tcp) and ucx(sm) too): the message header, the handshake payloads, the
// registration cache and its invalidation, UCX that cannot start, a peer with another secret, and
// a peer killed mid-frame.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/tsan.h"
#include "transport/ucx/ucx_connection.h"
#include "transport/ucx/ucx_control.h"
#include "transport/ucx/ucx_reg_cache.h"
#include "transport/ucx/ucx_transport.h"
#include "transport/ucx/ucx_worker.h"
#include "transport_test_sink.h"

namespace byteps::transport::ucx {
namespace {

using protocol::Header;

TEST(UcxHeader, RoundTripsAndRefusesDamage) {
  AmHeader h;
  h.conn_id = 0x0102030405060708;
  h.token = 0xfedcba9876543210;
  h.flags = kAmFlagChecksum;
  h.crc = 0xdeadbeef;
  h.frame.opcode = protocol::Opcode::kPushPull;
  h.frame.key = 77;
  h.frame.payload_len = 5u << 20;
  uint8_t buf[kAmHeaderBytes];
  EncodeAmHeader(h, buf);
  auto back = ParseAmHeader(buf, sizeof buf);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->conn_id, h.conn_id);
  EXPECT_EQ(back->token, h.token);
  EXPECT_EQ(back->crc, h.crc);
  EXPECT_EQ(back->frame.key, 77u);
  EXPECT_EQ(back->frame.payload_len, 5u << 20);

  EXPECT_NE(ParseAmHeader(buf, sizeof buf - 1).status().message().find("UCX message header of"), std::string::npos);
  uint8_t flags[kAmHeaderBytes];
  std::memcpy(flags, buf, sizeof buf);
  flags[16] |= 0x80;
  EXPECT_NE(ParseAmHeader(flags, sizeof flags).status().message().find("unknown UCX message flags"),
            std::string::npos);
  uint8_t magic[kAmHeaderBytes];
  std::memcpy(magic, buf, sizeof buf);
  magic[24] ^= 0xff;
  EXPECT_NE(ParseAmHeader(magic, sizeof magic).status().message().find("bad magic"), std::string::npos);
}

TEST(UcxHandshake, OfferAndAnswerRoundTripAndShortPayloadsAreRefused) {
  const std::string address("\x00\x01worker-address\xff", 17);  // binary, NULs included
  const std::string offer = EncodeOffer({0x0102030405060708, 0xfedcba9876543210, address});
  ASSERT_EQ(offer.size(), 16 + address.size());
  auto o = ParseOffer(offer);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->conn_id, 0x0102030405060708u);
  EXPECT_EQ(o->token, 0xfedcba9876543210u);
  EXPECT_EQ(o->address, address);
  EXPECT_FALSE(ParseOffer(offer.substr(0, 16)).has_value());  // ids and token but no address
  EXPECT_FALSE(ParseOffer("").has_value());

  const std::string answer = EncodeAnswer({42, address});
  ASSERT_EQ(answer.size(), 8 + address.size());
  auto a = ParseAnswer(answer);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->conn_id, 42u);
  EXPECT_EQ(a->address, address);
  EXPECT_FALSE(ParseAnswer(answer.substr(0, 8)).has_value());
}

class RegistrationCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = UcxContext::Create();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    context_ = *c;
  }
  std::shared_ptr<UcxContext> context_;
};

TEST_F(RegistrationCacheTest, ARangeIsRegisteredOnceAndDroppedWhenUnmapped) {
#ifdef BYTEPS_UNDER_TSAN
  GTEST_SKIP() << "libucm's memory hooks cannot run under ThreadSanitizer (the cache does not watch there)";
#endif
  RegistrationCache cache(context_->handle());
  ASSERT_TRUE(cache.watching()) << "UCX memory events are not available here";
  const size_t len = 4u << 20;
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  auto a = cache.Get(p, len);
  auto b = cache.Get(p, len);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a.get(), b.get()) << "the same range is registered once";
  auto half = cache.Get(p, len / 2);  // another length is another key
  ASSERT_TRUE(half);
  EXPECT_NE(half.get(), a.get());
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().misses, 2u);
  a.reset();
  b.reset();
  half.reset();

  // Gone from the address space: the next Get at that address registers anew, whatever is
  // mapped there now (the same address comes back from mmap often).
  ASSERT_EQ(munmap(p, len), 0);
  void* q = mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(q, MAP_FAILED);
  auto c = cache.Get(q, len);
  ASSERT_TRUE(c);
  EXPECT_EQ(cache.stats().invalidated, 2u) << "both entries of the unmapped range are dropped";
  EXPECT_EQ(cache.stats().misses, 3u);
  EXPECT_EQ(cache.size(), 1u);
  c.reset();
  munmap(q, len);
}

TEST_F(RegistrationCacheTest, AnEntryInUseOutlivesItsInvalidationAndTheLeastRecentlyUsedIsEvicted) {
#ifdef BYTEPS_UNDER_TSAN
  GTEST_SKIP() << "libucm's memory hooks cannot run under ThreadSanitizer (the cache does not watch there)";
#endif
  RegistrationCache cache(context_->handle(), /*capacity=*/2);
  std::vector<uint8_t> x(1 << 16), y(1 << 16), z(1 << 16);
  auto held = cache.Get(x.data(), x.size());
  ASSERT_TRUE(held);
  cache.NoteUnmapped(x.data() + 100, 1);  // as a memory event would
  auto again = cache.Get(x.data(), x.size());
  ASSERT_TRUE(again);
  EXPECT_NE(held.get(), again.get()) << "a dropped entry is never handed out again";
  EXPECT_TRUE(held->memh() != nullptr) << "the operation that holds it keeps it";
  (void)cache.Get(y.data(), y.size());
  (void)cache.Get(x.data(), x.size());  // x is now the most recently used
  (void)cache.Get(z.data(), z.size());  // evicts y
  EXPECT_EQ(cache.stats().evicted, 1u);
  EXPECT_EQ(cache.size(), 2u);
  const uint64_t misses = cache.stats().misses;
  (void)cache.Get(x.data(), x.size());
  EXPECT_EQ(cache.stats().misses, misses) << "x was kept";
  (void)cache.Get(y.data(), y.size());
  EXPECT_EQ(cache.stats().misses, misses + 1) << "y was the one evicted";
}

// Over UCX's tcp and sm: a small payload arrives eagerly, a large one by rendezvous (fetched by
// UCX straight into the handler's buffer), both intact.
TEST(UcxTransport, SmallPayloadsGoEagerlyAndLargeOnesByRendezvous) {
  for (const char* tls : {"tcp", "sm"}) {
    SCOPED_TRACE(tls);
    setenv("UCX_TLS", tls, 1);
    TransportOptions o;
    o.kind = TransportKind::kUcx;
    Sink sink, mine;  // outlive the transports
    auto server = CreateTransport(o), client = CreateTransport(o);
    auto port = server->Listen("127.0.0.1", 0, &sink);
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    auto c = client->Connect("127.0.0.1", *port, &mine, 5.0);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    std::vector<uint8_t> small(4096, 1), large(4u << 20, 2);
    for (auto* v : {&small, &large}) {
      const ReceiveCounts before = ReceivedSoFar();
      Header h;
      h.opcode = protocol::Opcode::kPushPull;
      h.payload_len = v->size();
      ASSERT_TRUE((*c)->Send(h, {{v->data(), v->size()}}, [](const Status&) {}).ok());
      for (int i = 0; i < 500; ++i) {
        {
          std::lock_guard<std::mutex> lock(sink.mu_);
          if (!sink.frames_.empty() && sink.frames_.back() == v->size()) break;
        }
        usleep(10000);
      }
      const ReceiveCounts after = ReceivedSoFar();
      if (v == &small) {
        EXPECT_EQ(after.eager - before.eager, 1u);
        EXPECT_EQ(after.rndv, before.rndv);
      } else {
        EXPECT_EQ(after.rndv - before.rndv, 1u) << "a 4 MiB payload did not go by rendezvous";
      }
    }
    {
      std::lock_guard<std::mutex> lock(sink.mu_);
      ASSERT_EQ(sink.frames_.size(), 2u);
      EXPECT_EQ(sink.frames_[1], large.size());
    }
    client->Shutdown();
    server->Shutdown();
  }
  unsetenv("UCX_TLS");
}

TEST(UcxTransport, UcxThatCannotStartIsANamedErrorWithTheFallback) {
  const char* old = std::getenv("UCX_TLS");
  const std::string saved = old ? old : "";
  setenv("UCX_TLS", "no-such-transport", 1);
  TransportOptions o;
  o.kind = TransportKind::kUcx;
  auto t = CreateTransport(o);
  Sink sink;
  auto port = t->Listen("127.0.0.1", 0, &sink);
  if (old) setenv("UCX_TLS", saved.c_str(), 1); else unsetenv("UCX_TLS");
  ASSERT_FALSE(port.ok());
  EXPECT_EQ(port.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(port.status().message().find("UCX is not available here"), std::string::npos) << port.status().message();
  EXPECT_NE(port.status().message().find("UCX_TLS=no-such-transport"), std::string::npos) << port.status().message();
  EXPECT_NE(port.status().message().find("set BYTEPS_TRANSPORT=tcp"), std::string::npos) << port.status().message();
  t->Shutdown();
}

TEST(UcxTransport, APeerWithAnotherSecretNeverGetsAUcxConnection) {
  TransportOptions right, wrong;
  right.kind = wrong.kind = TransportKind::kUcx;
  right.secret = "right";
  wrong.secret = "wrong";
  Sink sink, mine;
  auto server = CreateTransport(right), intruder = CreateTransport(wrong);
  auto port = server->Listen("127.0.0.1", 0, &sink);
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  auto c = intruder->Connect("127.0.0.1", *port, &mine, 5.0);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("BYTEPS_JOB_SECRET"), std::string::npos) << c.status().ToString();
  EXPECT_TRUE(sink.frames_.empty());
  intruder->Shutdown();
  server->Shutdown();
}


// The sending process dies (SIGKILL) with a 256 MiB rendezvous frame under way: the receiver
// notices within the deadline and never delivers a partial frame, over UCX's tcp and sm.
TEST(UcxTransport, APeerKilledMidFrameIsDetected) {
#ifdef BYTEPS_UNDER_TSAN
  GTEST_SKIP() << "forks a multithreaded process that then starts threads, which ThreadSanitizer does not "
                  "support; the plain and ASan runs cover it";
#endif
  for (const char* tls : {"tcp", "sm"}) {
    SCOPED_TRACE(tls);
    setenv("UCX_TLS", tls, 1);
    Sink sink;
    TransportOptions o;
    o.kind = TransportKind::kUcx;
    auto server = CreateTransport(o);
    auto port = server->Listen("127.0.0.1", 0, &sink);
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    pid_t child = fork();
    if (child == 0) {
      auto t = CreateTransport(o);
      Sink peer;
      auto c = t->Connect("127.0.0.1", *port, &peer, 5.0);
      if (!c.ok()) _exit(2);
      static std::vector<uint8_t> big(256u << 20, 7);
      Header h;
      h.opcode = protocol::Opcode::kPushPull;
      h.payload_len = big.size();
      if (!(*c)->Send(h, {{big.data(), big.size()}}, [](const Status&) {}).ok()) _exit(3);
      usleep(20000);
      raise(SIGKILL);
    }
    ASSERT_GT(child, 0);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child did not get to send (exit " << WEXITSTATUS(status) << ")";
    ASSERT_TRUE(sink.WaitClose(std::chrono::seconds(10))) << "the dead peer was not noticed";
    {
      std::lock_guard<std::mutex> lock(sink.mu_);
      EXPECT_EQ(sink.closes_[0].code(), StatusCode::kUnavailable) << sink.closes_[0].ToString();
      for (size_t n : sink.frames_) EXPECT_EQ(n, 256u << 20) << "a partial frame was delivered";
    }
    server->Shutdown();
  }
  unsetenv("UCX_TLS");
}

}  // namespace
}  // namespace byteps::transport::ucx
