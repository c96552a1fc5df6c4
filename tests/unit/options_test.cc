// The adapters from a process's Config to each layer's options: transport, cluster client,
// scheduler, server. Every field a setting feeds arrives where it belongs.
#include <gtest/gtest.h>

#include "cluster/cluster_config.h"
#include "config/config.h"
#include "server/server_config.h"
#include "transport/transport_config.h"

namespace byteps {
namespace {

config::Config Job() {
  config::Config c;
  c.root_uri = "10.0.0.1";
  c.root_port = 9000;
  c.num_workers = 4;
  c.num_servers = 2;
  c.worker_id = 3;
  c.node_host = "10.0.0.9";
  c.advertise_port = 0;
  c.io_threads = 3;
  c.socket_buffer_bytes = 1 << 20;
  c.max_message_bytes = 64 << 20;
  c.job_secret = "s3cret";
  c.checksum = true;
  c.auth_timeout_s = 7;
  c.max_connections = 99;
  c.server_engine_threads = 6;
  c.start_timeout_s = 30;
  c.op_timeout_s = 40;
  c.heartbeat_interval_s = 2;
  c.heartbeat_timeout_s = 20;
  c.reconnect_timeout_s = 8;
  return c;
}

TEST(OptionsTest, TransportOptionsCarryEveryTransportSetting) {
  transport::TransportOptions t = transport::TransportOptionsFor(Job(), "worker");
  EXPECT_EQ(t.name, "worker");
  EXPECT_EQ(t.io_threads, 3);
  EXPECT_EQ(t.socket_buffer_bytes, 1u << 20);
  EXPECT_EQ(t.max_payload_bytes, 64u << 20);
  EXPECT_EQ(t.secret, "s3cret");
  EXPECT_TRUE(t.checksum);
  EXPECT_EQ(t.auth_timeout_s, 7);
  EXPECT_EQ(t.max_connections, 99);
}

TEST(OptionsTest, ControlTransportsHaveOneThreadAndSmallFrames) {
  transport::TransportOptions t = transport::ControlTransportOptionsFor(Job(), "srv-ctl");
  EXPECT_EQ(t.name, "srv-ctl");
  EXPECT_EQ(t.io_threads, 1);
  EXPECT_EQ(t.max_payload_bytes, 1u << 20);
  EXPECT_EQ(t.secret, "s3cret");  // the same job, the same proof
  EXPECT_TRUE(t.checksum);
}

TEST(OptionsTest, ClientOptionsDescribeTheJobAndThisNode) {
  cluster::ClientOptions w = cluster::ClientOptionsFor(Job(), "worker", 0);
  EXPECT_EQ(w.role, "worker");
  EXPECT_EQ(w.requested_rank, 3);
  EXPECT_EQ(w.host, "10.0.0.9");  // DMLC_NODE_HOST wins
  EXPECT_EQ(w.root_uri, "10.0.0.1");
  EXPECT_EQ(w.root_port, 9000);
  EXPECT_EQ(w.num_workers, 4);
  EXPECT_EQ(w.num_servers, 2);
  EXPECT_EQ(w.start_timeout_s, 30);
  EXPECT_EQ(w.op_timeout_s, 40);
  EXPECT_EQ(w.heartbeat_interval_s, 2);
  EXPECT_EQ(w.heartbeat_timeout_s, 20);
  EXPECT_EQ(w.reconnect_timeout_s, 8);
  EXPECT_EQ(w.clock, nullptr);  // the steady clock

  cluster::ClientOptions s = cluster::ClientOptionsFor(Job(), "server", 4242);
  EXPECT_EQ(s.requested_rank, -1);  // DMLC_WORKER_ID is a worker's
  EXPECT_EQ(s.port, 4242);
  config::Config behind_nat = Job();
  behind_nat.advertise_port = 30001;
  EXPECT_EQ(cluster::ClientOptionsFor(behind_nat, "server", 4242).port, 30001);
}

TEST(OptionsTest, SchedulerOptionsListenOnTheRootPort) {
  cluster::SchedulerOptions o = cluster::SchedulerOptionsFor(Job());
  EXPECT_EQ(o.host, "10.0.0.9");
  EXPECT_EQ(o.port, 9000);
  EXPECT_EQ(o.num_workers, 4);
  EXPECT_EQ(o.num_servers, 2);
  EXPECT_EQ(o.start_timeout_s, 30);
  EXPECT_EQ(o.heartbeat_timeout_s, 20);
  EXPECT_EQ(o.reconnect_timeout_s, 8);
  EXPECT_EQ(o.transport.io_threads, 1);
  EXPECT_EQ(o.transport.max_payload_bytes, 1u << 20);

  config::Config quiet = Job();
  quiet.heartbeat_interval_s = 0;  // nobody beats: silence is not checked
  quiet.node_host.clear();
  o = cluster::SchedulerOptionsFor(quiet);
  EXPECT_EQ(o.heartbeat_timeout_s, 0);
  EXPECT_EQ(o.host, "0.0.0.0");
}

TEST(OptionsTest, ServerOptionsSizeTheShards) {
  server::ServerOptions o = server::ServerOptionsFor(Job());
  EXPECT_EQ(o.num_workers, 4);
  EXPECT_EQ(o.engine_threads, 6);
  EXPECT_EQ(o.transport.name, "server");
  EXPECT_EQ(o.transport.io_threads, 3);
  EXPECT_EQ(cluster::ListenHostFor(Job()), "10.0.0.9");
}

}  // namespace
}  // namespace byteps
