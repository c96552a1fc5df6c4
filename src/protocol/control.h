// Payloads of control frames (scheduler traffic and key declarations). They are small and rare, so
// they are JSON objects (nlohmann-json); decoding validates every field and never throws.
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/reducer.h"
#include "common/status.h"

namespace byteps::protocol {

// One node of the job as the scheduler announces it.
struct NodeInfo {
  std::string role;  // "worker" | "server"
  int rank = -1;     // rank within the role
  std::string host;  // address peers connect to
  int port = 0;      // data port (servers); 0 for workers
  int pid = 0;
  bool operator==(const NodeInfo&) const = default;
};
std::string Describe(const NodeInfo& n);  // "server 1 (127.0.0.1:4242, pid 77)"; no rank before the rendezvous

struct RegisterRequest {
  std::string role;
  int requested_rank = -1;  // DMLC_WORKER_ID, -1 = any
  std::string host;
  int port = 0;
  int pid = 0;
  int num_workers = 0;  // what this node believes the job size is (checked by the scheduler)
  int num_servers = 0;
  std::string job_secret_hash;  // reserved (authentication happens per connection, auth.h)
  bool rejoin = false;  // reconnecting after a dropped connection: requested_rank is its rank
  // Random per node (not per process: a test may run several nodes in one), the same on every
  // registration of that node: a registration again tells itself from a new node. "" = unknown.
  std::string instance;
  // The NIC rate of this node's machine in bytes/s (BYTEPS_NIC_GBPS, else the link speed the
  // kernel reports for the node's interface); 0 = unknown. The mixed placement's split uses it.
  double nic_rate = 0;
};

struct RegisterReply {
  std::string error;  // non-empty: registration refused, the node must exit with this message
  int rank = -1;
  std::vector<NodeInfo> nodes;  // all workers then all servers, rank order
  // Each server's share of the gradient bytes, by server rank (server_placement.h), and the
  // scheduler's one-line account of it; empty from a rejoin's reply before the rendezvous.
  std::vector<double> shares;
  std::string placement;
  // The job's id (16 hex characters, random per scheduler start) and the scheduler's system clock
  // in µs since the epoch when it wrote this reply, with how long it had held this node's request
  // (µs) before: a node's clock offset to the scheduler (cluster/clock_offset.h) for the traces.
  // Absent (older encodings, refusals): "" and 0.
  std::string job;
  int64_t clock_us = 0;
  int64_t held_us = 0;
};

struct NodeFailedNotice {
  NodeInfo node;
  std::string reason;  // "connection lost", "no heartbeat for 15 s", ...
};

// What a server does with the pushes of a key's round (the key's policy).
inline constexpr const char* kOpSum = "sum";        // adds them; every push carries the whole partition
inline constexpr const char* kOpMin = "min";        // element-wise minimum (bool: and), whole partitions
inline constexpr const char* kOpMax = "max";        // element-wise maximum (bool: or), whole partitions
inline constexpr const char* kOpProduct = "prod";   // element-wise product (bool: and), whole partitions
inline constexpr const char* kOpConcat = "concat";  // places each at its offset (the push's header arg):
                                                    // allgather, and broadcast (only the root pushes bytes)
inline constexpr const char* kOpAdasum = "adasum";  // keeps every worker's whole-tensor push, then combines
                                                    // them in rank order (common/adasum.h); float16/32/64,
                                                    // one partition per tensor (the dot products span it)
inline constexpr const char* kOpJoin = "join";      // Horovod's join(): a push marks its worker joined on this
                                                    // server (its rounds of every other key count as zeros
                                                    // until every worker joined); the round completes when
                                                    // every worker pushed: int32 [rank of the last pusher,
                                                    // max of the second words | 2 if a round went on without
                                                    // a joined worker]; then the joined state resets

// The element-wise reduction of op kOpSum/kOpMin/kOpMax/kOpProduct; nullopt for kOpConcat,
// kOpAdasum or an unknown op.
std::optional<ReduceKind> ReduceKindOfOp(const std::string& op);
// The op string of a reduction.
const char* OpOfReduceKind(ReduceKind kind);

// kInitKey payload: the tensor a partition belongs to, so servers can name it in errors, and
// what the server does with its pushes.
struct KeyInit {
  std::string name;
  uint64_t bytes = 0;      // bytes of this partition
  int dtype = 0;
  uint64_t tensor_bytes = 0;
  std::string op = kOpSum;  // one of the kOp* above
  // Declaration attributes the servers compare across workers, "key=value" pairs joined by ';'
  // (e.g. "shape=2x3;root=1"), chosen by the plugin; "" for none. Workers that declare a key with
  // different attributes all get a kMismatch error naming each attribute that differs.
  std::string attrs{};
  uint64_t offset = 0;  // the partition's first byte in its tensor (attribute "scatter" uses it)
};

// The name service (name_planner.h): kNameRequest asks the scheduler for the plan of one
// (name, incarnation, generation); kNameReply answers it (request_id echoed).
struct NameRequest {
  std::string name;
  uint32_t incarnation = 0;
  uint32_t generation = 0;
  bool sized = false;            // false: only the index (a declaration without a size)
  uint64_t bytes = 0;            // sized: the tensor's bytes
  int dtype = 0;                 // sized: its DataType code
  uint64_t partition_bytes = 0;  // sized: the generation's partition size on the asking worker
  // sized: the tensor must stay in one partition whatever partition_bytes says (an Adasum tensor:
  // its dot products span the whole tensor). Absent on the wire: false.
  bool whole = false;
  // sized: one partition per server, partition i on server i (the join key: every server must see
  // it); bytes must be a multiple of the number of servers' elements. Absent on the wire: false.
  bool spread = false;
  // sized: every partition on server `server` (the start-up probe of one server's links: a tensor
  // with the attribute kAttrServer); the loads stay. Absent on the wire: -1, placed by bytes.
  int server = -1;
  // Not a tensor's plan but the start-up probe's measurement, for the servers' placement
  // (server_placement.h PlaceFromProbe): probe_seconds[s] is the wire time of this worker's fastest
  // push_pull of probe_bytes pinned to server s (less that server's round trip). The first report
  // decides; every report is answered with NameReply.shares and .placement. Absent: empty (a
  // tensor's request).
  std::vector<double> probe_seconds;
  uint64_t probe_bytes = 0;
};

struct NamePartition {
  uint64_t key = 0;  // partition key
  int server = 0;
  uint64_t offset = 0;  // bytes from the tensor start
  uint64_t length = 0;
  bool operator==(const NamePartition&) const = default;
};

struct NamePlan {
  std::string name;
  uint32_t incarnation = 0;
  uint32_t generation = 0;
  uint32_t index = 0;
  uint32_t declared_key = 0;
  bool sized = false;  // partitions planned (else only the index)
  uint64_t bytes = 0;
  int dtype = 0;
  std::vector<NamePartition> partitions;
  bool operator==(const NamePlan&) const = default;
};

// kNameReply: a plan, or why there is none.
struct NameReply {
  std::string error;  // non-empty: no plan (e.g. too many partitions); names the tensor
  uint64_t error_code = 0;  // its StatusCode
  NamePlan plan;
  // A probe report's answer (NameRequest::probe_seconds): each server's share from now on and the
  // scheduler's account of it. Absent: empty.
  std::vector<double> shares;
  std::string placement;
};

// `byteps top`: kTopRequest (no payload) asks the scheduler; kTopReply answers with every node of
// the job and what its last two heartbeats said (their summaries: cluster/node_summary.h).
struct TopNode {
  NodeInfo node;           // rank -1 before the rendezvous
  double heard_s = 0;      // seconds since the scheduler last heard from it
  bool finished = false;   // a worker that sent Finish
  bool away = false;       // its connection dropped; it may still rejoin
  std::string summary;     // its last heartbeat's summary (JSON text), "" for none yet
  std::string previous;    // the one before it (rates are the difference), "" for none
};

struct TopReply {
  std::string job;  // the job's id
  int num_workers = 0;
  int num_servers = 0;
  bool started = false;  // the rendezvous is done
  double uptime_s = 0;   // since the scheduler started
  std::string placement;  // the servers' placement as the scheduler accounts for it
  std::vector<TopNode> nodes;  // workers, then servers, by rank (before the rendezvous: as registered)
};

// Parses "k1=v1;k2=v2" (empty items skipped; an item without '=' is a key with value ""), in order.
std::vector<std::pair<std::string, std::string>> ParseAttrs(const std::string& attrs);

// The attribute that scopes a key to a process set: "members=0,2,3" (ascending global worker
// ranks). The servers complete a round of such a key when every member pushed it, and refuse a
// push from any other worker. Absent: every worker is a member.
inline constexpr const char* kAttrMembers = "members";
// The attribute that pins every partition of a tensor to one server: "server=2" (a server rank).
// The start-up probe's per-server push_pulls use it (tuning/startup_agreement.h).
inline constexpr const char* kAttrServer = "server";
// The attribute "join": what a key's rounds do while a worker has joined (join()). Absent: count it
// as zeros (allreduces). "fail": the round fails (kMismatch; a reducescatter, which Horovod fails
// alike; concatenations fail anyway). "late": zeros, and the joined worker's own later push of
// that round is answered with its result (a one-shot key, e.g. worker 0's online agreements).
inline constexpr const char* kAttrJoin = "join";
inline constexpr const char* kJoinFails = "fail";
inline constexpr const char* kJoinLate = "late";
// The attribute "scatter=b0,b1,...,bm" (ascending tensor byte offsets, b0 = 0, bm = the tensor's
// bytes): Horovod's reducescatter. The i-th member of the key (ascending global rank among its
// members) is answered only [b_i, b_{i+1}) of the result, clipped to the partition: the reply's
// `arg` is that slice's offset in the partition, its payload the slice (possibly empty).
inline constexpr const char* kAttrScatter = "scatter";

std::string Encode(const RegisterRequest& m);
std::string Encode(const RegisterReply& m);
std::string Encode(const NodeFailedNotice& m);
std::string Encode(const KeyInit& m);

StatusOr<RegisterRequest> DecodeRegisterRequest(const std::string& payload);
StatusOr<RegisterReply> DecodeRegisterReply(const std::string& payload);
StatusOr<NodeFailedNotice> DecodeNodeFailedNotice(const std::string& payload);
StatusOr<KeyInit> DecodeKeyInit(const std::string& payload);
std::string Encode(const NameRequest& m);
std::string Encode(const NameReply& m);
StatusOr<NameRequest> DecodeNameRequest(const std::string& payload);
StatusOr<NameReply> DecodeNameReply(const std::string& payload);
std::string Encode(const TopReply& m);
StatusOr<TopReply> DecodeTopReply(const std::string& payload);

}  // namespace byteps::protocol
