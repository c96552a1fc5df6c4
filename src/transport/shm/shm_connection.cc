#include "transport/shm/shm_connection.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "common/logging.h"

namespace byteps::transport::shm {

using protocol::Header;
using protocol::Opcode;

namespace {
void Store32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void Store64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
}  // namespace

ShmConnection::ShmConnection(std::shared_ptr<Segment> segment, bool acceptor, int peer_pid, Handler* handler,
                             ShmConnectionOptions options, std::string peer)
    : segment_(std::move(segment)),
      tx_(segment_->control(acceptor ? 1 : 0), segment_->data(acceptor ? 1 : 0), segment_->capacity()),
      rx_(segment_->control(acceptor ? 0 : 1), segment_->data(acceptor ? 0 : 1), segment_->capacity()),
      peer_pid_(peer_pid),
      handler_(handler),
      options_(options),
      peer_(std::move(peer)) {}

ShmConnection::~ShmConnection() = default;

void ShmConnection::Attach(std::shared_ptr<Connection> control) { control_ = std::move(control); }

std::string ShmConnection::peer_name() const {
  std::lock_guard<std::mutex> lock(name_mu_);
  return peer_;
}

void ShmConnection::set_peer_name(std::string name) {
  if (control_) control_->set_peer_name(name);  // its messages (a close, say) name the same peer
  std::lock_guard<std::mutex> lock(name_mu_);
  peer_ = std::move(name);
}

void ShmConnection::Bell(uint32_t what) {
  if (!control_) return;
  Header h;
  h.opcode = Opcode::kShmBell;
  h.arg = what;
  (void)control_->SendCopy(h, "");  // a closed control connection closes this one too
}

Status ShmConnection::Send(const Header& header, const std::vector<iovec>& payload, SendCallback on_done) {
  size_t total = 0;
  for (const auto& v : payload) total += v.iov_len;
  if (total != header.payload_len) {
    return Internal(fmt::format("{}: payload_len {} but {} payload bytes given", protocol::DescribeHeader(header),
                                header.payload_len, total));
  }
  Outgoing o;
  Header h = header;
  // As on TCP, the flag says the frame is checksummed (the header's own CRC included); the
  // payload's CRC travels in the record.
  if (options_.checksum) {
    h.flags |= protocol::kFlagChecksum;
  } else {
    h.flags &= static_cast<uint16_t>(~protocol::kFlagChecksum);
  }
  protocol::EncodeHeader(h, o.header);
  o.bytes = total;
  o.remote = total > kInlineMax;
  if (o.remote && payload.size() > kMaxRemoteIovecs) {
    return Internal(fmt::format("{}: {} payload pieces (at most {} over shared memory)",
                                protocol::DescribeHeader(header), payload.size(), kMaxRemoteIovecs));
  }
  for (const auto& v : payload)
    if (v.iov_len > 0) o.iov.push_back(v);
  if (options_.checksum)
    for (const auto& v : o.iov) o.crc = Crc32c(o.crc, v.iov_base, v.iov_len);
  o.on_done = std::move(on_done);
  SendCallback inline_done;
  bool published = false, progress = false;
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (closed_.load()) {
      return Unavailable(fmt::format("connection to {} is closed: {}", peer_name(), close_reason_.message()));
    }
    if (o.remote) o.seq = ++next_seq_;
    if (corked_ == 0 && queued_.empty() && WriteLocked(o)) {
      published = true;
      if (o.remote) {
        in_flight_.push_back(std::move(o));
      } else {
        inline_done = std::move(o.on_done);
      }
    } else {
      queued_.push_back(std::move(o));
    }
    progress = corked_ == 0 && (!published || !in_flight_.empty());  // wants a bell when the consumer moves
  }
  if (published && tx_.control()->consumer_sleeping.exchange(0) == 1) Bell(kBellData);
  if (inline_done) inline_done(Status::Ok());
  if (progress) Progress();
  return Status::Ok();
}

bool ShmConnection::WriteLocked(Outgoing& o) {
  const size_t body = o.remote ? 16 * o.iov.size() : o.bytes;
  const size_t len = Ring::Align(kRecordHead + body);
  uint8_t* p = tx_.Reserve(len);
  if (p == nullptr) return false;
  Store32(p, static_cast<uint32_t>(len));
  Store32(p + 4, static_cast<uint32_t>(o.remote ? RecordKind::kRemote : RecordKind::kInline));
  std::memcpy(p + 8, o.header, protocol::kHeaderSize);
  Store32(p + 8 + protocol::kHeaderSize, o.crc);
  Store32(p + 12 + protocol::kHeaderSize, static_cast<uint32_t>(o.iov.size()));
  Store64(p + 16 + protocol::kHeaderSize, o.seq);
  uint8_t* b = p + kRecordHead;
  for (const auto& v : o.iov) {
    if (o.remote) {
      Store64(b, reinterpret_cast<uint64_t>(v.iov_base));
      Store64(b + 8, v.iov_len);
      b += 16;
    } else {
      std::memcpy(b, v.iov_base, v.iov_len);
      b += v.iov_len;
    }
  }
  tx_.Publish();
  return true;
}

void ShmConnection::Cork() {
  std::lock_guard<std::mutex> lock(send_mu_);
  ++corked_;
}

void ShmConnection::Uncork() {
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (corked_ == 0 || --corked_ > 0) return;
  }
  Progress();
}

void ShmConnection::Progress() {
  std::vector<SendCallback> done;
  bool bell = false;
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (closed_.load() || corked_ > 0) return;
    for (int pass = 0; pass < 2; ++pass) {
      const uint64_t acked = tx_.control()->acked.load(std::memory_order_acquire);
      while (!in_flight_.empty() && in_flight_.front().seq <= acked) {
        done.push_back(std::move(in_flight_.front().on_done));
        in_flight_.pop_front();
      }
      while (!queued_.empty() && WriteLocked(queued_.front())) {
        bell = true;
        Outgoing& o = queued_.front();
        if (o.remote) {
          in_flight_.push_back(std::move(o));
        } else {
          done.push_back(std::move(o.on_done));
        }
        queued_.pop_front();
      }
      if (queued_.empty() && in_flight_.empty()) break;
      // Ask the consumer for a bell when it moves, then look once more: it may have moved before
      // it could see the request.
      tx_.control()->producer_waiting.store(1, std::memory_order_seq_cst);
    }
  }
  if (bell && tx_.control()->consumer_sleeping.exchange(0) == 1) Bell(kBellData);
  for (auto& d : done)
    if (d) d(Status::Ok());
}

void ShmConnection::OnBell(uint32_t what) {
  if (what & kBellData) Drain();
  if (what & kBellSpace) Progress();
}

void ShmConnection::Drain() {
  while (!closed_.load()) {
    size_t avail = 0;
    auto next = rx_.Next(&avail);
    if (!next.ok()) return Fail(next.status().WithContext(fmt::format("from {}", peer_name())));
    if (*next == nullptr) {
      rx_.control()->consumer_sleeping.store(1, std::memory_order_seq_cst);
      if (rx_.Empty()) break;
      rx_.control()->consumer_sleeping.store(0, std::memory_order_relaxed);
      continue;
    }
    auto rec = ParseRecord(*next, avail);
    if (!rec.ok()) return Fail(rec.status().WithContext(fmt::format("from {}", peer_name())));
    Status st = DeliverOne(*rec);
    if (!st.ok()) return Fail(st);
  }
  if (rx_.control()->producer_waiting.exchange(0) == 1) Bell(kBellSpace);
}

Status ShmConnection::DeliverOne(const RecordView& rec) {
  auto h = protocol::DecodeHeader(rec.header, protocol::kHeaderSize, options_.max_payload);
  if (!h.ok()) return h.status().WithContext(fmt::format("from {}", peer_name()));
  if (protocol::IsTransportOpcode(h->opcode)) {
    return ProtocolError(fmt::format("{} from {}: not a frame for a shared-memory ring", protocol::DescribeHeader(*h),
                                     peer_name()));
  }
  const size_t len = static_cast<size_t>(h->payload_len);
  uint64_t remote_bytes = 0;
  std::vector<iovec> remote;
  if (rec.kind == RecordKind::kInline) {
    if (rec.body_bytes < len || rec.body_bytes - len >= 8) {
      return ProtocolError(fmt::format("{} from {}: a record of {} payload bytes", protocol::DescribeHeader(*h),
                                       peer_name(), rec.body_bytes));
    }
  } else {
    for (uint32_t i = 0; i < rec.iovecs; ++i) {
      uint64_t addr, n;
      std::memcpy(&addr, rec.body + 16 * i, 8);
      std::memcpy(&n, rec.body + 16 * i + 8, 8);
      remote.push_back({reinterpret_cast<void*>(addr), static_cast<size_t>(n)});
      remote_bytes += n;
    }
    if (remote_bytes != len) {
      return ProtocolError(fmt::format("{} from {}: its pieces hold {} bytes", protocol::DescribeHeader(*h),
                                       peer_name(), remote_bytes));
    }
  }
  auto target = handler_->OnHeader(*this, *h);
  if (!target.ok()) return target.status();
  RecvBuffer b = std::move(target.value());
  BYTEPS_RETURN_IF_ERROR(PrepareRecvBuffer(b, *h, len, peer_name()));
  if (!b.discard && len > 0) {
    if (rec.kind == RecordKind::kInline) {
      std::memcpy(b.data, rec.body, len);
    } else {
      size_t got = 0;
      size_t first = 0;  // the first remote piece not fully read
      while (got < len) {
        iovec local{b.data + got, len - got};
        std::vector<iovec> rest(remote.begin() + first, remote.end());
        ssize_t n = process_vm_readv(peer_pid_, &local, 1, rest.data(), rest.size(), 0);
        if (n <= 0) {
          return Unavailable(fmt::format("{} from {}: reading its payload from pid {} failed: {}",
                                         protocol::DescribeHeader(*h), peer_name(), peer_pid_,
                                         n == 0 ? "no bytes" : std::strerror(errno)));
        }
        got += static_cast<size_t>(n);
        size_t skip = static_cast<size_t>(n);
        while (skip > 0 && first < remote.size()) {
          const size_t take = std::min(skip, remote[first].iov_len);
          remote[first].iov_base = static_cast<uint8_t*>(remote[first].iov_base) + take;
          remote[first].iov_len -= take;
          skip -= take;
          if (remote[first].iov_len == 0) ++first;
        }
      }
      // The sender gave up on its sends meanwhile (closing): the bytes may not be the frame's.
      if (rx_.control()->producer_closed.load(std::memory_order_seq_cst)) {
        return Unavailable(fmt::format("{} closed the connection while its frame was read", peer_name()));
      }
    }
    if (options_.checksum && Crc32c(0, b.data, len) != rec.crc) {
      return ProtocolError(fmt::format("{} from {}: payload checksum mismatch (BYTEPS_CHECKSUM)",
                                       protocol::DescribeHeader(*h), peer_name()));
    }
  }
  rx_.Consume(rec.length);
  if (rec.kind == RecordKind::kRemote) rx_.control()->acked.store(rec.seq, std::memory_order_release);
  if (rx_.control()->producer_waiting.exchange(0) == 1) Bell(kBellSpace);
  handler_->OnFrame(*this, *h, std::move(b));
  return Status::Ok();
}

void ShmConnection::Fail(const Status& reason) {
  BYTEPS_LOG(Warning, "closing the shared-memory connection to {}: {}", peer_name(), reason.message());
  Close(reason);
}

void ShmConnection::Close(const Status& reason) {
  if (close_done_.load()) return;
  if (control_) {
    control_->Close(reason);  // its close runs OnControlClosed (synchronously)
  }
  OnControlClosed(reason);  // no control connection yet, or it had closed before
}

void ShmConnection::OnControlClosed(const Status& reason) {
  std::deque<Outgoing> queued, in_flight;
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (closed_.exchange(true)) return;
    close_reason_ = reason;
    queued.swap(queued_);
    in_flight.swap(in_flight_);
  }
  // Before any sender memory can go: a consumer still reading it drops what it read.
  tx_.control()->producer_closed.store(1, std::memory_order_seq_cst);
  handler_->OnClose(*this, reason);
  for (auto& o : in_flight)
    if (o.on_done) o.on_done(reason);
  for (auto& o : queued)
    if (o.on_done) o.on_done(reason);
  close_done_.store(true);
}

}  // namespace byteps::transport::shm
