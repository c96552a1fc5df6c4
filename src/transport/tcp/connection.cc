#include "transport/tcp/connection.h"

#include <fmt/format.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "common/crc32c.h"
#include "common/little_endian.h"
#include "common/logging.h"
#include "common/tsan.h"

namespace byteps::transport::tcp {
namespace {

// The staging buffer small control frames are read through. A connection starts with a small one
// and gets the full size once its peer has proved itself (authenticated, when a secret is set, and
// delivered a frame): a flood of idle or hostile connections costs 4 KiB each, not 256 KiB.
constexpr size_t kInitialStageBytes = 4 * 1024;
constexpr size_t kStageBytes = 256 * 1024;
// Payload bytes still to come at or above this are received straight into the destination.
constexpr size_t kDirectRecvBytes = 32 * 1024;
// Bytes read per readiness event before yielding to the loop's other sockets.
constexpr size_t kReadBudget = 32u << 20;
constexpr int kMaxIov = 512;  // < IOV_MAX (1024)

std::string Errno(int e) { return fmt::format("{} (errno {})", std::strerror(e), e); }

}  // namespace

TcpConnection::TcpConnection(int fd, EventLoop* loop, Handler* handler, ConnectionOptions options,
                             std::string peer)
    : fd_(fd), loop_(loop), handler_(handler), options_(std::move(options)), peer_(std::move(peer)),
      stage_(kInitialStageBytes) {
  authenticated_ = options_.secret.empty();
}

TcpConnection::~TcpConnection() { ::close(fd_); }

bool TcpConnection::Start() {
  // The challenge goes out before the socket is registered, so it precedes anything the loop
  // thread may send (e.g. the answer to the peer's challenge).
  if (!options_.secret.empty() && !SendChallenge()) return false;
  auto self = this->self();
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    uint32_t events = EPOLLIN | EPOLLRDHUP | (want_write_ ? static_cast<uint32_t>(EPOLLOUT) : 0u);
    // The loop's callback table holds the only strong reference the loop keeps; Remove drops it.
    if (!loop_->Add(fd_, events, [self](uint32_t ev) { self->OnEvents(ev); })) return false;
  }
  // A failed challenge send may have closed us on the loop before Add (its Remove found
  // nothing): take the registration back, or the loop would keep a dead fd (and us) forever.
  // (Closed after Add, e.g. the handshake already failed, this Remove is a harmless repeat; the
  // caller learns the reason from WaitAuthenticated.)
  if (closed_.load()) loop_->RunSync([self] { self->loop_->Remove(self->fd_); });
  return true;
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
    protocol::Header h = header;
    h.flags = static_cast<uint16_t>((h.flags & ~protocol::kFlagChecksum) |
                                    (options_.checksum ? protocol::kFlagChecksum : 0));
    protocol::EncodeHeader(h, e.header);
    e.iov.reserve(payload.size() + 2);
    e.iov.push_back({e.header, protocol::kHeaderSize});
    e.remaining = protocol::kHeaderSize;
    uint32_t crc = 0;
    for (const iovec& v : payload) {
      if (v.iov_len == 0) continue;
      e.iov.push_back(v);
      e.remaining += v.iov_len;
      if (options_.checksum) crc = Crc32c(crc, v.iov_base, v.iov_len);
    }
    if (options_.checksum) {
      StoreLe32(e.trailer, crc);
      e.iov.push_back({e.trailer, protocol::kTrailerSize});
      e.remaining += protocol::kTrailerSize;
    }
    e.on_done = std::move(on_done);
    if (corked_ == 0) err = WriteNowLocked(&done);
  }
  return AfterWrite(done, err);
}

void TcpConnection::Cork() {
  std::lock_guard<std::mutex> lock(send_mu_);
  ++corked_;
}

void TcpConnection::Uncork() {
  std::vector<SendCallback> done;
  Status err;
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (corked_ > 0 && --corked_ == 0 && !closed_.load()) err = WriteNowLocked(&done);
  }
  (void)AfterWrite(done, err);
}

Status TcpConnection::WriteNowLocked(std::vector<SendCallback>* done) {
  if (want_write_) return Status::Ok();  // the I/O thread writes as the socket drains
  Status err = FlushLocked(done);
  if (err.ok() && !send_queue_.empty()) {
    want_write_ = true;
    loop_->Modify(fd_, EPOLLIN | EPOLLRDHUP | EPOLLOUT);
  }
  return err;
}

Status TcpConnection::AfterWrite(const std::vector<SendCallback>& done, const Status& err) {
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
        if (cur_.flags & protocol::kFlagChecksum) crc_ = Crc32c(crc_, target_.data + got_, static_cast<size_t>(n));
        got_ += static_cast<size_t>(n);
        if (got_ == len) BYTEPS_RETURN_IF_ERROR(PayloadComplete());
      }
    } else {
      if (stage_.size() < kStageBytes && authenticated_.load() && delivered_.load()) stage_.resize(kStageBytes);
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
    const size_t avail = stage_end_ - stage_begin_;
    const uint8_t* at = stage_.data() + stage_begin_;
    if (in_trailer_) {
      if (avail < protocol::kTrailerSize) break;
      uint32_t sent = LoadLe32(at);
      stage_begin_ += protocol::kTrailerSize;
      in_trailer_ = false;
      if (sent != crc_) {
        return ProtocolError(fmt::format("corrupt {} from {}: payload checksum 0x{:08x}, computed 0x{:08x}",
                                         protocol::DescribeHeader(cur_), peer_name(), sent, crc_));
      }
      BYTEPS_RETURN_IF_ERROR(DeliverFrame());
    } else if (!in_payload_) {
      if (avail < protocol::kHeaderSize) break;
      const bool authenticated = authenticated_.load();
      auto h = protocol::DecodeHeader(at, avail, authenticated ? options_.max_payload : UINT64_MAX);
      if (!h.ok()) {
        // Another release (not a damaged header that also has another version byte).
        if (options_.accepted && h.status().code() == StatusCode::kInvalidArgument &&
            protocol::IsWireVersionMismatch(at, avail)) {
          AnswerOtherVersion();
        }
        return h.status().WithContext(fmt::format("frame from {}", peer_name()));
      }
      BYTEPS_RETURN_IF_ERROR(CheckSizeBeforeAuth(h.value()));  // checked before anything is allocated
      cur_ = h.value();
      stage_begin_ += protocol::kHeaderSize;
      BYTEPS_RETURN_IF_ERROR(OnFrameHeader());
    } else {
      const size_t len = static_cast<size_t>(cur_.payload_len);
      size_t take = std::min(avail, len - got_);
      if (!target_.discard) std::memcpy(target_.data + got_, at, take);
      if (cur_.flags & protocol::kFlagChecksum) crc_ = Crc32c(crc_, at, take);
      got_ += take;
      stage_begin_ += take;
      if (got_ == len) BYTEPS_RETURN_IF_ERROR(PayloadComplete());
    }
  }
  if (stage_begin_ == stage_end_) stage_begin_ = stage_end_ = 0;
  return Status::Ok();
}

void TcpConnection::AnswerOtherVersion() {
  // One header of our own version, so that the peer fails at once naming both versions (its
  // decoder checks the version first) instead of reconnecting to a peer that hung up silently.
  // Written straight to the socket: the connection closes right after.
  protocol::Header h;
  h.opcode = protocol::Opcode::kError;
  uint8_t bytes[protocol::kHeaderSize];
  protocol::EncodeHeader(h, bytes);
  (void)::send(fd_, bytes, sizeof(bytes), MSG_DONTWAIT | MSG_NOSIGNAL);
}

Status TcpConnection::OnFrameHeader() {
  if (options_.checksum && !(cur_.flags & protocol::kFlagChecksum)) {
    return ProtocolError(fmt::format("{} sent {} without a checksum, but BYTEPS_CHECKSUM=1 here (set it alike "
                                     "on every node)",
                                     peer_name(), protocol::OpcodeName(cur_.opcode)));
  }
  crc_ = 0;
  internal_frame_ = IsAuthOpcode(cur_.opcode) || !authenticated_.load();
  const size_t len = static_cast<size_t>(cur_.payload_len);
  if (internal_frame_) {
    BYTEPS_RETURN_IF_ERROR(CheckBeforeAuth(cur_));
    target_ = RecvBuffer{};
  } else {
    auto t = handler_->OnHeader(*this, cur_);
    if (!t.ok()) return t.status();
    target_ = std::move(t.value());
  }
  BYTEPS_RETURN_IF_ERROR(PrepareRecvBuffer(target_, cur_, len, peer_name()));
  got_ = 0;
  in_payload_ = true;
  if (len == 0) return PayloadComplete();
  return Status::Ok();
}

Status TcpConnection::PayloadComplete() {
  in_payload_ = false;
  if (cur_.flags & protocol::kFlagChecksum) {
    in_trailer_ = true;  // ParseStaged verifies it once its 4 bytes are staged
    return Status::Ok();
  }
  return DeliverFrame();
}

Status TcpConnection::DeliverFrame() {
  in_payload_ = false;
  RecvBuffer b = std::move(target_);
  target_ = RecvBuffer{};
  if (internal_frame_) return HandleAuthFrame(b.data, b.discard ? 0 : cur_.payload_len);
  delivered_ = true;
  handler_->OnFrame(*this, cur_, std::move(b));
  return Status::Ok();
}

void TcpConnection::Close(const Status& reason) {
  // Synchronous: once Close returns, no handler callback for this connection runs any more, so
  // the handler may be destroyed right after. That holds even when the loop closed the
  // connection first (e.g. a reset) and may still be inside OnClose: RunSync waits for the loop
  // to finish that. Once the close has run to its end the loop is not touched (it may be gone).
  if (close_done_.load()) return;
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
  {
    std::lock_guard<std::mutex> lock(auth_mu_);  // wakes WaitAuthenticated
  }
  auth_cv_.notify_all();
  // The one place a refused peer is logged (handlers need not): unauthenticated, or bad bytes.
  if (options_.accepted && (!authenticated_.load() || IsRefusal(reason))) {
    BYTEPS_LOG(Warning, "refused connection from {}: {}", peer_name(), reason.message());
  }
  // Keep ourselves alive: Remove drops the loop's reference.
  auto self = this->self();
  loop_->Remove(fd_);
  ::shutdown(fd_, SHUT_RDWR);
  BYTEPS_LOG(Debug, "connection to {} closed: {}", peer_name(), reason.message());
  handler_->OnClose(*this, reason);
  for (auto& e : pending)
    if (e.on_done) e.on_done(reason);
  close_done_.store(true);
}

}  // namespace byteps::transport::tcp