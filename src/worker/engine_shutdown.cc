// Engine's failure and shutdown paths (engine.h): failing every operation, ending the job, and
// tearing the layers down in the order their callbacks need.
#include "cluster/cluster_client.h"
#include "worker/engine.h"
#include "worker/local_reduce/local_circles.h"
#include "worker/pipeline/dispatch_loop.h"
#include "worker/pipeline/handle_table.h"
#include "worker/pipeline_set.h"
#include "worker/server_links/server_links.h"
#include "worker/stand_ins.h"
#include "worker/trace/trace_recorder.h"
#include "worker/job_files.h"
#include "cluster/name_client.h"
#include "transport/transport.h"
#include "worker/planning/key_assigner.h"
#include "worker/tuning/online_tuner.h"
#include "worker/tuning/partition_schedule.h"
#include "worker/tuning/worker0_agreement.h"

namespace byteps::worker {

void Engine::FailAll(const Status& st) {
  // Held throughout: the destructor takes mu_ to stop failures from reaching parts it releases.
  std::lock_guard<std::mutex> lock(mu_);
  if (shut_down_) return;
  if (failure_.ok()) failure_ = st;
  if (loop_) loop_->FailAll(st);  // before the pipeline exists, StartPipeline applies failure_
  if (links_) links_->Fail(st);
  // A connection still being opened (a server that ended with the job is retried until the start
  // deadline otherwise) fails now; the control transport keeps its own, to hear the scheduler.
  if (transport_) transport_->CancelConnects(st);
  if (local_) local_->FailAll(st);
  if (names_) names_->Abort(st);  // a first use waiting for the scheduler's answer fails now too
}

void Engine::FailJob(const Status& st) {
  FailAll(st);
  // Held: Shutdown releases cluster_ only after setting shut_down_ under mu_. Finish with a
  // failure only sends (it never waits), and the client never calls into us holding its lock.
  std::lock_guard<std::mutex> lock(mu_);
  if (!shut_down_ && cluster_) (void)cluster_->Finish(st);
}

Status Engine::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return Status::Ok();
  }
  Status result;
  if (local_ && local_->all()->is_root()) {
    // The host's other processes may still need this root (their rounds go through it, and it
    // stands in for those it does not run itself): it leaves after them.
    handles_->WaitIdle(config_.op_timeout_s);
    local_->all()->AwaitPeersLeft(config_.op_timeout_s);
  }
  if (cluster_) {
    // Let in-flight operations finish (bounded), then leave the job together with the others.
    handles_->WaitIdle(config_.op_timeout_s);
    Status failure;
    {
      std::lock_guard<std::mutex> lock(mu_);
      failure = failure_;
    }
    if (failure.ok() && local_) failure = local_->failure();  // a local process died: not a clean finish
    if (links_) links_->SetLeaving(failure.ok());
    result = cluster_->Finish(failure);
  }
  if (stand_ins_) stand_ins_->Stop(config_.op_timeout_s);
  {
    std::lock_guard<std::mutex> lock(mu_);
    shut_down_ = true;
    loop_->FailAll(Aborted("byteps was shut down"));
  }
  if (local_) local_->Leave();
  cluster_.reset();  // closes the scheduler connection as expected, before the transport goes
  if (control_transport_) control_transport_->Shutdown();
  if (links_) links_->Shutdown();
  if (transport_) transport_->Shutdown();
  return result;
}

Engine::~Engine() {
  if (!settings_report_.empty()) RemoveSettingsRecord(config_, rank_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    shut_down_ = true;  // FailAll no longer reaches the parts released below
  }
  StopReports();                           // no report asks the loop after this
  if (stand_ins_) stand_ins_->Stop(0);     // no stand-in starts after this
  if (loop_) loop_->Stop();                // no stage starts anything after this
  if (recorder_) recorder_->Close();       // the dispatcher no longer records: a timeline not yet out goes now
  if (links_) links_->Shutdown();
  if (transport_) transport_->Shutdown();  // no server callback runs after this
  if (local_) local_->Close();             // nor a local one
  stand_ins_.reset();                      // nothing posts to it any more
  pipelines_.reset();                      // its device groups still reach the (closed) local reducer
  local_.reset();
  cluster_.reset();
  if (control_transport_) control_transport_->Shutdown();
}

}  // namespace byteps::worker
