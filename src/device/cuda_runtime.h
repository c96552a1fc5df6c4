// The CUDA runtime (libcudart), loaded at run time rather than linked, so that the runtime in use
// is the one the framework already loaded (torch's, from its pip wheel) or one the driver can run,
// and a machine without CUDA loads byteps all the same. Compiled only with BYTEPS_HAVE_CUDA.
//
// The first use loads libcudart.so.<the toolkit's major version>, in this order: the copy already
// in the process (torch's), the loader's search path, then the folders found at build time (pip's
// nvidia wheels, the toolkit's lib64) and <BYTEPS_CUDA_HOME, else CUDA_HOME>/lib64 (library_homes.h). The cuda*
// functions the backends call are defined (hidden) in cuda_runtime.cc and forward to it; while it
// is not loaded they answer cudaErrorSharedObjectInitFailed.
//
// Threading: any thread; loading happens once.
#pragma once

#include <string>

#include "common/status.h"

namespace byteps::device {

// OK once libcudart is loaded; else Unavailable naming the library and every place tried.
Status CudaRuntimeStatus();
// The loaded library's path and the versions ("/…/libcudart.so.13: runtime 13.0, driver 13.0");
// the failure's message if it could not be loaded.
std::string CudaRuntimeDescription();

}  // namespace byteps::device
