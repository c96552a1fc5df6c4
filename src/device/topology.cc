#include "device/topology.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#ifdef BYTEPS_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace byteps::device {

namespace {
std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// "0,2,3" -> {0, 2, 3}; anything else (UUIDs, "all", empty) -> nothing.
std::vector<int> ParseIndices(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty() || !std::all_of(item.begin(), item.end(), [](char c) { return std::isdigit(c) != 0; }))
      return {};
    out.push_back(std::atoi(item.c_str()));
  }
  return out;
}
}  // namespace

int SwitchSizeOf(const std::vector<PciGpu>& gpus, const std::string& visible) {
  std::vector<const PciGpu*> seen;
  const std::vector<int> indices = ParseIndices(visible);
  if (indices.empty()) {
    for (const auto& g : gpus) seen.push_back(&g);
  } else {
    for (int i : indices) {
      if (i < 0 || i >= static_cast<int>(gpus.size())) return 0;
      seen.push_back(&gpus[i]);
    }
  }
  std::map<std::string, int> per_switch;
  for (const PciGpu* g : seen) {
    if (g->switch_id.empty()) return 0;
    ++per_switch[g->switch_id];
  }
  if (per_switch.size() < 2) return 0;
  const int size = per_switch.begin()->second;
  for (const auto& [id, n] : per_switch)
    if (n != size) return 0;
  return size;
}

int DetectedSwitchSize(const std::string& visible) { return SwitchSizeOf(HostGpus(), visible); }

int NumaNodeOfPci(const std::string& bus_id) {
  std::ifstream f(fmt::format("/sys/bus/pci/devices/{}/numa_node", Lower(bus_id)));
  int node = -1;
  if (f >> node) return node < 0 ? -1 : node;
  for (const auto& g : HostGpus())
    if (Lower(g.bus_id) == Lower(bus_id)) return g.numa_node;
  return -1;
}

#ifdef BYTEPS_HAVE_HWLOC

bool TopologyBuilt() { return true; }

std::vector<PciGpu> HostGpus() {
  // One load at a time: hwloc's Linux backend reaches libudev, whose process-wide state is not
  // safe for concurrent loads (ThreadSanitizer saw it, with engines started as threads).
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::vector<PciGpu> out;
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return out;
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  // Only the PCI tree and the NUMA nodes are read. hwloc's Linux backend finds the same PCI
  // devices and bridges in sysfs that its libpciaccess plugin ("pci") finds, and that plugin leaks
  // once unloaded (LeakSanitizer); the GPU-runtime plugins would create a CUDA / OpenCL context
  // in every process. Names hwloc does not know are refused harmlessly.
  for (const char* unneeded : {"pci", "cuda", "nvml", "opencl", "rsmi", "levelzero", "gl"}) {
    hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, unneeded);
  }
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return out;
  }
  for (hwloc_obj_t d = hwloc_get_next_pcidev(topo, nullptr); d; d = hwloc_get_next_pcidev(topo, d)) {
    const auto& pci = d->attr->pcidev;
    if (pci.vendor_id != 0x10de || (pci.class_id >> 8) != 0x03) continue;  // NVIDIA display / 3D controller
    PciGpu g;
    g.bus_id = fmt::format("{:04x}:{:02x}:{:02x}.{:x}", pci.domain, pci.bus, pci.dev, pci.func);
    // Up to the host bridge; the topmost PCI-to-PCI bridge below it is the switch's upstream port.
    for (hwloc_obj_t p = d->parent; p && p->type == HWLOC_OBJ_BRIDGE; p = p->parent) {
      if (p->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI) {
        const auto& up = p->attr->bridge.upstream.pci;
        g.switch_id = fmt::format("{:04x}:{:02x}:{:02x}.{:x}", up.domain, up.bus, up.dev, up.func);
      }
    }
    hwloc_obj_t host = hwloc_get_non_io_ancestor_obj(topo, d);
    if (host && host->nodeset && !hwloc_bitmap_iszero(host->nodeset) && hwloc_bitmap_weight(host->nodeset) == 1) {
      g.numa_node = hwloc_bitmap_first(host->nodeset);
    }
    out.push_back(std::move(g));
  }
  hwloc_topology_destroy(topo);
  std::sort(out.begin(), out.end(), [](const PciGpu& a, const PciGpu& b) { return a.bus_id < b.bus_id; });
  return out;
}

#else

bool TopologyBuilt() { return false; }
std::vector<PciGpu> HostGpus() { return {}; }

#endif

}  // namespace byteps::device
