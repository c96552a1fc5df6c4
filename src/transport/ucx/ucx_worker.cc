#include "transport/ucx/ucx_worker.h"

#include <sys/epoll.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "common/logging.h"
#include "transport/ucx/ucx_connection.h"
#include "transport/ucx/ucx_reg_cache.h"

namespace byteps::transport::ucx {

std::string UcsError(ucs_status_t status) { return ucs_status_string(status); }

namespace {
std::atomic<uint64_t> g_eager{0}, g_rndv{0};

// What `print` writes to a FILE (UCX reports some things only as printed text).
template <typename Print>
std::string Printed(Print print) {
  char* text = nullptr;
  size_t size = 0;
  FILE* f = open_memstream(&text, &size);
  if (f == nullptr) return {};
  print(f);
  std::fclose(f);
  std::string all(text ? text : "", size);
  std::free(text);
  return all;
}

// The transports UCX read from its settings (UCX_TLS), as UCX prints them, for error messages.
std::string ConfiguredTls(const ucp_config_t* config) {
  const std::string all = Printed([&](FILE* f) { ucp_config_print(config, f, nullptr, UCS_CONFIG_PRINT_CONFIG); });
  const size_t at = all.find("UCX_TLS=");
  if (at == std::string::npos) return "?";
  const size_t from = at + 8, to = all.find('\n', from);
  return all.substr(from, to == std::string::npos ? std::string::npos : to - from);
}
}  // namespace

ReceiveCounts ReceivedSoFar() { return {g_eager.load(), g_rndv.load()}; }

StatusOr<std::shared_ptr<UcxContext>> UcxContext::Create() {
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);  // UCX_TLS, UCX_NET_DEVICES, ... as set
  if (s != UCS_OK) {
    return Unavailable(fmt::format("UCX cannot read its settings (UCX_* variables): {}; set BYTEPS_TRANSPORT=tcp to "
                                   "run without UCX", UcsError(s)));
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 1;  // memory registration from several workers' threads
  params.name = "byteps";
  std::shared_ptr<UcxContext> ctx(new UcxContext());
  s = ucp_init(&params, config, &ctx->context_);
  const std::string tls = s == UCS_OK ? std::string() : ConfiguredTls(config);
  ucp_config_release(config);
  if (s == UCS_OK) {
    // UCX lists its resources ("resource 1 : md 1 dev 1 flags -- rc_mlx5/mlx5_0:1") only as text.
    const std::string info = Printed([&](FILE* f) { ucp_context_print_info(ctx->context_, f); });
    for (const char* tl : {"-- rc_", "-- ud_", "-- dc_"}) ctx->rdma_ |= info.find(tl) != std::string::npos;
  }
  if (s != UCS_OK) {
    return Unavailable(fmt::format("UCX is not available here: ucp_init failed: {} (UCX_TLS={}); set "
                                   "BYTEPS_TRANSPORT=tcp to run without UCX",
                                   UcsError(s), tls));
  }
  return ctx;
}

UcxContext::~UcxContext() {
  if (context_) ucp_cleanup(context_);
}

UcxWorker::UcxWorker(std::shared_ptr<UcxContext> context, const std::string& name)
    : context_(std::move(context)), loop_(name) {}

StatusOr<std::shared_ptr<UcxWorker>> UcxWorker::Create(std::shared_ptr<UcxContext> context, const std::string& name) {
  std::shared_ptr<UcxWorker> w(new UcxWorker(std::move(context), name));
  Status st;
  w->loop_.RunSync([&] {  // the worker is created where it will be used
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    ucs_status_t s = ucp_worker_create(w->context_->handle(), &wp, &w->worker_);
    if (s != UCS_OK) {
      st = Unavailable(fmt::format("UCX worker: {}; set BYTEPS_TRANSPORT=tcp to run without UCX", UcsError(s)));
      return;
    }
    ucp_address_t* addr = nullptr;
    size_t len = 0;
    if ((s = ucp_worker_get_address(w->worker_, &addr, &len)) != UCS_OK ||
        (s = ucp_worker_get_efd(w->worker_, &w->efd_)) != UCS_OK) {
      st = Unavailable(fmt::format("UCX worker address / event fd: {}", UcsError(s)));
      return;
    }
    w->address_.assign(reinterpret_cast<const char*>(addr), len);
    ucp_worker_release_address(w->worker_, addr);
    ucp_am_handler_param_t ap{};
    ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    ap.id = kAmId;
    ap.cb = &UcxWorker::OnMessage;
    ap.arg = w.get();
    if ((s = ucp_worker_set_am_recv_handler(w->worker_, &ap)) != UCS_OK) {
      st = Unavailable(fmt::format("UCX active-message handler: {}", UcsError(s)));
      return;
    }
    w->cache_ = std::make_unique<RegistrationCache>(w->context_->handle());
    UcxWorker* raw = w.get();
    if (!w->loop_.Add(w->efd_, EPOLLIN, [raw](uint32_t) { raw->Progress(); })) {
      st = Unavailable("UCX worker: cannot watch its event fd");
      return;
    }
    w->Progress();  // arms the event fd
  });
  if (!st.ok()) {
    w->Stop(st);
    return st;
  }
  return w;
}

UcxWorker::~UcxWorker() { Stop(Unavailable("the UCX transport shut down")); }

bool UcxWorker::Post(std::function<void()> task) {
  return loop_.Post([this, task = std::move(task)] {
    task();
    Progress();
  });
}

void UcxWorker::RunSync(const std::function<void()>& task) {
  loop_.RunSync([&] {
    task();
    if (!stopped_) Progress();
  });
}

uint64_t UcxWorker::Register(std::shared_ptr<UcxConnection> conn) {
  const uint64_t id = next_id_++;
  conns_[id] = std::move(conn);
  return id;
}

void UcxWorker::Unregister(uint64_t id) { conns_.erase(id); }

void UcxWorker::OnEndpointFailure(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* self = static_cast<UcxWorker*>(arg);
  auto it = self->eps_.find(ep);
  if (it == self->eps_.end()) return;  // closed by us meanwhile
  if (auto conn = it->second.lock()) conn->OnEndpointError(status);
}

StatusOr<ucp_ep_h> UcxWorker::CreateEndpoint(const std::string& remote_address,
                                             const std::shared_ptr<UcxConnection>& conn, bool local_peer) {
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(remote_address.data());
  ep.err_handler.cb = &UcxWorker::OnEndpointFailure;
  ep.err_handler.arg = this;  // the connection may be gone when UCX calls: looked up by endpoint
  ucp_ep_h h = nullptr;
  ucs_status_t s = UCS_ERR_UNREACHABLE;
  // A peer of this host: UCX's shared-memory transports, which cannot report a peer's failure
  // (asking for it would push UCX onto loopback TCP); the TCP connection beside it watches it.
  if (peer_errors_ && !local_peer) {
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    s = ucp_ep_create(worker_, &ep, &h);
  }
  if (s == UCS_ERR_UNREACHABLE) {
    // The transports UCX_TLS allows cannot report a peer's failure: without it the TCP connection
    // beside every UCX one still tells a dead peer at once.
    if (peer_errors_ && !local_peer) {
      BYTEPS_LOG(Info, "UCX: the transports UCX_TLS allows cannot report peer failures; the TCP connection beside "
                       "each UCX one watches for them alone");
    }
    if (!local_peer) peer_errors_ = false;
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    s = ucp_ep_create(worker_, &ep, &h);
  }
  if (s != UCS_OK) return Unavailable(fmt::format("UCX endpoint: {}", UcsError(s)));
  eps_[h] = conn;
  return h;
}

void UcxWorker::CloseEndpoint(ucp_ep_h ep) {
  eps_.erase(ep);
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
  if (UCS_PTR_IS_PTR(r)) closing_.push_back(r);
}

ucs_status_t UcxWorker::OnMessage(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                  const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxWorker*>(arg);
  auto parsed = ParseAmHeader(header, header_length);
  std::shared_ptr<UcxConnection> conn;
  if (parsed.ok()) {
    auto it = self->conns_.find(parsed->conn_id);
    if (it != self->conns_.end() && it->second->token() == parsed->token) conn = it->second;
  }
  const bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  (rndv ? g_rndv : g_eager).fetch_add(1, std::memory_order_relaxed);
  if (!conn) {
    // Not for a connection of ours (closed meanwhile, or forged): dropped, rendezvous data too.
    BYTEPS_LOG(Debug, "UCX: dropping a message for no connection here ({})",
               parsed.ok() ? "closed or unknown id" : parsed.status().message());
    return UCS_OK;
  }
  Arrival a;
  a.header = parsed.value();
  a.length = length;
  if (rndv) {
    a.rndv_desc = data;
    self->Defer([conn, a] { conn->OnArrival(a); });
    return UCS_INPROGRESS;  // the descriptor lives until ucp_am_recv_data_nbx / ucp_am_data_release
  }
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) {
    a.data = data;
    a.release = true;
    self->Defer([conn, a] { conn->OnArrival(a); });
    return UCS_INPROGRESS;  // kept until OnArrival copied it (ucp_am_data_release)
  }
  a.copy = std::make_shared<std::vector<uint8_t>>(static_cast<const uint8_t*>(data),
                                                  static_cast<const uint8_t*>(data) + length);
  self->Defer([conn, a] { conn->OnArrival(a); });
  return UCS_OK;
}

void UcxWorker::RunDeferred() {
  while (!deferred_.empty()) {
    std::vector<std::function<void()>> run;
    run.swap(deferred_);
    for (auto& fn : run) fn();
  }
}

std::shared_ptr<void> UcxWorker::Untrack(const void* key) {
  auto it = tracked_.find(key);
  if (it == tracked_.end()) return nullptr;
  std::shared_ptr<void> owner = std::move(it->second);
  tracked_.erase(it);
  return owner;
}

bool UcxWorker::ReapClosing() {
  std::erase_if(closing_, [](void* r) {
    if (ucp_request_check_status(static_cast<ucs_status_ptr_t>(r)) == UCS_INPROGRESS) return false;
    ucp_request_free(r);
    return true;
  });
  return closing_.empty();
}

void UcxWorker::Progress() {
  if (in_progress_ || stopped_ || worker_ == nullptr) return;  // the outer pass goes on
  in_progress_ = true;
  for (;;) {
    while (ucp_worker_progress(worker_) != 0) {
    }
    ReapClosing();
    if (!deferred_.empty()) {
      std::vector<std::function<void()>> run;
      run.swap(deferred_);
      for (auto& fn : run) fn();
      continue;
    }
    if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) continue;  // events came meanwhile
    break;
  }
  in_progress_ = false;
}

void UcxWorker::ProgressUntil(const std::function<bool()>& done, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done() && std::chrono::steady_clock::now() < until) {
    ucp_worker_progress(worker_);
  }
}

void UcxWorker::Stop(const Status& reason) {
  loop_.RunSync([&] {
    if (stopped_) return;
    while (!conns_.empty()) {
      auto conn = conns_.begin()->second;
      conn->CloseOnLoop(reason);  // unregisters it
      conns_.erase(conn->id());
    }
    Progress();
    if (worker_) {
      ProgressUntil([&] { return ReapClosing(); }, 2.0);
      RunDeferred();  // the last completions (their on_done)
      if (efd_ >= 0) loop_.Remove(efd_);
      cache_.reset();
      ucp_worker_destroy(worker_);
      worker_ = nullptr;
      RunDeferred();     // what the destruction completed
      tracked_.clear();  // receives UCX never completed: nothing writes into their memory now
    }
    stopped_ = true;
  });
  loop_.Stop();
}

}  // namespace byteps::transport::ucx
