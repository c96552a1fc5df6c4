#include "worker/pipeline/dispatcher.h"

#include "common/logging.h"

namespace byteps::worker::pipeline {

Dispatcher::Dispatcher(const Options& options, Finished on_finished)
    : options_(options), on_finished_(std::move(on_finished)), credit_(options.credit_bytes) {}

void Dispatcher::Submit(Operation* op) {
  const uint32_t round = rounds_.NextRound(op->plan->declared_key);
  if (observer_) observer_->OperationSubmitted(*op);
  for (PartitionTask& t : op->parts) {
    t.round = round;
    t.stage = 0;
    t.where = PartitionTask::Where::kWaitingRound;
    if (rounds_.Enter(&t)) Enter(&t);
  }
}

void Dispatcher::Enter(PartitionTask* task) {
  const Pipeline& p = *task->op->pipeline;
  if (!failure_.ok()) return Fail(task, task->stage, failure_);
  if (task->stage >= p.size()) return Finish(task, Status::Ok());
  task->where = PartitionTask::Where::kQueued;
  p.at(task->stage)->queue().Push(task);
  if (observer_) observer_->TaskQueued(*task, task->stage);
}

void Dispatcher::Complete(PartitionTask* task, const Status& status, Clock::time_point now) {
  last_progress_ = now;
  if (task->credit_bytes > 0) {
    credit_.Release(task->credit_bytes);
    task->credit_bytes = 0;
  }
  holding_credit_.erase(task);
  if (observer_) observer_->TaskCompleted(*task, task->stage, status);
  if (!status.ok()) return Fail(task, task->stage + 1, status);
  ++task->stage;
  Enter(task);
}

void Dispatcher::Fail(PartitionTask* task, size_t first_unreached_stage, const Status& failure) {
  const Pipeline& p = *task->op->pipeline;
  for (size_t i = first_unreached_stage; i < p.size(); ++i) p.at(i)->Skip(task, failure);
  Finish(task, failure);
}

void Dispatcher::Finish(PartitionTask* task, const Status& status) {
  task->where = PartitionTask::Where::kFinished;
  PartitionTask* next = rounds_.Leave(task);
  on_finished_(task, status);  // may release the task's operation: task is not touched after this
  if (next) Enter(next);
}

void Dispatcher::FailAll(const Status& failure) {
  if (failure_.ok()) failure_ = failure;
  for (PartitionTask* t : rounds_.TakeAllWaiting()) Fail(t, 0, failure_);
  for (Stage* s : stages_) {
    while (PartitionTask* t = s->queue().Pop()) Fail(t, t->stage, failure_);
  }
  for (Stage* s : stages_) s->FailAll(failure_);
}

bool Dispatcher::CreditBlocked() {
  for (Stage* s : stages_) {
    PartitionTask* t = s->queue().Top();
    if (t != nullptr && s->CreditFor(*t) > 0) return true;  // Run left it queued: it did not fit
  }
  return false;
}

void Dispatcher::TakeBackCredit() {
  BYTEPS_LOG(Debug, "credit stall guard: {} partition(s) out for a whole stall period give back their credit",
             holding_credit_.size());
  for (PartitionTask* t : holding_credit_) {
    credit_.Release(t->credit_bytes);
    t->credit_bytes = 0;
  }
  holding_credit_.clear();
}

std::optional<Dispatcher::Clock::time_point> Dispatcher::Run(Clock::time_point now) {
  for (bool started = true; started;) {
    started = false;
    for (Stage* s : stages_) {
      bool here = false;
      while (PartitionTask* t = s->queue().Top()) {
        const size_t need = s->CreditFor(*t);
        if (need > 0 && !credit_.TryAcquire(need)) break;
        s->queue().Pop();
        t->credit_bytes = need;
        if (need > 0) holding_credit_.insert(t);
        last_progress_ = now;
        here = true;
        t->where = PartitionTask::Where::kRunning;
        t->started_at = now;
        if (observer_) observer_->TaskStarted(*t, t->stage);
        s->Start(t);  // may complete t (or others) right here, through Complete
      }
      if (here) s->Flush();
      started = started || here;
    }
  }
  if (!CreditBlocked()) return std::nullopt;
  if (now - last_progress_ >= options_.stall_period && !holding_credit_.empty()) {
    TakeBackCredit();
    last_progress_ = now;
    return Run(now);
  }
  return last_progress_ + options_.stall_period;
}

}  // namespace byteps::worker::pipeline
