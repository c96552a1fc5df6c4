// Which workers have joined (Horovod's join(): out of data) on one server, shared by its SumEngine
// shards. The shard that owns a join key marks a worker joined when its join push arrives, and
// resets the board once every worker pushed the join round; every shard reads the board when it
// decides whether a round is complete (a joined member counts as zeros), and re-examines its open
// rounds when told that someone joined (the notify callback posts that to every shard).
// Threading: every method from any thread (atomics; the callback is set once before any use, and
// runs under a mutex that Close takes, so that no notice reaches shards being destroyed).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>

namespace byteps::server {

class JoinBoard {
 public:
  explicit JoinBoard(int num_workers) : joined_(std::make_unique<std::atomic<bool>[]>(num_workers)), n_(num_workers) {}

  // Runs after a worker joined (Server: posts a JoinTask to every shard). Set before any Join.
  void set_notify(std::function<void()> notify) { notify_ = std::move(notify); }
  // `worker` has joined: every shard re-examines its open rounds.
  void Join(int worker) {
    if (worker < 0 || worker >= n_ || joined_[worker].exchange(true)) return;
    count_.fetch_add(1);
    std::lock_guard<std::mutex> lock(mu_);
    if (notify_ && !closed_) notify_();
  }
  // The shards are going away: no more notices (waits for one in progress).
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  // Every worker joined (the join round completed): nobody is joined any more.
  void Reset() {
    for (int w = 0; w < n_; ++w) joined_[w].store(false);
    count_.store(0);
  }
  bool joined(int worker) const { return worker >= 0 && worker < n_ && joined_[worker].load(); }
  bool any() const { return count_.load() > 0; }

 private:
  std::unique_ptr<std::atomic<bool>[]> joined_;
  const int n_;
  std::atomic<int> count_{0};
  std::function<void()> notify_;
  std::mutex mu_;        // a notice in progress vs Close
  bool closed_ = false;  // guarded by mu_
};

}  // namespace byteps::server
