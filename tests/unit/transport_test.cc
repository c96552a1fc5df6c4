// The TCP transport on loopback, parameterised over io_threads: payload sizes from 0 to 64 MiB
// (zero-copy into the handler's buffer), ordering, scatter-gather, completion callbacks, closing,
// timeouts and hostile peers. Every wait has a deadline so a bug fails the test instead of hanging.
#include "transport/transport.h"
#include "transport/shm/shm_transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <future>
#include <numeric>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/crc32c.h"
#include "config/config.h"
#include "common/little_endian.h"
#include "protocol/auth.h"

namespace byteps::transport {
namespace {

using protocol::Header;
using protocol::Opcode;
using Clock = std::chrono::steady_clock;
constexpr auto kWait = std::chrono::seconds(5);
constexpr size_t kHeaderSizeForTest = protocol::kHeaderSize;

struct Received {
  Header header;
  RecvBuffer buffer;
};

// Records frames, closes and send completions; optional hooks choose buffers / react to frames.
// Every wait is bounded.
class Recorder : public Handler {
 public:
  using HeaderFn = std::function<StatusOr<RecvBuffer>(const Header&)>;
  using FrameFn = std::function<void(Connection&, const Header&, const RecvBuffer&)>;

  void SetOnHeader(HeaderFn fn) { Locked([&] { on_header_ = std::move(fn); }); }
  void SetOnFrame(FrameFn fn) { Locked([&] { on_frame_ = std::move(fn); }); }
  StatusOr<RecvBuffer> OnHeader(Connection&, const Header& h) override {
    HeaderFn fn = Locked([&] { return on_header_; });
    return fn ? fn(h) : StatusOr<RecvBuffer>(RecvBuffer{});
  }
  void OnFrame(Connection& conn, const Header& h, RecvBuffer b) override {
    FrameFn fn = Locked([&] { frames_.push_back({h, b}); cv_.notify_all(); return on_frame_; });
    if (fn) fn(conn, h, b);
  }
  void OnClose(Connection&, const Status& reason) override {
    Locked([&] { closes_.push_back(reason); cv_.notify_all(); });
  }
  // An on_done callback recording (id, status).
  SendCallback Done(uint64_t id) {
    return [this, id](const Status& st) { Locked([&] { done_.emplace_back(id, st); cv_.notify_all(); }); };
  }
  bool WaitFrames(size_t n, std::chrono::seconds t = kWait) { return Wait(t, [&] { return frames_.size() >= n; }); }
  bool WaitCloses(size_t n) { return Wait(kWait, [&] { return closes_.size() >= n; }); }
  bool WaitDone(size_t n) { return Wait(kWait, [&] { return done_.size() >= n; }); }
  std::vector<Received> frames() { return Locked([&] { return frames_; }); }
  std::vector<Status> closes() { return Locked([&] { return closes_; }); }
  std::vector<std::pair<uint64_t, Status>> done() { return Locked([&] { return done_; }); }

 private:
  template <typename F>
  auto Locked(F f) -> decltype(f()) {
    std::lock_guard<std::mutex> lock(mu_);
    return f();
  }
  template <typename P>
  bool Wait(std::chrono::seconds t, P pred) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, t, pred);
  }
  std::mutex mu_;
  std::condition_variable cv_;
  HeaderFn on_header_;
  FrameFn on_frame_;
  std::vector<Received> frames_;
  std::vector<Status> closes_;
  std::vector<std::pair<uint64_t, Status>> done_;
};

// Every id in `ids` completed exactly once, with `code`, and nothing else completed.
void ExpectCompletedOnce(Recorder& r, std::vector<uint64_t> ids, StatusCode code) {
  ASSERT_TRUE(r.WaitDone(ids.size())) << "only " << r.done().size() << " of " << ids.size();
  std::vector<uint64_t> got;
  for (const auto& [id, st] : r.done()) {
    got.push_back(id);
    EXPECT_EQ(st.code(), code) << "send " << id << ": " << st.ToString();
  }
  std::sort(got.begin(), got.end());
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(got, ids);
}

void ExpectError(const Status& st, StatusCode code, const std::string& needle) {
  EXPECT_EQ(st.code(), code) << st.ToString();
  EXPECT_NE(st.message().find(needle), std::string::npos) << "'" << st.message() << "' lacks '" << needle << "'";
}

Header Hdr(uint64_t key, size_t len, Opcode op = Opcode::kPushPull) {
  return Header{.opcode = op, .sender = 3, .round = 1, .key = key, .request_id = key, .payload_len = len};
}

std::vector<uint8_t> Pattern(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + (i >> 13) + seed * 7);
  return v;
}

bool SameBytes(const RecvBuffer& b, const std::vector<uint8_t>& want) {
  return b.size == want.size() && (want.empty() || std::memcmp(b.data, want.data(), want.size()) == 0);
}

// A raw loopback socket: connected to a port, or bound (optionally listening) on a fresh one.
struct RawSocket {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int port = 0;
  sockaddr_in addr{AF_INET, 0, {htonl(INADDR_LOOPBACK)}, {}};
  ~RawSocket() { ::close(fd); }
  bool Connect(int p) {
    addr.sin_port = htons(static_cast<uint16_t>(p));
    return ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  bool ConnectUnix(const std::string& name) {  // an abstract Unix socket
    ::close(fd);
    fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un u{};
    u.sun_family = AF_UNIX;
    std::memcpy(u.sun_path + 1, name.data(), name.size());
    return ::connect(fd, reinterpret_cast<sockaddr*>(&u), offsetof(sockaddr_un, sun_path) + 1 + name.size()) == 0;
  }
  bool Bind(bool listen) {
    socklen_t len = sizeof(addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || (listen && ::listen(fd, 4) != 0)) {
      return false;
    }
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
    return true;
  }
  // True once the peer has closed (EOF or reset) within the deadline.
  bool WaitPeerClosed() {
    char buf[256];
    for (auto deadline = Clock::now() + kWait; Clock::now() < deadline;) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 100) > 0 && ::recv(fd, buf, sizeof(buf), 0) <= 0) return true;
    }
    return false;
  }
};

// The conformance suite, for every backend. The parameter is io_threads, plus 100 for the secure
// mode (job secret and checksums), so every test also runs over authenticated, checksummed
// connections, plus 1000 x the backend (TransportKind: 0 auto, which picks shared memory for
// these same-host peers, 1 tcp, 2 shm, 3 ucx over UCX's tcp transport, 4 ucx over its shared
// memory: UCX_TLS=tcp / sm, read when the transport is made).
class TransportTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    opts_.io_threads = GetParam() % 100;
    if (GetParam() % 1000 >= 100) {
      opts_.secret = "transport-test-secret";
      opts_.checksum = true;
    }
    const int backend = GetParam() / 1000;
    opts_.kind = static_cast<TransportKind>(std::min(backend, 3));
    if (opts_.kind == TransportKind::kUcx) {
#ifndef BYTEPS_TEST_HAVE_UCX
      GTEST_SKIP() << "this build has no UCX (libucx-dev not found at build time)";
#endif
      setenv("UCX_TLS", backend == 3 ? "tcp" : "sm", 1);
    }
    server_ = Make(opts_);
    client_ = Make(opts_);
    auto port = server_->Listen("127.0.0.1", 0, &server_handler_);
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    port_ = port.value();
    auto conn = client_->Connect("127.0.0.1", port_, &client_handler_, 5.0);
    ASSERT_TRUE(conn.ok()) << conn.status().ToString();
    conn_ = conn.value();
  }
  void TearDown() override {
    client_->Shutdown();
    server_->Shutdown();
  }

  // Handlers outlive the transports (members are destroyed in reverse order). side_handler_ serves
  // the extra connections some tests open on client_; sent_ only collects on_done calls.
  // The backend under test: tcp, the shared-memory backend alone, or auto (CreateTransport).
  static std::unique_ptr<Transport> Make(const TransportOptions& o) {
    if (o.kind == TransportKind::kShm) return shm::CreateShmTransport(o);
    return CreateTransport(o);
  }
  Recorder server_handler_, client_handler_, side_handler_, sent_;
  TransportOptions opts_;
  std::unique_ptr<Transport> server_, client_;
  int port_ = 0;
  std::shared_ptr<Connection> conn_;
};

TEST_P(TransportTest, ZeroBytePayload) {
  Header h = Hdr(42, 0, Opcode::kHeartbeat);
  h.flags = 0x3eef;  // the top bit belongs to the transport (checksum flag)
  h.arg = 0xffffffffu;
  ASSERT_TRUE(conn_->Send(h, {}, sent_.Done(0)).ok());
  ASSERT_TRUE(server_handler_.WaitFrames(1));
  auto f = server_handler_.frames();
  EXPECT_EQ(f[0].header.opcode, Opcode::kHeartbeat);
  EXPECT_EQ(f[0].header.key, 42u);
  EXPECT_EQ(f[0].header.flags, opts_.checksum ? 0xbeef : 0x3eef);
  EXPECT_EQ(f[0].header.arg, 0xffffffffu);
  EXPECT_EQ(f[0].header.payload_len, 0u);
  EXPECT_EQ(f[0].buffer.size, 0u);
  ExpectCompletedOnce(sent_, {0}, StatusCode::kOk);
}

TEST_P(TransportTest, OddSizesIntoTransportOwnedBuffers) {
  const size_t sizes[] = {1, 3, 4097, (1u << 20) + 7};
  std::vector<std::vector<uint8_t>> data;
  for (size_t i = 0; i < std::size(sizes); ++i) data.push_back(Pattern(sizes[i], i));
  for (size_t i = 0; i < data.size(); ++i) {
    ASSERT_TRUE(conn_->Send(Hdr(i, sizes[i]), {{data[i].data(), sizes[i]}}, sent_.Done(i)).ok());
  }
  ASSERT_TRUE(server_handler_.WaitFrames(data.size()));
  auto f = server_handler_.frames();
  for (size_t i = 0; i < data.size(); ++i) {
    EXPECT_EQ(f[i].header.key, i);
    EXPECT_NE(f[i].buffer.owner, nullptr);  // the transport's allocation stays alive with the frame
    EXPECT_TRUE(SameBytes(f[i].buffer, data[i])) << "size " << sizes[i];
  }
  ExpectCompletedOnce(sent_, {0, 1, 2, 3}, StatusCode::kOk);
}

TEST_P(TransportTest, LargePayloadLandsInHandlerBuffer) {
  constexpr size_t kBig = 64u << 20;
  std::vector<uint8_t> src = Pattern(kBig, 9), dst(kBig);
  server_handler_.SetOnHeader([&dst](const Header& h) -> StatusOr<RecvBuffer> {
    if (h.payload_len != kBig) return InvalidArgument("unexpected frame");
    return RecvBuffer{dst.data(), dst.size(), nullptr, false};
  });
  ASSERT_TRUE(conn_->Send(Hdr(1, kBig), {{src.data(), kBig}}, sent_.Done(1)).ok());
  ASSERT_TRUE(server_handler_.WaitFrames(1, std::chrono::seconds(30)));
  auto f = server_handler_.frames();
  EXPECT_EQ(f[0].buffer.data, dst.data());
  EXPECT_EQ(f[0].buffer.size, kBig);
  EXPECT_TRUE(src == dst);
  ExpectCompletedOnce(sent_, {1}, StatusCode::kOk);
  EXPECT_TRUE(server_handler_.closes().empty());
}

TEST_P(TransportTest, ManySmallFramesArriveInOrderAndCompleteOnce) {
  constexpr size_t kFrames = 10000, kLen = 16;
  std::vector<uint8_t> src = Pattern(kFrames * kLen, 5);
  for (size_t i = 0; i < kFrames; ++i) {
    ASSERT_TRUE(conn_->Send(Hdr(i, kLen), {{src.data() + i * kLen, kLen}}, sent_.Done(i)).ok());
  }
  ASSERT_TRUE(server_handler_.WaitFrames(kFrames));
  auto f = server_handler_.frames();
  ASSERT_EQ(f.size(), kFrames);
  for (size_t i = 0; i < kFrames; ++i) {
    ASSERT_EQ(f[i].header.request_id, i);
    ASSERT_EQ(std::memcmp(f[i].buffer.data, src.data() + i * kLen, kLen), 0) << i;
  }
  std::vector<uint64_t> ids(kFrames);
  std::iota(ids.begin(), ids.end(), 0);
  ExpectCompletedOnce(sent_, ids, StatusCode::kOk);
}

TEST_P(TransportTest, CorkedSendsWaitForUncorkThenArriveInOrder) {
  constexpr size_t kFrames = 300, kLen = 24;
  std::vector<uint8_t> src = Pattern(kFrames * kLen, 6);
  conn_->Cork();
  conn_->Cork();  // nests
  for (size_t i = 0; i < kFrames; ++i) {
    ASSERT_TRUE(conn_->Send(Hdr(i, kLen), {{src.data() + i * kLen, kLen}}, sent_.Done(i)).ok());
  }
  conn_->Uncork();
  EXPECT_TRUE(sent_.done().empty());  // still corked: only queued, nothing written
  conn_->Uncork();
  ASSERT_TRUE(server_handler_.WaitFrames(kFrames));
  auto f = server_handler_.frames();
  for (size_t i = 0; i < kFrames; ++i) {
    ASSERT_EQ(f[i].header.request_id, i);
    ASSERT_EQ(std::memcmp(f[i].buffer.data, src.data() + i * kLen, kLen), 0) << i;
  }
  std::vector<uint64_t> ids(kFrames);
  std::iota(ids.begin(), ids.end(), 0);
  ExpectCompletedOnce(sent_, ids, StatusCode::kOk);
  conn_->Uncork();  // one too many: harmless
  ASSERT_TRUE(conn_->Send(Hdr(kFrames, 0), {}, sent_.Done(kFrames)).ok());
  ASSERT_TRUE(server_handler_.WaitFrames(kFrames + 1));  // uncorked: goes at once
}

TEST_P(TransportTest, ScatterGatherSend) {
  auto a = Pattern(7, 1), b = Pattern(70000, 2), c = Pattern(13, 3);
  std::vector<uint8_t> all(a);
  all.insert(all.end(), b.begin(), b.end());
  all.insert(all.end(), c.begin(), c.end());
  ASSERT_TRUE(conn_->Send(Hdr(1, all.size()), {{a.data(), 7}, {b.data(), 70000}, {c.data(), 13}}, sent_.Done(1)).ok());
  // Empty iovecs are allowed and skipped.
  ASSERT_TRUE(conn_->Send(Hdr(2, 20), {{a.data(), 7}, {nullptr, 0}, {c.data(), 13}}, sent_.Done(2)).ok());
  ASSERT_TRUE(server_handler_.WaitFrames(2));
  auto f = server_handler_.frames();
  EXPECT_TRUE(SameBytes(f[0].buffer, all));
  std::vector<uint8_t> ac(a);
  ac.insert(ac.end(), c.begin(), c.end());
  EXPECT_TRUE(SameBytes(f[1].buffer, ac));
  ExpectCompletedOnce(sent_, {1, 2}, StatusCode::kOk);
}

TEST_P(TransportTest, RepliesFromTheIoThread) {
  server_handler_.SetOnFrame([](Connection& conn, const Header& h, const RecvBuffer& b) {
    Header r = h;
    r.opcode = Opcode::kPushPullReply;
    EXPECT_TRUE(conn.SendCopy(r, std::string(reinterpret_cast<const char*>(b.data), b.size) + "!").ok());
  });
  for (uint64_t i = 0; i < 100; ++i) ASSERT_TRUE(conn_->SendCopy(Hdr(i, 0), "req" + std::to_string(i)).ok());
  ASSERT_TRUE(client_handler_.WaitFrames(100));
  auto f = client_handler_.frames();
  for (uint64_t i = 0; i < 100; ++i) {
    EXPECT_EQ(f[i].header.opcode, Opcode::kPushPullReply);
    EXPECT_EQ(f[i].header.request_id, i);
    std::string want = "req" + std::to_string(i) + "!";
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(f[i].buffer.data), f[i].buffer.size), want);
  }
}

TEST_P(TransportTest, PeerCloseReportedOnceAndSendAfterCloseFails) {
  conn_->Close(Aborted("test is done"));
  // Close is synchronous: the local OnClose has run when it returns.
  ASSERT_EQ(client_handler_.closes().size(), 1u);
  EXPECT_EQ(client_handler_.closes()[0].code(), StatusCode::kAborted);
  EXPECT_TRUE(conn_->closed());
  ASSERT_TRUE(server_handler_.WaitCloses(1));
  EXPECT_EQ(server_handler_.closes()[0].code(), StatusCode::kUnavailable) << server_handler_.closes()[0].ToString();

  ExpectError(conn_->Send(Hdr(1, 0), {}, sent_.Done(1)), StatusCode::kUnavailable, "test is done");
  conn_->Close(Aborted("again"));
  client_->Shutdown();
  server_->Shutdown();
  EXPECT_EQ(client_handler_.closes().size(), 1u);
  EXPECT_EQ(server_handler_.closes().size(), 1u);
  EXPECT_TRUE(sent_.done().empty());  // a refused Send never calls on_done
}

// A handler whose OnClose blocks until the test releases it: Close from another thread while the
// I/O thread is still inside that OnClose must wait for it (callers destroy the handler right
// after Close).
class BlockingCloseHandler : public Handler {
 public:
  StatusOr<RecvBuffer> OnHeader(Connection&, const Header&) override { return RecvBuffer{}; }
  void OnFrame(Connection&, const Header&, RecvBuffer) override {}
  void OnClose(Connection&, const Status&) override {
    std::unique_lock<std::mutex> lock(mu_);
    entered_ = true;
    cv_.notify_all();
    cv_.wait_for(lock, kWait, [&] { return released_; });
    finished_ = true;
  }
  bool WaitEntered() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kWait, [&] { return entered_; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  bool finished() {
    std::lock_guard<std::mutex> lock(mu_);
    return finished_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false, released_ = false, finished_ = false;
};

TEST_P(TransportTest, CloseWaitsForAnOnCloseAlreadyRunning) {
  BlockingCloseHandler slow;
  auto conn = client_->Connect("127.0.0.1", port_, &slow, 5.0);
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  server_->Shutdown();  // the peer goes away: the client's I/O thread runs slow.OnClose
  ASSERT_TRUE(slow.WaitEntered()) << "the peer's shutdown was not noticed";
  auto closing = std::async(std::launch::async, [&] {
    conn.value()->Close(Aborted("done"));
    return slow.finished();  // what the caller of Close sees once it returned
  });
  EXPECT_EQ(closing.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout)
      << "Close returned while OnClose was still running";
  slow.Release();
  EXPECT_TRUE(closing.get()) << "Close returned while OnClose was still running";
  conn.value()->Close(Aborted("again"));  // after the close has completed: returns at once
}

TEST_P(TransportTest, CorkedSendsCompleteWithTheCloseReason) {
  conn_->Cork();
  std::vector<uint8_t> big(1u << 20);
  ASSERT_TRUE(conn_->Send(Hdr(1, big.size()), {{big.data(), big.size()}}, sent_.Done(1)).ok());
  ASSERT_TRUE(conn_->Send(Hdr(2, 0), {}, sent_.Done(2)).ok());
  EXPECT_TRUE(sent_.done().empty());
  conn_->Close(Aborted("stop"));
  ExpectCompletedOnce(sent_, {1, 2}, StatusCode::kAborted);
  EXPECT_TRUE(server_handler_.frames().empty());
}

TEST_P(TransportTest, PendingSendsCompleteWithTheCloseReason) {
  if (!opts_.secret.empty()) GTEST_SKIP() << "a raw sink cannot authenticate, so Connect would not return";
  if (opts_.kind != TransportKind::kTcp) GTEST_SKIP() << "a raw TCP sink: the other backends' pending sends are covered by CorkedSendsCompleteWithTheCloseReason";
  RawSocket sink;  // accepts (in the kernel) but never reads: the sends stay queued
  ASSERT_TRUE(sink.Bind(/*listen=*/true));
  auto conn = client_->Connect("127.0.0.1", sink.port, &side_handler_, 5.0);
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  std::vector<uint8_t> big(64u << 20);
  ASSERT_TRUE(conn.value()->Send(Hdr(1, big.size()), {{big.data(), big.size()}}, sent_.Done(1)).ok());
  ASSERT_TRUE(conn.value()->Send(Hdr(2, 0), {}, sent_.Done(2)).ok());
  EXPECT_TRUE(sent_.done().empty());
  conn.value()->Close(Aborted("stop"));
  ExpectCompletedOnce(sent_, {1, 2}, StatusCode::kAborted);
  EXPECT_EQ(side_handler_.closes().size(), 1u);
}

TEST_P(TransportTest, ConnectToClosedPortTimesOut) {
  RawSocket bound;  // holds the port without listening: connections are refused
  ASSERT_TRUE(bound.Bind(/*listen=*/false));
  auto start = Clock::now();
  auto conn = client_->Connect("127.0.0.1", bound.port, &side_handler_, 0.7);
  double took = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_FALSE(conn.ok());
  EXPECT_EQ(conn.status().code(), StatusCode::kDeadlineExceeded) << conn.status().ToString();
  EXPECT_GE(took, 0.6);
  EXPECT_LT(took, 1.0) << "Connect overran its 0.7 s timeout";
}

// A process whose job failed stops waiting for peers: a Connect retrying a refused port fails at
// once with the reason, and so does every later one; open connections keep working.
TEST_P(TransportTest, CancelConnectsEndsAWaitingConnectAndEveryLaterOne) {
  RawSocket bound;  // holds the port without listening: connections are refused
  ASSERT_TRUE(bound.Bind(/*listen=*/false));
  auto start = Clock::now();
  auto waiting = std::async(std::launch::async,
                            [&] { return client_->Connect("127.0.0.1", bound.port, &side_handler_, 20.0); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let it retry a few times first
  client_->CancelConnects(Aborted("the scheduler ended the job: worker 1 failed"));
  ASSERT_EQ(waiting.wait_for(kWait), std::future_status::ready) << "Connect still waiting";
  auto conn = waiting.get();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
  ASSERT_FALSE(conn.ok());
  ExpectError(conn.status(), StatusCode::kAborted, "the scheduler ended the job: worker 1 failed");
  auto later = client_->Connect("127.0.0.1", port_, &side_handler_, 20.0);  // even to a live listener
  ASSERT_FALSE(later.ok());
  EXPECT_EQ(later.status().code(), StatusCode::kAborted) << later.status().ToString();
  ASSERT_TRUE(conn_->SendCopy(Hdr(7, 3), "abc").ok());  // the open connection is untouched
  ASSERT_TRUE(server_handler_.WaitFrames(1));
}

TEST_P(TransportTest, ListenOnUsedPortFails) {
  Recorder h;
  auto other = Make(opts_);
  auto port = other->Listen("127.0.0.1", port_, &h);
  ExpectError(port.status(), StatusCode::kUnavailable, "already in use");
}

TEST_P(TransportTest, GarbageClosesOnlyThatConnection) {
  RawSocket raw;
  if (opts_.kind == TransportKind::kTcp) {
    ASSERT_TRUE(raw.Connect(port_));
  } else if (opts_.kind == TransportKind::kUcx) {  // UCX: on the TCP connection it starts on
    ASSERT_TRUE(raw.Connect(port_));
  } else {  // shared memory: garbage on the socket its connections start on
    ASSERT_TRUE(raw.ConnectUnix("byteps-shm-" + std::to_string(port_)));
  }
  std::mt19937 rng(GetParam());
  uint8_t junk[48];
  for (auto& x : junk) x = static_cast<uint8_t>(rng());
  junk[0] = 'X';  // never the magic
  ASSERT_EQ(::send(raw.fd, junk, sizeof(junk), MSG_NOSIGNAL), 48);
  // Over TCP the handler saw the connection go; a shared-memory connection is the handler's only
  // once its handshake is done, so this one is dropped before the handler ever meets it.
  // (A UCX listener hands a connection that does not start a UCX one to the handler, as TCP.)
  const size_t handler_closes = opts_.kind == TransportKind::kTcp || opts_.kind == TransportKind::kUcx ? 1 : 0;
  if (handler_closes) {
    ASSERT_TRUE(server_handler_.WaitCloses(1));
    ExpectError(server_handler_.closes()[0], StatusCode::kProtocol, "bad magic");
  }
  EXPECT_TRUE(raw.WaitPeerClosed());

  // The listener and the other connection carry on.
  auto fresh = client_->Connect("127.0.0.1", port_, &side_handler_, 5.0);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  ASSERT_TRUE(fresh.value()->SendCopy(Hdr(7, 0), "fresh").ok());
  ASSERT_TRUE(conn_->SendCopy(Hdr(8, 0), "old").ok());
  ASSERT_TRUE(server_handler_.WaitFrames(2));
  EXPECT_EQ(server_handler_.closes().size(), handler_closes);
}

TEST_P(TransportTest, OversizedPayloadIsProtocolError) {
  Recorder h;
  TransportOptions small = opts_;
  small.max_payload_bytes = 1024;
  auto server = Make(small);
  auto port = server->Listen("127.0.0.1", 0, &h);
  ASSERT_TRUE(port.ok());
  auto conn = client_->Connect("127.0.0.1", port.value(), &client_handler_, 5.0);
  ASSERT_TRUE(conn.ok());
  std::vector<uint8_t> data(1025);
  ASSERT_TRUE(conn.value()->Send(Hdr(1, 1024), {{data.data(), 1024}}, sent_.Done(1)).ok());  // at the limit
  ASSERT_TRUE(conn.value()->Send(Hdr(2, 1025), {{data.data(), 1025}}, sent_.Done(2)).ok());
  ASSERT_TRUE(h.WaitCloses(1));
  ExpectError(h.closes()[0], StatusCode::kProtocol, "exceeds the limit of 1024");
  EXPECT_EQ(h.frames().size(), 1u);
  ASSERT_TRUE(client_handler_.WaitCloses(1));  // the sender learns its connection is gone
  EXPECT_EQ(client_handler_.closes()[0].code(), StatusCode::kUnavailable);
  ASSERT_TRUE(sent_.WaitDone(2));
  server->Shutdown();
}

TEST_P(TransportTest, HandlerErrorsCloseTheConnection) {
  std::vector<uint8_t> small(5);
  server_handler_.SetOnHeader([&small](const Header& h) -> StatusOr<RecvBuffer> {
    if (h.key == 13) return InvalidArgument("no buffer for key 13");
    if (h.key == 14) return RecvBuffer{small.data(), small.size(), nullptr, false};  // wrong size
    return RecvBuffer{};
  });
  ASSERT_TRUE(conn_->SendCopy(Hdr(1, 0), "0123456789").ok());
  ASSERT_TRUE(conn_->SendCopy(Hdr(13, 0), "0123456789").ok());
  (void)conn_->SendCopy(Hdr(2, 0), "0123456789");  // may already see the close; never delivered
  ASSERT_TRUE(server_handler_.WaitCloses(1));
  ExpectError(server_handler_.closes()[0], StatusCode::kInvalidArgument, "no buffer for key 13");
  ASSERT_EQ(server_handler_.frames().size(), 1u);
  EXPECT_EQ(server_handler_.frames()[0].header.key, 1u);
  ASSERT_TRUE(client_handler_.WaitCloses(1));

  auto conn = client_->Connect("127.0.0.1", port_, &side_handler_, 5.0);
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(conn.value()->SendCopy(Hdr(14, 0), "0123456789").ok());
  ASSERT_TRUE(server_handler_.WaitCloses(2));
  EXPECT_EQ(server_handler_.closes()[1].code(), StatusCode::kInternal) << server_handler_.closes()[1].ToString();
}

TEST_P(TransportTest, DiscardDropsPayloadAndKeepsFraming) {
  server_handler_.SetOnHeader([](const Header& h) -> StatusOr<RecvBuffer> {
    RecvBuffer b;
    b.discard = h.key % 2 == 1;
    return b;
  });
  auto big = Pattern(100000, 1), mid = Pattern(10, 2), tiny = Pattern(5, 3);
  ASSERT_TRUE(conn_->Send(Hdr(1, big.size()), {{big.data(), big.size()}}, sent_.Done(1)).ok());
  ASSERT_TRUE(conn_->Send(Hdr(2, mid.size()), {{mid.data(), mid.size()}}, sent_.Done(2)).ok());
  ASSERT_TRUE(conn_->Send(Hdr(3, tiny.size()), {{tiny.data(), tiny.size()}}, sent_.Done(3)).ok());
  ASSERT_TRUE(conn_->Send(Hdr(4, big.size()), {{big.data(), big.size()}}, sent_.Done(4)).ok());
  ASSERT_TRUE(server_handler_.WaitFrames(4));
  auto f = server_handler_.frames();
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(f[i].header.key, i + 1);
  EXPECT_TRUE(f[0].buffer.discard);
  EXPECT_TRUE(f[2].buffer.discard);
  EXPECT_TRUE(SameBytes(f[1].buffer, mid));
  EXPECT_TRUE(SameBytes(f[3].buffer, big));
  ExpectCompletedOnce(sent_, {1, 2, 3, 4}, StatusCode::kOk);
}

TEST_P(TransportTest, ShutdownIsIdempotentAndFinal) {
  client_->Shutdown();
  client_->Shutdown();
  ASSERT_EQ(client_handler_.closes().size(), 1u);
  EXPECT_EQ(client_handler_.closes()[0].code(), StatusCode::kAborted);
  EXPECT_FALSE(conn_->Send(Hdr(1, 0), {}, sent_.Done(1)).ok());
  Recorder h;
  auto again = client_->Connect("127.0.0.1", port_, &h, 1.0);
  EXPECT_FALSE(again.ok());
  ASSERT_TRUE(server_handler_.WaitCloses(1));

  server_->Shutdown();
  server_->Shutdown();
  auto relisten = server_->Listen("127.0.0.1", 0, &server_handler_);  // nothing would accept on it
  EXPECT_FALSE(relisten.ok()) << "Listen after Shutdown returned port " << relisten.value();
  auto fresh = Make(opts_);
  auto refused = fresh->Connect("127.0.0.1", port_, &h, 0.3);  // the listener is gone
  EXPECT_FALSE(refused.ok());
  EXPECT_TRUE(h.closes().empty());
  EXPECT_TRUE(sent_.done().empty());
}

std::string BackendName(const ::testing::TestParamInfo<int>& p) {
  const int backend = p.param / 1000;
  const std::string name = backend == 3 ? "ucx_tcp" : backend == 4 ? "ucx_sm"
                                        : TransportKindName(static_cast<TransportKind>(backend));
  return name + "_io" +
         std::to_string(p.param % 100) + (p.param % 1000 >= 100 ? "_secure" : "");
}

INSTANTIATE_TEST_SUITE_P(Backends, TransportTest, ::testing::Values(1001, 1002, 1101, 1102, 2001, 2101, 1, 101, 3001,
                                                                     3002, 3101, 4001, 4101),
                         BackendName);

// --- Authentication, checksums and limits on accepted connections ------------------------------

struct Endpoint {
  Recorder handler;
  std::unique_ptr<Transport> transport;
  int port = 0;
  explicit Endpoint(TransportOptions o, bool listen = true) : transport(CreateTcpTransport(o)) {
    if (listen) port = transport->Listen("127.0.0.1", 0, &handler).value();
  }
  ~Endpoint() { transport->Shutdown(); }
};

TransportOptions Secure(const std::string& secret, bool checksum = false) {
  TransportOptions o;
  o.secret = secret;
  o.checksum = checksum;
  return o;
}

// The warnings for the original's RDMA / UCX knobs say what this build does with them: with UCX,
// that UCX tunes itself through its own variables; without, that it is not built (and how to get
// it). Never "the job runs over TCP" where RDMA would in fact run.
TEST(TransportBuildTest, TheOriginalsRdmaAndUcxKnobsAreWordedForThisBuild) {
  const bool ucx = TransportBuilt(TransportKind::kUcx);
  for (const char* name : {"BYTEPS_RDMA_RX_DEPTH", "BYTEPS_PRINT_RDMA_LOG", "BYTEPS_UCX_SHORT_THRESH",
                           "BYTEPS_UCX_RECONNECT_TMO"}) {
    SCOPED_TRACE(name);
    auto c = config::Load(config::Environment{{name, "4"}});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_EQ(c->warnings.size(), 1u);
    const std::string& w = c->warnings[0];
    EXPECT_EQ(w.find("not in this build") == std::string::npos, ucx) << w;
    EXPECT_EQ(w.find("the job runs over TCP"), std::string::npos) << w;
    EXPECT_NE(w.find(ucx ? "UCX_" : "install libucx-dev and rebuild"), std::string::npos) << w;
  }
}

TEST(TransportAuthTest, WrongSecretIsRefusedAndTheListenerCarriesOn) {
  Endpoint server(Secure("right")), intruder(Secure("wrong"), false), member(Secure("right"), false);
  auto bad = intruder.transport->Connect("127.0.0.1", server.port, &intruder.handler, 5.0);
  ASSERT_FALSE(bad.ok());
  ExpectError(bad.status(), StatusCode::kProtocol, "BYTEPS_JOB_SECRET");
  EXPECT_NE(bad.status().message().find("authentication with 127.0.0.1"), std::string::npos) << bad.status().ToString();
  ASSERT_TRUE(server.handler.WaitCloses(1));  // the server side saw it fail too...
  EXPECT_TRUE(server.handler.frames().empty());  // ...and no frame of it reached the handler

  auto good = member.transport->Connect("127.0.0.1", server.port, &member.handler, 5.0);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  ASSERT_TRUE(good.value()->SendCopy(Hdr(5, 0), "hello").ok());
  ASSERT_TRUE(server.handler.WaitFrames(1));
  EXPECT_EQ(server.handler.frames()[0].header.key, 5u);
}

TEST(TransportAuthTest, MissingSecretOnEitherSideIsNamed) {
  {
    Endpoint server(Secure("s")), plain(TransportOptions{}, false);
    auto conn = plain.transport->Connect("127.0.0.1", server.port, &plain.handler, 5.0);
    ASSERT_TRUE(conn.ok());  // without a secret nothing is awaited...
    (void)conn.value()->SendCopy(Hdr(1, 0), "x");
    ASSERT_TRUE(plain.handler.WaitCloses(1));  // ...but the server's challenge is refused here
    // A setting that differs, which no retry fixes: InvalidArgument, not a damaged frame's ProtocolError.
    ExpectError(plain.handler.closes()[0], StatusCode::kInvalidArgument, "BYTEPS_JOB_SECRET is not set here");
    ASSERT_TRUE(server.handler.WaitCloses(1));
    EXPECT_TRUE(server.handler.frames().empty());
  }
  {
    Endpoint server(TransportOptions{}), secure(Secure("s"), false);
    auto conn = secure.transport->Connect("127.0.0.1", server.port, &secure.handler, 5.0);
    ASSERT_FALSE(conn.ok());
    EXPECT_NE(conn.status().message().find("authentication with"), std::string::npos) << conn.status().ToString();
    ASSERT_TRUE(server.handler.WaitCloses(1));
    ExpectError(server.handler.closes()[0], StatusCode::kInvalidArgument, "requires authentication");
  }
}

// A peer of another byteps release: the acceptor answers with one header of its own version
// before it hangs up, so the peer fails at once naming both versions instead of reconnecting.
TEST(TransportVersionTest, AnAcceptedPeerOfAnotherWireVersionIsToldOurs) {
  for (bool secure : {false, true}) {
    SCOPED_TRACE(secure ? "with a job secret" : "without a secret");
    Endpoint server(secure ? Secure("s") : TransportOptions{});
    RawSocket peer;
    ASSERT_TRUE(peer.Connect(server.port));
    std::vector<uint8_t> old(protocol::kHeaderSize);
    protocol::EncodeHeader(Hdr(1, 0, Opcode::kRegister), old.data());
    old[4] = protocol::kWireVersion - 1;  // what an older release sends
    ASSERT_EQ(::send(peer.fd, old.data(), old.size(), MSG_NOSIGNAL), static_cast<ssize_t>(old.size()));
    // Everything the server sent (a challenge first when it has a secret), up to its hang-up.
    std::vector<uint8_t> got;
    for (auto deadline = Clock::now() + kWait; Clock::now() < deadline;) {
      pollfd p{peer.fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      uint8_t buf[512];
      ssize_t n = ::recv(peer.fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      got.insert(got.end(), buf, buf + n);
    }
    ASSERT_GE(got.size(), protocol::kHeaderSize);
    const uint8_t* last = got.data() + got.size() - protocol::kHeaderSize;  // the answer is the last frame
    EXPECT_EQ(last[4], protocol::kWireVersion);
    auto h = protocol::DecodeHeader(last, protocol::kHeaderSize, UINT64_MAX);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_EQ(h->opcode, Opcode::kError);
    EXPECT_EQ(h->payload_len, 0u);
    ASSERT_TRUE(server.handler.WaitCloses(1));
    ExpectError(server.handler.closes()[0], StatusCode::kInvalidArgument,
                "unsupported wire version " + std::to_string(protocol::kWireVersion - 1));
    EXPECT_TRUE(server.handler.frames().empty());
  }
}

// A peer that hangs up during the handshake: before it challenged us, that is the network (no
// hint about the secret); after our proof went out, a different secret is the likely cause.
TEST(TransportAuthTest, HangUpDuringTheHandshakeSaysWhetherTheSecretIsLikely) {
  for (bool challenge_first : {false, true}) {
    SCOPED_TRACE(challenge_first ? "peer challenged, then hung up" : "peer hung up at once");
    Endpoint client(Secure("s"), false);
    RawSocket listener;
    ASSERT_TRUE(listener.Bind(/*listen=*/true));
    std::atomic<int> attempts{0};
    std::thread peer([&] {  // every attempt gets the same treatment
      for (;;) {
        pollfd p{listener.fd, POLLIN, 0};
        if (::poll(&p, 1, 500) <= 0) return;  // the client gave up
        int fd = ::accept(listener.fd, nullptr, nullptr);
        if (fd < 0) return;
        ++attempts;
        if (challenge_first) {
          uint8_t frame[kHeaderSizeForTest + protocol::kAuthNonceBytes] = {};
          protocol::EncodeHeader(Hdr(0, protocol::kAuthNonceBytes, Opcode::kAuthChallenge), frame);
          (void)::send(fd, frame, sizeof(frame), MSG_NOSIGNAL);
          uint8_t sink[256];  // the client's challenge and proof
          size_t want = 2 * kHeaderSizeForTest + protocol::kAuthNonceBytes + protocol::kAuthProofBytes, got = 0;
          for (ssize_t n; got < want && (n = ::recv(fd, sink, sizeof(sink), 0)) > 0;) got += static_cast<size_t>(n);
        }
        ::close(fd);
      }
    });
    auto conn = client.transport->Connect("127.0.0.1", listener.port, &client.handler, 5.0);
    peer.join();
    ASSERT_FALSE(conn.ok());
    EXPECT_EQ(attempts.load(), 3) << "a failed handshake is tried 3 times in all";
    EXPECT_EQ(conn.status().code(), StatusCode::kUnavailable) << conn.status().ToString();
    const std::string& m = conn.status().message();
    EXPECT_NE(m.find("authentication with 127.0.0.1"), std::string::npos) << m;
    if (challenge_first) {
      EXPECT_NE(m.find("after this process sent its proof: does the peer use the same BYTEPS_JOB_SECRET?"),
                std::string::npos) << m;
    } else {
      EXPECT_NE(m.find("a network problem, not the secret"), std::string::npos) << m;
      EXPECT_EQ(m.find("same BYTEPS_JOB_SECRET"), std::string::npos) << m;
    }
  }
}

TEST(TransportAuthTest, SecondChallengeIsNamedAsSuch) {
  Endpoint server(Secure("s"));
  RawSocket raw;
  ASSERT_TRUE(raw.Connect(server.port));
  uint8_t frame[2 * (kHeaderSizeForTest + protocol::kAuthNonceBytes)] = {};
  protocol::EncodeHeader(Hdr(0, protocol::kAuthNonceBytes, Opcode::kAuthChallenge), frame);
  std::memcpy(frame + sizeof(frame) / 2, frame, sizeof(frame) / 2);
  ASSERT_EQ(::send(raw.fd, frame, sizeof(frame), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(frame)));
  ASSERT_TRUE(server.handler.WaitCloses(1));
  ExpectError(server.handler.closes()[0], StatusCode::kProtocol, "sent a second AuthChallenge");
}

TEST(TransportAuthTest, FrameBeforeAuthenticationIsRefusedWithoutAllocating) {
  // A frame of the layers above is refused on its kind (the peer has no secret, or another);
  // a handshake frame on its size (the pre-authentication limit is 64 bytes). Both before
  // anything is allocated for the terabyte each announces.
  for (Opcode op : {Opcode::kPushPull, Opcode::kAuthChallenge}) {
    SCOPED_TRACE(protocol::OpcodeName(op));
    Endpoint server(Secure("s"));
    RawSocket raw;
    ASSERT_TRUE(raw.Connect(server.port));
    uint8_t h[kHeaderSizeForTest];
    protocol::EncodeHeader(Hdr(1, 1ull << 40, op), h);
    ASSERT_EQ(::send(raw.fd, h, sizeof(h), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(h)));
    ASSERT_TRUE(server.handler.WaitCloses(1));
    ExpectError(server.handler.closes()[0], StatusCode::kProtocol,
                op == Opcode::kPushPull ? "sent PushPull before authenticating: it has no BYTEPS_JOB_SECRET"
                                        : "before the connection is authenticated (at most 64 bytes");
    EXPECT_TRUE(raw.WaitPeerClosed());
  }
}

TEST(TransportAuthTest, SilentPeersAreDroppedAfterTheAuthTimeout) {
  for (const std::string& secret : {std::string(), std::string("s")}) {
    TransportOptions o = Secure(secret);
    o.auth_timeout_s = 0.3;
    Endpoint server(o);
    RawSocket raw;
    ASSERT_TRUE(raw.Connect(server.port));
    auto t0 = Clock::now();
    EXPECT_TRUE(raw.WaitPeerClosed()) << "secret '" << secret << "'";
    double took = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_GT(took, 0.2);
    EXPECT_LT(took, 3.0);
    ASSERT_TRUE(server.handler.WaitCloses(1));
    ExpectError(server.handler.closes()[0], StatusCode::kProtocol, "BYTEPS_AUTH_TIMEOUT");
  }
}

TEST(TransportAuthTest, ConnectionsBeyondTheLimitAreRefused) {
  TransportOptions o;
  o.max_connections = 3;
  Endpoint server(o);
  std::vector<std::unique_ptr<RawSocket>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(std::make_unique<RawSocket>());
    ASSERT_TRUE(held.back()->Connect(server.port));
    uint8_t h[kHeaderSizeForTest];
    protocol::EncodeHeader(Hdr(i, 0), h);  // a first frame, so the reaper leaves them alone
    ASSERT_EQ(::send(held.back()->fd, h, sizeof(h), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(h)));
  }
  ASSERT_TRUE(server.handler.WaitFrames(3));
  RawSocket extra;
  ASSERT_TRUE(extra.Connect(server.port));  // the kernel accepts; byteps resets it
  EXPECT_TRUE(extra.WaitPeerClosed());
  held.pop_back();  // one goes away: room for a new one
  ASSERT_TRUE(server.handler.WaitCloses(1));
  Endpoint client(TransportOptions{}, false);
  auto conn = client.transport->Connect("127.0.0.1", server.port, &client.handler, 5.0);
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(conn.value()->SendCopy(Hdr(9, 0), "late").ok());
  ASSERT_TRUE(server.handler.WaitFrames(4));
}

// Sends a checksummed frame by hand: header (optionally with a broken checksum field), payload,
// trailer (optionally wrong).
void SendChecksummed(RawSocket& raw, const std::string& payload, bool break_header, bool break_trailer) {
  Header h = Hdr(1, payload.size());
  h.flags = protocol::kFlagChecksum;
  std::vector<uint8_t> out(protocol::kHeaderSize);
  protocol::EncodeHeader(h, out.data());
  if (break_header) out[18] ^= 1;
  out.insert(out.end(), payload.begin(), payload.end());
  uint32_t crc = Crc32c(0, payload.data(), payload.size()) ^ (break_trailer ? 1u : 0u);
  out.resize(out.size() + protocol::kTrailerSize);
  StoreLe32(out.data() + out.size() - protocol::kTrailerSize, crc);
  ASSERT_EQ(::send(raw.fd, out.data(), out.size(), MSG_NOSIGNAL), static_cast<ssize_t>(out.size()));
}

TEST(TransportChecksumTest, CorruptionIsDetectedAndTheFrameNeverDelivered) {
  TransportOptions o;
  o.checksum = true;
  Endpoint server(o);
  {
    RawSocket raw;  // intact: delivered
    ASSERT_TRUE(raw.Connect(server.port));
    SendChecksummed(raw, std::string(100000, 'a'), false, false);
    ASSERT_TRUE(server.handler.WaitFrames(1));
  }
  ASSERT_TRUE(server.handler.WaitCloses(1));  // that socket's orderly close, before counting
  struct Case { bool header, trailer; const char* error; } cases[] = {
      {false, true, "payload checksum"}, {true, false, "corrupt frame header"}};
  size_t closes = server.handler.closes().size();
  for (const auto& c : cases) {
    RawSocket raw;
    ASSERT_TRUE(raw.Connect(server.port));
    SendChecksummed(raw, std::string(5000, 'b'), c.header, c.trailer);
    ASSERT_TRUE(server.handler.WaitCloses(closes + 1));
    Status st = server.handler.closes().back();
    ExpectError(st, StatusCode::kProtocol, c.error);
    closes = server.handler.closes().size();
  }
  {
    RawSocket raw;  // no checksum at all while this side requires one
    ASSERT_TRUE(raw.Connect(server.port));
    uint8_t h[kHeaderSizeForTest];
    protocol::EncodeHeader(Hdr(2, 0), h);
    ASSERT_EQ(::send(raw.fd, h, sizeof(h), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(h)));
    ASSERT_TRUE(server.handler.WaitCloses(closes + 1));
    ExpectError(server.handler.closes().back(), StatusCode::kProtocol, "BYTEPS_CHECKSUM=1 here");
  }
  EXPECT_EQ(server.handler.frames().size(), 1u);
}

}  // namespace
}  // namespace byteps::transport
