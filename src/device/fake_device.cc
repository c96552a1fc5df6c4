#include "device/fake_device.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "device/backends.h"
#include "device/numa.h"

namespace byteps::device {
namespace {

struct Event {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
  void Complete(const Status& st) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      status = st;
    }
    cv.notify_all();
  }
};

// One stream: a thread running its queue in order. An op returns its status; after a failure the
// stream is broken (as CUDA's errors are sticky): later ops see that failure and carry it on.
class Stream {
 public:
  using Op = std::function<Status(const Status& so_far)>;
  // `on_end` runs on the stream's thread once it ended (retired, and everything queued ran).
  explicit Stream(std::string name, int numa_node = -1, std::function<void()> on_end = nullptr)
      : name_(std::move(name)), numa_node_(numa_node), on_end_(std::move(on_end)), thread_([this] { Run(); }) {}
  ~Stream() {
    Retire();
    thread_.join();
  }
  void Push(Op op) {
    // Notified under the lock: a stream destroyed right after (its ops run) cannot lose the
    // condition variable under a pusher still inside notify.
    std::lock_guard<std::mutex> lock(mu_);
    ops_.push_back(std::move(op));
    cv_.notify_all();
  }
  // No more ops come: the thread ends once it ran what is queued (maybe never: a stuck op).
  void Retire() {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  bool ended() const { return ended_.load(); }
  const std::string& name() const { return name_; }

 private:
  void Run() {
    (void)RunOnNode(numa_node_);  // the device's copies run on its node's cores
    Status failed;
    while (true) {
      Op op;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !ops_.empty(); });
        if (ops_.empty()) break;  // stopping, and everything queued has run
        op = std::move(ops_.front());
        ops_.pop_front();
      }
      Status st = op(failed);
      if (failed.ok() && !st.ok()) failed = st;
    }
    ended_ = true;
    if (on_end_) on_end_();
  }
  std::string name_;
  const int numa_node_;
  std::function<void()> on_end_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> ops_;
  bool stop_ = false;
  std::atomic<bool> ended_{false};
  std::thread thread_;  // last: started once the rest exists
};

class Gate final : public FakeGate {
 public:
  void Open() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  bool reached() const override { return reached_.load(); }
  void Pass() {
    reached_ = true;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  std::atomic<bool> reached_{false};
};


class FakeDeviceImpl final : public FakeDevice {
 public:
  explicit FakeDeviceImpl(int index) : index_(index), default_(std::make_unique<Stream>("default")) {}
  ~FakeDeviceImpl() override {
    {
      std::lock_guard<std::mutex> lock(reap_mu_);
      stop_reaping_ = true;
    }
    reap_cv_.notify_all();
    if (reaper_.joinable()) reaper_.join();
  }

  Kind kind() const override { return Kind::kFake; }
  int index() const override { return index_; }
  int numa_node() const override { return numa_node_.load(); }
  StatusOr<void*> AllocHost(size_t bytes) override { return AlignedHostOnNode(bytes, numa_node(), "fake device"); }
  void FreeHost(void* p) override { std::free(p); }
  StatusOr<void*> AllocDevice(size_t bytes) override { return AlignedHost(bytes, "fake device"); }
  void FreeDevice(void* p) override { std::free(p); }

  StatusOr<StreamHandle> CreateStream() override {
    std::lock_guard<std::mutex> lock(mu_);
    auto s = std::make_unique<Stream>(fmt::format("stream {}", ++streams_made_), options_.numa_node, [this] {
      std::lock_guard<std::mutex> lock(reap_mu_);
      reap_cv_.notify_all();
    });
    StreamHandle h = s.get();
    streams_.emplace(h, std::move(s));
    return h;
  }
  void DestroyStream(StreamHandle h) override {
    std::unique_ptr<Stream> s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto found = streams_.find(h);
      if (found == streams_.end()) return;
      s = std::move(found->second);
      streams_.erase(found);
    }
    s->Retire();  // returns at once, as cudaStreamDestroy: what is queued still runs
    {
      std::lock_guard<std::mutex> lock(reap_mu_);
      retired_.push_back(std::move(s));
      if (!reaper_.joinable()) reaper_ = std::thread([this] { Reap(); });
    }
    reap_cv_.notify_all();  // it may have ended already
  }

  Status CopyAsync(void* dst, const void* src, size_t bytes, CopyKind, StreamHandle h) override {
    BYTEPS_ASSIGN_OR_RETURN(Stream * s, Find(h));
    FakeOptions o = options();
    s->Push([this, dst, src, bytes, o](const Status& so_far) {
      if (!so_far.ok()) return so_far;
      // The copy takes latency + bytes / bandwidth in all: the memmove's own time counts towards it.
      const auto start = std::chrono::steady_clock::now();
      if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
      const double t = o.copy_latency_s + (o.copy_bytes_per_s > 0 ? bytes / o.copy_bytes_per_s : 0.0);
      const auto end = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                   std::chrono::duration<double>(t));
      if (t > 0) std::this_thread::sleep_until(end);
      copies_.fetch_add(1);
      copied_bytes_.fetch_add(bytes);
      return Status::Ok();
    });
    return Status::Ok();
  }

  StatusOr<EventHandle> RecordEvent(StreamHandle h) override {
    BYTEPS_ASSIGN_OR_RETURN(Stream * s, Find(h));
    auto* holder = new std::shared_ptr<Event>(std::make_shared<Event>());
    std::shared_ptr<Event> e = *holder;
    s->Push([e](const Status& so_far) {
      e->Complete(so_far);
      return Status::Ok();
    });
    return static_cast<EventHandle>(holder);
  }
  StatusOr<bool> QueryEvent(EventHandle h) override {
    if (h == nullptr) return InvalidArgument(name() + ": query of a null event");
    Event& e = **static_cast<std::shared_ptr<Event>*>(h);
    std::lock_guard<std::mutex> lock(e.mu);
    if (e.done && !e.status.ok()) return e.status;
    return e.done;
  }
  Status StreamWaitEvent(StreamHandle h, EventHandle ev) override {
    if (ev == nullptr) return InvalidArgument(name() + ": wait on a null event");
    BYTEPS_ASSIGN_OR_RETURN(Stream * s, Find(h));
    std::shared_ptr<Event> e = *static_cast<std::shared_ptr<Event>*>(ev);
    s->Push([e](const Status&) {
      std::unique_lock<std::mutex> lock(e->mu);
      e->cv.wait(lock, [&] { return e->done; });  // as long as it takes, as on a GPU
      return e->status;
    });
    return Status::Ok();
  }
  void DestroyEvent(EventHandle h) override { delete static_cast<std::shared_ptr<Event>*>(h); }

  Status LaunchHostFunc(StreamHandle h, std::function<void()> fn) override {
    BYTEPS_ASSIGN_OR_RETURN(Stream * s, Find(h));
    s->Push([this, fn = std::move(fn)](const Status& so_far) {
      if (!so_far.ok()) {  // CUDA never calls a host function queued after an error
        dropped_host_functions_.fetch_add(1);
        return so_far;
      }
      const auto start = std::chrono::steady_clock::now();
      fn();
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      double longest = longest_host_function_s_.load();
      while (took > longest && !longest_host_function_s_.compare_exchange_weak(longest, took)) {
      }
      return Status::Ok();
    });
    return Status::Ok();
  }

  void SetOptions(const FakeOptions& o) override {
    std::lock_guard<std::mutex> lock(mu_);
    options_ = o;
    numa_node_ = o.numa_node;
  }
  std::shared_ptr<FakeGate> Hold(StreamHandle h) override {
    auto gate = std::make_shared<Gate>();
    auto s = Find(h);
    if (!s.ok()) {
      gate->Open();
      return gate;
    }
    (*s)->Push([gate](const Status&) {
      gate->Pass();
      return Status::Ok();
    });
    return gate;
  }
  Status Launch(StreamHandle h, std::function<void()> work) override {
    BYTEPS_ASSIGN_OR_RETURN(Stream * s, Find(h));
    s->Push([work = std::move(work)](const Status& so_far) {
      if (so_far.ok()) work();
      return Status::Ok();
    });
    return Status::Ok();
  }
  Status Enqueue(StreamHandle h, std::function<Status()> work) override {
    BYTEPS_ASSIGN_OR_RETURN(Stream * s, Find(h));
    s->Push([work = std::move(work)](const Status& so_far) { return so_far.ok() ? work() : so_far; });
    return Status::Ok();
  }
  uint64_t copies() const override { return copies_.load(); }
  uint64_t copied_bytes() const override { return copied_bytes_.load(); }
  uint64_t dropped_host_functions() const override { return dropped_host_functions_.load(); }
  double longest_host_function_s() const override { return longest_host_function_s_.load(); }

 private:
  // Joins the threads of destroyed streams once they ended (a stuck one waits for its work).
  void Reap() {
    std::unique_lock<std::mutex> lock(reap_mu_);
    while (true) {
      reap_cv_.wait(lock, [&] {
        return stop_reaping_ || std::any_of(retired_.begin(), retired_.end(), [](auto& r) { return r->ended(); });
      });
      if (stop_reaping_) return;
      std::vector<std::unique_ptr<Stream>> ended;
      for (auto it = retired_.begin(); it != retired_.end();) {
        if ((*it)->ended()) {
          ended.push_back(std::move(*it));
          it = retired_.erase(it);
        } else {
          ++it;
        }
      }
      lock.unlock();
      ended.clear();  // joins
      lock.lock();
    }
  }
  StatusOr<Stream*> Find(StreamHandle h) {
    if (h == nullptr) return default_.get();
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(h);
    if (it == streams_.end()) return InvalidArgument(fmt::format("{}: unknown stream {}", name(), h));
    return it->second.get();
  }
  FakeOptions options() {
    std::lock_guard<std::mutex> lock(mu_);
    return options_;
  }

  const int index_;
  std::mutex mu_;
  std::mutex reap_mu_;  // guards retired_, stop_reaping_; a stream's on_end takes it to notify
  std::condition_variable reap_cv_;
  FakeOptions options_;
  std::atomic<int> numa_node_{-1};
  std::map<StreamHandle, std::unique_ptr<Stream>> streams_;
  uint64_t streams_made_ = 0;
  std::atomic<uint64_t> copies_{0};
  std::atomic<uint64_t> copied_bytes_{0};
  std::atomic<uint64_t> dropped_host_functions_{0};
  std::atomic<double> longest_host_function_s_{0};
  std::vector<std::unique_ptr<Stream>> retired_;  // destroyed streams whose thread may still run
  bool stop_reaping_ = false;
  std::thread reaper_;  // started by the first DestroyStream
  std::unique_ptr<Stream> default_;  // last: destroyed first, after the others ran out
};

}  // namespace

std::shared_ptr<FakeDevice> FakeDevice::Get(int index) {
  static std::mutex mu;
  static auto* devices = new std::map<int, std::shared_ptr<FakeDevice>>();  // lives for the process
  std::lock_guard<std::mutex> lock(mu);
  auto& d = (*devices)[index];
  if (!d) d = std::make_shared<FakeDeviceImpl>(index);
  return d;
}

std::shared_ptr<Device> OpenFake(int index) { return FakeDevice::Get(index); }

}  // namespace byteps::device
