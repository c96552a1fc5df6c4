// Completions: learning, on a thread of byteps's own, that work queued on device streams finished,
// failed, or is stuck. CUDA runs a host function only when everything before it succeeded (after
// an error it never runs), forbids it to block or to call CUDA, and NCCL's collectives never
// finish when a peer never queues its part. So a watched piece of work is an event recorded after
// it plus a host function that only pushes the watch's ticket onto this object's queue (under a
// small mutex no one holds across a device call). This object's thread then delivers the watch's
// callback: OK when the ticket came or the event completed; the stream's error when querying the
// event reports one (queried every poll interval while anything is watched); DeadlineExceeded,
// naming the device and the work, once its deadline passed.
//
// Every callback runs exactly once, on this object's thread, unless this object goes first: the
// callbacks still pending then are dropped (their owner failed that work already, or goes too).
// Threading: Watch / FailAll / pending from any thread; callbacks on the thread "bps-completion",
// started by the first Watch. A callback may take its owner's locks (it is no host function), but
// delays the others while it runs.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"
#include "device/device.h"

namespace byteps::device {

class Completions {
 public:
  using Done = std::function<void(const Status&)>;
  // `poll_s`: how often the events of watched work are queried (how soon an error is seen).
  explicit Completions(double poll_s = 0.01);
  ~Completions();
  Completions(const Completions&) = delete;
  Completions& operator=(const Completions&) = delete;

  // Calls `done` once the work queued on `stream` so far finished (OK), failed (the error), or
  // `deadline_s` passed ("<device>: <what> did not finish within N s ..."). An error here (the
  // event could not be recorded) means `done` will not run.
  Status Watch(std::shared_ptr<Device> device, StreamHandle stream, double deadline_s, std::string what, Done done);
  // Every watch pending now gets `failure` (from this object's thread, soon), whatever its work does.
  void FailAll(const Status& failure);
  size_t pending() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Watched {
    std::shared_ptr<Device> device;
    StreamHandle stream = nullptr;
    EventHandle event = nullptr;
    Clock::time_point deadline;
    double deadline_s = 0;
    std::string what;
    Done done;
    bool decided = false;  // FailAll: `verdict` is delivered whatever the work does
    Status verdict;
  };
  // Shared with the host functions, which may run after this object is gone (a stream runs them
  // later): they only push a ticket, under `mu`, which is never held across a device call or a
  // callback.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<uint64_t> fired;  // tickets whose host function ran
    std::map<uint64_t, Watched> watched;  // by ticket: a stream's watches in the order queued
    uint64_t next_ticket = 1;
    bool decided = false;  // some watch has a verdict to deliver
    bool stop = false;
  };
  struct Delivery {
    Watched watched;
    Status status;
  };
  void Run();
  // Takes what the host functions fired and what FailAll decided (under State::mu).
  void TakeReadyLocked(std::vector<Delivery>* out);
  // Queries the events of what is still watched, oldest first per stream (a stream whose oldest
  // watch has not finished has finished none after it), not under State::mu; returns the tickets
  // decided: finished, failed, or past their deadline.
  std::vector<std::pair<uint64_t, Status>> Poll();
  static void Deliver(std::vector<Delivery>& out);

  const std::chrono::duration<double> poll_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::thread thread_;  // started by the first Watch (under State::mu); joined by the destructor
};

}  // namespace byteps::device
