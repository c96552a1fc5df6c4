// Client for bench/pslite/run.py: the ps-lite side of the byteps vs ps-lite comparison.
//
// One program plays every role of a ps-lite job (scheduler, server, worker; DMLC_ROLE picks) and
// measures the shape byteps's `byteps-core bench --tensors N --tensor-bytes B` measures: each
// iteration, N float32 tensors (one ps-lite key each) are all put in flight at once, every one is
// pushed to the server, summed there over the workers, and pulled back. The iteration ends when
// the last tensor is back. Two ways to move a tensor:
//   --mode push-then-pull  Push(key); when the push is acknowledged, Pull(key)  (two requests)
//   --mode zpushpull       one ZPushPull(key) request that carries the push and returns the sum
//
// The worker prints one line `RESULT {json}` with the per-iteration seconds and their median.
// Every wait has a deadline (--iter-timeout): on expiry the worker prints an ERROR line and exits
// with status 3 without finalizing (the runner kills the rest of the job).
//
// Written for byteps against ps-lite's public API (include/ps/ps.h); built by bench/pslite/run.py
// against a libps.a it builds in a temporary folder. Not part of the byteps build.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ps/ps.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int tensors = 20;
  long long tensor_bytes = 4LL << 20;
  int iters = 20;
  int warmup = 2;
  std::string mode = "push-then-pull";
  double iter_timeout_s = 60;
};

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "pslite_kv_bench: %s\nusage: pslite_kv_bench [--tensors N] [--tensor-bytes B] [--iters N] "
               "[--warmup N] [--mode push-then-pull|zpushpull] [--iter-timeout SECONDS]\n",
               why);
  std::exit(2);
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) Usage(("missing value for " + a).c_str());
    const char* v = argv[++i];
    char* end = nullptr;
    if (a == "--tensors") {
      o.tensors = static_cast<int>(std::strtol(v, &end, 10));
    } else if (a == "--tensor-bytes") {
      o.tensor_bytes = std::strtoll(v, &end, 10);
    } else if (a == "--iters") {
      o.iters = static_cast<int>(std::strtol(v, &end, 10));
    } else if (a == "--warmup") {
      o.warmup = static_cast<int>(std::strtol(v, &end, 10));
    } else if (a == "--iter-timeout") {
      o.iter_timeout_s = std::strtod(v, &end);
    } else if (a == "--mode") {
      o.mode = v;
      continue;
    } else {
      Usage(("unknown option " + a).c_str());
    }
    if (end == v || *end != '\0') Usage(("bad value for " + a).c_str());
  }
  if (o.tensors < 1 || o.iters < 1 || o.warmup < 0 || o.iter_timeout_s <= 0) Usage("values out of range");
  if (o.tensor_bytes < 4 || o.tensor_bytes % 4 != 0) Usage("--tensor-bytes must be a positive multiple of 4");
  if (o.mode != "push-then-pull" && o.mode != "zpushpull") Usage("--mode must be push-then-pull or zpushpull");
  return o;
}

// Sums the pushes of every worker per key and round; a pull for a round is answered once all
// workers have pushed to it. The worker sends its round number as the request's `cmd`, so a fast
// worker's next round never mixes with a slow worker's current one. Requests carry one key each.
// Runs on the server customer's single receive thread: no locking needed.
class SumServer {
 public:
  explicit SumServer(int num_workers) : num_workers_(num_workers) {}

  void Handle(const ps::KVMeta& meta, const ps::KVPairs<float>& req, ps::KVServer<float>* server) {
    if (req.keys.size() != 1) {
      std::fprintf(stderr, "pslite_kv_bench server: expected one key per request, got %zu\n", req.keys.size());
      std::exit(4);
    }
    const ps::Key key = req.keys[0];
    Round& r = rounds_[key][meta.cmd];
    if (meta.push) {
      if (r.sum.empty()) r.sum = TakeBuffer(key, req.vals.size());
      if (r.sum.size() != req.vals.size()) {
        std::fprintf(stderr, "pslite_kv_bench server: key %llu pushed with %zu values, expected %zu\n",
                     static_cast<unsigned long long>(key), req.vals.size(), r.sum.size());
        std::exit(4);
      }
      float* dst = r.sum.data();
      const float* src = req.vals.data();
      const size_t n = req.vals.size();
      if (r.pushes == 0) {
        std::memcpy(dst, src, n * sizeof(float));
      } else {
        for (size_t i = 0; i < n; ++i) dst[i] += src[i];
      }
      ++r.pushes;
      if (!meta.pull) server->Response(meta);  // plain push: acknowledge at once
    }
    if (meta.pull) r.waiting.push_back(meta);
    if (r.pushes == num_workers_) {
      ps::KVPairs<float> res;
      res.keys = req.keys;
      res.vals = r.sum;  // shared, not copied: the van keeps its own reference until sent
      for (const auto& m : r.waiting) server->Response(m, res);
      r.pulls += static_cast<int>(r.waiting.size());
      r.waiting.clear();
      if (r.pulls == num_workers_) {
        free_[key].push_back(r.sum);
        rounds_[key].erase(meta.cmd);
      }
    }
  }

 private:
  struct Round {
    ps::SArray<float> sum;
    int pushes = 0;
    int pulls = 0;
    std::vector<ps::KVMeta> waiting;
  };

  // Reuses a key's buffer once nothing else (an unsent reply) still holds it.
  ps::SArray<float> TakeBuffer(ps::Key key, size_t n) {
    auto& pool = free_[key];
    for (size_t i = 0; i < pool.size(); ++i) {
      if (pool[i].ptr().use_count() == 1 && pool[i].size() == n) {
        ps::SArray<float> b = pool[i];
        pool.erase(pool.begin() + static_cast<long>(i));
        return b;
      }
    }
    return ps::SArray<float>(n, 0.0f);
  }

  const int num_workers_;
  std::unordered_map<ps::Key, std::map<int, Round>> rounds_;
  std::unordered_map<ps::Key, std::vector<ps::SArray<float>>> free_;
};

// Probe positions whose pulled values are checked after every iteration.
std::vector<size_t> Probes(size_t n) { return {0, n / 2, n - 1}; }

// Value worker `rank` pushes at a probe position of tensor `t` in round `round`.
float ProbeValue(int rank, int t, int round) { return static_cast<float>((rank + 1) * (round % 64 + 1) + t); }

int RunWorker(const Options& o) {
  ps::KVWorker<float> kv(0, 0);
  const int rank = ps::MyRank();
  const int workers = ps::NumWorkers();
  const size_t n = static_cast<size_t>(o.tensor_bytes / 4);
  // Keys spread over the whole key space so several servers (if any) would each get some.
  const ps::Key stride = ps::kMaxKey / static_cast<ps::Key>(o.tensors);
  std::vector<ps::SArray<ps::Key>> keys(o.tensors);
  std::vector<ps::SArray<float>> vals(o.tensors), outs(o.tensors);
  for (int t = 0; t < o.tensors; ++t) {
    keys[t] = ps::SArray<ps::Key>(1, stride * static_cast<ps::Key>(t));
    vals[t] = ps::SArray<float>(n, 1.0f);
    outs[t] = ps::SArray<float>(n, 0.0f);
  }

  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  auto finished = [&] {
    std::lock_guard<std::mutex> lk(mu);
    if (++done == o.tensors) cv.notify_all();
  };

  std::vector<double> iter_s;
  const int total = o.warmup + o.iters;
  for (int round = 0; round < total; ++round) {
    for (int t = 0; t < o.tensors; ++t) {
      for (size_t p : Probes(n)) vals[t][p] = ProbeValue(rank, t, round);
    }
    {
      std::lock_guard<std::mutex> lk(mu);
      done = 0;
    }
    const auto t0 = Clock::now();
    for (int t = 0; t < o.tensors; ++t) {
      if (o.mode == "zpushpull") {
        kv.ZPushPull(keys[t], vals[t], &outs[t], nullptr, round, finished);
      } else {
        // The pull is issued from the push's completion callback (ps-lite's receive thread).
        kv.ZPush(keys[t], vals[t], {}, round,
                 [&kv, &keys, &outs, &finished, t, round] { kv.ZPull(keys[t], &outs[t], nullptr, round, finished); });
      }
    }
    {
      std::unique_lock<std::mutex> lk(mu);
      const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(o.iter_timeout_s));
      if (!cv.wait_until(lk, deadline, [&] { return done == o.tensors; })) {
        std::printf("ERROR iteration %d timed out after %g s: %d of %d tensors back\n", round, o.iter_timeout_s,
                    done, o.tensors);
        std::fflush(stdout);
        std::_Exit(3);
      }
    }
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (round >= o.warmup) iter_s.push_back(dt);

    // Check the sums (outside the timed region): the probes, and one plain position (all 1.0 pushed).
    for (int t = 0; t < o.tensors; ++t) {
      float probe = 0;
      for (int w = 0; w < workers; ++w) probe += ProbeValue(w, t, round);
      std::vector<std::pair<size_t, float>> checks;
      for (size_t p : Probes(n)) checks.emplace_back(p, probe);
      if (n >= 4) checks.emplace_back(1, static_cast<float>(workers));
      for (const auto& [pos, want] : checks) {
        if (outs[t][pos] != want) {
          std::printf("ERROR wrong sum: round %d tensor %d position %zu: got %g, expected %g\n", round, t, pos,
                      static_cast<double>(outs[t][pos]), static_cast<double>(want));
          std::fflush(stdout);
          std::_Exit(5);
        }
      }
    }
  }

  std::vector<double> sorted = iter_s;
  std::sort(sorted.begin(), sorted.end());
  const size_t m = sorted.size();
  const double median = m % 2 ? sorted[m / 2] : 0.5 * (sorted[m / 2 - 1] + sorted[m / 2]);
  std::string list;
  for (size_t i = 0; i < iter_s.size(); ++i) list += (i ? "," : "") + std::to_string(iter_s[i]);
  if (rank == 0) {
    std::printf(
        "RESULT {\"system\": \"ps-lite\", \"mode\": \"%s\", \"tensors\": %d, \"tensor_bytes\": %lld, "
        "\"iters\": %d, \"warmup\": %d, \"workers\": %d, \"servers\": %d, \"median_s\": %.9f, "
        "\"iter_s\": [%s]}\n",
        o.mode.c_str(), o.tensors, o.tensor_bytes, o.iters, o.warmup, workers, ps::NumServers(), median,
        list.c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = ParseArgs(argc, argv);
  ps::Start(0, argv[0]);
  if (ps::IsServer()) {
    auto* sum = new SumServer(ps::NumWorkers());
    auto* server = new ps::KVServer<float>(0);
    server->set_request_handle([sum](const ps::KVMeta& m, const ps::KVPairs<float>& d, ps::KVServer<float>* s) {
      sum->Handle(m, d, s);
    });
    ps::RegisterExitCallback([server, sum] {
      delete server;
      delete sum;
    });
  }
  int rc = 0;
  if (ps::IsWorker()) rc = RunWorker(o);
  ps::Finalize(0, true);
  return rc;
}
