// The transport layer moves framed bytes between peers; it knows nothing of keys or tensors.
// Contract (mirrored by every backend, e.g. tcp/):
//  - Send is non-blocking and completion-based: the header is copied, the payload iovecs are sent
//    straight from the caller's memory, which must stay valid until on_done runs.
//  - Receive is zero-copy where the upper layer wants it: for every incoming header the Handler
//    chooses where the payload lands (a tensor slice, a pooled server buffer, or a transport-owned
//    buffer), then gets OnFrame once all bytes are there.
//  - A connection closes once; OnClose runs exactly once with the reason, and every pending send's
//    on_done gets that reason.
// Threading: Send/Close are thread-safe. Handler callbacks run on the connection's I/O thread, must
// not block, and for one connection are never concurrent.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "protocol/frame.h"

namespace byteps::transport {

// Where an incoming payload goes. data == nullptr (and discard false) lets the transport allocate.
struct RecvBuffer {
  uint8_t* data = nullptr;
  size_t size = 0;
  std::shared_ptr<void> owner;  // keeps pooled/owned memory alive while the frame travels up
  bool discard = false;         // read and drop the payload (e.g. a reply nobody waits for)
};

using SendCallback = std::function<void(const Status&)>;

// For backends: completes what OnHeader returned for a `len`-byte payload. A buffer the Handler
// left empty (no data, no discard) gets transport-owned memory; any other must hold exactly `len`
// bytes (Internal error naming the frame and `peer` otherwise).
Status PrepareRecvBuffer(RecvBuffer& b, const protocol::Header& header, size_t len, const std::string& peer);

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  virtual ~Connection() = default;
  // Queues header + payload. payload iovecs must stay valid until on_done (may be empty);
  // header.payload_len must equal their total length (Internal error otherwise).
  // Returns an error (and does not call on_done) if the connection is already closed.
  virtual Status Send(const protocol::Header& header, const std::vector<iovec>& payload,
                      SendCallback on_done) = 0;
  // Convenience for small control frames: the payload is copied.
  Status SendCopy(protocol::Header header, const std::string& payload);
  // Batching: between Cork and Uncork, Send only queues; Uncork writes everything queued with as
  // few system calls as it can (many small frames share one). Nests. A backend that cannot batch
  // sends at once and ignores both.
  virtual void Cork() {}
  virtual void Uncork() {}
  // Closes now: when Close returns, no handler callback of this connection runs any more (so the
  // handler may be destroyed). Must not be called while holding a lock the handler takes.
  virtual void Close(const Status& reason) = 0;
  virtual bool closed() const = 0;
  // Human-readable peer, e.g. "127.0.0.1:41234"; the upper layer may rename it ("server 1 (...)").
  virtual std::string peer_name() const = 0;
  virtual void set_peer_name(std::string name) = 0;
  // Opaque slot for the upper layer (e.g. which worker rank this connection belongs to).
  int64_t tag = -1;
};

// A close that refused the peer: bad bytes (ProtocolError) or a setting that differs from this
// process's, such as BYTEPS_JOB_SECRET or the wire version (InvalidArgument; no retry fixes it).
// The transport logs these itself where it detects them.
inline bool IsRefusal(const Status& reason) {
  return reason.code() == StatusCode::kProtocol || reason.code() == StatusCode::kInvalidArgument;
}

class Handler {
 public:
  virtual ~Handler() = default;
  // Choose the payload's destination. An error closes the connection with that error.
  virtual StatusOr<RecvBuffer> OnHeader(Connection& conn, const protocol::Header& header) = 0;
  // The complete frame. buffer is what OnHeader returned (or a transport-owned buffer).
  virtual void OnFrame(Connection& conn, const protocol::Header& header, RecvBuffer buffer) = 0;
  // The connection is gone (peer closed, I/O error, protocol error, local Close).
  virtual void OnClose(Connection& conn, const Status& reason) = 0;
};

// Which backend carries a process's data connections (BYTEPS_TRANSPORT).
enum class TransportKind : uint8_t {
  kAuto = 0,  // shared memory to processes of this host that offer it, TCP to everyone else
  kTcp = 1,
  kShm = 2,   // as auto, but a peer of this host that offers shared memory gets it or an error
  kUcx = 3,   // UCX (RDMA on a cluster; UCX_TLS chooses), plain TCP peers still served (ucx/)
};

struct TransportOptions {
  TransportKind kind = TransportKind::kAuto;  // read by CreateTransport only
  int io_threads = 1;
  size_t socket_buffer_bytes = 4u << 20;  // 0 = OS default
  uint64_t max_payload_bytes = 1ull << 30;
  std::string name = "byteps";            // thread names: "<name>-io<i>"
  // Non-empty: every connection authenticates with this job secret (protocol/auth.h) before any
  // frame reaches the Handler; Connect returns only once the peer proved it knows the secret.
  std::string secret;
  bool checksum = false;        // send CRC-32C with every frame and require it on receipt
  double auth_timeout_s = 10;   // accepted connections must authenticate (or, without a secret,
                                // deliver a first frame) within this, else they are dropped
  int max_connections = 1024;   // accepted connections open at once; more are refused
};

class Transport {
 public:
  virtual ~Transport() = default;
  // Listens on host:port (port 0 = ephemeral); returns the bound port. Accepted connections use
  // `handler` (borrowed; must outlive the transport).
  virtual StatusOr<int> Listen(const std::string& host, int port, Handler* handler) = 0;
  // Connects, retrying refused connections until timeout_s has passed; with a secret, also
  // authenticates within that time. A failed handshake (a damaged frame, a reset, a different
  // secret) is tried again on a new connection, 3 attempts in all, then reported.
  virtual StatusOr<std::shared_ptr<Connection>> Connect(const std::string& host, int port,
                                                        Handler* handler, double timeout_s) = 0;
  // Same-host variants over a Unix socket named `name` (abstract namespace).
  virtual StatusOr<int> ListenLocal(const std::string& name, Handler* handler) = 0;
  virtual StatusOr<std::shared_ptr<Connection>> ConnectLocal(const std::string& name, Handler* handler,
                                                             double timeout_s) = 0;
  // Closes every connection and the listener, joins I/O threads. Idempotent.
  virtual void Shutdown() = 0;
  // Connect / ConnectLocal calls waiting for a peer to listen fail now with `why`, and so does
  // every later one; open connections and listeners are untouched. For a process whose job has
  // failed: no peer it waits for is coming (a server that ended with the job would otherwise be
  // retried until the caller's deadline). Thread-safe, callable from any thread, never blocks.
  // A backend that connects through another transport forwards it.
  virtual void CancelConnects(const Status& why) { (void)why; }
};

std::unique_ptr<Transport> CreateTcpTransport(const TransportOptions& options);
// The backend `options.kind` names. Auto listens on TCP and on shared memory (same port), and
// connects through shared memory where the peer is on this host and offers it, else over TCP:
// peers of different settings still meet (a tcp-only peer offers no shared memory).
std::unique_ptr<Transport> CreateTransport(const TransportOptions& options);
const char* TransportKindName(TransportKind kind);  // "auto", "tcp", "shm", "ucx"
// Whether this build has the backend (UCX is optional at build time; the others always are).
bool TransportBuilt(TransportKind kind);

}  // namespace byteps::transport
