#include "device/completions.h"

#include <pthread.h>

#include <set>
#include <utility>

#include <fmt/format.h>

namespace byteps::device {

Completions::Completions(double poll_s) : poll_(poll_s) {}

Completions::~Completions() {
  std::map<uint64_t, Watched> left;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
    left.swap(state_->watched);
    state_->fired.clear();
  }
  state_->cv.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& [ticket, w] : left) w.device->DestroyEvent(w.event);  // their callbacks are dropped
}

Status Completions::Watch(std::shared_ptr<Device> device, StreamHandle stream, double deadline_s, std::string what,
                          Done done) {
  BYTEPS_ASSIGN_OR_RETURN(EventHandle event, device->RecordEvent(stream));
  uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->stop) {
      device->DestroyEvent(event);
      return Aborted(fmt::format("{}: {}: completions are shutting down", device->name(), what));
    }
    if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
    ticket = state_->next_ticket++;
    Watched& w = state_->watched[ticket];
    w.device = device;
    w.stream = stream;
    w.event = event;
    w.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(deadline_s));
    w.deadline_s = deadline_s;
    w.what = std::move(what);
    w.done = std::move(done);
  }
  state_->cv.notify_all();  // an idle thread starts polling
  // The host function only pushes the ticket. Should queueing it fail, the event still tells.
  std::shared_ptr<State> state = state_;
  (void)device->LaunchHostFunc(stream, [state, ticket] {
    {
      std::lock_guard<std::mutex> lock(state->mu);
      if (state->stop) return;
      state->fired.push_back(ticket);
    }
    state->cv.notify_all();
  });
  return Status::Ok();
}

void Completions::FailAll(const Status& failure) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    for (auto& [ticket, w] : state_->watched) {
      if (w.decided) continue;
      w.decided = true;
      w.verdict = failure;
      state_->decided = true;
    }
  }
  state_->cv.notify_all();
}

size_t Completions::pending() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->watched.size();
}

void Completions::TakeReadyLocked(std::vector<Delivery>* out) {
  State& st = *state_;
  for (uint64_t ticket : st.fired) {
    auto it = st.watched.find(ticket);
    if (it == st.watched.end()) continue;  // delivered already (its event was seen first)
    Status status = it->second.decided ? it->second.verdict : Status::Ok();
    out->push_back({std::move(it->second), std::move(status)});
    st.watched.erase(it);
  }
  st.fired.clear();
  if (!st.decided) return;
  for (auto it = st.watched.begin(); it != st.watched.end();) {
    if (!it->second.decided) {
      ++it;
      continue;
    }
    Status status = it->second.verdict;
    out->push_back({std::move(it->second), std::move(status)});
    it = st.watched.erase(it);
  }
  st.decided = false;
}

std::vector<std::pair<uint64_t, Status>> Completions::Poll() {
  struct Probe {
    uint64_t ticket;
    Device* device;
    StreamHandle stream;
    EventHandle event;
    Clock::time_point deadline;
    double deadline_s;
    std::string what;
  };
  std::vector<Probe> probes;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    for (auto& [ticket, w] : state_->watched) {
      if (!w.decided) probes.push_back({ticket, w.device.get(), w.stream, w.event, w.deadline, w.deadline_s, w.what});
    }
  }
  // Only this thread delivers (and destroys) a watch's event, so the handles stay valid here.
  std::vector<std::pair<uint64_t, Status>> decided;
  std::set<std::pair<Device*, StreamHandle>> busy;  // streams whose older watch has not finished
  const Clock::time_point now = Clock::now();
  for (const Probe& p : probes) {
    const auto stream = std::make_pair(p.device, p.stream);
    if (!busy.count(stream)) {
      StatusOr<bool> finished = p.device->QueryEvent(p.event);
      if (!finished.ok()) {
        decided.emplace_back(p.ticket, finished.status());
        continue;
      }
      if (*finished) {
        decided.emplace_back(p.ticket, Status::Ok());
        continue;
      }
      busy.insert(stream);
    }
    if (now >= p.deadline) {
      decided.emplace_back(p.ticket, DeadlineExceeded(fmt::format(
                                         "{}: {} did not finish within {:.1f} s: its stream is stuck (work that "
                                         "never ends reports no error, e.g. a collective whose peer never queued "
                                         "its part)",
                                         p.device->name(), p.what, p.deadline_s)));
    }
  }
  return decided;
}

void Completions::Deliver(std::vector<Delivery>& out) {
  for (Delivery& d : out) {
    d.watched.device->DestroyEvent(d.watched.event);
    d.watched.done(d.status);
  }
  out.clear();
}

void Completions::Run() {
  pthread_setname_np(pthread_self(), "bps-completion");
  State& st = *state_;
  std::vector<Delivery> out;
  Clock::time_point next_poll = Clock::now() + std::chrono::duration_cast<Clock::duration>(poll_);
  while (true) {
    bool poll = false;
    {
      std::unique_lock<std::mutex> lock(st.mu);
      auto ready = [&] { return st.stop || !st.fired.empty() || st.decided; };
      if (st.watched.empty()) {  // idle: nothing to poll until a watch comes
        st.cv.wait(lock, [&] { return ready() || !st.watched.empty(); });
        next_poll = Clock::now() + std::chrono::duration_cast<Clock::duration>(poll_);
      } else {
        st.cv.wait_until(lock, next_poll, ready);
      }
      if (st.stop) return;
      TakeReadyLocked(&out);
      poll = Clock::now() >= next_poll && !st.watched.empty();
    }
    Deliver(out);
    if (!poll) {
      if (Clock::now() >= next_poll) next_poll = Clock::now() + std::chrono::duration_cast<Clock::duration>(poll_);
      continue;
    }
    std::vector<std::pair<uint64_t, Status>> decided = Poll();
    {
      std::lock_guard<std::mutex> lock(st.mu);
      if (st.stop) return;
      for (auto& [ticket, status] : decided) {
        auto it = st.watched.find(ticket);
        if (it == st.watched.end()) continue;
        Status s = it->second.decided ? it->second.verdict : std::move(status);
        out.push_back({std::move(it->second), std::move(s)});
        st.watched.erase(it);
      }
    }
    Deliver(out);
    next_poll = Clock::now() + std::chrono::duration_cast<Clock::duration>(poll_);
  }
}

}  // namespace byteps::device
