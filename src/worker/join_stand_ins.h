// join() with several processes per host: once the local root joined, the rounds its host's other
// processes still run need it to push and pull them to the servers. The local reducer posts each
// such tensor round here (from its I/O thread); Engine::Join's thread takes them and runs each as
// a stand-in operation with zeros as the root's share (Horovod: a joined rank contributes zeros),
// whose result goes to the processes that asked through the local broadcast.
// Threading: Post from any thread; Take and the rest from one thread (Engine::Join's).
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

#include "worker/local_reduce/local_reducer.h"
#include "worker/tensor_request.h"

namespace byteps::worker {

class JoinStandIns {
 public:
  using Part = local_reduce::LocalReducer::Part;
  void Post(const Part& part);
  // The parts posted so far, waiting up to wait_s for the first.
  std::vector<Part> Take(double wait_s);

  // A stand-in's request for `part`'s tensor, reading `zeros` and writing `scratch` (each at least
  // part.tensor_bytes; kept alive until the operation finished).
  static TensorRequest Request(const Part& part, const void* zeros, void* scratch);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Part> posted_;
};

}  // namespace byteps::worker
