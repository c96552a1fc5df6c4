// The UCP side of the UCX backend: one context per transport (UCX_* settings, UCX_TLS among them,
// read once at its creation) and its workers. Each worker lives on an EventLoop thread of its own
// (tcp/event_loop.h) that sleeps on the worker's event fd (ucp_worker_arm) and runs UCX progress
// when it fires, so nothing busy-polls. Every call into UCP happens on that thread. What UCX calls
// back from inside ucp_worker_progress (an arrived message, a finished send) is only queued; the
// Handler's callbacks and the senders' on_done run once progress has returned.
// Threading: Post/RunSync/InLoopThread from any thread; everything else on the loop thread.
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "transport/tcp/event_loop.h"

namespace byteps::transport::ucx {

class UcxConnection;
class RegistrationCache;

inline constexpr uint16_t kAmId = 7;  // byteps frames, as UCP active messages

class UcxContext {
 public:
  // Fails with UCX's reason (an unknown UCX_TLS, no usable transport) naming the fallback.
  static StatusOr<std::shared_ptr<UcxContext>> Create();
  ~UcxContext();
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;
  ucp_context_h handle() const { return context_; }
  // Whether UCX found an RDMA transport (verbs rc/ud/dc) to use: only then does rendezvous between
  // hosts move data without copies; over UCX's tcp it costs a round trip per message for nothing.
  bool rdma() const { return rdma_; }

 private:
  UcxContext() = default;
  ucp_context_h context_ = nullptr;
  bool rdma_ = false;
};

class UcxWorker {
 public:
  static StatusOr<std::shared_ptr<UcxWorker>> Create(std::shared_ptr<UcxContext> context, const std::string& name);
  ~UcxWorker();  // Stop()s
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  // The packed worker address a peer creates its endpoint from.
  const std::string& address() const { return address_; }

  // Runs `task` on the loop thread, then drives progress. False once stopped.
  bool Post(std::function<void()> task);
  void RunSync(const std::function<void()>& task);  // inline on the loop thread or once stopped
  bool InLoopThread() const { return loop_.InLoopThread(); }

  // --- On the loop thread -----------------------------------------------------------------
  ucp_worker_h handle() const { return worker_; }
  RegistrationCache& cache() { return *cache_; }
  uint64_t Register(std::shared_ptr<UcxConnection> conn);  // the id peers address it by
  void Unregister(uint64_t id);
  // An endpoint to `remote_address` whose failures go to conn->OnEndpointError (a peer on another
  // host; UCX reports none for `local_peer`s, whose shared-memory transports cannot).
  StatusOr<ucp_ep_h> CreateEndpoint(const std::string& remote_address, const std::shared_ptr<UcxConnection>& conn,
                                    bool local_peer);
  // Closes without flushing (the peer may be dead); completes in the background.
  void CloseEndpoint(ucp_ep_h ep);
  // Runs `fn` once the current progress pass has returned (what UCX callbacks must not do inline).
  void Defer(std::function<void()> fn) { deferred_.push_back(std::move(fn)); }
  // A receive UCX runs into memory `owner` keeps alive: held here until Untrack(key) (its completion)
  // or, if UCX never completes it (a peer gone mid-transfer), until the UCX worker is destroyed.
  void Track(const void* key, std::shared_ptr<void> owner) { tracked_[key] = std::move(owner); }
  std::shared_ptr<void> Untrack(const void* key);
  // Drives UCX until it is idle and armed (its event fd will fire on anything new), running what
  // was deferred meanwhile.
  void Progress();
  // Progress for at most `seconds` or until `done()` holds.
  void ProgressUntil(const std::function<bool()>& done, double seconds);

  // Closes every connection still registered (with `reason`), lets UCX finish and stops the loop.
  void Stop(const Status& reason);

 private:
  UcxWorker(std::shared_ptr<UcxContext> context, const std::string& name);
  static ucs_status_t OnMessage(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                const ucp_am_recv_param_t* param);
  static void OnEndpointFailure(void* arg, ucp_ep_h ep, ucs_status_t status);
  void RunDeferred();
  bool ReapClosing();  // frees finished endpoint-close requests; true when none is left

  std::shared_ptr<UcxContext> context_;
  tcp::EventLoop loop_;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  std::string address_;
  std::unique_ptr<RegistrationCache> cache_;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, std::shared_ptr<UcxConnection>> conns_;
  std::unordered_map<ucp_ep_h, std::weak_ptr<UcxConnection>> eps_;  // open endpoints' connections
  std::vector<std::function<void()>> deferred_;
  std::vector<void*> closing_;  // endpoint-close requests not finished yet
  std::unordered_map<const void*, std::shared_ptr<void>> tracked_;  // see Track()
  bool in_progress_ = false;
  bool peer_errors_ = true;  // endpoints report peer failures (not all transports can)
  bool stopped_ = false;
};

// UCX's text for a status, for messages.
std::string UcsError(ucs_status_t status);

// Messages this process received so far, by protocol (for tests and debugging).
struct ReceiveCounts {
  uint64_t eager = 0, rndv = 0;
};
ReceiveCounts ReceivedSoFar();

}  // namespace byteps::transport::ucx
