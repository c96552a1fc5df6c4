// A group of devices on one host that reduce and broadcast among themselves, on their own streams
// (NCCL for CUDA; the fake device's in-process rendezvous for tests). The local reduce of a host's
// GPUs is built on it: reduce to the local root's GPU, push-pull from there, broadcast back.
//
// Every rank must queue the same collectives in the same order (NCCL's rule); the caller orders
// them (the local root decides and tells the others). A collective is queued on `stream` after
// the work already there and returns at once; its completion is observed through the device's
// events on that stream (Completions). NCCL's failures are modelled by the fake groups too: a
// collective whose peer never queues its part never finishes (its stream is stuck, and no error
// comes), and the groups refuse a device that two ranks share.
//
// On any failure or deadline the caller aborts the group (ncclCommAbort), which ends its stuck
// collectives; a group is destroyed (ncclCommDestroy) only with no work in flight.
//
// Threading: one Group is used by one thread at a time (the caller serialises its collectives and
// Abort).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/dtype.h"
#include "common/status.h"
#include "device/device.h"

namespace byteps::device {

class Group {
 public:
  virtual ~Group() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The element-wise sum of every rank's `count` elements at `send` lands in `recv` on `root`
  // (`recv` is ignored elsewhere; send == recv is allowed).
  virtual Status Reduce(const void* send, void* recv, size_t count, DataType dtype, int root, StreamHandle stream) = 0;
  // `root`'s `bytes` at `buf` land in every rank's `buf`.
  virtual Status Broadcast(void* buf, size_t bytes, int root, StreamHandle stream) = 0;
  // ncclCommAbort: this rank's collectives still queued or stuck end (their results are garbage),
  // and later calls fail without queueing anything. Idempotent.
  virtual void Abort() = 0;
  virtual bool aborted() const = 0;
};

// Whether devices of `kind` can form groups here: cuda when this build has NCCL's header and
// libnccl.so.2 loads (the same answer for every process of a host); fake only once a test called
// EnableFakeGroups (its groups meet inside one process, so separate processes cannot use them);
// cpu never.
bool GroupsAvailable(Kind kind);
// Whether this build has the group backend of `kind` at all: cuda when NCCL's header was found at
// build time; fake always; cpu never. (GroupsAvailable also needs libnccl.so.2 at run time.)
bool GroupsBuilt(Kind kind);
// Why devices of `kind` cannot form groups here, naming what is missing; OK when they can.
Status GroupsStatus(Kind kind);
void EnableFakeGroups(bool on);
// A new group's id (ncclGetUniqueId for cuda), which rank 0 hands to the others out of band.
StatusOr<std::string> NewGroupId(Kind kind);
// Joins group `id` as `rank` of `size` on `device`; blocks until every rank joined or `timeout_s`
// passed. Errors name the device and the rank ("NCCL init on cuda:1 (local rank 1 of 4) failed: ...").
// Two ranks on one device (the same hardware_id) fail every rank's join, as NCCL does.
StatusOr<std::unique_ptr<Group>> JoinGroup(std::shared_ptr<Device> device, const std::string& id, int rank, int size,
                                           double timeout_s);

}  // namespace byteps::device
