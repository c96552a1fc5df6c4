// The circles of one host's worker processes (BYTEPS_LOCAL_SIZE > 1), each a LocalReducer (a star
// around its last member, over a Unix socket and shared memory):
//   all     every local process; host tensors reduce through it, and its root (the highest local
//           rank) is the host's local root, the one process that talks to the servers;
//   switch  the processes whose GPUs sit under one PCIe switch (BYTEPS_PCIE_SWITCH_SIZE of them,
//           consecutive local ranks); a device group per switch reduces to the switch's root
//           (its last member) and broadcasts back; with one switch it is `all`;
//   cross   the switches' roots, in cross-switch mode only: they sum the switch-reduced tensors
//           staged in host memory on the CPU, as BytePS does (GPU peer traffic across switches
//           goes through the CPU's root complex), and the host's local root pushes the sum.
// Every process starts its circles in the same order (all, switch, cross), each bounded by the
// start timeout, so no two processes wait on each other.
// Threading: the circles are thread-safe (LocalReducer); this object is immutable after Start.
#pragma once

#include <memory>
#include <string>

#include "worker/local_reduce/local_reducer.h"

namespace byteps::worker::local_reduce {

// Where a process sits among its host's PCIe switches.
struct SwitchLayout {
  int switch_size = 1;   // processes per switch (== local_size: one switch, no cross-switch step)
  int switches = 1;
  int index = 0;         // this process's switch
  int place = 0;         // its place in the switch (switch_size - 1: the switch's root)
  bool cross() const { return switches > 1; }
  bool switch_root() const { return place == switch_size - 1; }
};

// The layout of `local_rank` of `local_size` for BYTEPS_PCIE_SWITCH_SIZE `configured` (0: not
// set) and the switch size the topology shows (`detected`, 0: unknown). The variable wins; a size
// that is not below local_size or does not divide it means one switch, as in BytePS, with
// `*warning` saying why when the variable asked for another.
SwitchLayout LayoutSwitches(int local_rank, int local_size, int configured, int detected, std::string* warning);

class LocalCircles {
 public:
  using Done = LocalReducer::Done;
  // `base`: this process's options for the `all` circle (its local rank and size).
  static StatusOr<std::unique_ptr<LocalCircles>> Start(const LocalOptions& base, const SwitchLayout& layout,
                                                       Done on_failure);

  LocalReducer* all() const { return all_.get(); }
  LocalReducer* pcie_switch() const { return switch_ ? switch_.get() : all_.get(); }
  LocalReducer* cross() const { return cross_.get(); }  // nullptr unless a switch root in cross-switch mode
  const SwitchLayout& layout() const { return layout_; }
  bool is_root() const { return all_->is_root(); }

  void FailAll(const Status& st);
  Status failure() const;
  void Leave();
  void Close();

 private:
  SwitchLayout layout_;
  std::unique_ptr<LocalReducer> all_, switch_, cross_;
};

}  // namespace byteps::worker::local_reduce
