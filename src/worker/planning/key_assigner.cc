#include "worker/planning/key_assigner.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <memory>

#include "protocol/name_planner.h"

namespace byteps::worker::planning {

namespace {
bool InProcessSet(const Signature& sig) {
  for (const auto& [k, v] : protocol::ParseAttrs(sig.attrs))
    if (k == protocol::kAttrMembers) return true;
  return false;
}
// The server a tensor's attributes pin it to (protocol::kAttrServer), -1 for none; -2 for a value
// that is not a server rank (the name service refuses it, naming the tensor).
int PinnedServer(const std::string& attrs) {
  for (const auto& [key, value] : protocol::ParseAttrs(attrs)) {
    if (key != protocol::kAttrServer) continue;
    int rank = -2;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), rank);
    return ec == std::errc() && end == value.data() + value.size() && rank >= 0 ? rank : -2;
  }
  return -1;
}

}  // namespace

std::string Signature::Describe() const {
  return fmt::format("{} bytes of {} ({}{}{})", bytes, DataTypeName(dtype), op, attrs.empty() ? "" : ", ", attrs);
}

bool IsAgreedFailure(const Status& st) {
  // The servers' cross-worker mismatch (the workers disagree on the tensor's size, dtype, op or
  // attributes) reaches every worker of the tensor. So does an InvalidArgument that reaches a
  // submitted operation: a server refusing a push against the tensor's declaration, or a push past
  // another worker's release. Local InvalidArguments fail Enqueue before anything is submitted.
  return st.code() == StatusCode::kMismatch || st.code() == StatusCode::kInvalidArgument;
}

KeyAssigner::KeyAssigner(Resolver resolve, size_t partition_bytes) : resolve_(std::move(resolve)) {
  gens_.push_back(partition_bytes);
}

KeyAssigner::Resolver KeyAssigner::LocalResolver(int num_servers) {
  struct Local {
    std::mutex mu;
    protocol::NamePlanner planner;
    explicit Local(int n) : planner(n) {}
  };
  auto local = std::make_shared<Local>(num_servers);
  return [local](const protocol::NameRequest& r) {
    std::lock_guard<std::mutex> lock(local->mu);
    return local->planner.Plan(r);
  };
}

KeyAssigner::Name& KeyAssigner::NameLocked(const std::string& name) {
  auto [it, added] = names_.try_emplace(name);
  if (added) it->second.local_index = static_cast<uint32_t>(names_.size() - 1);
  return it->second;
}

uint32_t KeyAssigner::LocalIndex(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  return NameLocked(name).local_index;
}

std::vector<Retired> KeyAssigner::RetireLocked(Name& n) {
  std::vector<Retired> out;
  for (const auto& [g, plan] : n.plans) {
    auto r = rounds_.find(plan->declared_key);
    out.push_back({plan, r == rounds_.end() ? 0 : r->second});
    if (r != rounds_.end()) rounds_.erase(r);
  }
  n.plans.clear();
  return out;
}

StatusOr<uint32_t> KeyAssigner::Declare(const std::string& name, std::optional<std::pair<size_t, DataType>> size,
                                        std::vector<Retired>* retired) {
  if (size) {
    Signature sig;
    sig.bytes = size->first;
    sig.dtype = size->second;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const Name& n = NameLocked(name);
      // The same size as the name's current use keeps its op and attributes.
      if (n.sig && n.sig->bytes == sig.bytes && n.sig->dtype == sig.dtype) sig = *n.sig;
    }
    BYTEPS_ASSIGN_OR_RETURN(Begun b, Acquire(name, sig, /*op=*/false));
    if (retired) retired->insert(retired->end(), b.retired.begin(), b.retired.end());
    return b.plan->index;
  }
  protocol::NameRequest req;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Name& n = NameLocked(name);
    if (n.index) return *n.index;
    req.name = name;
    req.incarnation = n.incarnation;
    req.generation = current_;
  }
  auto resolved = resolve_(req);
  if (!resolved.ok()) return resolved.status().WithContext(fmt::format("declaring tensor '{}'", name));
  std::lock_guard<std::mutex> lock(mu_);
  Name& n = NameLocked(name);
  if (n.incarnation == req.incarnation) n.index = resolved->index;
  return resolved->index;
}

StatusOr<KeyAssigner::Begun> KeyAssigner::Begin(const std::string& name, const Signature& sig) {
  return Acquire(name, sig, /*op=*/true);
}

StatusOr<KeyAssigner::Begun> KeyAssigner::Acquire(const std::string& name, const Signature& sig, bool op) {
  Begun out;
  uint32_t use = 0;
  uint32_t g = 0;
  Scheduler scheduler;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Name& n = NameLocked(name);
    bool move = false;
    if (n.sig && !(*n.sig == sig)) {
      if (n.in_flight > 0) {
        return InvalidArgument(fmt::format("tensor '{}' is in flight as {} and cannot be used as {} until that "
                                           "completes (a name keeps its size, dtype and op while in use)",
                                           name, n.sig->Describe(), sig.Describe()));
      }
      move = true;
    } else if (n.move_next && n.in_flight == 0) {
      move = true;  // its last operation failed on every worker: start afresh
    }
    if (move) {
      out.retired = RetireLocked(n);
      ++n.incarnation;
      n.index.reset();
      n.move_next = false;
      n.uses = 0;
      n.final.reset();
    }
    if (!n.sig || move) {
      known_bytes_ -= n.sig ? n.sig->bytes : 0;
      known_bytes_ += sig.bytes;
      n.sig = sig;
    }
    g = current_;
    if (!op) {
      // A declaration plans the name once (any generation's plan gives its index).
      if (auto it = n.plans.find(g); it != n.plans.end()) out.plan = it->second;
      else if (!n.plans.empty()) out.plan = n.plans.begin()->second;
      if (out.plan) return out;
    } else {
      // In flight from here: its incarnation stays while it waits for its placement and plan.
      ++n.in_flight;
      ++n.placing;
      use = n.uses++;
      // A process set's tensor stays in generation 0: the partition phase's agreements are the
      // whole job's, which a worker outside the set never reaches through this tensor.
      if (InProcessSet(sig)) g = 0;
      else scheduler = scheduler_;
    }
  }
  bool final = false;
  if (scheduler) {
    auto placed = scheduler(name, use);
    std::lock_guard<std::mutex> lock(mu_);
    if (placed.ok() && placed->generation >= gens_.size()) {
      placed = Internal(fmt::format("use {} of tensor '{}' was placed in partition generation {}, which does not exist",
                                    use, name, placed->generation));
    }
    if (!placed.ok()) {
      Name& n = NameLocked(name);
      --n.in_flight;
      --n.placing;
      return placed.status().WithContext(fmt::format("placing use {} of tensor '{}'", use, name));
    }
    g = placed->generation;
    final = placed->final;
  }
  return Place(name, sig, op, g, final, std::move(out));
}

StatusOr<KeyAssigner::Begun> KeyAssigner::Place(const std::string& name, const Signature& sig, bool op, uint32_t g,
                                                bool final, Begun out) {
  protocol::NameRequest req;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Name& n = NameLocked(name);
    if (auto it = n.plans.find(g); it != n.plans.end()) {
      out.plan = it->second;
      if (op) Placed(n, *out.plan, final, &out.retired);
      return out;
    }
    if (!op) ++n.in_flight;  // while resolving: another signature must wait for this one
    req.name = name;
    req.incarnation = n.incarnation;
    req.generation = g;
    req.sized = true;
    req.bytes = sig.bytes;
    req.dtype = static_cast<int>(sig.dtype);
    req.partition_bytes = gens_[g];
    req.whole = sig.op == protocol::kOpAdasum;  // one partition: its dot products span the tensor
    req.spread = sig.op == protocol::kOpJoin;   // one partition per server: every server must see it
    req.server = PinnedServer(sig.attrs);
  }
  auto resolved = resolve_(req);
  std::lock_guard<std::mutex> lock(mu_);
  Name& n = NameLocked(name);
  const auto fail = [&](Status st) {
    --n.in_flight;
    if (op) --n.placing;
    return st;
  };
  if (!resolved.ok()) return fail(resolved.status().WithContext(fmt::format("planning tensor '{}'", name)));
  const protocol::NamePlan& np = *resolved;
  if (!np.sized || np.bytes != sig.bytes || np.name != name || np.incarnation != req.incarnation ||
      np.generation != req.generation) {
    return fail(Internal(fmt::format("the name service answered tensor '{}' (incarnation {}, generation {}, {} bytes) "
                                     "with a plan of '{}' (incarnation {}, generation {}, {} bytes)",
                                     name, req.incarnation, req.generation, sig.bytes, np.name, np.incarnation,
                                     np.generation, np.bytes)));
  }
  if (!op) --n.in_flight;
  auto [it, added] = n.plans.try_emplace(req.generation, nullptr);
  if (added) {  // else another thread stored the same answer first
    TensorPlan p;
    p.name = name;
    p.index = np.index;
    p.declared_key = np.declared_key;
    p.incarnation = np.incarnation;
    p.generation = np.generation;
    p.bytes = np.bytes;
    p.dtype = sig.dtype;
    for (const protocol::NamePartition& x : np.partitions) {
      p.partitions.push_back({x.key, x.server, {static_cast<size_t>(x.offset), static_cast<size_t>(x.length)}});
    }
    plans_.push_back(std::move(p));
    it->second = &plans_.back();
  }
  n.index = np.index;
  out.plan = it->second;
  if (op) Placed(n, *out.plan, final, &out.retired);
  return out;
}

void KeyAssigner::Placed(Name& n, const TensorPlan& plan, bool final, std::vector<Retired>* retired) {
  ++rounds_[plan.declared_key];
  --n.placing;
  if (final) n.final = plan.generation;
  // Every use before the final one has its round counted: the other generations' plans retire,
  // with this worker's last round of each.
  if (!n.final || n.placing > 0) return;
  for (auto it = n.plans.begin(); it != n.plans.end();) {
    if (it->first == *n.final) {
      ++it;
      continue;
    }
    auto r = rounds_.find(it->second->declared_key);
    retired->push_back({it->second, r == rounds_.end() ? 0 : r->second});
    if (r != rounds_.end()) rounds_.erase(r);
    it = n.plans.erase(it);
  }
}

void KeyAssigner::Abandon(const TensorPlan& plan) {
  std::lock_guard<std::mutex> lock(mu_);
  Name& n = NameLocked(plan.name);
  if (n.in_flight > 0) --n.in_flight;
  if (auto r = rounds_.find(plan.declared_key); r != rounds_.end() && r->second > 0) --r->second;
}

void KeyAssigner::End(const TensorPlan& plan, const Status& st) {
  std::lock_guard<std::mutex> lock(mu_);
  Name& n = NameLocked(plan.name);
  if (n.in_flight > 0) --n.in_flight;
  if (!st.ok() && IsAgreedFailure(st) && n.incarnation == plan.incarnation) n.move_next = true;
}

std::vector<Retired> KeyAssigner::RetireGeneration(uint32_t g) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Retired> out;
  for (auto& [name, n] : names_) {
    auto it = n.plans.find(g);
    if (it == n.plans.end()) continue;
    auto r = rounds_.find(it->second->declared_key);
    out.push_back({it->second, r == rounds_.end() ? 0 : r->second});
    if (r != rounds_.end()) rounds_.erase(r);
    n.plans.erase(it);
  }
  return out;
}

void KeyAssigner::set_partition_bytes(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  gens_[current_] = bytes;
}

size_t KeyAssigner::partition_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return gens_[current_];
}

uint32_t KeyAssigner::generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

uint64_t KeyAssigner::known_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return known_bytes_;
}

Status KeyAssigner::DefineLocked(uint32_t g, size_t partition_bytes) {
  if (g >= kMaxGenerations) {
    return InvalidArgument(fmt::format("partition generation {} (at most {})", g, kMaxGenerations));
  }
  if (g < gens_.size()) {
    if (gens_[g] != partition_bytes) {
      return InvalidArgument(
          fmt::format("partition generation {} has {} byte partitions, not {}", g, gens_[g], partition_bytes));
    }
  } else if (g != gens_.size()) {
    return InvalidArgument(fmt::format("partition generation {} follows generation {}", g, gens_.size() - 1));
  } else {
    gens_.push_back(partition_bytes);
  }
  return Status::Ok();
}

Status KeyAssigner::AddGeneration(uint32_t g, size_t partition_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  return DefineLocked(g, partition_bytes);
}

Status KeyAssigner::UseGeneration(uint32_t g, size_t partition_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  BYTEPS_RETURN_IF_ERROR(DefineLocked(g, partition_bytes));
  current_ = g;
  return Status::Ok();
}

void KeyAssigner::set_scheduler(Scheduler scheduler) {
  std::lock_guard<std::mutex> lock(mu_);
  scheduler_ = std::move(scheduler);
}

}  // namespace byteps::worker::planning
