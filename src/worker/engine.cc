#include "worker/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>

#include "cluster/cluster_config.h"
#include "common/logging.h"
#include "protocol/error_frame.h"
#include "protocol/key_layout.h"
#include "transport/transport_config.h"
#include "worker/average.h"

#include <pthread.h>
#include <unistd.h>

namespace byteps::worker {

using protocol::Header;
using protocol::Opcode;

namespace {
// A token naming this job's local sockets and shared memory: every process of a job computes the
// same one (from the launcher's secret, else the scheduler address, else the launching parent).
std::string JobToken(const config::Config& c) {
  std::string seed = !c.job_secret.empty()   ? c.job_secret
                     : c.root_port > 0       ? fmt::format("{}:{}", c.root_uri, c.root_port)
                                             : fmt::format("ppid{}", getppid());
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : seed) h = (h ^ ch) * 1099511628211ull;
  return fmt::format("{:012x}", h & 0xffffffffffffull);
}

size_t CreditBytes(const config::Config& c) {
  return static_cast<size_t>(c.scheduling_credit) * c.partition_bytes;
}
}  // namespace

Engine::Engine(const config::Config& config)
    : config_(config),
      assigner_(std::max(1, config.num_servers), config.partition_bytes),
      scheduler_(CreditBytes(config)) {}

StatusOr<std::unique_ptr<Engine>> Engine::Start(const config::Config& config) {
  if (config.role != config::Role::kWorker) {
    return InvalidArgument(fmt::format("DMLC_ROLE={}: only a worker can run the engine (start servers and the "
                                       "scheduler with `byteps server` / `byteps scheduler`)",
                                       config::RoleName(config.role)));
  }
  std::unique_ptr<Engine> e(new Engine(config));
  e->rank_ = config.global_rank >= 0 ? config.global_rank
                                     : std::max(0, config.worker_id) * config.local_size + config.local_rank;
  if (config.local_size > 1) {
    LocalOptions lo;
    lo.local_rank = config.local_rank;
    lo.local_size = config.local_size;
    lo.job = JobToken(config);
    lo.host_id = std::max(0, config.worker_id);
    lo.start_timeout_s = config.start_timeout_s;
    lo.transport = transport::TransportOptionsFor(config, "bps-local");
    Engine* raw = e.get();
    auto local = LocalReducer::Start(lo, [raw](const Status& st) { raw->FailAll(st); });
    if (!local.ok()) return local.status();
    e->local_ = std::move(local.value());
    if (!e->local_->is_root()) return e;  // only the local root talks to the scheduler and servers
  }
  if (!config.distributed()) return e;
  if (Status st = e->Connect(); !st.ok()) {
    if (e->local_) e->local_->FailAll(st);  // the local non-roots learn why, not just that we left
    return st;
  }
  return e;
}

Status Engine::Connect() {
  transport_ = transport::CreateTcpTransport(transport::TransportOptionsFor(config_, "worker"));

  cluster::ClientOptions co = cluster::ClientOptionsFor(config_, "worker", 0);
  auto client = cluster::ClusterClient::Join(*transport_, co, [this](const Status& st) { FailAll(st); });
  if (!client.ok()) return client.status();
  cluster_ = std::move(client.value());
  host_rank_ = cluster_->rank();
  rank_ = host_rank_ * config_.local_size + config_.local_rank;
  log::SetIdentity(fmt::format("worker:{}", cluster_->rank()));

  for (const auto& node : cluster_->servers()) {
    ServerLink link;
    link.node = node;
    servers_.push_back(std::move(link));
  }
  const auto now = std::chrono::steady_clock::now();
  for (size_t s = 0; s < servers_.size(); ++s) {
    for (int i = 0; i < config_.connections_per_peer; ++i) {
      BYTEPS_ASSIGN_OR_RETURN(auto c, OpenServerConnection(static_cast<int>(s), config_.start_timeout_s));
      std::lock_guard<std::mutex> lock(mu_);
      servers_[s].conns.push_back(c);
      servers_[s].connected_at.push_back(now);
      servers_[s].down_since.push_back(now);
    }
  }
  reconnect_thread_ = std::thread([this] { ReconnectLoop(); });
  BYTEPS_LOG(Info, "connected to {} servers ({} connections each)", servers_.size(), config_.connections_per_peer);
  return Status::Ok();
}

StatusOr<std::shared_ptr<transport::Connection>> Engine::OpenServerConnection(int server, double timeout_s) {
  const protocol::NodeInfo& node = servers_[server].node;  // immutable once Connect filled it
  auto conn = transport_->Connect(node.host, node.port, this, timeout_s);
  if (!conn.ok()) return conn.status().WithContext(fmt::format("connecting to {}", protocol::Describe(node)));
  auto c = conn.value();
  c->tag = node.rank;
  c->set_peer_name(protocol::Describe(node));
  Header h;
  h.opcode = Opcode::kHello;
  h.sender = static_cast<uint32_t>(host_rank_);
  BYTEPS_RETURN_IF_ERROR(c->SendCopy(h, ""));
  return c;
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shut_down_ = true;
  }
  cv_.notify_all();
  if (transport_) transport_->Shutdown();
  if (reconnect_thread_.joinable()) reconnect_thread_.join();
  cluster_.reset();
}

size_t Engine::ConnIndex(int server, uint64_t key) const {
  // All frames of one key use one connection, so a key's InitKey is read before its pushes.
  return protocol::MixKey(key) % servers_[server].conns.size();
}

std::shared_ptr<transport::Connection> Engine::ConnFor(int server, uint64_t key) const {
  return servers_[server].conns[ConnIndex(server, key)];
}

StatusOr<uint32_t> Engine::Declare(const std::string& name, std::optional<std::pair<size_t, DataType>> size) {
  std::lock_guard<std::mutex> lock(mu_);
  return assigner_.Declare(name, size);
}

std::pair<Header, std::string> Engine::InitKeyFrame(const TensorPlan& plan, const PartitionPlan& p) const {
  protocol::KeyInit ki;
  ki.name = plan.name;
  ki.bytes = p.range.length;
  ki.dtype = static_cast<int>(plan.dtype);
  ki.tensor_bytes = plan.bytes;
  Header h;
  h.opcode = Opcode::kInitKey;
  h.key = p.key;
  h.sender = static_cast<uint32_t>(host_rank_);
  return {h, protocol::Encode(ki)};
}

Header Engine::PushHeader(const PartTask& t) const {
  Header h;
  h.opcode = Opcode::kPushPull;
  h.key = t.key;
  h.round = t.round;
  h.request_id = t.id;
  h.sender = static_cast<uint32_t>(host_rank_);
  h.dtype = static_cast<uint8_t>(t.handle->request.dtype);
  h.payload_len = t.len;
  return h;
}

void Engine::Announce(const TensorPlan& plan) {
  std::vector<std::pair<std::shared_ptr<transport::Connection>, std::pair<Header, std::string>>> frames;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& p : plan.partitions) frames.push_back({ConnFor(p.server, p.key), InitKeyFrame(plan, p)});
  }
  // A failed send means the connection dropped: the reconnect re-sends every declaration.
  for (auto& [conn, f] : frames) (void)conn->SendCopy(f.first, f.second);
}

StatusOr<HandleId> Engine::Enqueue(const TensorRequest& r) {
  if (r.bytes > 0 && (r.input == nullptr || r.output == nullptr)) {
    return InvalidArgument(fmt::format("push_pull of '{}': null data pointer", r.name));
  }
  const size_t esize = DataTypeSize(r.dtype);
  if (esize == 0) return InvalidArgument(fmt::format("push_pull of '{}': unsupported dtype", r.name));
  if (r.bytes % esize != 0) {
    return InvalidArgument(fmt::format("push_pull of '{}': {} bytes is not a whole number of {} elements", r.name,
                                       r.bytes, DataTypeName(r.dtype)));
  }
  if (local_) return EnqueueLocal(r);
  if (!config_.distributed()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return Precondition("byteps has been shut down; call init() again");
    BYTEPS_ASSIGN_OR_RETURN(const TensorPlan* plan, assigner_.Plan(r.name, r.bytes, r.dtype));
    (void)plan;
    if (r.output != r.input && r.bytes > 0) std::memmove(r.output, r.input, r.bytes);
    DivideInPlace(r.output, r.bytes / esize, r.dtype, r.average ? size() : 1);
    auto h = std::make_shared<HandleState>();
    h->id = next_handle_++;
    h->request = r;
    h->done = true;
    handles_[h->id] = h;
    return h->id;
  }

  return StartDistributed(r, nullptr);
}

StatusOr<HandleId> Engine::EnqueueLocal(const TensorRequest& r) {
  std::shared_ptr<HandleState> h;
  uint32_t dk, round;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return Precondition("byteps has been shut down; call init() again");
    if (!failure_.ok()) return failure_.WithContext(fmt::format("push_pull of '{}'", r.name));
    BYTEPS_ASSIGN_OR_RETURN(const TensorPlan* plan, assigner_.Plan(r.name, r.bytes, r.dtype));
    dk = plan->declared_key;
    round = ++tensors_[dk].local_round;
    h = std::make_shared<HandleState>();
    h->id = next_handle_++;
    h->request = r;
    handles_[h->id] = h;
  }
  // Completes h (with st) from any thread.
  auto complete = [this, h](const Status& st) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!st.ok() && h->status.ok()) h->status = st.WithContext(fmt::format("push_pull of tensor '{}'", h->request.name));
    h->done = true;
    cv_.notify_all();
  };
  if (!local_->is_root()) {
    BYTEPS_RETURN_IF_ERROR(local_->Contribute(dk, r.name, round, r.input, r.output, r.bytes, r.dtype, complete));
    return h->id;
  }
  // Local root: its own contribution goes to the output, the others are added there, then the
  // sum goes to the servers like a one-process worker's tensor and the result back to the host.
  if (r.output != r.input && r.bytes > 0) std::memmove(r.output, r.input, r.bytes);
  LocalReducer* local = local_.get();
  h->on_complete = [local, dk, round, out = r.output, bytes = r.bytes](const Status& st) {
    if (st.ok()) (void)local->Publish(dk, round, out, bytes);
    else local->PublishError(dk, round, st);
  };
  TensorRequest summed = r;
  summed.input = r.output;
  Status st = local_->Gather(dk, r.name, round, r.output, r.bytes, r.dtype, [this, h, summed, complete](const Status& gst) {
    if (!gst.ok()) {
      h->on_complete(gst);
      complete(gst);
      return;
    }
    if (config_.distributed()) {
      auto id = StartDistributed(summed, h);
      if (!id.ok()) {
        h->on_complete(id.status());
        complete(id.status());
      }
      return;
    }
    const size_t n = summed.bytes / DataTypeSize(summed.dtype);
    DivideInPlace(summed.output, n, summed.dtype, summed.average ? size() : 1);
    h->on_complete(Status::Ok());
    complete(Status::Ok());
  });
  if (!st.ok()) return st;
  return h->id;
}

StatusOr<HandleId> Engine::StartDistributed(const TensorRequest& r, std::shared_ptr<HandleState> existing) {
  std::lock_guard<std::mutex> serial(enqueue_mu_);
  const TensorPlan* plan;
  bool announce = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return Precondition("byteps has been shut down; call init() again");
    if (!failure_.ok()) return failure_.WithContext(fmt::format("push_pull of '{}'", r.name));
    BYTEPS_ASSIGN_OR_RETURN(plan, assigner_.Plan(r.name, r.bytes, r.dtype));
    TensorState& ts = tensors_[plan->declared_key];
    if (!ts.error.ok()) return ts.error;
    if (!ts.announced) {
      ts.plan = plan;
      ts.announced = true;
      ts.part_busy.assign(plan->partitions.size(), false);
      ts.waiting.resize(plan->partitions.size());
      announce = true;
    }
  }
  if (announce) Announce(*plan);
  HandleId id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    TensorState& ts = tensors_[plan->declared_key];
    std::shared_ptr<HandleState> h = existing;
    if (!h) {
      h = std::make_shared<HandleState>();
      h->id = next_handle_++;
      h->request = r;
      handles_[h->id] = h;
    }
    id = h->id;
    h->remaining = plan->partitions.size();
    uint32_t round = ++ts.round;
    for (size_t i = 0; i < plan->partitions.size(); ++i) {
      const PartitionPlan& pp = plan->partitions[i];
      PartTask t;
      t.id = next_task_++;
      t.handle = h;
      t.declared_key = plan->declared_key;
      t.part = i;
      t.key = pp.key;
      t.round = round;
      t.server = pp.server;
      t.in = static_cast<const uint8_t*>(r.input) + pp.range.offset;
      t.out = static_cast<uint8_t*>(r.output) + pp.range.offset;
      t.len = pp.range.length;
      tasks_[t.id] = t;
      if (ts.part_busy[i]) {
        ts.waiting[i].push_back(t.id);  // the previous round of this partition is still out
      } else {
        ts.part_busy[i] = true;
        scheduler_.Push({r.priority, t.key, 0, t.len, t.id});
      }
    }
  }
  Dispatch();
  return id;
}

void Engine::ReleaseStalledCreditLocked() {
  for (auto& [id, t] : tasks_) {
    if (t.dispatched && t.holds_credit) {
      t.holds_credit = false;
      scheduler_.Release(t.len);
    }
  }
}

void Engine::Dispatch() {
  std::vector<Outgoing> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (auto item = scheduler_.Pop()) {
      auto it = tasks_.find(item->id);
      if (it == tasks_.end()) {  // failed before it went out
        scheduler_.Release(item->bytes);
        continue;
      }
      PartTask& t = it->second;
      t.dispatched = true;
      t.holds_credit = true;
      out.push_back({ConnFor(t.server, t.key), PushHeader(t), t.in, t.len});
    }
  }
  for (auto& o : out) {
    std::vector<iovec> iov;
    if (o.len > 0) iov.push_back({const_cast<uint8_t*>(o.data), o.len});
    Status st = o.conn->Send(o.header, iov, nullptr);
    // Unavailable = the connection is closed: its OnClose reconnects and re-sends this partition
    // (or fails it with the link). Anything else is a bug worth failing the operation for.
    if (!st.ok() && st.code() != StatusCode::kUnavailable) {
      std::lock_guard<std::mutex> lock(mu_);
      FinishTaskLocked(o.header.request_id, st, nullptr);
    }
  }
}

StatusOr<transport::RecvBuffer> Engine::OnHeader(transport::Connection& c, const Header& h) {
  if (h.opcode == Opcode::kError) {
    if (h.payload_len > 64 * 1024) return ProtocolError("oversized error frame from " + c.peer_name());
    return transport::RecvBuffer{};
  }
  if (h.opcode != Opcode::kPushPullReply) {
    return ProtocolError(fmt::format("unexpected {} from {}", protocol::OpcodeName(h.opcode), c.peer_name()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tasks_.find(h.request_id);
  transport::RecvBuffer b;
  if (it == tasks_.end()) {
    b.discard = true;  // its operation already failed; drop the bytes
    return b;
  }
  if (it->second.len != h.payload_len || it->second.key != h.key) {
    return ProtocolError(fmt::format("{} answered request {} (key {}, {} bytes) with key {} and {} bytes",
                                     c.peer_name(), h.request_id, it->second.key, it->second.len, h.key,
                                     h.payload_len));
  }
  it->second.receiving_on = &c;
  b.data = it->second.out;
  b.size = it->second.len;
  return b;
}

void Engine::OnFrame(transport::Connection& c, const Header& h, transport::RecvBuffer b) {
  if (h.opcode == Opcode::kError) {
    std::string msg(reinterpret_cast<const char*>(b.data), b.size);
    std::lock_guard<std::mutex> lock(mu_);
    Status st = protocol::StatusFromErrorFrame(h, fmt::format("{}: {}", c.peer_name(), msg));
    if (h.request_id != 0) {
      FinishTaskLocked(h.request_id, st, nullptr);
    } else {
      uint32_t dk = protocol::DeclaredKeyOf(h.key);
      tensors_[dk].error = st;
      FailTasksLocked([dk](const PartTask& t) { return t.declared_key == dk; }, st);
    }
    cv_.notify_all();
    return;
  }
  if (b.discard) return;
  std::shared_ptr<HandleState> handle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = tasks_.find(h.request_id);
    if (it == tasks_.end()) return;
    it->second.receiving_on = nullptr;
    if (!it->second.deferred_error.ok()) {
      FinishTaskLocked(h.request_id, it->second.deferred_error, nullptr);
      cv_.notify_all();
      return;
    }
    handle = it->second.handle;
  }
  // Average this partition here, on the I/O thread that received it, while others still travel.
  const TensorRequest& r = handle->request;
  if (r.average) {
    DivideInPlace(b.data, b.size / DataTypeSize(r.dtype), r.dtype, size());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    FinishTaskLocked(h.request_id, Status::Ok(), nullptr);
  }
  cv_.notify_all();
  Dispatch();
}

void Engine::FinishTaskLocked(uint64_t task_id, const Status& st, std::vector<std::shared_ptr<HandleState>>*) {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return;
  PartTask t = std::move(it->second);
  tasks_.erase(it);
  ++completions_;
  if (t.holds_credit) scheduler_.Release(t.len);
  auto ts_it = tensors_.find(t.declared_key);
  if (ts_it != tensors_.end()) {
    TensorState& ts = ts_it->second;
    auto& q = ts.waiting[t.part];
    // If this round is done, the next round of the same partition may go.
    bool was_running = ts.part_busy[t.part];
    if (was_running) {
      // A task still queued behind (never dispatched) that is being failed is not the running one.
      auto pos = std::find(q.begin(), q.end(), t.id);
      if (pos != q.end()) {
        q.erase(pos);
      } else if (!q.empty()) {
        uint64_t next = q.front();
        q.pop_front();
        auto nt = tasks_.find(next);
        if (nt != tasks_.end()) {
          scheduler_.Push({nt->second.handle->request.priority, nt->second.key, 0, nt->second.len, next});
        }
      } else {
        ts.part_busy[t.part] = false;
      }
    }
  }
  HandleState& hs = *t.handle;
  if (!st.ok() && hs.status.ok()) {
    hs.status = st.WithContext(fmt::format("push_pull of tensor '{}'", hs.request.name));
  }
  if (hs.remaining > 0 && --hs.remaining == 0) CompleteHandleLocked(hs);
}

void Engine::CompleteHandleLocked(HandleState& h) {
  if (h.on_complete) h.on_complete(h.status);  // local root: hand the result to the host's processes
  h.done = true;
}

void Engine::FailTasksLocked(const std::function<bool(const PartTask&)>& match, const Status& st) {
  std::vector<uint64_t> ids;
  for (auto& [id, t] : tasks_) {
    if (!match(t)) continue;
    if (t.receiving_on != nullptr) {
      if (t.deferred_error.ok()) t.deferred_error = st;  // finished when its frame is complete
      continue;
    }
    ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end(), std::greater<>());  // queued (later) tasks first
  for (uint64_t id : ids) FinishTaskLocked(id, st, nullptr);
}

void Engine::FailAll(const Status& st) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.ok()) failure_ = st;
    FailTasksLocked([](const PartTask&) { return true; }, st);
  }
  cv_.notify_all();
  if (local_) local_->FailAll(st);
}

void Engine::OnClose(transport::Connection& c, const Status& reason) {
  const int server = static_cast<int>(c.tag);
  std::lock_guard<std::mutex> lock(mu_);
  // The transport stopped writing into whatever this connection was receiving.
  for (auto& [id, t] : tasks_)
    if (t.receiving_on == &c) t.receiving_on = nullptr;
  const bool shutting = shut_down_ || (leaving_ && tasks_.empty());
  if (shutting || server < 0 || server >= static_cast<int>(servers_.size())) {
    FailTasksLocked([server](const PartTask& t) { return t.server == server; }, Aborted("byteps was shut down"));
    return;
  }
  if (!failure_.ok()) return;  // the job is already failing; nothing to save
  ServerLink& link = servers_[server];
  auto it = std::find_if(link.conns.begin(), link.conns.end(), [&](const auto& p) { return p.get() == &c; });
  if (it == link.conns.end()) return;  // an older connection, already replaced
  const size_t index = static_cast<size_t>(it - link.conns.begin());
  // A new episode of drops unless the connection dropped again within the reconnect window.
  const auto now = std::chrono::steady_clock::now();
  if (now - link.connected_at[index] > std::chrono::duration<double>(config_.reconnect_timeout_s)) {
    link.down_since[index] = now;
  }
  lost_links_.push_back({server, index, reason});
  cv_.notify_all();
}

std::string Engine::Outstanding(const HandleState& h) const {
  std::set<int> servers;
  for (const auto& [id, t] : tasks_)
    if (t.handle.get() == &h) servers.insert(t.server);
  std::string s;
  for (int sv : servers) s += (s.empty() ? "" : ", ") + std::to_string(sv);
  return fmt::format("{} partition(s) outstanding on server(s) {}", h.remaining, s);
}

StatusOr<bool> Engine::Poll(HandleId id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = handles_.find(id);
  if (it == handles_.end()) return InvalidArgument(fmt::format("unknown handle {}", id));
  if (!it->second->done) return false;
  if (!it->second->status.ok()) return it->second->status;
  return true;
}

Status Engine::Wait(HandleId id, double timeout_s) {
  if (timeout_s < 0) timeout_s = config_.op_timeout_s;
  std::unique_lock<std::mutex> lock(mu_);
  auto it = handles_.find(id);
  if (it == handles_.end()) return InvalidArgument(fmt::format("unknown handle {}", id));
  std::shared_ptr<HandleState> h = it->second;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                          std::chrono::duration<double>(timeout_s));
  // Credit stall guard: if nothing completes for kStall while partitions wait for credit, let one
  // more go (see PriorityScheduler::PopIgnoringCredit).
  constexpr auto kStall = std::chrono::milliseconds(50);
  uint64_t seen = completions_;
  while (!h->done && std::chrono::steady_clock::now() < deadline) {
    auto until = std::min(deadline, std::chrono::steady_clock::now() + kStall);
    if (cv_.wait_until(lock, until, [&] { return h->done; })) break;
    if (completions_ == seen && scheduler_.pending() > 0 && config_.scheduling_credit > 0) {
      ReleaseStalledCreditLocked();
      lock.unlock();
      Dispatch();
      lock.lock();
    }
    seen = completions_;
  }
  if (!h->done) {
    return DeadlineExceeded(fmt::format("push_pull of tensor '{}' did not complete within {:.1f} s "
                                        "(BYTEPS_TIMEOUT): {}",
                                        h->request.name, timeout_s, Outstanding(*h)));
  }
  return h->status;
}

void Engine::Release(HandleId id) {
  std::lock_guard<std::mutex> lock(mu_);
  handles_.erase(id);
}

Status Engine::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return Status::Ok();
  }
  Status result;
  if (cluster_) {
    // Let in-flight operations finish (bounded), then leave the job together with the others.
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::duration<double>(config_.op_timeout_s), [&] { return tasks_.empty(); });
      leaving_ = true;
    }
    Status failure;
    {
      std::lock_guard<std::mutex> lock(mu_);
      failure = failure_;
    }
    result = cluster_->Finish(failure);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    shut_down_ = true;
    FailTasksLocked([](const PartTask&) { return true; }, Aborted("byteps was shut down"));
  }
  cv_.notify_all();
  if (local_) local_->Leave();
  cluster_.reset();  // closes the scheduler connection as expected, before the transport goes
  if (transport_) transport_->Shutdown();
  if (reconnect_thread_.joinable()) reconnect_thread_.join();
  return result;
}

}  // namespace byteps::worker
