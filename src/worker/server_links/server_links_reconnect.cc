// ServerLinks: reconnect-and-resend after a dropped server connection (see server_links.h).
#include <fmt/format.h>
#include <pthread.h>

#include "common/logging.h"
#include "worker/server_links/server_links.h"

namespace byteps::worker::server_links {

void ServerLinks::ReconnectLoop() {
  pthread_setname_np(pthread_self(), "bps-reconnect");
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return shut_down_ || !lost_.empty(); });
    if (shut_down_) return;
    Lost l = lost_.front();
    lost_.pop_front();
    if (!failure_.ok()) continue;
    lock.unlock();
    Status st = Reconnect(l);
    if (!st.ok()) {
      BYTEPS_LOG(Error, "{}", st.message());
      Fail(st);
      if (on_failure_) on_failure_(st);
    }
    lock.lock();
  }
}

bool ServerLinks::Pause(int ms) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return Ending(); });
  return !Ending();
}

Status ServerLinks::Reconnect(const Lost& lost) {
  const protocol::NodeInfo& node = links_[lost.server].node;
  const double limit = options_.reconnect_timeout_s;
  Clock::time_point deadline;
  bool repeat;  // it dropped again soon after the last reconnect: pause before retrying
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Link& link = links_[lost.server];
    deadline = link.down_since[lost.index] +
               std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit));
    repeat = Clock::now() - link.connected_at[lost.index] < std::chrono::seconds(1);
  }
  if (!repeat) {
    BYTEPS_LOG(Warning, "lost connection {} to {}: {}; reconnecting (BYTEPS_RECONNECT_TIMEOUT={:g} s)", lost.index,
               protocol::Describe(node), lost.reason.message(), limit);
  }
  if (repeat && !Pause(200)) return Status::Ok();
  Status last = lost.reason;
  for (;;) {
    double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (Ending()) return Status::Ok();  // someone else ends the job
    }
    if (left <= 0) {
      return Unavailable(fmt::format("lost the connection to {}: {}; could not reconnect within {:g} s "
                                     "(BYTEPS_RECONNECT_TIMEOUT): {}",
                                     protocol::Describe(node), lost.reason.message(), limit, last.message()));
    }
    auto conn = Open(lost.server, left);
    if (!conn.ok()) {
      last = conn.status();
      if (!Pause(100)) return Status::Ok();
      continue;
    }
    std::shared_ptr<transport::Connection> c = conn.value();
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (Ending()) {  // the job ended while we connected: nothing to resend
        lock.unlock();
        c->Close(Aborted("byteps was shut down"));
        return Status::Ok();
      }
      if (c->closed()) {
        // Dropped before it was installed: its OnClose took it for an old connection, so retry here.
        last = Unavailable(fmt::format("{} closed the new connection at once", protocol::Describe(node)));
        lock.unlock();
        if (!Pause(200)) return Status::Ok();
        continue;
      }
      Link& link = links_[lost.server];
      link.conns[lost.index] = c;
      link.connected_at[lost.index] = Clock::now();
    }
    // Installed first, collected second: a partition that starts in between goes out on the new
    // connection and may be sent twice, which the server ignores; none is missed.
    std::vector<OutFrame> frames = client_->CollectResend(lost.server, lost.index);
    size_t inits = 0;
    for (const OutFrame& f : frames) {
      if (f.header.opcode == protocol::Opcode::kInitKey) ++inits;
      std::vector<iovec> iov;
      if (f.data != nullptr && f.len > 0) iov.push_back({const_cast<uint8_t*>(f.data), f.len});
      // A failure closes c: its OnClose starts over.
      (void)(f.data == nullptr ? c->SendCopy(f.header, f.owned) : c->Send(f.header, iov, nullptr));
    }
    metrics_[lost.server].reconnects->Add();
    BYTEPS_LOG(Warning, "reconnected to {} (connection {}); re-sent {} declaration(s) and {} partition(s)",
               protocol::Describe(node), lost.index, inits, frames.size() - inits);
    return Status::Ok();
  }
}

}  // namespace byteps::worker::server_links
