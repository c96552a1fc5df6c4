#include "worker/trace/trace_recorder.h"

#include <fmt/format.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "common/logging.h"
#include "worker/pipeline/pipeline.h"
#include "worker/tensor_request.h"
#include "worker/trace/trace_writer.h"

namespace byteps::worker::trace {

namespace {

int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t EpochMinusSteadyNs() {
  const int64_t system_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
  return system_ns - SteadyNs();
}

}  // namespace

StatusOr<std::unique_ptr<TraceRecorder>> TraceRecorder::Create(const TraceOptions& options) {
  const std::string dir = (std::filesystem::path(options.dir) / std::to_string(options.local_rank)).string();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return InvalidArgument(fmt::format("BYTEPS_TRACE_DIR={}: cannot create the timeline directory {}: {}",
                                       options.dir, dir, ec.message()));
  }
  const std::string probe = fmt::format("{}/.byteps-write-probe-{}", dir, ::getpid());
  std::FILE* f = std::fopen(probe.c_str(), "w");
  if (f == nullptr) {
    return InvalidArgument(fmt::format("BYTEPS_TRACE_DIR={}: cannot write in the timeline directory {}: {}",
                                       options.dir, dir, std::strerror(errno)));
  }
  std::fclose(f);
  std::remove(probe.c_str());
  return std::unique_ptr<TraceRecorder>(new TraceRecorder(options, dir + "/comm.json"));
}

TraceRecorder::TraceRecorder(const TraceOptions& options, std::string path)
    : options_(options), path_(std::move(path)), data_(std::make_unique<TraceData>()) {
  data_->epoch_minus_steady_ns = EpochMinusSteadyNs();
}

TraceRecorder::~TraceRecorder() { Close(); }

void TraceRecorder::SetRank(int rank) { options_.rank = rank; }

void TraceRecorder::SetClock(std::string job, int64_t offset_us) {
  std::lock_guard<std::mutex> lock(mu_);
  job_ = std::move(job);
  clock_offset_us_ = offset_us;
}

void TraceRecorder::Close() {
  if (!handed_off_ && data_ && data_->totals.size() > 0) {
    handed_off_ = true;
    live_.clear();
    Write(*data_);
  }
  handed_off_ = true;
  data_.reset();
  if (writer_.joinable()) writer_.join();
}

uint16_t TraceRecorder::StageIndex(const pipeline::Stage* stage) {
  for (const auto& [s, i] : stage_ids_)
    if (s == stage) return i;
  const auto i = static_cast<uint16_t>(data_->stages.size());
  data_->stages.push_back(TimelineStageName(stage->name()));
  stage_ids_.emplace_back(stage, i);
  return i;
}

void TraceRecorder::OperationSubmitted(const pipeline::Operation& op) {
  if (handed_off_ || op.request.stand_in || op.request.name.rfind(kInternalPrefix, 0) == 0) return;
  auto [it, added] = tensors_.try_emplace(op.request.name);
  Tensor& t = it->second;
  if (added) {
    t.index = static_cast<uint32_t>(data_->tensors.size());
    data_->tensors.push_back(op.request.name);
  }
  const uint32_t step = ++t.submitted;
  if (step < static_cast<uint32_t>(options_.start_step) || step > static_cast<uint32_t>(options_.end_step)) return;
  if (!t.recording) {
    t.recording = true;
    ++recording_;
  }
  Live l;
  l.tensor = &t;
  l.step = step;
  l.stages = op.pipeline->size();
  l.total = data_->totals.Grow(1);
  l.first_span = data_->spans.Grow(op.parts.size() * l.stages);
  if (l.total == ChunkedBuffer<Total>::npos || l.first_span == ChunkedBuffer<Span>::npos) {
    BYTEPS_LOG(Warning, "local rank {}: no memory for more of the timeline: it ends at step {} of tensor '{}'",
               options_.local_rank, step, op.request.name);
    return HandOff();  // what was recorded is written; an unfinished total is left out
  }
  Total& total = data_->totals[l.total];
  total.tensor = t.index;
  total.step = step;
  total.bytes = op.request.bytes;
  total.submitted = SteadyNs();
  for (size_t p = 0; p < op.parts.size(); ++p) {
    const pipeline::PartitionTask& task = op.parts[p];
    for (size_t s = 0; s < l.stages; ++s) {
      Span& span = data_->spans[l.first_span + p * l.stages + s];
      span.tensor = t.index;
      span.step = step;
      span.stage = StageIndex(op.pipeline->at(s));
      span.server = task.server;
      span.key = task.key;
      span.bytes = task.len;
    }
  }
  live_.emplace(&op, l);
}

Span* TraceRecorder::SpanOf(const pipeline::PartitionTask& task, size_t stage) {
  if (live_.empty()) return nullptr;
  auto it = live_.find(task.op);
  if (it == live_.end() || stage >= it->second.stages) return nullptr;
  return &data_->spans[it->second.first_span + task.part * it->second.stages + stage];
}

void TraceRecorder::TaskQueued(const pipeline::PartitionTask& task, size_t stage) {
  if (Span* s = SpanOf(task, stage)) s->queued = SteadyNs();
}

void TraceRecorder::TaskStarted(const pipeline::PartitionTask& task, size_t stage) {
  if (Span* s = SpanOf(task, stage)) {
    s->started = SteadyNs();
    s->credit = task.credit_bytes > 0;
  }
}

void TraceRecorder::TaskCompleted(const pipeline::PartitionTask& task, size_t stage, const Status& status) {
  if (Span* s = SpanOf(task, stage)) {
    s->ended = SteadyNs();
    s->ok = status.ok();
  }
}

void TraceRecorder::OperationFinished(const pipeline::Operation& op) {
  if (live_.empty()) return;
  auto it = live_.find(&op);
  if (it == live_.end()) return;
  const Live l = it->second;
  live_.erase(it);
  Total& total = data_->totals[l.total];
  total.finished = SteadyNs();
  total.ok = op.status.ok();
  if (l.step == static_cast<uint32_t>(options_.end_step) && ++finished_ == recording_) HandOff();
}

void TraceRecorder::HandOff() {
  handed_off_ = true;
  live_.clear();
  writer_ = std::thread([this, data = std::move(data_)] {
    pthread_setname_np(pthread_self(), "bps-trace");
    Write(*data);
  });
}

void TraceRecorder::Write(const TraceData& data) {
  TraceMeta meta;
  meta.rank = options_.rank;
  meta.local_rank = options_.local_rank;
  meta.start_step = options_.start_step;
  meta.end_step = options_.end_step;
  {
    std::lock_guard<std::mutex> lock(mu_);
    meta.job = job_;
    meta.clock_offset_us = clock_offset_us_;
  }
  if (Status st = WriteTimelineFile(data, meta, path_); !st.ok()) {
    BYTEPS_LOG(Warning, "local rank {}: the timeline was not written: {}", options_.local_rank, st.message());
    return;
  }
  BYTEPS_LOG(Info, "local rank {}: timeline written to {}", options_.local_rank, path_);
}

}  // namespace byteps::worker::trace
