// The seam between the push-pull stage and the worker's connections to the servers
// (ServerLinks), so that each can be tested without the other.
// Threading: see each side's header.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "protocol/frame.h"
#include "transport/transport.h"

namespace byteps::worker::server_links {

// A frame to (re-)send: a copied payload (`owned`), or `len` bytes at `data` that stay valid
// until the frame's task completes.
struct OutFrame {
  protocol::Header header;
  std::string owned;
  const uint8_t* data = nullptr;
  size_t len = 0;
};

// How the push-pull stage reaches the servers. All frames of one key travel on one connection, so
// a key's declaration (InitKey) is read before its pushes.
class DataPlane {
 public:
  virtual ~DataPlane() = default;
  // Which of the connections to `server` carries `key`.
  virtual size_t ConnIndex(int server, uint64_t key) const = 0;
  // Queues the frame on that connection; Flush writes what was queued (many frames per system
  // call). Unavailable: the connection is down; once re-established, everything the stage reports
  // in flight on it is sent again (DataClient::CollectResend).
  virtual Status Send(int server, const OutFrame& frame) = 0;
  virtual void Flush() = 0;
};

// What the connections need from their one user, the push-pull stage.
class DataClient {
 public:
  virtual ~DataClient() = default;
  // A reply's header / complete frame (kPushPullReply or kError) arrived on `conn`.
  virtual StatusOr<transport::RecvBuffer> OnReplyHeader(transport::Connection& conn, const protocol::Header& h) = 0;
  virtual void OnReplyFrame(transport::Connection& conn, const protocol::Header& h, transport::RecvBuffer b) = 0;
  // `conn` closed: the transport no longer writes into any buffer it was given for it.
  virtual void OnConnectionLost(const transport::Connection& conn) = 0;
  // What to send again on connection `index` to `server` after it was re-established: every
  // declaration of its keys, then every partition in flight on it, oldest first.
  virtual std::vector<OutFrame> CollectResend(int server, size_t index) = 0;
  // Fails every partition in flight to `server` (it is gone for good, or we are shutting down).
  virtual void FailServer(int server, const Status& failure) = 0;
  // Nothing in flight.
  virtual bool idle() const = 0;
};

}  // namespace byteps::worker::server_links
