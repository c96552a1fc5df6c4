# NCCL, for the GPU groups (the NCCL local reduce of a host's GPUs): found here, at the top level,
# because two layers depend on the answer: device builds the NCCL group backend, config words the
# warnings for the original's NCCL knobs after what this build can do.
#
# Only the header is needed at build time; libnccl.so.2 is opened at run time (nccl_group.cc), by
# name and then from the folder found here. Searched: BYTEPS_NCCL_HOME (the original's name; one
# without nccl.h is an error), NCCL_HOME, CUDA's folders, and pip's nvidia-nccl wheel (where
# torch's CUDA builds get NCCL from). Sets BYTEPS_HAVE_NCCL_GROUPS, BYTEPS_NCCL_INCLUDE,
# BYTEPS_NCCL_LIB_DIR (may be empty), and BYTEPS_NCCL_MISSING (why not) for the closing summary.
set(BYTEPS_HAVE_NCCL_GROUPS OFF)
set(BYTEPS_NCCL_LIB_DIR "")
if(NOT BYTEPS_HAVE_CUDA)
  set(BYTEPS_NCCL_MISSING "no CUDA")
  return()
endif()
set(_nccl_roots "")
if(DEFINED ENV{BYTEPS_NCCL_HOME})
  list(APPEND _nccl_roots "$ENV{BYTEPS_NCCL_HOME}")
endif()
if(DEFINED ENV{NCCL_HOME})
  list(APPEND _nccl_roots "$ENV{NCCL_HOME}")
endif()
if(Python3_EXECUTABLE)
  execute_process(COMMAND "${Python3_EXECUTABLE}" -c
                          "import importlib.util as u; s = u.find_spec('nvidia.nccl'); print(list(s.submodule_search_locations)[0] if s else '')"
                  OUTPUT_VARIABLE _pip_nccl OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_pip_nccl)
    list(APPEND _nccl_roots "${_pip_nccl}")
  endif()
endif()
set(_nccl_include_hints ${CUDAToolkit_INCLUDE_DIRS})
set(_nccl_lib_hints ${CUDAToolkit_LIBRARY_DIR})
foreach(_root IN LISTS _nccl_roots)
  list(PREPEND _nccl_include_hints "${_root}/include")
  list(PREPEND _nccl_lib_hints "${_root}/lib" "${_root}/lib64")
endforeach()
find_path(BYTEPS_NCCL_INCLUDE nccl.h HINTS ${_nccl_include_hints})
if(DEFINED ENV{BYTEPS_NCCL_HOME} AND NOT EXISTS "$ENV{BYTEPS_NCCL_HOME}/include/nccl.h")
  message(FATAL_ERROR "BYTEPS_NCCL_HOME=$ENV{BYTEPS_NCCL_HOME} has no include/nccl.h: point it at an NCCL "
                      "installation (include/ and lib/), or unset it to search the usual places")
endif()
find_library(BYTEPS_NCCL_LIBRARY NAMES libnccl.so.2 nccl HINTS ${_nccl_lib_hints})
if(BYTEPS_NCCL_INCLUDE)
  set(BYTEPS_HAVE_NCCL_GROUPS ON)
  if(BYTEPS_NCCL_LIBRARY)
    get_filename_component(BYTEPS_NCCL_LIB_DIR "${BYTEPS_NCCL_LIBRARY}" DIRECTORY)
  endif()
  message(STATUS "byteps: nccl.h found (${BYTEPS_NCCL_INCLUDE}): building the NCCL group backend")
else()
  set(BYTEPS_NCCL_MISSING "nccl.h not found: set BYTEPS_NCCL_HOME, or install NCCL or pip's nvidia-nccl")
  message(STATUS "byteps: nccl.h not found: GPU groups (the NCCL local reduce) are left out")
endif()
