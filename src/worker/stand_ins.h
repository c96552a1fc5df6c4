// A host's local root runs some operations on behalf of its other processes (BYTEPS_LOCAL_SIZE >
// 1), because only it talks to the servers: the rounds of a process set it is not a member of,
// and every round the others start after it called join(). The local reducer posts each such
// tensor round here (from its I/O thread); this runner's thread starts it as a stand-in operation
// (zeros in, a scratch buffer out: the reducer leaves the root's share out, or counts it as a
// joined process's zeros) and keeps the buffers until it finished. The result reaches the
// processes that asked through the local broadcast; a stand-in that cannot start fails their
// round with why.
// Threading: Post from any thread; one thread of its own; Stop (or the destructor) once.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "worker/local_reduce/local_reducer.h"
#include "worker/tensor_request.h"

namespace byteps::worker {

class StandInRunner {
 public:
  using Part = local_reduce::LocalReducer::Part;
  struct Calls {
    std::function<StatusOr<HandleId>(const TensorRequest&)> enqueue;  // Engine::Enqueue
    std::function<StatusOr<bool>(HandleId)> poll;                      // Engine::Poll
    std::function<Status(HandleId, double)> wait;                      // Engine::Wait (seconds)
    std::function<void(HandleId)> release;                             // Engine::Release
    std::function<void(const Part&, const Status&)> fail;              // the asking processes learn why
  };
  explicit StandInRunner(Calls calls);
  ~StandInRunner();

  void Post(const Part& part);
  // Stops taking posts; waits up to wait_s for the running stand-ins (their buffers are kept, not
  // freed, if one is still running then).
  void Stop(double wait_s);
  // The operations started so far (tests and logs).
  size_t started() const;

  // A stand-in's request for `part`'s tensor, reading `zeros` and writing `scratch` (each at least
  // part.tensor_bytes).
  static TensorRequest Request(const Part& part, const void* zeros, void* scratch);

 private:
  struct Running {
    HandleId h = 0;
    std::vector<uint8_t> zeros, scratch;
  };
  void Loop();
  // Releases the finished ones; true when none is left.
  bool Reap(std::vector<std::unique_ptr<Running>>* running);

  const Calls calls_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Part> posted_;
  bool stopping_ = false;
  size_t started_ = 0;
  std::vector<std::unique_ptr<Running>> left_;  // still running at Stop (kept alive)
  std::thread thread_;
};

}  // namespace byteps::worker
