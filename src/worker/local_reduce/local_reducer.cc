#include "worker/local_reduce/local_reducer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "common/logging.h"
#include "protocol/error_frame.h"
#include "protocol/control.h"
#include "common/reducer.h"

namespace byteps::worker::local_reduce {

using protocol::Header;
using protocol::Opcode;

LocalReducer::LocalReducer(const LocalOptions& options, Done on_failure)
    : options_(options), on_failure_(std::move(on_failure)) {}

std::string LocalReducer::SocketName() const {
  return fmt::format("byteps-{}-w{}-local{}", options_.job, options_.host_id, options_.circle);
}

int LocalReducer::RankOf(int place) const {
  return place >= 0 && place < static_cast<int>(options_.members.size()) ? options_.members[place] : place;
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
      int count = 0;
      for (int i = 0; i < options.local_size - 1; ++i)
        if (!raw->peers_.count(i)) missing += (count++ ? ", " : "") + std::to_string(raw->RankOf(i));
      return DeadlineExceeded(fmt::format("local root (BYTEPS_LOCAL_RANK={}) waited {:.0f} s (BYTEPS_START_TIMEOUT) "
                                          "for local rank{} {} of BYTEPS_LOCAL_SIZE={} on this host, which never "
                                          "connected (did that process start, or die?)",
                                          r->RankOf(options.local_rank), timeout, count == 1 ? "" : "s", missing,
                                          options.local_size));
    }
    return r;
  }
  auto c = r->transport_->ConnectLocal(r->SocketName(), raw, timeout);
  if (!c.ok()) {
    return c.status().WithContext(
        fmt::format("local rank {} cannot reach its local root (local rank {}; is that process running?)",
                    r->RankOf(options.local_rank), r->RankOf(options.local_size - 1)));
  }
  r->root_ = c.value();
  r->root_->set_peer_name(fmt::format("local root (local rank {})", r->RankOf(options.local_size - 1)));
  Header h;
  h.opcode = Opcode::kHello;
  h.sender = static_cast<uint32_t>(options.local_rank);
  h.arg = static_cast<uint32_t>(getpid());
  h.round = static_cast<uint32_t>(options.global_rank);  // process sets name their members by it
  BYTEPS_RETURN_IF_ERROR(r->root_->SendCopy(h, ""));
  std::unique_lock<std::mutex> lock(r->mu_);
  if (!r->cv_.wait_for(lock, std::chrono::duration<double>(timeout),
                       [&] { return raw->root_pid_ != 0 || !raw->failure_.ok(); })) {
    return DeadlineExceeded("the local root did not answer within BYTEPS_START_TIMEOUT");
  }
  if (!raw->failure_.ok()) return raw->failure_;
  return r;
}

LocalReducer::~LocalReducer() { Close(); }

void LocalReducer::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.ok()) failure_ = Aborted("local reducer closed");
  }
  cv_.notify_all();
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

bool LocalReducer::AwaitPeersLeft(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] {
    if (!failure_.ok()) return true;
    for (const auto& [rank, peer] : peers_)
      if (!peer.left) return false;
    return true;
  });
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
    for (auto& [k, w] : awaited_)
      if (w.done) dones.push_back(std::move(w.done));
    awaited_.clear();
    for (auto& [k, r] : rounds_)
      if (r.done) dones.push_back([d = std::move(r.done)](const Status& s) { d(s, false); });
    rounds_.clear();
    stand_in_ = nullptr;
  }
  cv_.notify_all();
  Header h = protocol::ErrorHeader(Opcode::kJobError, st.code());
  for (auto& c : tell) (void)c->SendCopy(h, st.message());
  for (auto& d : dones) d(st);
}

StatusOr<transport::RecvBuffer> LocalReducer::OnHeader(transport::Connection& c, const Header& h) {
  // A name's plan lists every partition (as the scheduler's replies may); the rest is small.
  const size_t limit = h.opcode == Opcode::kNameReply ? (16u << 20) : 64 * 1024;
  if (h.payload_len > limit) return ProtocolError("oversized local control frame from " + c.peer_name());
  return transport::RecvBuffer{};
}

void LocalReducer::OnFrame(transport::Connection& c, const Header& h, transport::RecvBuffer b) {
  std::string payload(reinterpret_cast<const char*>(b.data), b.size);
  std::function<void()> work;
  switch (h.opcode) {
    case Opcode::kHello: {
      std::lock_guard<std::mutex> lock(mu_);
      if (is_root()) {
        int rank = static_cast<int>(h.sender);
        if (rank < 0 || rank >= options_.local_size - 1 || peers_.count(rank)) {
          const std::string why = fmt::format(
              "refusing local rank {} (BYTEPS_LOCAL_SIZE={}: {}); every process of a host needs its own "
              "BYTEPS_LOCAL_RANK below the local root's",
              rank, options_.local_size, peers_.count(rank) ? "another process has that rank" : "out of range");
          BYTEPS_LOG(Error, "{}", why);
          // The refused process learns why at once, instead of waiting out BYTEPS_START_TIMEOUT.
          (void)c.SendCopy(protocol::ErrorHeader(Opcode::kJobError, StatusCode::kPrecondition), why);
          return;
        }
        Peer& p = peers_[rank];
        p.conn = c.shared_from_this();
        p.pid = static_cast<int>(h.arg);
        p.global_rank = static_cast<int>(h.round);
        c.tag = rank;
        c.set_peer_name(fmt::format("local rank {} (pid {})", RankOf(rank), p.pid));
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
    case Opcode::kLocalReady:
      return OnLocalReady(c, h, payload);
    case Opcode::kNameRequest:
      return OnNameRequest(c, h, payload);
    case Opcode::kNameReply:
      return OnNameReply(h, payload);
    case Opcode::kLocalDone: {
      std::lock_guard<std::mutex> lock(mu_);
      Result& r = awaited_[{h.key, h.round}];
      r.published = true;
      work = MaybeDeliverLocked({h.key, h.round});
      break;
    }
    case Opcode::kLocalGroup:
    case Opcode::kLocalGo: {  // a device group's frames: the root's, in its order; a non-root's device
      if (is_root() && (h.opcode == Opcode::kLocalGo || static_cast<int64_t>(h.sender) != c.tag)) {
        BYTEPS_LOG(Warning, "dropped a {} frame from {} (sender {}): not one a local root takes from it",
                   protocol::OpcodeName(h.opcode), c.peer_name(), h.sender);
        return;
      }
      std::function<void(const Header&, const std::string&)> listener;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!group_listener_ || early_draining_) {
          // Kept for the listener: a peer's first device tensor may come before this process's
          // pipeline exists.
          early_group_frames_.emplace_back(h, std::move(payload));
          return;
        }
        listener = group_listener_;
        ++listener_calls_;
      }
      listener(h, payload);
      {
        std::lock_guard<std::mutex> lock(mu_);
        --listener_calls_;
      }
      cv_.notify_all();
      return;
    }
    case Opcode::kError: {  // the root's round failed (a server error, a dead server...)
      std::lock_guard<std::mutex> lock(mu_);
      Result& r = awaited_[{h.key, h.round}];
      r.published = true;
      r.error = protocol::StatusFromErrorFrame(h, payload);
      work = MaybeDeliverLocked({h.key, h.round});
      break;
    }
    case Opcode::kJobError: {  // non-root: the root failed (and is about to go)
      if (is_root()) return;
      Status st = protocol::StatusFromErrorFrame(
          h, fmt::format("the local root (local rank {}) failed: {}", RankOf(options_.local_size - 1), payload));
      BYTEPS_LOG(Error, "{}", st.message());
      if (on_failure_) on_failure_(st);  // first: the engine knows before any waiter wakes up
      FailAll(st);
      return;
    }
    case Opcode::kFinish: {
      std::lock_guard<std::mutex> lock(mu_);
      auto pit = peers_.find(static_cast<int>(c.tag));
      if (pit != peers_.end()) pit->second.left = true;
      cv_.notify_all();  // AwaitPeersLeft
      return;
    }
    default:
      return;
  }
  if (work) work();
}

void LocalReducer::OnClose(transport::Connection& c, const Status& reason) {
  Status st;
  int dead_pid = 0;
  bool report = true;  // an unexpected loss: the job fails
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (is_root()) {
      auto pit = peers_.find(static_cast<int>(c.tag));
      if (pit == peers_.end()) return;
      dead_pid = pit->second.pid;
      report = !pit->second.left;
      st = Unavailable(fmt::format("{} on this host died: {}", c.peer_name(), reason.message()));
    } else {
      dead_pid = root_pid_;
      st = Unavailable(fmt::format("lost the local root (local rank {}): {}", RankOf(options_.local_size - 1),
                                   reason.message()));
    }
    if (!failure_.ok()) report = false;  // closing, or failed already
  }
  // A peer that went without saying goodbye may have been killed: nobody else would unlink the
  // segments it created. So may one that said goodbye, or whose loss comes while this process
  // closes (killed during shutdown): its segments go too once it is gone. Ours are unlinked when
  // this process tears down.
  if (dead_pid > 0 && (report || ShmSegment::ProcessGone(dead_pid))) {
    int removed = ShmSegment::RemoveCreatedBy(dead_pid, options_.job);
    if (removed > 0) BYTEPS_LOG(Warning, "removed {} shared-memory segments of the lost pid {}", removed, dead_pid);
  }
  if (!report) return;
  BYTEPS_LOG(Error, "{}", st.message());
  // The engine learns of the failure before the waiting rounds fail: a training script that sees
  // the error and exits must not reach Shutdown with the job still looking healthy (it would tell
  // the scheduler it finished cleanly, and the other hosts would wait for it).
  if (on_failure_) on_failure_(st);
  FailAll(st);
}

}  // namespace byteps::worker::local_reduce
