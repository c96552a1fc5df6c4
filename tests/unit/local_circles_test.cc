// Where each local process sits among its host's PCIe switches (LayoutSwitches): the variable wins
// over the topology, and a size that does not split the host evenly means one switch.
#include <gtest/gtest.h>

#include <string>

#include "worker/local_reduce/local_circles.h"

namespace byteps::worker {
namespace {

TEST(LayoutSwitches, TwoSwitchesOfTwo) {
  std::string warning;
  for (int r = 0; r < 4; ++r) {
    local_reduce::SwitchLayout l = local_reduce::LayoutSwitches(r, 4, 2, 0, &warning);
    EXPECT_TRUE(l.cross());
    EXPECT_EQ(l.switches, 2);
    EXPECT_EQ(l.switch_size, 2);
    EXPECT_EQ(l.index, r / 2);
    EXPECT_EQ(l.place, r % 2);
    EXPECT_EQ(l.switch_root(), r % 2 == 1);
  }
  EXPECT_TRUE(warning.empty());
}

TEST(LayoutSwitches, TheVariableWinsOverTheTopology) {
  std::string warning;
  EXPECT_EQ(local_reduce::LayoutSwitches(0, 8, 4, 2, &warning).switch_size, 4);
  EXPECT_EQ(local_reduce::LayoutSwitches(0, 8, 0, 2, &warning).switch_size, 2);  // unset: the topology's
  EXPECT_FALSE(local_reduce::LayoutSwitches(0, 8, 0, 0, &warning).cross());      // neither: one switch
  EXPECT_TRUE(warning.empty());
}

TEST(LayoutSwitches, ASizeThatDoesNotSplitTheHostMeansOneSwitch) {
  std::string warning;
  auto l = local_reduce::LayoutSwitches(1, 4, 8, 0, &warning);  // BytePS's default 8 on a 4-GPU host
  EXPECT_FALSE(l.cross());
  EXPECT_EQ(l.switch_size, 4);
  EXPECT_TRUE(warning.empty());  // not asking for anything smaller than the host
  l = local_reduce::LayoutSwitches(1, 6, 4, 0, &warning);
  EXPECT_FALSE(l.cross());
  EXPECT_NE(warning.find("BYTEPS_PCIE_SWITCH_SIZE=4"), std::string::npos) << warning;
  EXPECT_NE(warning.find("BYTEPS_LOCAL_SIZE=6"), std::string::npos) << warning;
}

TEST(LayoutSwitches, OneProcessPerSwitch) {
  local_reduce::SwitchLayout l = local_reduce::LayoutSwitches(2, 4, 1, 0, nullptr);
  EXPECT_TRUE(l.cross());
  EXPECT_EQ(l.switches, 4);
  EXPECT_TRUE(l.switch_root());
}

}  // namespace
}  // namespace byteps::worker
