// Several observers behind one Observer pointer: each event goes to each, in the order they were
// added. The dispatcher keeps one pointer and one virtual call per event; only a fan-out that is
// installed pays one more call per observer.
// Threading: as Observer (the dispatcher thread); Add before the dispatcher reports anything.
#pragma once

#include <vector>

#include "worker/pipeline/observer.h"

namespace byteps::worker::pipeline {

class ObserverFanout final : public Observer {
 public:
  // `observer` is borrowed: it must outlive the fan-out's last event.
  void Add(Observer* observer) { observers_.push_back(observer); }
  size_t size() const { return observers_.size(); }

  void OperationSubmitted(const Operation& op) override {
    for (Observer* o : observers_) o->OperationSubmitted(op);
  }
  void TaskQueued(const PartitionTask& task, size_t stage) override {
    for (Observer* o : observers_) o->TaskQueued(task, stage);
  }
  void TaskStarted(const PartitionTask& task, size_t stage) override {
    for (Observer* o : observers_) o->TaskStarted(task, stage);
  }
  void TaskCompleted(const PartitionTask& task, size_t stage, const Status& status) override {
    for (Observer* o : observers_) o->TaskCompleted(task, stage, status);
  }
  void OperationFinished(const Operation& op) override {
    for (Observer* o : observers_) o->OperationFinished(op);
  }

 private:
  std::vector<Observer*> observers_;
};

}  // namespace byteps::worker::pipeline
