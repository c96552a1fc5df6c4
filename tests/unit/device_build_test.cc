// What this build can do on a GPU, as users read it: the warnings for the original's NCCL knobs
// follow the build (CUDA built or not, GPU groups built or not), and the CUDA runtime is loaded at
// run time, naming what it loaded or everything it tried.
#include <gtest/gtest.h>

#include <string>

#include "config/config.h"
#include "device/cuda_runtime.h"
#include "device/device.h"
#include "device/group.h"

namespace byteps::device {
namespace {

// (Named without "cuda"/"nccl": scripts/gpu_check_report.py counts such tests as the CUDA path's.)
TEST(DeviceBuildTest, TheOriginalsGroupKnobsAreWordedForThisBuild) {
  const bool cuda = Built(Kind::kCuda);
  const bool groups = GroupsBuilt(Kind::kCuda);
  ASSERT_TRUE(cuda || !groups);
  for (const char* name : {"BYTEPS_NCCL_GROUP_SIZE", "BYTEPS_NCCL_NUM_RINGS", "BYTEPS_REDUCE_ROOTS"}) {
    SCOPED_TRACE(name);
    auto c = config::Load(config::Environment{{name, "2"}});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_EQ(c->warnings.size(), 1u);
    const std::string& w = c->warnings[0];
    EXPECT_EQ(w.find("this build has no CUDA") != std::string::npos, !cuda) << w;
    EXPECT_EQ(w.find("this build has no GPU groups") != std::string::npos, cuda && !groups) << w;
    EXPECT_EQ(w.find("one NCCL reduce and broadcast per partition") != std::string::npos, groups) << w;
  }
}

TEST(DeviceBuildTest, TheCudaRuntimeIsLoadedAtRunTimeOrNamesWhatItTried) {
  const std::string d = CudaRuntimeDescription();
  if (!Built(Kind::kCuda)) {
    EXPECT_FALSE(CudaRuntimeStatus().ok());
    EXPECT_NE(d.find("not built"), std::string::npos) << d;
    return;
  }
  EXPECT_NE(d.find("libcudart.so."), std::string::npos) << d;
  if (CudaRuntimeStatus().ok()) {
    EXPECT_NE(d.find(": runtime "), std::string::npos) << d;
    EXPECT_NE(d.find(", driver "), std::string::npos) << d;
  } else {
    EXPECT_NE(d.find("tried"), std::string::npos) << d;
  }
  // Without a usable GPU, opening one says why, with the versions that met (or the load failure).
  auto dev = Open(Kind::kCuda, 0);
  if (dev.ok()) {  // a GPU machine: the runtime that was loaded met a driver
    EXPECT_TRUE(CudaRuntimeStatus().ok()) << d;
    EXPECT_EQ(d.find("driver none"), std::string::npos) << d;
    return;
  }
  const std::string m = dev.status().message();
  EXPECT_NE(m.find("cuda:0"), std::string::npos) << m;
  EXPECT_NE(m.find("libcudart.so."), std::string::npos) << m;
}

}  // namespace
}  // namespace byteps::device
