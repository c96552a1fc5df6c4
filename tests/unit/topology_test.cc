// The host topology the GPU path reads: PCIe switches from hwloc (a saved topology through hwloc's
// HWLOC_XMLFILE: two sockets, one switch of two NVIDIA GPUs each, a NIC on a root port), the
// switch-size rule, and NUMA placement of staging memory (fake device bound to node 0).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "device/fake_device.h"
#include "device/numa.h"
#include "device/topology.h"

namespace byteps::device {
namespace {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_, old_.c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

std::vector<PciGpu> Gpus(std::initializer_list<const char*> switches) {
  std::vector<PciGpu> out;
  int i = 0;
  for (const char* s : switches) out.push_back({"0000:0" + std::to_string(i++) + ":00.0", s, 0});
  return out;
}

TEST(SwitchSize, EqualSwitchesGiveTheirSize) {
  EXPECT_EQ(SwitchSizeOf(Gpus({"a", "a", "b", "b"}), ""), 2);
  EXPECT_EQ(SwitchSizeOf(Gpus({"a", "a", "a", "a", "b", "b", "b", "b"}), ""), 4);
}

TEST(SwitchSize, OneSwitchUnbalancedOrRootPortsGiveNothing) {
  EXPECT_EQ(SwitchSizeOf(Gpus({"a", "a", "a", "a"}), ""), 0);  // one switch: nothing across
  EXPECT_EQ(SwitchSizeOf(Gpus({"a", "a", "a", "b"}), ""), 0);  // unbalanced
  EXPECT_EQ(SwitchSizeOf(Gpus({"", "", "", ""}), ""), 0);      // root ports (NVLink boxes)
  EXPECT_EQ(SwitchSizeOf({}, ""), 0);
}

TEST(SwitchSize, OnlyTheVisibleGpusCount) {
  const auto gpus = Gpus({"a", "a", "b", "b"});
  EXPECT_EQ(SwitchSizeOf(gpus, "0,1"), 0);  // both under switch a
  EXPECT_EQ(SwitchSizeOf(gpus, "0,2"), 1);  // one per switch
  EXPECT_EQ(SwitchSizeOf(gpus, "0,1,2,3"), 2);
  EXPECT_EQ(SwitchSizeOf(gpus, "0,7"), 0);  // an index this host does not have: unknown
  EXPECT_EQ(SwitchSizeOf(gpus, "GPU-5f3c,GPU-77aa"), 2);  // UUIDs: not a list of indices, all count
}

TEST(HostTopology, ReadsSwitchesAndNodesFromHwloc) {
  if (!TopologyBuilt()) GTEST_SKIP() << "this build has no hwloc (libhwloc-dev): the topology is not read";
  ScopedEnv xml("HWLOC_XMLFILE", BYTEPS_TEST_DATA_DIR "/two_switches_four_gpus.xml");
  const auto gpus = HostGpus();
  ASSERT_EQ(gpus.size(), 4u);  // the NIC is not a GPU
  EXPECT_EQ(gpus[0].bus_id, "0000:11:00.0");
  EXPECT_EQ(gpus[3].bus_id, "0000:92:00.0");
  EXPECT_EQ(gpus[0].switch_id, gpus[1].switch_id);
  EXPECT_EQ(gpus[2].switch_id, gpus[3].switch_id);
  EXPECT_NE(gpus[0].switch_id, gpus[2].switch_id);
  EXPECT_EQ(gpus[0].numa_node, 0);
  EXPECT_EQ(gpus[3].numa_node, 1);
  EXPECT_EQ(DetectedSwitchSize(""), 2);
  EXPECT_EQ(DetectedSwitchSize("2,3"), 0);  // both under one switch
}

TEST(HostTopology, ThisMachineReadsWithoutError) {
  // No GPU here: nothing detected, so a host's processes reduce as one switch.
  ScopedEnv xml("HWLOC_XMLFILE", nullptr);
  for (const auto& g : HostGpus()) EXPECT_FALSE(g.bus_id.empty());
  EXPECT_GE(NumaNodes(), 1);
}

TEST(Numa, StagingMemoryPrefersTheDevicesNode) {
  if (!NumaAvailable()) GTEST_SKIP() << "no NUMA here (libnuma not built or the kernel lacks it)";
  auto fake = FakeDevice::Get(900);
  FakeOptions o;
  o.numa_node = 0;
  fake->SetOptions(o);
  auto p = fake->AllocHost(1 << 20);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto node = PolicyNodeOf(*p);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_EQ(*node, 0);
  fake->FreeHost(*p);
  fake->SetOptions({});
  auto q = fake->AllocHost(1 << 20);  // no node: the default policy
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*PolicyNodeOf(*q), -1);
  Status bad = PreferNode(*q, 4096, NumaNodes() + 3);  // a node that does not exist is named
  EXPECT_NE(bad.message().find("NUMA node"), std::string::npos) << bad.ToString();
  fake->FreeHost(*q);
}

TEST(Numa, AThreadPreferringANodeGetsItsPoliciesBack) {
  if (!NumaAvailable()) GTEST_SKIP() << "no NUMA here (libnuma not built or the kernel lacks it)";
  ASSERT_EQ(*ThreadPolicyNode(), -1);
  {
    ScopedPreferredNode on0(0);
    EXPECT_EQ(*ThreadPolicyNode(), 0);  // what cudaHostAlloc's pages follow
  }
  EXPECT_EQ(*ThreadPolicyNode(), -1);
}

}  // namespace
}  // namespace byteps::device
