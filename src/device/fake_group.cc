// The fake device's groups: ranks are fake devices in this process that meet by the group id. A
// collective is an op on the rank's stream; it waits (on that stream's thread) until every rank's
// op of the same sequence number arrived, then the last to arrive does the work for all: real
// asynchrony and NCCL's ordering rule (a rank queueing a different collective is an error, not a
// wrong sum). NCCL's failures, not kinder ones: a collective whose peer never queues its part
// waits forever (its stream is stuck, no error comes) until this rank's group is aborted, which
// ends it with an error; a join with two ranks on one device fails on every rank.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>

#include "common/reducer.h"
#include "device/fake_device.h"
#include "device/group_backends.h"

namespace byteps::device {
namespace {

struct Call {  // one rank's part of one collective
  bool reduce = false;
  const void* send = nullptr;
  void* buf = nullptr;  // recv (reduce) or buf (broadcast)
  size_t count = 0;     // elements (reduce) or bytes (broadcast)
  DataType dtype = DataType::kUint8;
  int root = 0;
};

struct Collective {
  std::vector<Call> calls;
  int arrived = 0;
  int left = 0;
  bool done = false;
  Status status;
};

struct Shared {
  explicit Shared(int n) : size(n), devices(n), aborted(n, false) {}
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  int joined = 0;
  std::vector<std::string> devices;  // by rank: the hardware id it joined with ("" not yet)
  std::vector<bool> aborted;         // by rank: Abort was called (ncclCommAbort)
  std::map<uint64_t, Collective> collectives;  // by sequence number
};

std::mutex g_mu;
std::map<std::string, std::shared_ptr<Shared>>& Groups() {
  static auto* groups = new std::map<std::string, std::shared_ptr<Shared>>();
  return *groups;
}
uint64_t g_next_id = 0;  // guarded by g_mu

Status Check(const std::vector<Call>& calls) {
  const Call& a = calls[0];
  for (size_t r = 1; r < calls.size(); ++r) {
    const Call& b = calls[r];
    if (b.reduce != a.reduce || b.count != a.count || b.dtype != a.dtype || b.root != a.root) {
      return Internal(fmt::format("fake group: rank 0 and rank {} queued different collectives ({} of {} vs {} of {})",
                                  r, a.reduce ? "reduce" : "broadcast", a.count, b.reduce ? "reduce" : "broadcast",
                                  b.count));
    }
  }
  return Status::Ok();
}

void Perform(std::vector<Call>& calls) {
  const Call& root = calls[calls[0].root];
  if (calls[0].reduce) {
    const size_t bytes = root.count * DataTypeSize(root.dtype);
    std::vector<uint8_t> sum(static_cast<const uint8_t*>(calls[0].send),
                             static_cast<const uint8_t*>(calls[0].send) + bytes);
    for (size_t r = 1; r < calls.size(); ++r) SumInto(sum.data(), calls[r].send, root.count, root.dtype);
    if (bytes > 0) std::memcpy(root.buf, sum.data(), bytes);
    return;
  }
  for (size_t r = 0; r < calls.size(); ++r)
    if (static_cast<int>(r) != calls[0].root && root.count > 0) std::memcpy(calls[r].buf, root.buf, root.count);
}

class FakeGroup final : public Group {
 public:
  FakeGroup(std::shared_ptr<FakeDevice> dev, std::shared_ptr<Shared> shared, int rank)
      : dev_(std::move(dev)), shared_(std::move(shared)), rank_(rank),
        where_(fmt::format("fake group on {} (rank {} of {})", dev_->name(), rank, shared_->size)) {}
  int rank() const override { return rank_; }
  int size() const override { return shared_->size; }
  Status Reduce(const void* send, void* recv, size_t count, DataType dtype, int root, StreamHandle s) override {
    return Queue({true, send, recv, count, dtype, root}, s);
  }
  Status Broadcast(void* buf, size_t bytes, int root, StreamHandle s) override {
    return Queue({false, nullptr, buf, bytes, DataType::kUint8, root}, s);
  }
  void Abort() override {
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->aborted[rank_] = true;
    }
    shared_->cv.notify_all();
  }
  bool aborted() const override {
    std::lock_guard<std::mutex> lock(shared_->mu);
    return shared_->aborted[rank_];
  }

 private:
  Status Queue(Call call, StreamHandle s) {
    if (call.root < 0 || call.root >= size()) {
      return InvalidArgument(fmt::format("{}: root {} is not a rank of {}", where_, call.root, size()));
    }
    if (aborted()) return Precondition(where_ + ": the group was aborted; it queues nothing more");
    const uint64_t seq = next_seq_++;
    std::shared_ptr<Shared> sh = shared_;
    const int rank = rank_;
    std::string where = where_;
    return dev_->Enqueue(s, [sh, seq, rank, call, where]() -> Status {
      std::unique_lock<std::mutex> lock(sh->mu);
      if (sh->aborted[rank]) return Aborted(fmt::format("{}: collective {} ended: the group was aborted", where, seq));
      Collective& c = sh->collectives[seq];
      if (c.calls.empty()) c.calls.resize(sh->size);
      c.calls[rank] = call;
      if (++c.arrived == sh->size) {
        c.status = Check(c.calls);
        if (c.status.ok()) Perform(c.calls);
        c.done = true;
        sh->cv.notify_all();
      } else {
        // As NCCL's kernel spins: no deadline, no error; only an abort of this rank ends the wait.
        sh->cv.wait(lock, [&] { return c.done || sh->aborted[rank]; });
        if (!c.done) {
          return Aborted(fmt::format("{}: collective {} ended: the group was aborted while it waited for {} of {} "
                                     "ranks",
                                     where, seq, sh->size - c.arrived, sh->size));
        }
      }
      Status st = c.status;
      if (++c.left == sh->size) sh->collectives.erase(seq);  // the last one out forgets it
      return st;
    });
  }

  std::shared_ptr<FakeDevice> dev_;
  std::shared_ptr<Shared> shared_;
  const int rank_;
  const std::string where_;
  uint64_t next_seq_ = 0;
};

// A rank of the group that shares `rank`'s device, or -1 (under sh.mu, every rank joined).
int SharesDevice(const Shared& sh, int rank) {
  for (int r = 0; r < sh.size; ++r)
    if (r != rank && sh.devices[r] == sh.devices[rank]) return r;
  return -1;
}

}  // namespace

StatusOr<std::string> NewFakeGroupId() {
  std::lock_guard<std::mutex> lock(g_mu);
  return fmt::format("fake-group-{}-{}", getpid(), ++g_next_id);
}

StatusOr<std::unique_ptr<Group>> JoinFakeGroup(std::shared_ptr<Device> device, const std::string& id, int rank,
                                               int size, double timeout_s) {
  auto fake = std::dynamic_pointer_cast<FakeDevice>(device);
  if (!fake) return InvalidArgument(fmt::format("{}: not a fake device", device->name()));
  std::shared_ptr<Shared> sh;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto& g = Groups()[id];
    if (!g) g = std::make_shared<Shared>(size);
    sh = g;
  }
  if (sh->size != size) {
    return InvalidArgument(fmt::format("fake group {}: rank {} joined with size {}, the group has {}", id, rank, size,
                                       sh->size));
  }
  std::unique_lock<std::mutex> lock(sh->mu);
  if (!sh->devices[rank].empty()) {
    return InvalidArgument(fmt::format("group init on {} (rank {} of {}) failed: rank {} joined group {} already",
                                       device->name(), rank, size, rank, id));
  }
  sh->devices[rank] = device->hardware_id();
  ++sh->joined;
  sh->cv.notify_all();
  if (!sh->cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return sh->joined >= sh->size; })) {
    return DeadlineExceeded(fmt::format("group init on {} (rank {} of {}) failed: {} of {} ranks joined within {:.1f} s",
                                        device->name(), rank, size, sh->joined, size, timeout_s));
  }
  // As NCCL ("Duplicate GPU detected"): every rank learns it, none gets a group.
  for (int r = 0; r < size; ++r) {
    if (int other = SharesDevice(*sh, r); other >= 0) {
      return InvalidArgument(fmt::format("group init on {} (rank {} of {}) failed: ranks {} and {} use the same device "
                                         "({}); a group needs one device per rank, as NCCL does",
                                         device->name(), rank, size, std::min(r, other), std::max(r, other),
                                         sh->devices[r]));
    }
  }
  return std::unique_ptr<Group>(new FakeGroup(fake, sh, rank));
}

}  // namespace byteps::device
