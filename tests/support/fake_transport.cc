#include "tests/support/fake_transport.h"

#include <fmt/format.h>

#include <cstring>
#include <utility>

namespace byteps::testing {
namespace {

std::string Gather(const std::vector<iovec>& payload) {
  std::string out;
  for (const iovec& v : payload) out.append(static_cast<const char*>(v.iov_base), v.iov_len);
  return out;
}

}  // namespace

FakeConnection::FakeConnection(std::string peer, transport::Handler* handler)
    : handler_(handler), peer_(std::move(peer)) {}

FakeConnection::~FakeConnection() = default;

Status FakeConnection::Send(const protocol::Header& header, const std::vector<iovec>& payload,
                            transport::SendCallback on_done) {
  size_t total = 0;
  for (const iovec& v : payload) total += v.iov_len;
  if (total != header.payload_len) {
    return Internal(fmt::format("{}: header says {} payload bytes but {} were given",
                                protocol::DescribeHeader(header), header.payload_len, total));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Unavailable(fmt::format("connection to {} is closed", peer_));
    sent_.push_back({header, Gather(payload)});
    if (hold_) {
      held_.push_back({payload, std::move(on_done)});
      on_done = nullptr;
    }
  }
  cv_.notify_all();
  if (on_done) on_done(Status::Ok());
  return Status::Ok();
}

void FakeConnection::Close(const Status& reason) {
  std::deque<Held> held;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    held.swap(held_);
  }
  cv_.notify_all();
  if (handler_ != nullptr) handler_->OnClose(*this, reason);
  for (Held& h : held)
    if (h.on_done) h.on_done(reason);
}

bool FakeConnection::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

std::string FakeConnection::peer_name() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peer_;
}

void FakeConnection::set_peer_name(std::string name) {
  std::lock_guard<std::mutex> lock(mu_);
  peer_ = std::move(name);
}

std::optional<SentFrame> FakeConnection::NextSent(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !sent_.empty(); })) return std::nullopt;
  SentFrame f = std::move(sent_.front());
  sent_.pop_front();
  return f;
}

std::vector<SentFrame> FakeConnection::TakeSent() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SentFrame> out(std::make_move_iterator(sent_.begin()), std::make_move_iterator(sent_.end()));
  sent_.clear();
  return out;
}

Status FakeConnection::Deliver(protocol::Header header, const std::string& payload) {
  if (closed()) return Unavailable("delivering on a closed connection");
  header.payload_len = payload.size();
  auto target = handler_->OnHeader(*this, header);
  if (!target.ok()) {
    Close(target.status());
    return target.status();
  }
  transport::RecvBuffer b = std::move(target.value());
  std::shared_ptr<std::vector<uint8_t>> owned;
  if (!b.discard && b.data == nullptr && !payload.empty()) {  // the transport allocates
    owned = std::make_shared<std::vector<uint8_t>>(payload.size());
    b.data = owned->data();
    b.size = owned->size();
    b.owner = owned;
  }
  if (!b.discard && b.size != payload.size()) {
    Status st = Internal(fmt::format("handler gave a {}-byte buffer for {} bytes", b.size, payload.size()));
    Close(st);
    return st;
  }
  if (!b.discard && !payload.empty()) std::memcpy(b.data, payload.data(), payload.size());
  handler_->OnFrame(*this, header, std::move(b));
  return Status::Ok();
}

void FakeConnection::HoldSends(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  hold_ = on;
}

std::vector<std::string> FakeConnection::HeldPayloads() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const Held& h : held_) out.push_back(Gather(h.payload));
  return out;
}

void FakeConnection::CompleteHeld() {
  std::deque<Held> held;
  {
    std::lock_guard<std::mutex> lock(mu_);
    held.swap(held_);
  }
  for (Held& h : held)
    if (h.on_done) h.on_done(Status::Ok());
}

FakeTransport::~FakeTransport() { Shutdown(); }

StatusOr<int> FakeTransport::Listen(const std::string& host, int port, transport::Handler* handler) {
  std::lock_guard<std::mutex> lock(mu_);
  listener_ = handler;
  return port != 0 ? port : 1;
}

StatusOr<std::shared_ptr<transport::Connection>> FakeTransport::Connect(const std::string& host, int port,
                                                                        transport::Handler* handler,
                                                                        double timeout_s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (refuse_) return Unavailable(fmt::format("connection to {}:{} refused", host, port));
  }
  return std::static_pointer_cast<transport::Connection>(Add(fmt::format("{}:{}", host, port), handler, true));
}

StatusOr<int> FakeTransport::ListenLocal(const std::string& name, transport::Handler* handler) {
  return Listen(name, 0, handler);
}

StatusOr<std::shared_ptr<transport::Connection>> FakeTransport::ConnectLocal(const std::string& name,
                                                                             transport::Handler* handler,
                                                                             double timeout_s) {
  return Connect(name, 0, handler, timeout_s);
}

void FakeTransport::Shutdown() {
  std::vector<std::shared_ptr<FakeConnection>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all.swap(all_);
    connected_.clear();
  }
  for (auto& c : all) c->Close(Aborted("transport shut down"));
}

std::shared_ptr<FakeConnection> FakeTransport::Accept(const std::string& peer) {
  transport::Handler* handler;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handler = listener_;
  }
  return Add(peer, handler, false);
}

std::shared_ptr<FakeConnection> FakeTransport::NextConnect(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !connected_.empty(); })) return nullptr;
  auto c = connected_.front();
  connected_.pop_front();
  return c;
}

void FakeTransport::RefuseConnects(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  refuse_ = on;
}

std::shared_ptr<FakeConnection> FakeTransport::Add(std::string peer, transport::Handler* handler, bool connected) {
  auto c = std::make_shared<FakeConnection>(std::move(peer), handler);
  {
    std::lock_guard<std::mutex> lock(mu_);
    all_.push_back(c);
    if (connected) connected_.push_back(c);
  }
  cv_.notify_all();
  return c;
}

}  // namespace byteps::testing
