#include "cli/top_cmd.h"

#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <thread>

#include "cli/top_view.h"
#include "cluster/top_client.h"
#include "transport/transport_config.h"

namespace byteps::cli {

namespace {

// "HOST:PORT" (the last colon splits, so a bracket-less IPv6 host keeps its own).
bool SplitAddress(const std::string& text, std::string* host, int* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  const char* first = text.data() + colon + 1;
  const char* last = text.data() + text.size();
  auto [end, ec] = std::from_chars(first, last, *port);
  if (ec != std::errc() || end != last || *port <= 0 || *port > 65535) return false;
  *host = text.substr(0, colon);
  return true;
}

}  // namespace

int RunTop(const config::Config& c, const TopOptions& o) {
  std::string host = c.root_uri;
  int port = c.root_port;
  if (!o.scheduler.empty() && !SplitAddress(o.scheduler, &host, &port)) {
    fmt::print(stderr, "byteps top: --scheduler='{}': expected HOST:PORT\n", o.scheduler);
    return 2;
  }
  if (port <= 0) {
    fmt::print(stderr,
               "byteps top: which job? give --scheduler HOST:PORT or set DMLC_PS_ROOT_URI and DMLC_PS_ROOT_PORT "
               "(bpsrun prints the scheduler's address when it starts)\n");
    return 2;
  }
  auto transport = transport::CreateTcpTransport(transport::ControlTransportOptionsFor(c, "top"));
  cluster::TopClient client(transport.get(), host, port);
  const bool screen = !o.json && isatty(STDOUT_FILENO);
  bool seen = false;
  for (int drawn = 0; o.count <= 0 || drawn < o.count; ++drawn) {
    if (drawn > 0) std::this_thread::sleep_for(std::chrono::duration<double>(o.interval_s));
    auto reply = client.Ask(o.timeout_s);
    if (!reply.ok()) {
      if (seen) {  // it answered before: the job is over (or its scheduler died; its nodes say which)
        fmt::print("byteps top: {}; the job ended\n", reply.status().message());
        return 0;
      }
      fmt::print(stderr, "byteps top: {}\n", reply.status().message());
      return 1;
    }
    seen = true;
    const TopView view = BuildTopView(reply.value());
    if (o.json) {
      fmt::print("{}\n", TopViewJson(view));
      return 0;
    }
    fmt::print("{}{}", screen ? "\033[H\033[2J" : (drawn > 0 ? "\n" : ""), RenderTopText(view));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace byteps::cli
