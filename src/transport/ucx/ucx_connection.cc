#include "transport/ucx/ucx_connection.h"

#include <cstring>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "common/logging.h"
#include "transport/ucx/ucx_reg_cache.h"

namespace byteps::transport::ucx {

using protocol::Header;

void EncodeAmHeader(const AmHeader& h, uint8_t* out) {
  std::memcpy(out, &h.conn_id, 8);
  std::memcpy(out + 8, &h.token, 8);
  std::memcpy(out + 16, &h.flags, 4);
  std::memcpy(out + 20, &h.crc, 4);
  protocol::EncodeHeader(h.frame, out + 24);
}

StatusOr<AmHeader> ParseAmHeader(const void* data, size_t length) {
  if (length != kAmHeaderBytes) {
    return ProtocolError(fmt::format("a UCX message header of {} bytes (expected {})", length, kAmHeaderBytes));
  }
  const auto* p = static_cast<const uint8_t*>(data);
  AmHeader h;
  std::memcpy(&h.conn_id, p, 8);
  std::memcpy(&h.token, p + 8, 8);
  std::memcpy(&h.flags, p + 16, 4);
  std::memcpy(&h.crc, p + 20, 4);
  if (h.flags & ~kAmFlagChecksum) return ProtocolError(fmt::format("unknown UCX message flags 0x{:x}", h.flags));
  BYTEPS_ASSIGN_OR_RETURN(h.frame, protocol::DecodeHeader(p + 24, protocol::kHeaderSize, ~0ull));
  return h;
}

struct UcxConnection::SendOp {
  std::shared_ptr<UcxConnection> self;  // alive while UCX holds the send
  uint8_t am[kAmHeaderBytes];
  std::vector<ucp_dt_iov_t> iov;
  size_t bytes = 0;
  SendCallback on_done;
  std::shared_ptr<Registration> reg;
};

struct UcxConnection::Incoming {
  std::shared_ptr<UcxConnection> conn;  // set while a rendezvous fetch is under way
  Header frame;
  uint32_t flags = 0, crc = 0;
  RecvBuffer buffer;
  bool done = false;
  bool drop = false;  // the Handler discards it: fetched into scratch memory
  ucs_status_t status = UCS_OK;
};

UcxConnection::UcxConnection(std::shared_ptr<UcxWorker> worker, Handler* handler, UcxConnectionOptions options,
                             std::string peer, uint64_t token, ControlCloser close_control)
    : worker_(std::move(worker)),
      handler_(handler),
      options_(options),
      token_(token),
      close_control_(std::move(close_control)),
      peer_(std::move(peer)) {}

UcxConnection::~UcxConnection() {
  for (SendOp* op : queue_) delete op;  // never started (the connection closed first)
}

void UcxConnection::Attach(std::shared_ptr<Connection> control) { control_ = std::move(control); }

std::string UcxConnection::peer_name() const {
  std::lock_guard<std::mutex> lock(name_mu_);
  return peer_;
}

void UcxConnection::set_peer_name(std::string name) {
  if (control_) control_->set_peer_name(name);
  std::lock_guard<std::mutex> lock(name_mu_);
  peer_ = std::move(name);
}

// --- Sending ----------------------------------------------------------------------------------

Status UcxConnection::Send(const Header& header, const std::vector<iovec>& payload, SendCallback on_done) {
  size_t total = 0;
  for (const iovec& v : payload) total += v.iov_len;
  if (total != header.payload_len) {
    return Internal(fmt::format("{} to {}: header says {} payload bytes but {} were given",
                                protocol::DescribeHeader(header), peer_name(), header.payload_len, total));
  }
  auto* op = new SendOp;
  AmHeader am;
  am.token = token_;
  am.frame = header;
  // As over TCP: with BYTEPS_CHECKSUM the frame header carries its own checksum and the flag.
  am.frame.flags = static_cast<uint16_t>((am.frame.flags & ~protocol::kFlagChecksum) |
                                         (options_.checksum ? protocol::kFlagChecksum : 0));
  if (options_.checksum) {
    am.flags = kAmFlagChecksum;
    for (const iovec& v : payload) am.crc = Crc32c(am.crc, v.iov_base, v.iov_len);
  }
  EncodeAmHeader(am, op->am);  // conn_id is filled in at the start (the peer's id may come later)
  op->iov.reserve(payload.size());
  for (const iovec& v : payload) {
    if (v.iov_len > 0) op->iov.push_back({v.iov_base, v.iov_len});
  }
  op->bytes = total;
  op->on_done = std::move(on_done);
  bool post;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_.load()) {
      delete op;
      return Unavailable(fmt::format("connection to {} is closed: {}", peer_name(), close_reason_.message()));
    }
    queue_.push_back(op);
    post = corked_ == 0 && !drain_posted_;
    if (post) drain_posted_ = true;
  }
  if (post) ScheduleDrain();
  return Status::Ok();
}

void UcxConnection::ScheduleDrain() {
  if (worker_->InLoopThread()) return Drain();
  auto self = std::static_pointer_cast<UcxConnection>(shared_from_this());
  if (!worker_->Post([self] { self->Drain(); })) {
    // The worker stopped (the transport shut down): CloseOnLoop completes what is queued.
    worker_->RunSync([self] { self->CloseOnLoop(Unavailable("the UCX transport shut down")); });
  }
}

void UcxConnection::Cork() {
  std::lock_guard<std::mutex> lock(mu_);
  ++corked_;
}

void UcxConnection::Uncork() {
  bool post;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (corked_ > 0) --corked_;
    post = corked_ == 0 && !drain_posted_ && !queue_.empty();
    if (post) drain_posted_ = true;
  }
  if (post) ScheduleDrain();
}

void UcxConnection::Drain() {
  if (ep_ == nullptr) return;  // Start drains once the endpoint exists
  std::vector<SendOp*> ops;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ops.swap(queue_);
    drain_posted_ = false;
  }
  for (SendOp* op : ops) StartSend(op);
}

void UcxConnection::StartSend(SendOp* op) {
  if (closed_.load()) return Finish(op, UCS_ERR_CANCELED);
  std::memcpy(op->am, &remote_id_, 8);
  op->self = std::static_pointer_cast<UcxConnection>(shared_from_this());
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE |
                   UCP_OP_ATTR_FIELD_FLAGS;
  p.cb.send = &UcxConnection::SendDone;
  p.user_data = op;
  // Small payloads eagerly; large ones take UCX's rendezvous (its threshold is below kRndvMin on
  // every transport, and forcing the flag measured slower: it rules out UCX's own protocol tuning).
  p.flags = op->bytes < kRndvMin || options_.large_eager ? UCP_AM_SEND_FLAG_EAGER : 0;
  const void* buffer = nullptr;
  size_t count = 0;
  if (op->iov.size() == 1) {
    p.datatype = ucp_dt_make_contig(1);
    buffer = op->iov[0].buffer;
    count = op->iov[0].length;
    if (op->bytes >= kRndvMin && (op->reg = worker_->cache().Get(op->iov[0].buffer, op->iov[0].length))) {
      p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
      p.memh = op->reg->memh();
    }
  } else {
    p.datatype = op->iov.empty() ? ucp_dt_make_contig(1) : ucp_dt_make_iov();
    buffer = op->iov.empty() ? nullptr : op->iov.data();
    count = op->iov.size();
  }
  ucs_status_ptr_t r = ucp_am_send_nbx(ep_, kAmId, op->am, kAmHeaderBytes, buffer, count, &p);
  if (r == nullptr) {
    worker_->Defer([this, op] { Finish(op, UCS_OK); });  // done at once: on_done outside the caller
    return;
  }
  if (UCS_PTR_IS_ERR(r)) {
    const ucs_status_t s = UCS_PTR_STATUS(r);
    worker_->Defer([this, op, s] { Finish(op, s); });
    return;
  }
  ++in_flight_;
}

void UcxConnection::SendDone(void* request, ucs_status_t status, void* user) {
  auto* op = static_cast<SendOp*>(user);
  ucp_request_free(request);
  UcxConnection* c = op->self.get();
  --c->in_flight_;
  c->worker_->Defer([c, op, status] { c->Finish(op, status); });
}

void UcxConnection::Finish(SendOp* op, ucs_status_t status) {
  Status st;
  if (status != UCS_OK) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      st = closed_.load() ? close_reason_ : Status::Ok();
    }
    if (st.ok()) {
      st = Unavailable(fmt::format("{} to {}: UCX send failed: {}", protocol::DescribeHeader(ParseAmHeader(op->am,
                                   kAmHeaderBytes)->frame), peer_name(), UcsError(status)));
      Fail(st);
    }
  }
  std::unique_ptr<SendOp> done(op);
  auto cb = std::move(op->on_done);
  done.reset();  // the registration and the connection go before the callback runs
  if (cb) cb(st);
}

// --- Receiving --------------------------------------------------------------------------------

void UcxConnection::Start(ucp_ep_h ep, uint64_t remote_id) {
  if (closed_.load()) return worker_->CloseEndpoint(ep);
  ep_ = ep;
  remote_id_ = remote_id;
  Drain();
}

void UcxConnection::OnArrival(const Arrival& a) {
  bool fetching = false;
  Status st = closed_.load() ? Status::Ok() : Receive(a, fetching);
  if (a.release) ucp_am_data_release(worker_->handle(), a.data);
  if (a.rndv_desc && !fetching) ucp_am_data_release(worker_->handle(), a.rndv_desc);  // dropped
  if (!st.ok()) return Fail(st.WithContext(fmt::format("from {}", peer_name())));
  DeliverReady();
}

Status UcxConnection::Receive(const Arrival& a, bool& fetching) {
  const Header& h = a.header.frame;
  if (h.payload_len != a.length) {
    return ProtocolError(fmt::format("{}: the header says {} payload bytes, the message holds {}",
                                     protocol::DescribeHeader(h), h.payload_len, a.length));
  }
  if (h.payload_len > options_.max_payload) {
    return ProtocolError(fmt::format("payload of {} bytes exceeds the limit of {} (BYTEPS_MAX_MESSAGE_BYTES)",
                                     h.payload_len, options_.max_payload));
  }
  if (options_.checksum && !(a.header.flags & kAmFlagChecksum)) {
    return ProtocolError(fmt::format("{} carries no checksum, but BYTEPS_CHECKSUM=1 here (set it on every process)",
                                     protocol::DescribeHeader(h)));
  }
  if (protocol::IsTransportOpcode(h.opcode)) {
    return ProtocolError(fmt::format("{}: not a frame for a UCX connection", protocol::DescribeHeader(h)));
  }
  auto in = std::make_shared<Incoming>();
  in->frame = h;
  in->flags = a.header.flags;
  in->crc = a.header.crc;
  auto target = handler_->OnHeader(*this, h);
  if (!target.ok()) return target.status();
  in->buffer = std::move(target.value());
  if (in->buffer.discard && a.rndv_desc) {  // fetched into scratch, then dropped
    in->buffer = RecvBuffer{};
    in->drop = true;
  }
  BYTEPS_RETURN_IF_ERROR(PrepareRecvBuffer(in->buffer, h, a.length, peer_name()));
  incoming_.push_back(in);
  if (!a.rndv_desc) {
    if (!in->buffer.discard && a.length > 0) std::memcpy(in->buffer.data, a.copy ? a.copy->data() : a.data, a.length);
    in->done = true;
    return Status::Ok();
  }
  in->conn = std::static_pointer_cast<UcxConnection>(shared_from_this());
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  p.cb.recv_am = &UcxConnection::RecvDone;
  p.datatype = ucp_dt_make_contig(1);
  p.user_data = in.get();
  worker_->Track(in.get(), in);  // the worker keeps the buffer alive for as long as UCX may write into it
  ucs_status_ptr_t r = ucp_am_recv_data_nbx(worker_->handle(), a.rndv_desc, in->buffer.data, a.length, &p);
  fetching = true;  // the descriptor is UCX's again
  if (UCS_PTR_IS_PTR(r)) return Status::Ok();  // RecvDone follows
  worker_->Untrack(in.get());
  in->conn.reset();
  in->done = true;
  in->status = r == nullptr ? UCS_OK : UCS_PTR_STATUS(r);
  return Status::Ok();
}

void UcxConnection::RecvDone(void* request, ucs_status_t status, size_t, void* user) {
  auto* raw = static_cast<Incoming*>(user);
  std::shared_ptr<UcxConnection> c = std::move(raw->conn);
  std::shared_ptr<void> keep = c->worker_->Untrack(raw);  // (raw lives until this returns)
  ucp_request_free(request);
  raw->done = true;
  raw->status = status;
  c->worker_->Defer([c] { c->DeliverReady(); });
}

void UcxConnection::DeliverReady() {
  while (!closed_.load() && !incoming_.empty() && incoming_.front()->done) {
    std::shared_ptr<Incoming> in = std::move(incoming_.front());
    incoming_.pop_front();
    const Header& h = in->frame;
    if (in->status != UCS_OK) {
      return Fail(Unavailable(fmt::format("{} from {}: receiving its payload failed: {}", protocol::DescribeHeader(h),
                                          peer_name(), UcsError(in->status))));
    }
    if ((in->flags & kAmFlagChecksum) && !in->buffer.discard && h.payload_len > 0 &&
        Crc32c(0, in->buffer.data, h.payload_len) != in->crc) {
      return Fail(ProtocolError(fmt::format("{} from {}: payload checksum mismatch (BYTEPS_CHECKSUM)",
                                            protocol::DescribeHeader(h), peer_name())));
    }
    if (in->drop) in->buffer = RecvBuffer{nullptr, 0, nullptr, /*discard=*/true};
    handler_->OnFrame(*this, h, std::move(in->buffer));
  }
}

// --- Closing ----------------------------------------------------------------------------------

void UcxConnection::OnEndpointError(ucs_status_t status) {
  // Called from inside progress: the close runs after it.
  auto self = std::static_pointer_cast<UcxConnection>(shared_from_this());
  worker_->Defer([self, status] {
    self->Fail(Unavailable(fmt::format("the UCX endpoint to {} failed: {} (the peer died or its network is gone)",
                                       self->peer_name(), UcsError(status))));
  });
}

void UcxConnection::OnControlClosed(const Status& reason) {
  auto self = std::static_pointer_cast<UcxConnection>(shared_from_this());
  if (!worker_->Post([self, reason] { self->CloseOnLoop(reason); })) {
    worker_->RunSync([self, reason] { self->CloseOnLoop(reason); });  // stopped: runs here
  }
}

void UcxConnection::Fail(const Status& reason) {
  if (closed_.load()) return;
  BYTEPS_LOG(Warning, "closing the UCX connection to {}: {}", peer_name(), reason.message());
  CloseOnLoop(reason);
}

void UcxConnection::Close(const Status& reason) {
  if (close_done_.load()) return;  // else wait, even for a close already running (its OnClose)
  worker_->RunSync([&] { CloseOnLoop(reason); });
}

void UcxConnection::CloseOnLoop(const Status& reason) {
  std::vector<SendOp*> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_.exchange(true)) return;
    close_reason_ = reason;
    queued.swap(queue_);
  }
  worker_->Unregister(id_);  // no message reaches it any more
  // Rendezvous fetches still running write into their buffers until UCX lets go of them: the
  // endpoint's forced close ends them, and the buffers' owners are held until they completed.
  std::vector<std::shared_ptr<Incoming>> fetching;
  for (auto& in : incoming_)
    if (!in->done) fetching.push_back(in);
  incoming_.clear();
  if (ep_) {
    worker_->CloseEndpoint(ep_);
    ep_ = nullptr;
  }
  if (!fetching.empty()) {
    worker_->ProgressUntil([&] {
      for (auto& in : fetching)
        if (!in->done) return false;
      return true;
    }, 1.0);
  }
  if (control_) close_control_(control_, reason);
  handler_->OnClose(*this, reason);
  for (SendOp* op : queued) Finish(op, UCS_ERR_CANCELED);
  close_done_.store(true);
}

}  // namespace byteps::transport::ucx
