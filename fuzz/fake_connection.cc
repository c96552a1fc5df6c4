#include "fake_connection.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

namespace byteps::fuzz {
namespace {

// FNV-1a over the payload: reading every byte also lets ASan see a freed or short buffer.
uint64_t Digest(const std::vector<iovec>& payload) {
  uint64_t h = 1469598103934665603ull;
  for (const iovec& v : payload) {
    const auto* p = static_cast<const uint8_t*>(v.iov_base);
    for (size_t i = 0; i < v.iov_len; ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

}  // namespace

void Fail(const char* what, const char* file, int line) {
  std::fprintf(stderr, "fuzz invariant violated at %s:%d: %s\n", file, line, what);
  std::abort();
}

FakeConnection::FakeConnection(std::string name, transport::Handler* handler, SendCheck check)
    : handler_(handler), check_(check), name_(std::move(name)) {}

FakeConnection::~FakeConnection() {
  // Held sends still own server buffers; they must have been completed or failed by now.
  FUZZ_CHECK(pending_.empty());
}

Status FakeConnection::Send(const protocol::Header& header, const std::vector<iovec>& payload,
                            transport::SendCallback on_done) {
  // What tcp::TcpConnection would reject as Internal; the server ignores Send's status, so a
  // length mismatch there would silently drop a reply: a bug worth stopping for.
  uint64_t total = 0;
  for (const iovec& v : payload) {
    FUZZ_CHECK(v.iov_len == 0 || v.iov_base != nullptr);
    total += v.iov_len;
  }
  FUZZ_CHECK(total == header.payload_len);
  uint8_t wire[protocol::kHeaderSize];
  protocol::EncodeHeader(header, wire);
  auto decoded = protocol::DecodeHeader(wire, sizeof(wire), UINT64_MAX);
  FUZZ_CHECK(decoded.ok());
  if (check_) check_(header, payload);
  uint64_t digest = Digest(payload);

  std::lock_guard<std::mutex> lock(mu_);
  if (closed_.load()) return Unavailable(name_ + " is closed");
  ++frames_sent_;
  pending_.push_back(Pending{header, payload, digest, std::move(on_done)});
  return Status::Ok();
}

std::vector<FakeConnection::Pending> FakeConnection::TakePending() {
  std::vector<Pending> out;
  std::lock_guard<std::mutex> lock(mu_);
  out.swap(pending_);
  return out;
}

void FakeConnection::CompleteAll() {
  for (Pending& p : TakePending()) {
    FUZZ_CHECK(Digest(p.payload) == p.digest);  // the payload changed while "on the wire"
    if (p.on_done) p.on_done(Status::Ok());
  }
}

void FakeConnection::Close(const Status& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_.exchange(true)) return;
  }
  if (handler_ != nullptr) handler_->OnClose(*this, reason);
  for (Pending& p : TakePending()) {
    FUZZ_CHECK(Digest(p.payload) == p.digest);
    if (p.on_done) p.on_done(reason);
  }
}

void FakeConnection::Detach() {
  handler_ = nullptr;
  Close(Aborted("harness done"));
}

std::string FakeConnection::peer_name() const {
  std::lock_guard<std::mutex> lock(mu_);
  return name_;
}

void FakeConnection::set_peer_name(std::string name) {
  std::lock_guard<std::mutex> lock(mu_);
  name_ = std::move(name);
}

uint64_t FakeConnection::frames_sent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return frames_sent_;
}

}  // namespace byteps::fuzz
