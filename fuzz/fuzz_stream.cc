// libFuzzer target: the TCP backend's receive side (tcp::TcpConnection: frame parser, checksum
// trailers, the authentication handshake) on arbitrary bytes that arrive over a socketpair in
// whatever chunks the kernel hands over, checked against a reference parse of the same bytes:
//  - the handler sees exactly the frames the reference finds (same headers, same payload bytes),
//    in order, then exactly one OnClose whose code says how the stream ended (protocol error, the
//    handler's own Close, or the end of the stream);
//  - what the connection sends back (its AuthChallenge, AuthResponse proofs, the frames the test
//    handler echoes) reaches the peer as a prefix of the expected bytes: sends queued at close
//    time may be dropped, never reordered or altered.
// Input: byte 0 configures the connection (bit 0 BYTEPS_CHECKSUM, bit 1 a job secret, bit 2 the
// accepting side, bit 3 with a secret: the harness completes the handshake first, so the rest
// reaches the handler); the remaining bytes are what the peer sends. Per frame the test handler's
// choice comes from request_id % 4: 0 the transport allocates, 1 a handler buffer, 2 discard,
// 3 refuse; flags 0x100 echoes the frame back as a PushPullReply, flags 0x200 closes the
// connection from OnFrame.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/little_endian.h"
#include "common/logging.h"
#include "protocol/auth.h"
#include "protocol/frame.h"
#include "transport/tcp/connection.h"
#include "transport/tcp/event_loop.h"

namespace {

using namespace byteps;
using protocol::Header;
using protocol::Opcode;
using Bytes = std::vector<uint8_t>;

constexpr uint64_t kMaxPayload = 1u << 20;
constexpr uint64_t kPreAuthMaxPayload = 64;  // tcp/connection.cc: the auth frames are 32 bytes
constexpr uint16_t kEchoFlag = 0x100, kCloseFlag = 0x200;
const char kSecret[] = "fuzz-job-secret";

[[noreturn]] void Fail(const char* what, int line) {
  std::fprintf(stderr, "fuzz_stream invariant violated at line %d: %s\n", line, what);
  std::abort();
}
#define FUZZ_CHECK(cond)                \
  do {                                  \
    if (!(cond)) Fail(#cond, __LINE__); \
  } while (0)

struct Config {
  bool checksum, secret, accepted, handshake;
  explicit Config(uint8_t b)
      : checksum(b & 1), secret(b & 2), accepted(b & 4), handshake((b & 2) && (b & 8)) {}
  protocol::AuthRole mine() const {
    return accepted ? protocol::AuthRole::kAcceptor : protocol::AuthRole::kConnector;
  }
  protocol::AuthRole theirs() const {
    return accepted ? protocol::AuthRole::kConnector : protocol::AuthRole::kAcceptor;
  }
};

// CRC-32C written here (bitwise), independent of common/crc32c.
uint32_t Crc32c(const uint8_t* p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
  }
  return ~c;
}

// A frame as a connection with `checksum` puts it on the wire.
Bytes WireFrame(Header h, const Bytes& payload, bool checksum) {
  h.payload_len = payload.size();
  if (checksum) h.flags |= protocol::kFlagChecksum;
  Bytes out(protocol::kHeaderSize);
  protocol::EncodeHeader(h, out.data());
  out.insert(out.end(), payload.begin(), payload.end());
  if (checksum) {
    out.resize(out.size() + protocol::kTrailerSize);
    StoreLe32(out.data() + out.size() - protocol::kTrailerSize, Crc32c(payload.data(), payload.size()));
  }
  return out;
}

Bytes AuthFrame(Opcode op, const uint8_t* body, bool checksum) {
  Header h;
  h.opcode = op;
  return WireFrame(h, Bytes(body, body + protocol::kAuthNonceBytes), checksum);
}

enum class Mode { kTransportBuffer, kHandlerBuffer, kDiscard, kRefuse };
Mode ModeOf(const Header& h) { return static_cast<Mode>(h.request_id % 4); }

Header EchoHeader(Header h) {
  h.opcode = Opcode::kPushPullReply;
  h.flags &= static_cast<uint16_t>(~protocol::kFlagChecksum);  // the connection decides that bit
  return h;
}

bool IsAuth(Opcode op) { return op == Opcode::kAuthChallenge || op == Opcode::kAuthResponse; }

struct Frame {
  Header header;
  bool discarded = false;
  Bytes payload;
};

bool SameFrame(const Frame& a, const Frame& b) {
  const Header& x = a.header;
  const Header& y = b.header;
  return x.opcode == y.opcode && x.dtype == y.dtype && x.flags == y.flags && x.sender == y.sender &&
         x.round == y.round && x.key == y.key && x.request_id == y.request_id &&
         x.payload_len == y.payload_len && x.arg == y.arg && a.discarded == b.discarded &&
         a.payload == b.payload;
}

// What the connection must deliver and send for the peer's bytes, and how it must end.
struct Expected {
  std::vector<Frame> frames;
  Bytes sent;
  StatusCode end = StatusCode::kUnavailable;
};

// The connection's state machine, written from the contract (transport.h, frame.h, auth.h).
Expected ReferenceParse(const Config& cfg, const protocol::AuthNonce& conn_nonce, const uint8_t* data,
                        size_t size) {
  Expected e;
  bool authenticated = !cfg.secret || cfg.handshake;
  bool challenged = cfg.handshake;
  protocol::AuthNonce peer_nonce{};
  size_t pos = 0;
  auto fail = [&] {
    e.end = StatusCode::kProtocol;
    return e;
  };
  while (size - pos >= protocol::kHeaderSize) {
    auto h = protocol::DecodeHeader(data + pos, protocol::kHeaderSize,
                                    authenticated ? kMaxPayload : kPreAuthMaxPayload);
    if (!h.ok() && h.status().code() == StatusCode::kInvalidArgument) {
      // Another release: an accepted connection answers with one header of its own version.
      if (cfg.accepted) {
        Header answer;
        answer.opcode = Opcode::kError;
        uint8_t bytes[protocol::kHeaderSize];
        protocol::EncodeHeader(answer, bytes);
        e.sent.insert(e.sent.end(), bytes, bytes + protocol::kHeaderSize);
      }
      e.end = StatusCode::kInvalidArgument;
      return e;
    }
    if (!h.ok()) return fail();
    pos += protocol::kHeaderSize;
    const Header& hd = h.value();
    const bool has_trailer = (hd.flags & protocol::kFlagChecksum) != 0;
    if (cfg.checksum && !has_trailer) return fail();
    const bool internal = IsAuth(hd.opcode) || !authenticated;
    if (internal) {
      if (!cfg.secret && IsAuth(hd.opcode)) {  // the peer has a secret, we have none: a setting
        e.end = StatusCode::kInvalidArgument;
        return e;
      }
      if (!cfg.secret || !IsAuth(hd.opcode) || authenticated) return fail();
      if (hd.opcode == Opcode::kAuthChallenge && challenged) return fail();
      if (hd.opcode == Opcode::kAuthResponse && !challenged) return fail();
      if (hd.payload_len != protocol::kAuthNonceBytes) return fail();
    } else if (ModeOf(hd) == Mode::kRefuse) {
      return fail();
    }
    const size_t len = static_cast<size_t>(hd.payload_len);
    if (size - pos < len) return e;  // the stream ends inside the payload
    Bytes payload(data + pos, data + pos + len);
    pos += len;
    if (has_trailer) {
      if (size - pos < protocol::kTrailerSize) return e;
      if (LoadLe32(data + pos) != Crc32c(payload.data(), payload.size())) return fail();
      pos += protocol::kTrailerSize;
    }
    if (internal) {
      if (hd.opcode == Opcode::kAuthChallenge) {
        challenged = true;
        std::copy(payload.begin(), payload.end(), peer_nonce.begin());
        protocol::AuthProof proof = protocol::MakeAuthProof(kSecret, cfg.mine(), peer_nonce, conn_nonce);
        Bytes f = AuthFrame(Opcode::kAuthResponse, proof.data(), cfg.checksum);
        e.sent.insert(e.sent.end(), f.begin(), f.end());
        continue;
      }
      // The peer's proof: right only with the secret (which the fuzzer does not know).
      protocol::AuthProof expected = protocol::MakeAuthProof(kSecret, cfg.theirs(), conn_nonce, peer_nonce);
      if (!std::equal(expected.begin(), expected.end(), payload.begin())) return fail();
      authenticated = true;
      continue;
    }
    Frame f;
    f.header = hd;
    f.discarded = ModeOf(hd) == Mode::kDiscard;
    if (!f.discarded) f.payload = payload;
    if (hd.flags & kEchoFlag) {
      Bytes w = WireFrame(EchoHeader(hd), f.payload, cfg.checksum);
      e.sent.insert(e.sent.end(), w.begin(), w.end());
    }
    const bool closes = (hd.flags & kCloseFlag) != 0;
    e.frames.push_back(std::move(f));
    if (closes) {
      e.end = StatusCode::kAborted;
      return e;
    }
  }
  return e;
}

class RecordingHandler : public transport::Handler {
 public:
  StatusOr<transport::RecvBuffer> OnHeader(transport::Connection& c, const Header& h) override {
    std::lock_guard<std::mutex> lock(mu_);
    FUZZ_CHECK(!closed_);
    transport::RecvBuffer b;
    switch (ModeOf(h)) {
      case Mode::kTransportBuffer:
        break;
      case Mode::kHandlerBuffer: {
        auto owned = std::make_shared<Bytes>(h.payload_len);
        b.data = owned->data();
        b.size = owned->size();
        b.owner = owned;
        break;
      }
      case Mode::kDiscard:
        b.discard = true;
        break;
      case Mode::kRefuse:
        return ProtocolError("refused by the fuzz handler");
    }
    return b;
  }

  void OnFrame(transport::Connection& c, const Header& h, transport::RecvBuffer b) override {
    Frame f;
    f.header = h;
    f.discarded = b.discard;
    if (!b.discard) {
      FUZZ_CHECK(b.size == h.payload_len);
      FUZZ_CHECK(b.size == 0 || b.data != nullptr);
      if (b.size > 0) f.payload.assign(b.data, b.data + b.size);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      FUZZ_CHECK(!closed_);
      frames_.push_back(f);
    }
    if (h.flags & kEchoFlag) {
      Status st = c.SendCopy(EchoHeader(h), std::string(f.payload.begin(), f.payload.end()));
      FUZZ_CHECK(st.ok());  // the connection is open while its own callback runs
    }
    if (h.flags & kCloseFlag) c.Close(Aborted("closed by the fuzz handler"));
  }

  void OnClose(transport::Connection& c, const Status& reason) override {
    std::lock_guard<std::mutex> lock(mu_);
    FUZZ_CHECK(!closed_);
    closed_ = true;
    reason_ = reason;
    cv_.notify_all();
  }

  // Waits for OnClose; a hang is a finding too.
  Status WaitClosed() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::seconds(20), [&] { return closed_; })) {
      Fail("no OnClose within 20 s after the peer finished", __LINE__);
    }
    return reason_;
  }

  std::vector<Frame> frames() {
    std::lock_guard<std::mutex> lock(mu_);
    return frames_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool closed_ = false;
  Status reason_;
  std::vector<Frame> frames_;
};

void WriteAll(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EPIPE || errno == ECONNRESET)) return;  // the connection closed early
    FUZZ_CHECK(w > 0);
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Reads exactly n bytes (the handshake), failing after 20 s. libFuzzer's -timeout alarm (SIGALRM)
// may interrupt poll/recv: that is retried, not a finding.
Bytes ReadExact(int fd, size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  Bytes out(n);
  size_t got = 0;
  while (got < n) {
    FUZZ_CHECK(std::chrono::steady_clock::now() < deadline);
    pollfd pfd{fd, POLLIN, 0};
    int ready = ::poll(&pfd, 1, 1000);
    if (ready < 0 && errno == EINTR) continue;
    FUZZ_CHECK(ready >= 0);
    if (ready == 0) continue;
    ssize_t r = ::recv(fd, out.data() + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    FUZZ_CHECK(r > 0);
    got += static_cast<size_t>(r);
  }
  return out;
}

Bytes ReadToEnd(int fd) {
  Bytes out;
  uint8_t buf[64 * 1024];
  for (;;) {
    ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return out;  // EOF (the connection shut its socket down) or reset
    out.insert(out.end(), buf, buf + r);
  }
}

size_t AuthFrameSize(const Config& cfg) {
  return protocol::kHeaderSize + protocol::kAuthNonceBytes + (cfg.checksum ? protocol::kTrailerSize : 0);
}

// Reads the connection's AuthChallenge from the front of `bytes` and returns its nonce.
protocol::AuthNonce ConnectionNonce(const Config& cfg, const Bytes& bytes) {
  FUZZ_CHECK(bytes.size() >= AuthFrameSize(cfg));
  protocol::AuthNonce nonce;
  std::copy_n(bytes.begin() + protocol::kHeaderSize, nonce.size(), nonce.begin());
  Bytes want = AuthFrame(Opcode::kAuthChallenge, nonce.data(), cfg.checksum);
  FUZZ_CHECK(std::equal(want.begin(), want.end(), bytes.begin()));
  return nonce;
}

// The harness plays a peer that knows the secret: answers the challenge, proves itself, and
// checks the connection's proof.
void Handshake(const Config& cfg, int fd, const protocol::AuthNonce& conn_nonce) {
  protocol::AuthNonce mine;
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<uint8_t>(0xa0 + i);
  protocol::AuthProof proof = protocol::MakeAuthProof(kSecret, cfg.theirs(), conn_nonce, mine);
  Bytes out = AuthFrame(Opcode::kAuthChallenge, mine.data(), cfg.checksum);
  Bytes resp = AuthFrame(Opcode::kAuthResponse, proof.data(), cfg.checksum);
  out.insert(out.end(), resp.begin(), resp.end());
  WriteAll(fd, out.data(), out.size());
  protocol::AuthProof theirs = protocol::MakeAuthProof(kSecret, cfg.mine(), mine, conn_nonce);
  Bytes want = AuthFrame(Opcode::kAuthResponse, theirs.data(), cfg.checksum);
  FUZZ_CHECK(ReadExact(fd, want.size()) == want);
}

transport::tcp::EventLoop* Loop() {
  static auto* loop = new transport::tcp::EventLoop("fuzz-io0");  // lives for the process
  return loop;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  byteps::log::SetLevel(byteps::log::Level::kFatal);
  Loop();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Config cfg(data[0]);
  const uint8_t* stream = data + 1;
  const size_t stream_len = size - 1;

  int sv[2];
  FUZZ_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  FUZZ_CHECK(::fcntl(sv[0], F_SETFL, O_NONBLOCK) == 0);
  RecordingHandler handler;
  transport::tcp::ConnectionOptions options;
  options.max_payload = kMaxPayload;
  options.checksum = cfg.checksum;
  options.accepted = cfg.accepted;
  if (cfg.secret) options.secret = kSecret;
  auto conn = std::make_shared<transport::tcp::TcpConnection>(sv[0], Loop(), &handler, options, "fuzz-peer");
  FUZZ_CHECK(conn->Start());

  protocol::AuthNonce conn_nonce{};
  Bytes sent;  // what the connection sent after the handshake
  if (cfg.handshake) {
    conn_nonce = ConnectionNonce(cfg, ReadExact(sv[1], AuthFrameSize(cfg)));
    Handshake(cfg, sv[1], conn_nonce);
  }
  WriteAll(sv[1], stream, stream_len);
  ::shutdown(sv[1], SHUT_WR);
  const Status reason = handler.WaitClosed();
  sent = ReadToEnd(sv[1]);
  ::close(sv[1]);
  conn.reset();  // the loop dropped its reference when the connection closed

  Bytes want_sent;
  if (cfg.secret && !cfg.handshake) {  // the connection's own challenge comes first
    conn_nonce = ConnectionNonce(cfg, sent);
    want_sent = AuthFrame(Opcode::kAuthChallenge, conn_nonce.data(), cfg.checksum);
  }
  Expected want = ReferenceParse(cfg, conn_nonce, stream, stream_len);
  want_sent.insert(want_sent.end(), want.sent.begin(), want.sent.end());

  std::vector<Frame> got = handler.frames();
  FUZZ_CHECK(got.size() == want.frames.size());
  for (size_t i = 0; i < got.size(); ++i) FUZZ_CHECK(SameFrame(got[i], want.frames[i]));
  FUZZ_CHECK(reason.code() == want.end);
  FUZZ_CHECK(sent.size() <= want_sent.size());
  FUZZ_CHECK(std::equal(sent.begin(), sent.end(), want_sent.begin()));
  return 0;
}
