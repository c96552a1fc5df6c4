// The cluster client's liveness: heartbeats (and noticing a scheduler gone deaf), a dropped
// scheduler connection, and rejoining the job as the same node. See cluster_client.h.
#include <fmt/format.h>
#include <pthread.h>

#include <chrono>

#include "cluster/cluster_client.h"
#include "common/logging.h"

namespace byteps::cluster {

using protocol::Header;
using protocol::Opcode;

void ClusterClient::OnClose(transport::Connection& c, const Status& reason) {
  std::thread previous;
  bool started = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!registered_ && &c != conn_.get()) {
      // Join's new connection may close before Join made it conn_ (a refusal right after the
      // connect): keep the reason for Join to find. An older attempt's connection is stale.
      early_close_ = {c.shared_from_this(), reason};
      cv_.notify_all();
      return;
    }
    if (terminated_ || stopping_ || !failure_.ok() || &c != conn_.get()) return;  // expected or stale
    if (rejoining_) return;  // a rejoin attempt's connection dropped: the rejoin thread goes on
    // Before the rendezvous there is nothing to rejoin (registration itself has a deadline), and
    // a connection this process closed itself (Aborted: its transport is shutting down) stays closed.
    if (registered_ && options_.reconnect_timeout_s > 0 && reason.code() != StatusCode::kAborted) {
      rejoining_ = true;
      previous = std::move(rejoin_);  // finished (rejoining_ was false); joined below, unlocked
      rejoin_ = std::thread([this, reason] { Rejoin(reason); });
      started = true;
    }
  }
  if (previous.joinable()) previous.join();
  if (started) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!registered_ && refusal_.empty()) {  // Join is waiting: it registers again on a new connection
      // A refusal keeps its code (Join decides whether registering again can help).
      join_lost_ = transport::IsRefusal(reason) ? reason : Unavailable(reason.message());
      cv_.notify_all();
      return;
    }
  }
  Fail(Unavailable(fmt::format("lost the connection to the scheduler at {}:{}: {}", options_.root_uri,
                               options_.root_port, reason.message())));
}

void ClusterClient::Rejoin(Status reason) {
  pthread_setname_np(pthread_self(), "bps-rejoin");
  BYTEPS_LOG(Warning, "lost the connection to the scheduler at {}:{}: {}; reconnecting (BYTEPS_RECONNECT_TIMEOUT={:g} s)",
             options_.root_uri, options_.root_port, reason.message(), options_.reconnect_timeout_s);
  using SteadyClock = std::chrono::steady_clock;
  auto deadline = SteadyClock::now() + Seconds(options_.reconnect_timeout_s);
  Status last = reason;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_ || terminated_ || !failure_.ok()) break;
    }
    double left = std::chrono::duration<double>(deadline - SteadyClock::now()).count();
    if (left <= 0) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        rejoining_ = false;
      }
      Fail(Unavailable(fmt::format("lost the connection to the scheduler at {}:{}: {}; could not reconnect "
                                   "within {:g} s (BYTEPS_RECONNECT_TIMEOUT): {}",
                                   options_.root_uri, options_.root_port, reason.message(),
                                   options_.reconnect_timeout_s, last.message())));
      return;
    }
    last = TryRejoin(std::min(left, 1.0));  // short attempts: a shutdown must not wait long
    std::unique_lock<std::mutex> lock(mu_);
    // OnClose ignores the current connection while rejoining_ is set, so a close right after the
    // reply must be seen here, under the same lock, or nobody would notice it.
    if (last.ok() && !conn_->closed()) {
      rejoining_ = false;
      return;
    }
    if (last.ok()) last = Unavailable("the new connection dropped right after the rejoin");
    cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stopping_; });
  }
  std::lock_guard<std::mutex> lock(mu_);
  rejoining_ = false;
}

Status ClusterClient::TryRejoin(double timeout_s) {
  auto conn = transport_->Connect(options_.root_uri, options_.root_port, this, timeout_s);
  if (!conn.ok()) return conn.status();
  auto c = conn.value();
  c->set_peer_name(fmt::format("scheduler ({}:{})", options_.root_uri, options_.root_port));
  {
    std::lock_guard<std::mutex> lock(mu_);
    conn_ = c;
    rejoined_ = false;
    refusal_.clear();
    last_heard_ = clock_.Now();
  }
  Header h;
  h.opcode = Opcode::kRegister;
  if (Status st = c->SendCopy(h, protocol::Encode(MakeRegisterRequest(true))); !st.ok()) {
    c->Close(st);
    return st;
  }
  std::unique_lock<std::mutex> lock(mu_);
  bool answered = cv_.wait_for(lock, std::chrono::duration<double>(std::max(timeout_s, 1.0)), [&] {
    return rejoined_ || terminated_ || !refusal_.empty() || c->closed() || stopping_;
  });
  if (terminated_ || stopping_) return Status::Ok();
  if (!refusal_.empty()) {
    std::string why = refusal_;
    lock.unlock();
    Fail(Aborted("the scheduler refused this " + options_.role + "'s rejoin: " + why));
    return Status::Ok();
  }
  if (!answered || !rejoined_) {
    lock.unlock();
    c->Close(Unavailable("no answer to the rejoin"));  // nothing may keep calling into us later
    return Unavailable(answered ? "the new connection dropped" : "no answer to the rejoin");
  }
  // Repeat what the scheduler may have missed while we were away.
  std::vector<std::pair<uint64_t, bool>> barriers(pending_barriers_.begin(), pending_barriers_.end());
  bool finish = finish_sent_;
  uint32_t arg = finish_arg_;
  std::string message = finish_message_;
  lock.unlock();
  for (auto& [id, all] : barriers) (void)c->SendCopy(BarrierHeader(id, all), "");
  if (finish) (void)c->SendCopy(FinishHeader(arg), message);
  BYTEPS_LOG(Warning, "rejoined the job through the scheduler at {}:{}", options_.root_uri, options_.root_port);
  return Status::Ok();
}

void ClusterClient::HeartbeatLoop() {
  pthread_setname_np(pthread_self(), "bps-heartbeat");
  const Clock::Duration interval = Seconds(options_.heartbeat_interval_s);
  std::unique_lock<std::mutex> lock(mu_);
  Clock::TimePoint next = clock_.Now() + interval;
  while (!stopping_ && !terminated_) {
    // One reading of the clock an iteration: what is checked and what is waited for agree.
    const Clock::TimePoint now = clock_.Now();
    if (now < next) {
      clock_.WaitUntil(cv_, lock, next);
      continue;
    }
    next = now + interval;
    auto conn = conn_;
    // A scheduler we have not heard from (not even its heartbeat echo) for the heartbeat timeout
    // is unreachable although TCP has not noticed (e.g. the link is down): drop the connection,
    // which starts a rejoin that either gets through or fails this node naming the cause.
    double silent = std::chrono::duration<double>(now - last_heard_).count();
    bool deaf = options_.heartbeat_timeout_s > 0 && !rejoining_ && silent > options_.heartbeat_timeout_s;
    lock.unlock();
    if (deaf) {
      conn->Close(Unavailable(fmt::format("no frame from the scheduler for {:.1f} s (PS_HEARTBEAT_TIMEOUT)", silent)));
      lock.lock();
      last_heard_ = clock_.Now();
      continue;
    }
    Header h;
    h.opcode = Opcode::kHeartbeat;
    (void)conn->SendCopy(h, options_.summary ? options_.summary() : std::string());
    lock.lock();
  }
}

}  // namespace byteps::cluster
