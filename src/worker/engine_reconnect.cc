// Engine: reconnect-and-resend after a dropped server connection (see engine.h).
#include <fmt/format.h>
#include <pthread.h>

#include <algorithm>
#include <chrono>

#include "common/logging.h"
#include "worker/engine.h"

namespace byteps::worker {

using protocol::Header;

void Engine::ReconnectLoop() {
  pthread_setname_np(pthread_self(), "bps-reconnect");
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return shut_down_ || !lost_links_.empty(); });
    if (shut_down_) return;
    LostLink l = lost_links_.front();
    lost_links_.pop_front();
    if (!failure_.ok()) continue;
    lock.unlock();
    Status st = Reconnect(l.server, l.index, l.reason);
    if (!st.ok()) {
      BYTEPS_LOG(Error, "{}", st.message());
      FailAll(st);
    }
    lock.lock();
  }
}

Status Engine::Reconnect(int server, size_t index, const Status& reason) {
  using Clock = std::chrono::steady_clock;
  const protocol::NodeInfo& node = servers_[server].node;
  const double limit = config_.reconnect_timeout_s;
  Clock::time_point deadline;
  bool repeat;  // it dropped again soon after the last reconnect: pause before retrying
  {
    std::lock_guard<std::mutex> lock(mu_);
    deadline = servers_[server].down_since[index] + std::chrono::duration_cast<Clock::duration>(
                                                         std::chrono::duration<double>(limit));
    repeat = Clock::now() - servers_[server].connected_at[index] < std::chrono::seconds(1);
  }
  if (!repeat) {
    BYTEPS_LOG(Warning, "lost connection {} to {}: {}; reconnecting (BYTEPS_RECONNECT_TIMEOUT={:g} s)", index,
               protocol::Describe(node), reason.message(), limit);
  }
  // Pauses up to `ms` (interruptible by shutdown or a failure); false when the job is ending.
  auto pause = [&](int ms) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return shut_down_ || !failure_.ok(); });
    return !shut_down_ && failure_.ok();
  };
  if (repeat && !pause(200)) return Status::Ok();
  std::shared_ptr<transport::Connection> c;
  std::vector<std::pair<Header, std::string>> inits;
  std::vector<Outgoing> resend;
  Status last = reason;
  for (;;) {
    double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shut_down_ || !failure_.ok()) return Status::Ok();  // someone else ends the job
    }
    if (left <= 0) {
      return Unavailable(fmt::format("lost the connection to {}: {}; could not reconnect within {:g} s "
                                     "(BYTEPS_RECONNECT_TIMEOUT): {}",
                                     protocol::Describe(node), reason.message(), limit, last.message()));
    }
    auto conn = OpenServerConnection(server, left);
    if (!conn.ok()) {
      last = conn.status();
      if (!pause(100)) return Status::Ok();
      continue;
    }
    c = conn.value();
    std::unique_lock<std::mutex> lock(mu_);
    if (shut_down_ || !failure_.ok()) {  // the job ended while we connected: nothing to resend
      lock.unlock();
      c->Close(Aborted("byteps was shut down"));
      return Status::Ok();
    }
    if (c->closed()) {
      // Dropped before it was installed: its OnClose took it for an old connection, so retry here.
      last = Unavailable(fmt::format("{} closed the new connection at once", protocol::Describe(node)));
      lock.unlock();
      if (!pause(200)) return Status::Ok();
      continue;
    }
    servers_[server].conns[index] = c;
    servers_[server].connected_at[index] = Clock::now();
    // Declarations first (the server keeps them; a lost InitKey is re-sent, duplicates are no-ops)...
    for (const auto& [dk, ts] : tensors_) {
      if (!ts.announced || ts.plan == nullptr) continue;
      for (const auto& p : ts.plan->partitions) {
        if (p.server != server || ConnIndex(server, p.key) != index) continue;
        inits.push_back(InitKeyFrame(*ts.plan, p));
      }
    }
    // ...then every partition that was out on the lost connection, oldest first.
    std::vector<const PartTask*> out;
    for (const auto& [id, t] : tasks_)
      if (t.dispatched && t.server == server && ConnIndex(server, t.key) == index) out.push_back(&t);
    std::sort(out.begin(), out.end(), [](const PartTask* a, const PartTask* b) { return a->id < b->id; });
    for (const PartTask* t : out) resend.push_back({c, PushHeader(*t), t->in, t->len});
    break;
  }
  for (auto& [h, payload] : inits) (void)c->SendCopy(h, payload);
  for (auto& o : resend) {
    std::vector<iovec> iov;
    if (o.len > 0) iov.push_back({const_cast<uint8_t*>(o.data), o.len});
    (void)o.conn->Send(o.header, iov, nullptr);  // a failure closes c: its OnClose starts over
  }
  BYTEPS_LOG(Warning, "reconnected to {} (connection {}); re-sent {} declaration(s) and {} partition(s)",
             protocol::Describe(node), index, inits.size(), resend.size());
  return Status::Ok();
}

}  // namespace byteps::worker
