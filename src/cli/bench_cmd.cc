#include "cli/bench_cmd.h"

#include "device/device.h"
#include "device/fake_device.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "common/dtype.h"
#include "common/logging.h"
#include "worker/engine.h"

namespace byteps::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

std::string HumanBytes(size_t b) {
  if (b >= (1u << 30) && b % (1u << 30) == 0) return fmt::format("{}G", b >> 30);
  if (b >= (1u << 20) && b % (1u << 20) == 0) return fmt::format("{}M", b >> 20);
  if (b >= 1024 && b % 1024 == 0) return fmt::format("{}K", b >> 10);
  return fmt::format("{}", b);
}

void Emit(const nlohmann::json& j, const BenchOptions& o) {
  std::string s = j.dump();
  fmt::print("JSON {}\n", s);
  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path);
    f << j.dump(2) << "\n";
  }
}

// Plain TCP over loopback: the ceilings a push_pull on this machine is measured against.
//  - stream: one socket, 64 MiB writes one way (what iperf3 measures);
//  - echo: 64 MiB out and the same 64 MiB back through a peer that returns every byte as it
//    arrives, i.e. exactly the bytes a push_pull moves, with nothing summed or framed.
class LoopbackPair {
 public:
  bool Open() {
    int ls = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(ls, 1) != 0) return false;
    getsockname(ls, reinterpret_cast<sockaddr*>(&a), &len);
    client_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(client_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return false;
    server_ = ::accept(ls, nullptr, nullptr);
    ::close(ls);
    return server_ >= 0;
  }
  ~LoopbackPair() {
    if (client_ >= 0) ::close(client_);
    if (server_ >= 0) ::close(server_);
  }
  int client_ = -1, server_ = -1;
};

bool SendAll(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool RecvAll(int fd, uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

double RawStream(size_t chunk, double seconds, std::vector<double>* rates) {
  LoopbackPair pair;
  if (!pair.Open()) return 0;
  std::thread reader([&] {
    std::vector<uint8_t> buf(4u << 20);
    while (::recv(pair.server_, buf.data(), buf.size(), 0) > 0) {
    }
  });
  std::vector<uint8_t> data(chunk, 1);
  auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    auto t0 = Clock::now();
    if (!SendAll(pair.client_, data.data(), chunk)) break;
    rates->push_back(chunk / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9);
  }
  ::shutdown(pair.client_, SHUT_WR);
  reader.join();
  return Median(*rates);
}

double RawEcho(size_t chunk, double seconds, std::vector<double>* rates) {
  LoopbackPair pair;
  if (!pair.Open()) return 0;
  std::thread echo([&] {
    std::vector<uint8_t> buf(1u << 20);
    for (;;) {
      ssize_t k = ::recv(pair.server_, buf.data(), buf.size(), 0);
      if (k <= 0 || !SendAll(pair.server_, buf.data(), static_cast<size_t>(k))) break;
    }
  });
  std::vector<uint8_t> out(chunk, 1), in(chunk);
  auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    auto t0 = Clock::now();
    std::thread sender([&] { SendAll(pair.client_, out.data(), chunk); });
    bool ok = RecvAll(pair.client_, in.data(), chunk);
    sender.join();
    if (!ok) break;
    rates->push_back(chunk / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9);
  }
  ::shutdown(pair.client_, SHUT_WR);
  echo.join();
  return Median(*rates);
}

int RunRawTcp(const BenchOptions& o) {
  const size_t chunk = 64u << 20;
  std::vector<double> s_rates, e_rates;
  double stream = RawStream(chunk, o.raw_seconds, &s_rates);
  double echo = RawEcho(chunk, o.raw_seconds, &e_rates);
  if (stream <= 0 || echo <= 0) {
    fmt::print(stderr, "raw tcp: loopback sockets failed: {}\n", std::strerror(errno));
    return 1;
  }
  fmt::print("# plain TCP over loopback, 64 MiB per sample, {:.1f} s each, medians\n", o.raw_seconds);
  fmt::print("raw_tcp_stream_GBps {:.3f}   (one way)\n", stream);
  fmt::print("raw_tcp_echo_GBps   {:.3f}   (64 MiB out + the same back: a push_pull's traffic)\n", echo);
  Emit(nlohmann::json{{"mode", "raw_tcp"}, {"stream_GBps", stream}, {"echo_GBps", echo},
                      {"stream_samples", s_rates.size()}, {"echo_samples", e_rates.size()}},
       o);
  return 0;
}

// Untimed iterations that let the online tuner settle before the timed ones, so the figures are
// the steady state a training job reaches after its first iterations: once, before the first
// size whose iterations push at least the credit (smaller ones never meet the cap and are not
// counted by the tuner). Decided from what every worker shares (the configuration and the agreed
// credit), so all make the same push_pulls, local non-root processes included.
int SettleIterations(const config::Config& c, const worker::Engine& e, size_t iteration_bytes, bool* done) {
  if (*done || !e.distributed() || !c.autotune || c.scheduling_credit_pinned || iteration_bytes < e.credit_bytes()) {
    return 0;
  }
  *done = true;
  return worker::Engine::kOnlineSettleIterations + 2;  // + the iteration each size change splits
}

int RunManyTensors(const config::Config& config, worker::Engine& e, const BenchOptions& o, DataType dt) {
  const int n = o.tensors;
  std::vector<std::vector<uint8_t>> bufs(n, std::vector<uint8_t>(o.tensor_bytes, 0));
  for (int i = 0; i < n; ++i) {
    auto k = e.Declare(fmt::format("bench.small.{}", i), std::make_pair(o.tensor_bytes, dt));
    if (!k.ok()) {
      fmt::print(stderr, "{}\n", k.status().message());
      return 1;
    }
  }
  int iters = o.iters > 0 ? o.iters : 20;
  std::vector<double> per_tensor_us;
  bool settled = false;
  const int settle = SettleIterations(config, e, static_cast<size_t>(n) * o.tensor_bytes, &settled);
  for (int it = 0; it < settle + o.warmup + iters; ++it) {
    auto t0 = Clock::now();
    std::vector<worker::HandleId> hs;
    hs.reserve(n);
    for (int i = 0; i < n; ++i) {
      worker::TensorRequest r;
      r.name = fmt::format("bench.small.{}", i);
      r.input = r.output = bufs[i].data();
      r.bytes = o.tensor_bytes;
      r.dtype = dt;
      auto h = e.Enqueue(r);
      if (!h.ok()) {
        fmt::print(stderr, "{}\n", h.status().message());
        return 1;
      }
      hs.push_back(h.value());
    }
    for (auto h : hs) {
      Status st = e.Wait(h);
      e.Release(h);
      if (!st.ok()) {
        fmt::print(stderr, "{}\n", st.message());
        return 1;
      }
    }
    double dt_s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (it >= settle + o.warmup) per_tensor_us.push_back(dt_s * 1e6 / n);
  }
  double med = Median(per_tensor_us);
  if (e.rank() == 0) {
    fmt::print("# {} tensors of {} B per iteration, {} iterations, {} workers\n", n, o.tensor_bytes, iters, e.size());
    fmt::print("per_tensor_us {:.2f}\n", med);
    Emit(nlohmann::json{{"mode", "many_tensors"}, {"tensors", n}, {"tensor_bytes", o.tensor_bytes},
                        {"iterations", iters}, {"settle_iterations", settle}, {"per_tensor_us_median", med},
                        {"workers", e.size()}, {"credit_bytes", e.credit_bytes()}, {"settings", e.settings_report()},
                        {"server_shares", e.server_shares()}, {"placement", e.placement_report()}},
         o);
  }
  return 0;
}

// The device the sweep's tensors live on: null for the host.
StatusOr<std::shared_ptr<device::Device>> OpenBenchDevice(const BenchOptions& o) {
  if (o.device == "cpu") return std::shared_ptr<device::Device>();
  if (o.device == "fake") {
    if (!(o.fake_copy_gbps > 0)) return InvalidArgument("--fake-copy-gbps must be > 0");
    auto fake = device::FakeDevice::Get(0);
    fake->SetOptions({5e-6, o.fake_copy_gbps * 1e9});
    return std::shared_ptr<device::Device>(fake);
  }
  if (o.device == "cuda") return device::Open(device::Kind::kCuda, 0);
  return InvalidArgument(fmt::format("unknown device '{}' (cpu, cuda, fake)", o.device));
}

}  // namespace

int RunBench(const config::Config& config, const BenchOptions& o) {
  if (o.raw_tcp) return RunRawTcp(o);
  auto dt = DataTypeFromName(o.dtype);
  if (!dt) {
    fmt::print(stderr, "bench: unknown dtype '{}'\n", o.dtype);
    return 2;
  }
  auto engine = worker::Engine::Start(config);
  if (!engine.ok()) {
    fmt::print(stderr, "bench: {}\n", engine.status().message());
    return 1;
  }
  worker::Engine& e = *engine.value();
  int rc = 0;
  if (o.tensors > 0) {
    rc = RunManyTensors(config, e, o, *dt);
  } else {
    const size_t esize = DataTypeSize(*dt);
    const int n = e.size();
    const double bus_factor = n > 1 ? 2.0 * (n - 1) / n : 1.0;
    std::vector<uint8_t> host_buf;
    auto dev = OpenBenchDevice(o);
    if (!dev.ok()) {
      fmt::print(stderr, "bench: --device {}: {}\n", o.device, dev.status().message());
      return 2;
    }
    const size_t buf_bytes = std::max(o.max_bytes, esize);
    uint8_t* buf = nullptr;
    if (*dev) {
      auto p = (*dev)->AllocDevice(buf_bytes);
      if (!p.ok()) {
        fmt::print(stderr, "bench: {}\n", p.status().message());
        return 1;
      }
      buf = static_cast<uint8_t*>(*p);
    } else {
      host_buf.assign(buf_bytes, 0);
      buf = host_buf.data();
    }
    nlohmann::json rows = nlohmann::json::array();
    int settled_at = 0;
    bool settled = false;
    if (e.rank() == 0) {
      fmt::print("# byteps bench: {} workers, {} servers, partition {} B, credit {} B, dtype {}, tensors on {}\n", n,
                 config.num_servers, e.partition_bytes(), e.credit_bytes(), o.dtype,
                 *dev ? (*dev)->name() + (o.device == "fake" ? fmt::format(" (copies at {} GB/s)", o.fake_copy_gbps) : "")
                      : std::string("the host"));
      fmt::print("{:>10} {:>12} {:>6} {:>12} {:>10} {:>10}\n", "size", "count", "iters", "time_us", "algbw_GBps",
                 "busbw_GBps");
    }
    // --barrier: a push_pull completes only when every worker has pushed it, so after it the
    // workers start the timed one together, as after the peers' barrier (gloo, MPI).
    std::vector<uint8_t> barrier_buf(sizeof(float), 0);
    if (o.barrier) {
      auto k = e.Declare("bench.barrier", std::make_pair(barrier_buf.size(), DataType::kFloat32));
      if (!k.ok()) {
        fmt::print(stderr, "{}\n", k.status().message());
        return 1;
      }
    }
    auto barrier = [&]() -> Status {
      if (!o.barrier) return Status::Ok();
      worker::TensorRequest r;
      r.name = "bench.barrier";
      r.input = r.output = barrier_buf.data();
      r.bytes = barrier_buf.size();
      r.dtype = DataType::kFloat32;
      auto h = e.Enqueue(r);
      Status st = h.ok() ? e.Wait(h.value()) : h.status();
      if (h.ok()) e.Release(h.value());
      return st;
    };
    for (size_t bytes = std::max(o.min_bytes, esize); bytes <= o.max_bytes; bytes *= o.step_factor) {
      size_t b = bytes / esize * esize;
      std::string name = fmt::format("bench.{}", b);
      auto k = e.Declare(name, std::make_pair(b, *dt));
      if (!k.ok()) {
        fmt::print(stderr, "{}\n", k.status().message());
        return 1;
      }
      int iters = o.iters > 0 ? o.iters : static_cast<int>(std::clamp<size_t>((512u << 20) / b, 5, 50));
      const int settle = SettleIterations(config, e, b, &settled);
      settled_at += settle;
      std::vector<double> times;
      for (int it = 0; it < settle + o.warmup + iters; ++it) {
        worker::TensorRequest r;
        r.name = name;
        r.input = r.output = buf;
        r.bytes = b;
        r.dtype = *dt;
        if (*dev) r.device = {(*dev)->kind(), (*dev)->index(), nullptr};
        if (Status bst = barrier(); !bst.ok()) {
          fmt::print(stderr, "bench: barrier: {}\n", bst.message());
          return 1;
        }
        auto t0 = Clock::now();
        auto h = e.Enqueue(r);
        Status st = h.ok() ? e.Wait(h.value()) : h.status();
        if (h.ok()) e.Release(h.value());
        if (!st.ok()) {
          fmt::print(stderr, "bench: {}\n", st.message());
          return 1;
        }
        if (it >= settle + o.warmup) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
      double t = Median(times);
      double algbw = b / t / 1e9;
      if (e.rank() == 0) {
        fmt::print("{:>10} {:>12} {:>6} {:>12.1f} {:>10.3f} {:>10.3f}\n", HumanBytes(b), b / esize, iters, t * 1e6,
                   algbw, algbw * bus_factor);
        std::fflush(stdout);
      }
      rows.push_back({{"bytes", b}, {"iters", iters}, {"time_us_median", t * 1e6}, {"algbw_GBps", algbw},
                      {"busbw_GBps", algbw * bus_factor}});
      if (bytes > o.max_bytes / o.step_factor) break;
    }
    if (e.rank() == 0) {
      Emit(nlohmann::json{{"mode", "sweep"}, {"workers", n}, {"servers", config.num_servers},
                          {"partition_bytes", e.partition_bytes()}, {"credit_bytes", e.credit_bytes()},
                          {"settings", e.settings_report()}, {"settle_iterations", settled_at},
                          {"server_shares", e.server_shares()}, {"placement", e.placement_report()},
                          {"barrier", o.barrier}, {"dtype", o.dtype}, {"device", o.device}, {"rows", rows}},
           o);
    }
    if (*dev) (*dev)->FreeDevice(buf);
  }
  Status st = e.Shutdown();
  if (!st.ok()) {
    fmt::print(stderr, "bench: shutdown: {}\n", st.message());
    return 1;
  }
  return rc;
}

}  // namespace byteps::cli
