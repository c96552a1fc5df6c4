// Where a host's GPUs sit: which PCIe switch each is under, and its NUMA node, read from hwloc
// (Debian's libhwloc; BYTEPS_HAVE_HWLOC) where the build found it. The worker groups its local
// processes by switch from it when BYTEPS_PCIE_SWITCH_SIZE is not set
// (worker/local_reduce/local_circles.h), and places staging memory on a GPU's node (numa.h).
// Threading: pure functions, and hwloc reads (one at a time) that build their own topology per call.
#pragma once

#include <string>
#include <vector>

namespace byteps::device {

struct PciGpu {
  std::string bus_id;     // "0000:1a:00.0"
  std::string switch_id;  // the PCIe switch above it (its topmost PCI-to-PCI bridge); "" when on a root port
  int numa_node = -1;
};

// Whether this build reads the topology (hwloc found at build time).
bool TopologyBuilt();

// The host's GPUs (NVIDIA display / 3D controllers), in PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID);
// empty without hwloc or without GPUs. HWLOC_XMLFILE, hwloc's own variable, reads a saved topology.
std::vector<PciGpu> HostGpus();

// GPUs per switch among those visible (`visible`: CUDA_VISIBLE_DEVICES's value, a list of indices
// into `gpus`; empty or not a list of numbers: all), when every visible GPU's switch holds the same
// number of them and there are several switches; 0 otherwise (unknown, unbalanced, one switch, or
// GPUs on root ports, as with NVLink, where there is nothing to gain).
int SwitchSizeOf(const std::vector<PciGpu>& gpus, const std::string& visible);

// SwitchSizeOf(HostGpus(), visible): `visible` is CUDA_VISIBLE_DEVICES, else NVIDIA_VISIBLE_DEVICES
// (from the process's Config).
int DetectedSwitchSize(const std::string& visible);

// The NUMA node of the PCI device `bus_id` ("0000:1a:00.0", any case; -1: unknown).
int NumaNodeOfPci(const std::string& bus_id);

}  // namespace byteps::device
