#include "transport/tcp/connection.h"

#include <fmt/format.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "common/logging.h"
#include "common/tsan.h"

namespace byteps::transport::tcp {
namespace {

constexpr size_t kStageBytes = 256 * 1024;
// Payload bytes still to come at or above this are received straight into the destination.
constexpr size_t kDirectRecvBytes = 32 * 1024;
// Bytes read per readiness event before yielding to the loop's other sockets.
constexpr size_t kReadBudget = 32u << 20;
constexpr int kMaxIov = 512;  // < IOV_MAX (1024)

std::string Errno(int e) { return fmt::format("{} (errno {})", std::strerror(e), e); }

}  // namespace

TcpConnection::TcpConnection(int fd, EventLoop* loop, Handler* handler, uint64_t max_payload,
                             std::string peer)
    : fd_(fd), loop_(loop), handler_(handler), max_payload_(max_payload), peer_(std::move(peer)),
      stage_(kStageBytes) {}

TcpConnection::~TcpConnection() { ::close(fd_); }

bool TcpConnection::Start() {
  auto self = this->self();
  // The loop's callback table holds the only strong reference the loop keeps; Remove drops it.
  return loop_->Add(fd_, EPOLLIN | EPOLLRDHUP, [self](uint32_t ev) { self->OnEvents(ev); });
}

std::string TcpConnection::peer_name() const {
  std::lock_guard<std::mutex> lock(name_mu_);
  return peer_;
}

void TcpConnection::set_peer_name(std::string name) {
  std::lock_guard<std::mutex> lock(name_mu_);
  peer_ = std::move(name);
}

Status TcpConnection::Send(const protocol::Header& header, const std::vector<iovec>& payload,
                           SendCallback on_done) {
  size_t total = 0;
  for (const iovec& v : payload) total += v.iov_len;
  if (total != header.payload_len) {
    return Internal(fmt::format("{} to {}: header says {} payload bytes but {} were given",
                                protocol::DescribeHeader(header), peer_name(), header.payload_len, total));
  }
  std::vector<SendCallback> done;
  Status err;
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (closed_.load()) {
      return Unavailable(fmt::format("connection to {} is closed: {}", peer_name(),
                                     close_reason_.message()));
    }
    SendEntry& e = send_queue_.emplace_back();
    protocol::EncodeHeader(header, e.header);
    e.iov.reserve(payload.size() + 1);
    e.iov.push_back({e.header, protocol::kHeaderSize});
    e.remaining = protocol::kHeaderSize;
    for (const iovec& v : payload) {
      if (v.iov_len == 0) continue;
      e.iov.push_back(v);
      e.remaining += v.iov_len;
    }
    e.on_done = std::move(on_done);
    if (!want_write_) {
      err = FlushLocked(&done);
      if (err.ok() && !send_queue_.empty()) {
        want_write_ = true;
        loop_->Modify(fd_, EPOLLIN | EPOLLRDHUP | EPOLLOUT);
      }
    }
  }
  for (auto& cb : done)
    if (cb) cb(Status::Ok());
  if (!err.ok()) {
    // Asynchronous here: a sender may itself be running on another loop's thread, and two loops
    // waiting on each other would deadlock.
    auto self = this->self();
    if (!loop_->Post([self, err] { self->CloseOnLoop(err); })) CloseOnLoop(err);
  }
  return Status::Ok();
}

Status TcpConnection::FlushLocked(std::vector<SendCallback>* done) {
  while (!send_queue_.empty()) {
    // Gather iovecs from as many queued entries as fit: small frames share one syscall.
    iovec iov[kMaxIov];
    int n_iov = 0;
    for (auto it = send_queue_.begin(); it != send_queue_.end() && n_iov < kMaxIov; ++it) {
      for (const iovec& v : it->iov) {
        if (v.iov_len == 0) continue;
        if (n_iov == kMaxIov) break;
        iov[n_iov++] = v;
      }
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n_iov);
    BYTEPS_TSAN_IGNORE_BEGIN();  // see common/tsan.h
    ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    BYTEPS_TSAN_IGNORE_END();
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
      return Unavailable(fmt::format("send to {} failed: {}", peer_name(), Errno(errno)));
    }
    size_t left = static_cast<size_t>(n);
    while (left > 0 && !send_queue_.empty()) {
      SendEntry& e = send_queue_.front();
      for (iovec& v : e.iov) {
        if (left == 0) break;
        size_t take = std::min(left, v.iov_len);
        v.iov_base = static_cast<uint8_t*>(v.iov_base) + take;
        v.iov_len -= take;
        e.remaining -= take;
        left -= take;
      }
      if (e.remaining == 0) {
        done->push_back(std::move(e.on_done));
        send_queue_.pop_front();
      }
    }
  }
  return Status::Ok();
}

void TcpConnection::HandleWritable() {
  std::vector<SendCallback> done;
  Status err;
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (closed_.load()) return;
    err = FlushLocked(&done);
    if (err.ok() && send_queue_.empty() && want_write_) {
      want_write_ = false;
      loop_->Modify(fd_, EPOLLIN | EPOLLRDHUP);
    }
  }
  for (auto& cb : done)
    if (cb) cb(Status::Ok());
  if (!err.ok()) CloseOnLoop(err);
}

void TcpConnection::OnEvents(uint32_t events) {
  if (closed_.load()) return;
  if (events & EPOLLOUT) HandleWritable();
  if (closed_.load()) return;
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
    Status st = HandleReadable();
    if (!st.ok()) CloseOnLoop(st);
  }
}

Status TcpConnection::HandleReadable() {
  size_t budget = kReadBudget;
  for (;;) {
    BYTEPS_RETURN_IF_ERROR(ParseStaged());
    if (closed_.load()) return Status::Ok();
    ssize_t n;
    size_t len = static_cast<size_t>(cur_.payload_len);
    if (in_payload_ && !target_.discard && len - got_ >= kDirectRecvBytes) {
      n = ::recv(fd_, target_.data + got_, len - got_, MSG_DONTWAIT);
      if (n > 0) {
        got_ += static_cast<size_t>(n);
        if (got_ == len) DeliverFrame();
      }
    } else {
      if (stage_begin_ > 0) {
        std::memmove(stage_.data(), stage_.data() + stage_begin_, stage_end_ - stage_begin_);
        stage_end_ -= stage_begin_;
        stage_begin_ = 0;
      }
      n = ::recv(fd_, stage_.data() + stage_end_, stage_.size() - stage_end_, MSG_DONTWAIT);
      if (n > 0) stage_end_ += static_cast<size_t>(n);
    }
    if (n == 0) {
      return Unavailable(fmt::format("{} closed the connection", peer_name()));
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
      return Unavailable(fmt::format("receive from {} failed: {}", peer_name(), Errno(errno)));
    }
    if (static_cast<size_t>(n) >= budget) return Status::Ok();  // level-triggered: we come back
    budget -= static_cast<size_t>(n);
  }
}

Status TcpConnection::ParseStaged() {
  while (stage_begin_ < stage_end_ && !closed_.load()) {
    size_t avail = stage_end_ - stage_begin_;
    if (!in_payload_) {
      if (avail < protocol::kHeaderSize) break;
      auto h = protocol::DecodeHeader(stage_.data() + stage_begin_, avail, max_payload_);
      if (!h.ok()) return h.status().WithContext(fmt::format("frame from {}", peer_name()));
      cur_ = h.value();
      stage_begin_ += protocol::kHeaderSize;
      auto t = handler_->OnHeader(*this, cur_);
      if (!t.ok()) return t.status();
      target_ = std::move(t.value());
      const size_t len = static_cast<size_t>(cur_.payload_len);
      if (!target_.discard && target_.data == nullptr && len > 0) {
        owned_ = std::make_shared<std::vector<uint8_t>>(len);
        target_.data = owned_->data();
        target_.size = len;
        target_.owner = owned_;
      }
      if (!target_.discard && target_.size != len) {
        return Internal(fmt::format("{} from {}: handler gave a {}-byte buffer for {} bytes",
                                    protocol::DescribeHeader(cur_), peer_name(), target_.size, len));
      }
      got_ = 0;
      in_payload_ = true;
      if (len == 0) DeliverFrame();
    } else {
      const size_t len = static_cast<size_t>(cur_.payload_len);
      size_t take = std::min(avail, len - got_);
      if (!target_.discard) std::memcpy(target_.data + got_, stage_.data() + stage_begin_, take);
      got_ += take;
      stage_begin_ += take;
      if (got_ == len) DeliverFrame();
    }
  }
  if (stage_begin_ == stage_end_) stage_begin_ = stage_end_ = 0;
  return Status::Ok();
}

Status TcpConnection::DeliverFrame() {
  in_payload_ = false;
  RecvBuffer b = std::move(target_);
  target_ = RecvBuffer{};
  owned_.reset();
  handler_->OnFrame(*this, cur_, std::move(b));
  return Status::Ok();
}

void TcpConnection::Close(const Status& reason) {
  if (closed_.load()) return;
  // Synchronous: once Close returns, no handler callback for this connection runs any more, so
  // the handler may be destroyed right after.
  auto self = this->self();
  loop_->RunSync([self, reason] { self->CloseOnLoop(reason); });
}

void TcpConnection::CloseOnLoop(const Status& reason) {
  std::deque<SendEntry> pending;
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (closed_.exchange(true)) return;
    close_reason_ = reason;
    pending.swap(send_queue_);
  }
  // Keep ourselves alive: Remove drops the loop's reference.
  auto self = this->self();
  loop_->Remove(fd_);
  ::shutdown(fd_, SHUT_RDWR);
  BYTEPS_LOG(Debug, "connection to {} closed: {}", peer_name(), reason.message());
  handler_->OnClose(*this, reason);
  for (auto& e : pending)
    if (e.on_done) e.on_done(reason);
}

}  // namespace byteps::transport::tcp
