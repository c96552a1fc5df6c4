// Where to look for the GPU libraries loaded at run time (libcudart, libnccl) when the loader's
// search path does not have them: the folders the configuration names (BYTEPS_CUDA_HOME / CUDA_HOME,
// BYTEPS_NCCL_HOME / NCCL_HOME; src/config reads them, the device layer never reads the
// environment). The process sets them once its configuration is loaded, before the first device
// use; unset, only the loader's path and the build's folders are searched.
// Threading: any thread.
#pragma once

#include <string>

namespace byteps::device {

struct LibraryHomes {
  std::string cuda;  // the toolkit's folder: <cuda>/lib64 holds libcudart
  std::string nccl;  // NCCL's folder: <nccl>/lib holds libnccl.so.2
};

void SetLibraryHomes(LibraryHomes homes);
LibraryHomes GetLibraryHomes();

}  // namespace byteps::device
