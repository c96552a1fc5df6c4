// The backends behind device::Open (device.cc). Internal to the device layer.
#pragma once

#include <memory>

#include "common/status.h"
#include "device/device.h"

namespace byteps::device {

std::shared_ptr<Device> OpenCpu();
// The fake device `index`: one instance per index in the process (tests reach it through
// FakeDevice::Get with the same index, see fake_device.h).
std::shared_ptr<Device> OpenFake(int index);
// The CUDA device `index`, or the reason it cannot be had (no CUDA in this build, no such GPU).
StatusOr<std::shared_ptr<Device>> OpenCuda(int index);
bool CudaBuilt();
// 64-byte aligned host memory (free with std::free), for the cpu and fake backends; the error names
// `who` and the size.
StatusOr<void*> AlignedHost(size_t bytes, const char* who);
// Page-aligned host memory whose pages prefer NUMA node `node` (AlignedHost for node < 0).
StatusOr<void*> AlignedHostOnNode(size_t bytes, int node, const char* who);

}  // namespace byteps::device
