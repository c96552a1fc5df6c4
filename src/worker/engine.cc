#include "worker/engine.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

#include "cluster/cluster_config.h"
#include "cluster/name_client.h"
#include "protocol/control.h"
#include "protocol/name_planner.h"
#include "common/adasum.h"
#include "common/logging.h"
#include "device/topology.h"
#include "transport/transport_config.h"
#include "worker/job_files.h"
#include "worker/local_reduce/local_circles.h"
#include "worker/pipeline/dispatch_loop.h"
#include "worker/pipeline/handle_table.h"
#include "worker/pipeline_set.h"
#include "worker/planning/key_assigner.h"
#include "worker/server_links/server_links.h"
#include "worker/stand_ins.h"
#include "worker/stages/push_pull_stage.h"
#include "worker/trace/trace_recorder.h"
#include "worker/tuning/online_tuner.h"
#include "worker/tuning/partition_schedule.h"
#include "worker/tuning/startup_agreement.h"
#include "worker/tuning/worker0_agreement.h"

namespace byteps::worker {

Engine::Engine(const config::Config& config)
    : config_(config),
      local_names_(planning::KeyAssigner::LocalResolver(std::max(1, config.num_servers))),
      handles_(std::make_unique<pipeline::HandleTable>()),
      telemetry_(config.telemetry_on, config.telemetry_window_s),
      assigner_(std::make_unique<planning::KeyAssigner>(
          [this](const protocol::NameRequest& r) { return Resolve(r); }, config.partition_bytes)),
      credit_bytes_(static_cast<size_t>(config.scheduling_credit) * config.partition_bytes) {}

StatusOr<std::unique_ptr<Engine>> Engine::Start(const config::Config& config) {
  if (config.role != config::Role::kWorker) {
    return InvalidArgument(fmt::format("DMLC_ROLE={}: only a worker can run the engine (start servers and the "
                                       "scheduler with `byteps server` / `byteps scheduler`)",
                                       config::RoleName(config.role)));
  }
  std::unique_ptr<Engine> e(new Engine(config));
  e->rank_ = config.global_rank >= 0 ? config.global_rank
                                     : std::max(0, config.worker_id) * config.local_size + config.local_rank;
  BYTEPS_RETURN_IF_ERROR(e->StartObservers());
  if (config.local_size > 1) BYTEPS_RETURN_IF_ERROR(e->StartLocal());
  // Only a host's local root talks to the scheduler and the servers.
  if (config.distributed() && (!e->local_ || e->local_->is_root())) {
    if (Status st = e->Connect(); !st.ok()) {
      if (e->local_) e->local_->FailAll(st);  // the local non-roots learn why, not just that we left
      return st;
    }
    // The merge aligns this node's clock to the scheduler's and refuses other jobs' files. A
    // host's other processes (no scheduler connection) write no job and no offset: the merge
    // takes them unshifted (they share this host's clock).
    if (e->recorder_) e->recorder_->SetClock(e->cluster_->job_id(), e->cluster_->clock_offset_us());
  }
  e->StartNames();
  e->StartPipeline();
  e->StartReports();
  if (config.distributed()) {
    if (Status st = e->TuneAtStart(); !st.ok()) {
      // E.g. another pinned partition size, or servers this process cannot reach with its
      // BYTEPS_TRANSPORT: the others learn it now, not when this process's connection drops.
      e->FailJob(st);
      return st;
    }
  }
  return e;
}

Status Engine::StartLocal() {
  local_reduce::LocalOptions lo;
  lo.local_rank = config_.local_rank;
  lo.local_size = config_.local_size;
  lo.job = JobToken(config_);
  lo.host_id = std::max(0, config_.worker_id);
  lo.global_rank = rank_;
  lo.start_timeout_s = config_.start_timeout_s;
  lo.transport = transport::TransportOptionsFor(config_, "bps-local");
  if (!config_.distributed()) lo.names = local_names_;  // the root plans the host's names
  std::string warning;
  const local_reduce::SwitchLayout layout = local_reduce::LayoutSwitches(
      config_.local_rank, config_.local_size, config_.pcie_switch_size,
      config_.pcie_switch_size > 0
          ? 0
          : device::DetectedSwitchSize(!config_.cuda_visible_devices.empty() ? config_.cuda_visible_devices
                                                                             : config_.nvidia_visible_devices),
      &warning);
  if (!warning.empty() && config_.local_rank == config_.local_size - 1) BYTEPS_LOG(Warning, "{}", warning);
  if (layout.cross() && config_.local_rank == config_.local_size - 1) {
    BYTEPS_LOG(Info, "{} PCIe switches of {} processes: device tensors reduce per switch, then across switches on "
               "the CPU", layout.switches, layout.switch_size);
  }
  auto local = local_reduce::LocalCircles::Start(lo, layout, [this](const Status& st) { FailAll(st); });
  if (!local.ok()) return local.status();
  std::lock_guard<std::mutex> lock(mu_);
  local_ = std::move(local.value());
  return Status::Ok();
}

Status Engine::Connect() {
  transport_ = transport::CreateTransport(transport::TransportOptionsFor(config_, "worker"));
  // The scheduler is reached over TCP whatever carries the data (as the servers do): it speaks
  // neither shared memory nor UCX. The data settings' limits stay (its replies can be large).
  transport::TransportOptions control = transport::TransportOptionsFor(config_, "wrk-ctl");
  control.kind = transport::TransportKind::kTcp;
  control.io_threads = 1;
  control_transport_ = transport::CreateTcpTransport(control);
  cluster::ClientOptions co = cluster::ClientOptionsFor(config_, "worker", 0);
  auto client = cluster::ClusterClient::Join(*control_transport_, co, [this](const Status& st) { FailAll(st); });
  if (!client.ok()) return client.status();
  cluster_ = std::move(client.value());
  host_rank_ = cluster_->rank();
  rank_ = host_rank_ * config_.local_size + config_.local_rank;
  log::SetIdentity(fmt::format("worker:{}", host_rank_));

  server_links::LinkOptions lo;
  lo.connections_per_server = config_.connections_per_peer;
  lo.connect_timeout_s = config_.start_timeout_s;
  lo.reconnect_timeout_s = config_.reconnect_timeout_s;
  lo.host_rank = host_rank_;
  auto links = std::make_unique<server_links::ServerLinks>(transport_.get(), cluster_->servers(), lo,
                                                           [this](const Status& st) { FailAll(st); },
                                                           [this](const Status& st) { FailJob(st); });
  std::lock_guard<std::mutex> lock(mu_);
  links_ = std::move(links);
  return Status::Ok();
}

void Engine::StartNames() {
  if (!config_.distributed()) return;  // this process's own planner (local_names_)
  transport::Transport* t = control_transport_.get();
  if (t == nullptr) {  // a host's non-root: a line of its own to the scheduler (it never registers)
    transport::TransportOptions o = transport::TransportOptionsFor(config_, "wrk-names");
    o.kind = transport::TransportKind::kTcp;
    o.io_threads = 1;
    names_transport_ = transport::CreateTcpTransport(o);
    t = names_transport_.get();
  }
  cluster::NameClientOptions no;
  no.root_uri = config_.root_uri;
  no.root_port = config_.root_port;
  no.timeout_s = config_.op_timeout_s;
  names_ = std::make_unique<cluster::NameClient>(t, no);
}

StatusOr<protocol::NamePlan> Engine::Resolve(const protocol::NameRequest& r) {
  if (names_) return names_->Resolve(r);
  // Without servers a host's processes pair their names through the root's one planner.
  if (local_ && !local_->all()->is_root()) return local_->all()->ResolveAtRoot(r, config_.op_timeout_s);
  return local_names_(r);
}

void Engine::ReleaseRetired(const std::vector<planning::Retired>& retired) {
  if (retired.empty()) return;
  // Only a process with links to the servers has keys there (a host's non-roots share the root's).
  if (pipelines_ == nullptr || pipelines_->push_pull() == nullptr) return;
  for (const planning::Retired& r : retired) pipelines_->push_pull()->Release(*r.plan, r.last_round);
}

void Engine::StartPipeline() {
  pipeline::Dispatcher::Options d;
  d.credit_bytes = credit_bytes();
  auto loop = std::make_unique<pipeline::DispatchLoop>(
      d, [this](pipeline::PartitionTask* t, const Status& st) {
        // A user push_pull that succeeded counts for get_pushpull_speed once it completes, before
        // its waiter wakes (a caller reading the speed right after sees it).
        handles_->PartDone(*t->op, t->part, st, [this](const pipeline::Operation& op) {
          assigner_->End(*op.plan, op.status);  // before a waiter wakes: its next use sees it done
          if (op.status.ok() && op.request.name.rfind(kInternalPrefix, 0) != 0 && !op.request.stand_in) {
            telemetry_.Add(op.request.bytes);
          }
        });
      });
  Observe(*loop);
  PipelineContext pc;
  pc.loop = loop.get();
  pc.local = local_.get();
  pc.plane = links_.get();
  pc.host_rank = host_rank_;
  pc.size = size();
  pc.start_timeout_s = config_.start_timeout_s;
  pc.op_timeout_s = config_.op_timeout_s;
  pc.learning_rate = &learning_rate_;
  pipelines_ = std::make_unique<PipelineSet>(pc);
  loop->Start();
  {
    std::lock_guard<std::mutex> lock(mu_);
    loop_ = std::move(loop);
    if (!failure_.ok()) loop_->FailAll(failure_);  // it failed while starting
  }
  if (local_ && local_->all()->is_root()) {
    StandInRunner::Calls calls;
    calls.enqueue = [this](const TensorRequest& r) { return Enqueue(r); };
    calls.poll = [this](HandleId h) { return Poll(h); };
    calls.wait = [this](HandleId h, double s) { return Wait(h, s); };
    calls.release = [this](HandleId h) { Release(h); };
    calls.fail = [this](const StandInRunner::Part& p, const Status& st) { local_->all()->PublishError(p, st); };
    stand_ins_ = std::make_unique<StandInRunner>(std::move(calls));
    local_->all()->SetStandIn([runner = stand_ins_.get()](const StandInRunner::Part& p) { runner->Post(p); });
  }
  if (links_) {
    links_->set_client(pipelines_->push_pull());
    if (Status st = links_->Connect(); !st.ok()) FailAll(st);
  }
}

StatusOr<HandleId> Engine::Enqueue(const TensorRequest& request) {
  // Only a request that may be compressed (compression keys in its attrs, or declared for its name)
  // is copied and normalised: the uncompressed path stays as it was.
  TensorRequest normalized;
  const bool may_compress = !request.attrs.empty() || any_declared_params_.load(std::memory_order_acquire);
  const TensorRequest& r = may_compress ? normalized : request;
  if (may_compress) {
    normalized = request;
    std::optional<compress::Params> declared;
    {
      std::lock_guard<std::mutex> lock(declared_mu_);
      if (auto it = declared_params_.find(r.name); it != declared_params_.end()) declared = it->second;
    }
    BYTEPS_RETURN_IF_ERROR(
        NormalizeCompression(normalized, declared ? &*declared : nullptr, config_.min_compress_bytes));
  }
  const size_t contributed = r.op == ReduceOp::kConcat ? r.slice_bytes : r.bytes;
  if ((contributed > 0 && r.input == nullptr) || (r.bytes > 0 && r.output == nullptr)) {
    return InvalidArgument(fmt::format("push_pull of '{}': null data pointer", r.name));
  }
  const size_t esize = DataTypeSize(r.dtype);
  if (esize == 0) return InvalidArgument(fmt::format("push_pull of '{}': unsupported dtype", r.name));
  if (r.bytes % esize != 0) {
    return InvalidArgument(fmt::format("push_pull of '{}': {} bytes is not a whole number of {} elements", r.name,
                                       r.bytes, DataTypeName(r.dtype)));
  }
  if (local_ && r.attrs.find(protocol::kAttrMembers) != std::string::npos &&
      rank_ != std::max(0, config_.worker_id) * config_.local_size + config_.local_rank) {
    // The servers count hosts: a set's ranks map to hosts only in the launchers' layout.
    return Precondition(fmt::format("push_pull of '{}': a process set with several processes per host needs ranks "
                                    "laid out host by host (rank = DMLC_WORKER_ID x BYTEPS_LOCAL_SIZE + "
                                    "BYTEPS_LOCAL_RANK), but this process has rank {} (BYTEPS_GLOBAL_RANK)",
                                    r.name, rank_));
  }
  if (r.op == ReduceOp::kConcat) BYTEPS_RETURN_IF_ERROR(CheckConcat(r));
  else BYTEPS_RETURN_IF_ERROR(CheckReduction(r));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return Precondition("byteps has been shut down; call init() again");
    if (!failure_.ok()) return failure_.WithContext(fmt::format("push_pull of '{}'", r.name));
  }
  // Before any lock: a host's first device tensor may wait for its processes to form a device group.
  StatusOr<const pipeline::Pipeline*> routed = pipelines_->For(r);
  if (!routed.ok()) return routed.status().WithContext(fmt::format("push_pull of '{}'", r.name));
  const pipeline::Pipeline* route = *routed;
  // The core's own push_pulls (the tuning's, join's) are not iterations of the job.
  const bool internal = r.name.rfind(kInternalPrefix, 0) == 0 || r.stand_in;
  std::shared_ptr<pipeline::Operation> op;
  std::optional<size_t> credit;
  {
    std::lock_guard<std::mutex> lock(plan_mu_);
    if (online_ && !internal) credit = TuneOnline(assigner_->LocalIndex(r.name), r.bytes).credit;
  }
  // Not under plan_mu_: a first use waits for the name service, and a use in the online tuner's
  // partition phase may wait for worker 0's word (engine_tuning.cc); unrelated names need not wait.
  planning::Signature sig;
  sig.bytes = r.bytes;
  sig.dtype = r.dtype;
  sig.op = KeyOpOf(r.op);
  sig.attrs = r.attrs;  // another op or attribute set is another incarnation: a new declaration, compared anew
  auto begun = assigner_->Begin(r.name, sig);
  if (!begun.ok()) return begun.status().WithContext(fmt::format("push_pull of '{}'", r.name));
  ReleaseRetired(begun->retired);
  const planning::TensorPlan* plan = begun->plan;
  {
    std::lock_guard<std::mutex> lock(plan_mu_);
    if (credit_switch_ && !internal) {
      // The partition phase ended (in this Begin or another thread's): the credit phase starts
      // with this push_pull.
      credit = credit_switch_;
      credit_switch_.reset();
      if (online_) online_->OnPushPull(assigner_->LocalIndex(r.name), r.bytes, tuning::IterationClock::Clock::now());
    }
    op = pipeline::MakeOperation(r, *plan, route, &next_task_);
  }
  if (Status st = op->pipeline->Admit(*op); !st.ok()) {
    assigner_->Abandon(*plan);
    return st.WithContext(fmt::format("push_pull of '{}'", r.name));
  }
  // Submissions are applied in order and a new credit before them: it starts with this operation.
  if (credit) loop_->SetCredit(*credit);
  HandleId id = handles_->Add(op);
  loop_->Submit(std::move(op));
  return id;
}

Status Engine::CheckReduction(const TensorRequest& r) const {
  if (r.op == ReduceOp::kSum && r.dtype == DataType::kBool) {
    return InvalidArgument(fmt::format("push_pull of '{}': bool tensors cannot be summed (use min, max or product, "
                                       "or convert to an integer dtype)",
                                       r.name));
  }
  if (r.average && r.op != ReduceOp::kSum) {
    return InvalidArgument(fmt::format("push_pull of '{}': average applies to a sum only, not to a {}", r.name,
                                       ReduceOpName(r.op)));
  }
  if (r.op == ReduceOp::kAdasum) BYTEPS_RETURN_IF_ERROR(CheckAdasum(r));
  if (r.op != ReduceOp::kSum && local_ && !r.device.on_host()) {
    return Precondition(fmt::format("push_pull of '{}': a {} of a device tensor on a host with several processes "
                                    "(BYTEPS_LOCAL_SIZE={}) is not built yet (the device group sums); pass a CPU tensor",
                                    r.name, ReduceOpName(r.op), config_.local_size));
  }
  return Status::Ok();
}

Status Engine::CheckAdasum(const TensorRequest& r) const {
  if (!AdasumSupports(r.dtype)) {
    return InvalidArgument(fmt::format("adasum of '{}': {} is not supported (float16, float32 or float64)", r.name,
                                       DataTypeName(r.dtype)));
  }
  if (local_ && !r.device.on_host()) {
    // A host tensor's processes combine by Adasum locally (the tree in local-rank order), then the
    // servers across hosts: Horovod's CPU order over ranks. Horovod's GPU semantics (Adasum across
    // hosts of per-host averages, the device group summing) are not built yet.
    return Precondition(fmt::format("adasum of device tensor '{}' with several processes per host "
                                    "(BYTEPS_LOCAL_SIZE={}) is not implemented yet (Horovod's GPU semantics there: "
                                    "Adasum across hosts of per-host averages); pass a CPU tensor",
                                    r.name, config_.local_size));
  }
  // One partition carries the whole tensor (its dot products span it): it must fit in a message.
  if (r.bytes > config_.max_message_bytes) {
    return InvalidArgument(fmt::format("adasum of '{}': {} bytes do not fit in one message of at most {} bytes "
                                       "(an Adasum tensor is never split; raise BYTEPS_MAX_MESSAGE_BYTES)",
                                       r.name, r.bytes, config_.max_message_bytes));
  }
  return Status::Ok();
}

Status Engine::CheckConcat(const TensorRequest& r) const {
  const size_t esize = DataTypeSize(r.dtype);
  if (r.slice_offset > r.bytes || r.slice_bytes > r.bytes - r.slice_offset || r.slice_offset % esize != 0 ||
      r.slice_bytes % esize != 0) {
    return InvalidArgument(fmt::format("allgather of '{}': a slice of {} bytes at offset {} does not fit {} bytes of {} "
                                       "in whole elements",
                                       r.name, r.slice_bytes, r.slice_offset, r.bytes, DataTypeName(r.dtype)));
  }
  if (r.average) return InvalidArgument(fmt::format("allgather of '{}': a concatenation has no average", r.name));
  if (local_) {
    return Precondition(fmt::format("allgather of '{}' through the servers needs one process per host "
                                    "(BYTEPS_LOCAL_SIZE={} here)",
                                    r.name, config_.local_size));
  }
  if (!links_ && (r.slice_offset != 0 || r.slice_bytes != r.bytes)) {
    return InvalidArgument(fmt::format("allgather of '{}': the only worker's slice must be the whole {} bytes "
                                       "(got {} at offset {})",
                                       r.name, r.bytes, r.slice_bytes, r.slice_offset));
  }
  return Status::Ok();
}

StatusOr<bool> Engine::Poll(HandleId h) { return handles_->Poll(h); }

void Engine::Release(HandleId h) { handles_->Release(h); }

StatusOr<uint32_t> Engine::Declare(const std::string& name, std::optional<std::pair<size_t, DataType>> size) {
  std::vector<planning::Retired> retired;
  auto index = assigner_->Declare(name, size, &retired);
  ReleaseRetired(retired);
  return index;
}

// The scheduler's placement of the servers' shares (RegisterReply), for `byteps info` and bench.
// The start-up server probe's answer replaces it (Engine::TuneAtStart).
std::vector<double> Engine::server_shares() const {
  {
    std::lock_guard<std::mutex> lock(placement_mu_);
    if (!probed_shares_.empty()) return probed_shares_;
  }
  return cluster_ ? cluster_->server_shares() : std::vector<double>{};
}

std::string Engine::placement_report() const {
  const std::vector<double> s = server_shares();
  if (s.empty()) return "";
  std::string shares;
  for (size_t i = 0; i < s.size(); ++i) shares += fmt::format("{}server {} {:.1f}%", i ? ", " : "", i, 100 * s[i]);
  std::string summary;
  {
    std::lock_guard<std::mutex> lock(placement_mu_);
    summary = probed_placement_;
  }
  return fmt::format("{} [{}]", summary.empty() ? cluster_->placement() : summary, shares);
}

}  // namespace byteps::worker
