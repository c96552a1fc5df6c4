#include "worker/local_reducer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "common/logging.h"
#include "protocol/error_frame.h"
#include "protocol/control.h"
#include "common/reducer.h"

namespace byteps::worker {

using protocol::Header;
using protocol::Opcode;

namespace {
std::string SlotSuffix(int host, uint32_t key, int rank) { return fmt::format("w{}-k{}-slot{}", host, key, rank); }
std::string ResultSuffix(int host, uint32_t key) { return fmt::format("w{}-k{}-result", host, key); }
}  // namespace

LocalReducer::LocalReducer(const LocalOptions& options, Done on_failure)
    : options_(options), on_failure_(std::move(on_failure)) {}

std::string LocalReducer::SocketName() const {
  return fmt::format("byteps-{}-w{}-local", options_.job, options_.host_id);
}

StatusOr<std::unique_ptr<LocalReducer>> LocalReducer::Start(const LocalOptions& options, Done on_failure) {
  std::unique_ptr<LocalReducer> r(new LocalReducer(options, std::move(on_failure)));
  int stale = ShmSegment::RemoveStale();
  if (stale > 0) BYTEPS_LOG(Info, "removed {} shared-memory segment(s) left by dead processes", stale);
  transport::TransportOptions to = options.transport;
  to.io_threads = 1;
  to.name = "bps-local";
  to.socket_buffer_bytes = 0;
  r->transport_ = transport::CreateTcpTransport(to);
  const double timeout = options.start_timeout_s;
  LocalReducer* raw = r.get();
  if (r->is_root()) {
    auto l = r->transport_->ListenLocal(r->SocketName(), raw);
    if (!l.ok()) return l.status();
    std::unique_lock<std::mutex> lock(r->mu_);
    bool all = r->cv_.wait_for(lock, std::chrono::duration<double>(timeout), [&] {
      return static_cast<int>(raw->peers_.size()) == options.local_size - 1 || !raw->failure_.ok();
    });
    if (!raw->failure_.ok()) return raw->failure_;
    if (!all) {
      std::string missing;
      for (int i = 0; i < options.local_size - 1; ++i)
        if (!raw->peers_.count(i)) missing += (missing.empty() ? "" : ", ") + std::to_string(i);
      return DeadlineExceeded(fmt::format("local root (BYTEPS_LOCAL_RANK={}) waited {:.0f} s (BYTEPS_START_TIMEOUT) "
                                          "for local ranks {} of BYTEPS_LOCAL_SIZE={} on this host",
                                          options.local_rank, timeout, missing, options.local_size));
    }
    return r;
  }
  auto c = r->transport_->ConnectLocal(r->SocketName(), raw, timeout);
  if (!c.ok()) {
    return c.status().WithContext(
        fmt::format("local rank {} cannot reach its local root (local rank {}; is that process running?)",
                    options.local_rank, options.local_size - 1));
  }
  r->root_ = c.value();
  r->root_->set_peer_name(fmt::format("local root (local rank {})", options.local_size - 1));
  Header h;
  h.opcode = Opcode::kHello;
  h.sender = static_cast<uint32_t>(options.local_rank);
  h.arg = static_cast<uint32_t>(getpid());
  BYTEPS_RETURN_IF_ERROR(r->root_->SendCopy(h, ""));
  std::unique_lock<std::mutex> lock(r->mu_);
  if (!r->cv_.wait_for(lock, std::chrono::duration<double>(timeout),
                       [&] { return raw->root_pid_ != 0 || !raw->failure_.ok(); })) {
    return DeadlineExceeded("the local root did not answer within BYTEPS_START_TIMEOUT");
  }
  if (!raw->failure_.ok()) return raw->failure_;
  return r;
}

LocalReducer::~LocalReducer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.ok()) failure_ = Aborted("local reducer closed");
  }
  if (transport_) transport_->Shutdown();
}

void LocalReducer::Leave() {
  std::shared_ptr<transport::Connection> root;
  {
    std::lock_guard<std::mutex> lock(mu_);
    root = root_;
  }
  if (!root) return;
  Header h;
  h.opcode = Opcode::kFinish;
  h.sender = static_cast<uint32_t>(options_.local_rank);
  (void)root->SendCopy(h, "");
}

Status LocalReducer::Contribute(uint32_t key, const std::string& name, uint32_t round, const void* input,
                                void* output, size_t bytes, DataType dtype, Done done) {
  std::shared_ptr<transport::Connection> root;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return failure_;
    auto& slot = my_slots_[key];
    if (!slot) {
      auto seg = ShmSegment::Create(
          ShmSegment::Name(getpid(), options_.job, SlotSuffix(options_.host_id, key, options_.local_rank)), bytes);
      if (!seg.ok()) return seg.status();
      slot = std::move(seg.value());
    }
    if (slot->size() != bytes) {
      return InvalidArgument(fmt::format("tensor '{}' changed size from {} to {} bytes", name, slot->size(), bytes));
    }
    if (bytes > 0) std::memcpy(slot->data(), input, bytes);
    waiting_[{key, round}] = Waiting{output, bytes, std::move(done)};
    root = root_;
  }
  protocol::KeyInit ki{name, bytes, static_cast<int>(dtype), bytes};
  Header h;
  h.opcode = Opcode::kLocalReady;
  h.key = key;
  h.round = round;
  h.sender = static_cast<uint32_t>(options_.local_rank);
  return root->SendCopy(h, protocol::Encode(ki));
}

Status LocalReducer::Gather(uint32_t key, const std::string& name, uint32_t round, void* output, size_t bytes,
                            DataType dtype, Done ready) {
  Done run;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return failure_;
    Round& r = rounds_[{key, round}];
    r.root_in = true;
    r.output = output;
    r.bytes = bytes;
    r.dtype = dtype;
    r.name = name;
    r.done = std::move(ready);
    run = MaybeReduceLocked(key, round);
  }
  if (run) run(Status::Ok());
  return Status::Ok();
}

LocalReducer::Done LocalReducer::MaybeReduceLocked(uint32_t key, uint32_t round) {
  auto it = rounds_.find({key, round});
  if (it == rounds_.end()) return nullptr;
  Round& r = it->second;
  if (!r.root_in || r.ready < options_.local_size - 1) return nullptr;
  Done done = std::move(r.done);
  Status err = r.error;
  if (err.ok()) {
    const size_t count = r.bytes / DataTypeSize(r.dtype);
    for (auto& [rank, peer] : peers_) {
      auto s = peer.slots.find(key);
      if (s == peer.slots.end() || s->second->size() != r.bytes) {
        err = InvalidArgument(fmt::format("tensor '{}': local rank {} contributed {} bytes, local root has {}", r.name,
                                          rank, s == peer.slots.end() ? 0 : s->second->size(), r.bytes));
        break;
      }
      SumInto(r.output, s->second->data(), count, r.dtype);
    }
  }
  rounds_.erase(it);
  if (!err.ok()) return [done, err](const Status&) { done(err); };
  return done;
}

Status LocalReducer::Publish(uint32_t key, uint32_t round, const void* result, size_t bytes) {
  std::vector<std::shared_ptr<transport::Connection>> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return failure_;
    auto& seg = results_[key];
    if (!seg) {
      auto s = ShmSegment::Create(ShmSegment::Name(getpid(), options_.job, ResultSuffix(options_.host_id, key)), bytes);
      if (!s.ok()) return s.status();
      seg = std::move(s.value());
    }
    if (bytes > 0) std::memcpy(seg->data(), result, bytes);
    for (auto& [rank, peer] : peers_) conns.push_back(peer.conn);
  }
  Header h;
  h.opcode = Opcode::kLocalDone;
  h.key = key;
  h.round = round;
  h.arg = static_cast<uint32_t>(getpid());
  for (auto& c : conns) (void)c->SendCopy(h, "");
  return Status::Ok();
}

void LocalReducer::PublishError(uint32_t key, uint32_t round, const Status& error) {
  std::vector<std::shared_ptr<transport::Connection>> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [rank, peer] : peers_) conns.push_back(peer.conn);
  }
  Header h = protocol::ErrorHeader(Opcode::kError, error.code(), key);  // the local ranks raise the same kind
  h.round = round;
  for (auto& c : conns) (void)c->SendCopy(h, error.message());
}

void LocalReducer::FailAll(const Status& st) {
  std::vector<Done> dones;
  std::vector<std::shared_ptr<transport::Connection>> tell;  // root: the non-roots learn the cause
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.ok()) {
      failure_ = st;
      if (is_root())
        for (auto& [rank, peer] : peers_)
          if (!peer.left) tell.push_back(peer.conn);
    }
    for (auto& [k, w] : waiting_) dones.push_back(std::move(w.done));
    waiting_.clear();
    for (auto& [k, r] : rounds_)
      if (r.done) dones.push_back(std::move(r.done));
    rounds_.clear();
  }
  cv_.notify_all();
  Header h = protocol::ErrorHeader(Opcode::kJobError, st.code());
  for (auto& c : tell) (void)c->SendCopy(h, st.message());
  for (auto& d : dones) d(st);
}

StatusOr<transport::RecvBuffer> LocalReducer::OnHeader(transport::Connection& c, const Header& h) {
  if (h.payload_len > 64 * 1024) return ProtocolError("oversized local control frame from " + c.peer_name());
  return transport::RecvBuffer{};
}

void LocalReducer::OnFrame(transport::Connection& c, const Header& h, transport::RecvBuffer b) {
  std::string payload(reinterpret_cast<const char*>(b.data), b.size);
  Done run;
  Status run_status;
  switch (h.opcode) {
    case Opcode::kHello: {
      std::lock_guard<std::mutex> lock(mu_);
      if (is_root()) {
        int rank = static_cast<int>(h.sender);
        if (rank < 0 || rank >= options_.local_size - 1 || peers_.count(rank)) {
          BYTEPS_LOG(Error, "refusing local rank {} (BYTEPS_LOCAL_SIZE={}, duplicate or out of range)", rank,
                     options_.local_size);
          return;
        }
        Peer& p = peers_[rank];
        p.conn = c.shared_from_this();
        p.pid = static_cast<int>(h.arg);
        c.tag = rank;
        c.set_peer_name(fmt::format("local rank {} (pid {})", rank, p.pid));
        Header reply;
        reply.opcode = Opcode::kHello;
        reply.sender = static_cast<uint32_t>(options_.local_rank);
        reply.arg = static_cast<uint32_t>(getpid());
        (void)c.SendCopy(reply, "");
      } else {
        root_pid_ = static_cast<int>(h.arg);
      }
      cv_.notify_all();
      return;
    }
    case Opcode::kLocalReady: {
      auto ki = protocol::DecodeKeyInit(payload);
      std::lock_guard<std::mutex> lock(mu_);
      auto pit = peers_.find(static_cast<int>(c.tag));
      if (!ki.ok() || pit == peers_.end()) return;
      Peer& peer = pit->second;
      auto& slot = peer.slots[static_cast<uint32_t>(h.key)];
      Round& r = rounds_[{static_cast<uint32_t>(h.key), h.round}];
      if (!slot) {
        auto seg = ShmSegment::Open(
            ShmSegment::Name(peer.pid, options_.job, SlotSuffix(options_.host_id, static_cast<uint32_t>(h.key), pit->first)),
            ki->bytes);
        if (!seg.ok()) {
          r.error = seg.status();
        } else {
          slot = std::move(seg.value());
        }
      }
      if (r.root_in && r.name != ki->name) {
        r.error = InvalidArgument(fmt::format("local rank {} declared tensor '{}' where the local root has '{}' "
                                              "(declare tensors in the same order in every process)",
                                              pit->first, ki->name, r.name));
      }
      r.ready++;
      run = MaybeReduceLocked(static_cast<uint32_t>(h.key), h.round);
      break;
    }
    case Opcode::kLocalDone: {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = waiting_.find({static_cast<uint32_t>(h.key), h.round});
      if (it == waiting_.end()) return;
      Waiting w = std::move(it->second);
      waiting_.erase(it);
      auto& seg = result_maps_[static_cast<uint32_t>(h.key)];
      if (!seg) {
        auto s = ShmSegment::Open(
            ShmSegment::Name(root_pid_, options_.job, ResultSuffix(options_.host_id, static_cast<uint32_t>(h.key))),
            w.bytes);
        if (s.ok()) seg = std::move(s.value());
        else run_status = s.status();
      }
      if (run_status.ok() && w.bytes > 0) std::memcpy(w.output, seg->data(), w.bytes);
      run = std::move(w.done);
      break;
    }
    case Opcode::kError: {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = waiting_.find({static_cast<uint32_t>(h.key), h.round});
      if (it == waiting_.end()) return;
      run = std::move(it->second.done);
      waiting_.erase(it);
      run_status = protocol::StatusFromErrorFrame(h, payload);
      break;
    }
    case Opcode::kJobError: {  // non-root: the root failed (and is about to go)
      if (is_root()) return;
      Status st = protocol::StatusFromErrorFrame(
          h, fmt::format("the local root (local rank {}) failed: {}", options_.local_size - 1, payload));
      BYTEPS_LOG(Error, "{}", st.message());
      FailAll(st);
      if (on_failure_) on_failure_(st);
      return;
    }
    case Opcode::kFinish: {
      std::lock_guard<std::mutex> lock(mu_);
      auto pit = peers_.find(static_cast<int>(c.tag));
      if (pit != peers_.end()) pit->second.left = true;
      return;
    }
    default:
      return;
  }
  if (run) run(run_status);
}

void LocalReducer::OnClose(transport::Connection& c, const Status& reason) {
  Status st;
  int dead_pid = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return;
    if (is_root()) {
      auto pit = peers_.find(static_cast<int>(c.tag));
      if (pit == peers_.end() || pit->second.left) return;
      dead_pid = pit->second.pid;
      st = Unavailable(fmt::format("{} on this host died: {}", c.peer_name(), reason.message()));
    } else {
      dead_pid = root_pid_;
      st = Unavailable(fmt::format("lost the local root (local rank {}): {}", options_.local_size - 1,
                                   reason.message()));
    }
  }
  BYTEPS_LOG(Error, "{}", st.message());
  // A peer that went without saying goodbye may have been killed: nobody else would unlink the
  // segments it created. Ours are unlinked when this process tears down.
  if (dead_pid > 0) {
    int removed = ShmSegment::RemoveCreatedBy(dead_pid, options_.job);
    if (removed > 0) BYTEPS_LOG(Warning, "removed {} shared-memory segments of the lost pid {}", removed, dead_pid);
  }
  FailAll(st);
  if (on_failure_) on_failure_(st);
}

}  // namespace byteps::worker
