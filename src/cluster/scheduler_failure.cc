// The scheduler's failure handling: lost connections (and their rejoin deadline), the watchdog
// (start deadline, heartbeat silence), failing and terminating the job. See scheduler.h.
#include <fmt/format.h>
#include <pthread.h>

#include <algorithm>

#include "cluster/scheduler.h"
#include "common/logging.h"
#include "protocol/error_frame.h"

namespace byteps::cluster {

using protocol::Header;
using protocol::Opcode;
namespace {
// How often the watchdog looks at heartbeats and rejoin deadlines.
constexpr auto kWatchdogPeriod = std::chrono::milliseconds(250);
}  // namespace

void Scheduler::FailJobLocked(const Status& reason, const protocol::NodeInfo* dead, Outbox* out) {
  if (job_over_) return;
  BYTEPS_LOG(Error, "job failed: {}", reason.message());
  for (auto& [ptr, n] : nodes_) {
    if (dead) {
      protocol::NodeFailedNotice notice{*dead, reason.message()};
      Header h;
      h.opcode = Opcode::kNodeFailed;
      out->push_back({n.conn, {h, protocol::Encode(notice)}});
    } else {
      out->push_back({n.conn, {protocol::ErrorHeader(Opcode::kJobError, reason.code()), reason.message()}});
    }
  }
  result_ = reason;
  TerminateLocked(1, out);
}

void Scheduler::TerminateLocked(uint64_t code, Outbox* out) {
  for (auto& [ptr, n] : nodes_) {
    Header h;
    h.opcode = Opcode::kTerminate;
    h.arg = code;
    out->push_back({n.conn, {h, ""}});
  }
  job_over_ = true;
  cv_.notify_all();
}

void Scheduler::OnClose(transport::Connection& c, const Status& reason) {
  Outbox out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(&c);
    if (it == nodes_.end()) return;  // never registered (a refused peer is logged by the transport)
    Node node = it->second;
    nodes_.erase(it);
    cv_.notify_all();
    for (auto& [_, members] : barriers_) members.erase(&c);
    if (job_over_) return;
    // A dropped connection is not yet a death: the node may rejoin (after the rendezvous) or
    // register again (before it: its slot is free meanwhile); the Watchdog enforces the deadline.
    const char* when = rendezvous_done_ ? "" : " before the job started";
    if (options_.reconnect_timeout_s > 0 || node.finished) {
      BYTEPS_LOG(Warning, "lost the connection to {}{}: {}; it has {:g} s to {} (BYTEPS_RECONNECT_TIMEOUT)",
                 protocol::Describe(node.info), when, reason.message(), options_.reconnect_timeout_s,
                 rendezvous_done_ ? "rejoin" : "register again");
      lost_.push_back({node, reason.message(), clock_.Now() + Seconds(options_.reconnect_timeout_s)});
      return;
    }
    FailJobLocked(Unavailable(fmt::format("{} died{}: connection lost ({})", protocol::Describe(node.info), when,
                                          reason.message())),
                  &node.info, &out);
  }
  Flush(&out);
}

void Scheduler::Watchdog() {
  pthread_setname_np(pthread_self(), "sched-watchdog");
  std::unique_lock<std::mutex> lock(mu_);
  const Clock::TimePoint start_deadline = start_time_ + Seconds(options_.start_timeout_s);
  while (!job_over_) {
    // One reading of the clock a pass: the checks and the wait after them agree on the time.
    const Clock::TimePoint now = clock_.Now();
    Outbox out;
    CheckDeadlinesLocked(now, &out);
    if (!out.empty()) {
      lock.unlock();
      Flush(&out);
      lock.lock();
      continue;
    }
    Clock::TimePoint next = now + kWatchdogPeriod;
    if (!rendezvous_done_) next = std::min(next, start_deadline);
    clock_.WaitUntil(cv_, lock, next);
  }
}

void Scheduler::CheckDeadlinesLocked(Clock::TimePoint now, Outbox* out) {
  const Clock::TimePoint start_deadline = start_time_ + Seconds(options_.start_timeout_s);
  auto earliest = [](const LostNode& a, const LostNode& b) { return a.deadline < b.deadline; };
  if (!rendezvous_done_ && now >= start_deadline) {
    FailJobLocked(DeadlineExceeded(fmt::format("rendezvous did not complete within {:.0f} s "
                                               "(BYTEPS_START_TIMEOUT): {}",
                                               options_.start_timeout_s, MissingLocked())),
                  nullptr, out);
  } else if (auto it = std::min_element(lost_.begin(), lost_.end(), earliest);
             it != lost_.end() && now >= it->deadline) {
    protocol::NodeInfo info = it->node.info;
    bool finished = it->node.finished;
    std::string why = it->reason;
    lost_.erase(it);
    if (!finished)  // a finished worker that went away early is no failure
      FailJobLocked(Unavailable(fmt::format("{} died{}: connection lost ({}) and not re-established within {:g} s "
                                            "(BYTEPS_RECONNECT_TIMEOUT)",
                                            protocol::Describe(info), rendezvous_done_ ? "" : " before the job started",
                                            why, options_.reconnect_timeout_s)),
                    &info, out);
  } else if (rendezvous_done_ && options_.heartbeat_timeout_s > 0) {
    for (auto& [ptr, n] : nodes_) {
      double silent = std::chrono::duration<double>(now - n.last_seen).count();
      if (!n.finished && silent > options_.heartbeat_timeout_s) {
        protocol::NodeInfo info = n.info;
        FailJobLocked(Unavailable(fmt::format("{} died: no heartbeat for {:.1f} s (PS_HEARTBEAT_TIMEOUT)",
                                              protocol::Describe(info), silent)),
                      &info, out);
        break;
      }
    }
  }
}

void Scheduler::Stop(const Status& reason) {
  Outbox out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!job_over_) FailJobLocked(reason, nullptr, &out);
  }
  Flush(&out);
}

}  // namespace byteps::cluster
