#include "server/role_main.h"

#include <fmt/format.h>
#include <unistd.h>

#include "cluster/cluster_client.h"
#include "cluster/cluster_config.h"
#include "common/logging.h"
#include "common/report_file.h"
#include "common/report_signal.h"
#include "server/server.h"
#include "server/server_config.h"
#include "server/server_trace.h"
#include "transport/transport_config.h"

namespace byteps::server {

Status RunServer(const config::Config& c) {
  auto metrics = cluster::StartMetrics(c, "server");  // before anything: a port in use stops the server here
  if (!metrics.ok()) return metrics.status();
  // A trace that could not be written at the end must not let the job start half-traced.
  if (c.trace_on) BYTEPS_RETURN_IF_ERROR(ServerTrace::CheckDir(c.trace_dir));
  Server server(ServerOptionsFor(c));
  auto port = server.Listen(cluster::ListenHostFor(c), c.port);
  if (!port.ok()) return port.status();

  // The scheduler connection uses its own small transport so control never queues behind data.
  auto control = transport::CreateTcpTransport(transport::ControlTransportOptionsFor(c, "srv-ctl"));
  cluster::ClientOptions co = cluster::ClientOptionsFor(c, "server", port.value());
  auto client = cluster::ClusterClient::Join(*control, co, nullptr);
  if (!client.ok()) return client.status();
  const int rank = client.value()->rank();
  log::SetIdentity(fmt::format("server:{}", rank));
  // kill -USR1: the open rounds, to a file (common/report_file.h).
  const int report = report_signal::Add([&server, &c, rank] {
    const std::string text = fmt::format("byteps stall report of server {} (pid {})\nreason: asked for with kill -USR1\n"
                                          "open rounds: key, tensor, round, workers that pushed, workers waited for\n{}",
                                          rank, getpid(), server.OpenRounds(1.0));
    auto path = report_file::Write(report_file::Folder(c.trace_on, c.trace_dir, c.tmp_dir), fmt::format("server{}", rank), text);
    if (path.ok()) BYTEPS_LOG(Warning, "stall report (kill -USR1) written to {}", path.value());
    else BYTEPS_LOG(Warning, "{}", path.status().message());
  });
  BYTEPS_LOG(Info, "serving on {}:{} for {} workers with {} engine threads", co.host, port.value(), c.num_workers,
             c.server_engine_threads);
  Status st = client.value()->WaitTerminate();
  report_signal::Remove(report);
  server.Shutdown();
  // Written however the job ended: a failed job's timeline is the one worth reading.
  auto trace = server.WriteTrace(client.value()->rank(), client.value()->job_id(), client.value()->clock_offset_us());
  if (!trace.ok()) {
    BYTEPS_LOG(Error, "{}", trace.status().message());
  } else if (!trace.value().empty()) {
    BYTEPS_LOG(Info, "server {}: timeline written to {}", client.value()->rank(), trace.value());
  }
  client.value().reset();
  control->Shutdown();
  return st;
}

}  // namespace byteps::server
