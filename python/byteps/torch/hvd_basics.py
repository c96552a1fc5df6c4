"""Horovod's lifecycle, build/runtime queries, barrier, join and timeline on byteps.

Build queries describe byteps, which is neither an MPI nor a Gloo build: ``mpi_built`` /
``mpi_enabled`` / ``gloo_built`` / ``gloo_enabled`` are False (``mpi_threads_supported`` raises
ValueError, as a non-MPI Horovod does), ``ccl_built`` / ``ddl_built`` / ``rocm_built`` are False,
``cuda_built`` says whether the core was built with CUDA, and ``nccl_built`` is non-zero when the
core was built with NCCL groups (the NCCL version code from torch, else from libnccl, else 1), 0
otherwise.

There is no timeline yet: ``start_timeline`` raises ValueError (Horovod's error when no timeline
was enabled at init), ``stop_timeline`` is a no-op (nothing is running); both raise ValueError
before init, as Horovod's.
"""

from __future__ import annotations

import ctypes
import functools
import subprocess
from pathlib import Path

import torch

from .. import _basics
from . import hvd_common as C
from . import hvd_handles as H
from . import ops
from .hvd_common import global_process_set

__all__ = ["init", "shutdown", "is_initialized", "mpi_built", "mpi_enabled", "mpi_threads_supported", "gloo_built",
           "gloo_enabled", "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built", "is_homogeneous",
           "barrier", "join", "start_timeline", "stop_timeline"]

_NOT_INIT = "Horovod has not been initialized; use hvd.init()."


def init(comm=None, process_sets=None, lazy: bool = True) -> None:
    """Joins the job (idempotent).  ``comm`` (an MPI communicator or rank list) needs an MPI build:
    ValueError; ``process_sets``: the sets to register (ids 1, 2, ... in list order; every worker
    passes the same list), or ``"dynamic"`` to allow :func:`add_process_set` later."""
    if isinstance(comm, bool):  # BytePS's init(lazy) called positionally
        comm, lazy = None, comm
    if comm is not None:
        raise ValueError("init(comm=...): byteps is not an MPI build; every worker of the job takes part (launch "
                         "the workers you want with bpsrun/bpslaunch)")
    dynamic = isinstance(process_sets, str) and process_sets == "dynamic"
    if isinstance(process_sets, str) and not dynamic:
        raise ValueError(f"init(process_sets={process_sets!r}): pass a list of hvd.ProcessSet or 'dynamic'")
    first = not _basics.is_initialized()
    if first:
        H.reset()
    ops.init(lazy)
    if first:
        C.register_process_sets([] if dynamic else process_sets, dynamic)


def shutdown() -> None:
    """Leaves the job; pending Horovod handles are forgotten and auto-names restart."""
    try:
        ops.shutdown()
    finally:
        H.reset()
        C.reset_process_sets()


def is_initialized() -> bool:
    return _basics.is_initialized()


def mpi_built() -> bool:
    return False


def mpi_enabled() -> bool:
    return False


def mpi_threads_supported() -> bool:
    raise ValueError("mpi_threads_supported: byteps is not an MPI build (MPI is not enabled)")


def gloo_built() -> bool:
    return False


def gloo_enabled() -> bool:
    return False


def ddl_built() -> bool:
    return False


def ccl_built() -> bool:
    return False


def rocm_built() -> bool:
    return False


def cuda_built() -> bool:
    core = _basics.core()
    return bool(core.device_built(core.DEVICE_CUDA))


@functools.lru_cache(maxsize=1)
def _core_says_nccl() -> bool:
    """Whether ``byteps-core info`` reports NCCL GPU groups in this build."""
    binary = Path(_basics.__file__).resolve().parent / "_bin" / "byteps-core"
    try:
        out = subprocess.run([str(binary), "info"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    line = next((ln for ln in out.splitlines() if ln.startswith("gpu groups:")), "")
    return line.split(":", 1)[-1].strip() == "nccl"


def _nccl_library_version() -> int:
    """``ncclGetVersion`` of the libnccl.so.2 the loader finds (the library the core opens at run
    time; the call needs no GPU), or 0 when it cannot be loaded."""
    try:
        lib = ctypes.CDLL("libnccl.so.2")
        code = ctypes.c_int(0)
        if lib.ncclGetVersion(ctypes.byref(code)) != 0:
            return 0
    except (OSError, AttributeError):
        return 0
    return int(code.value)


def nccl_built() -> int:
    """NCCL's version code (e.g. 21803, as Horovod's) when the core has NCCL groups, 0 when not.

    The code comes from torch when it has NCCL, else from libnccl itself; only when neither can
    tell is it 1.  (A CPU-only torch with a core built with NCCL used to give 1 always, which
    Horovod-style version gates read as "NCCL older than 2.7" and so skipped alltoall.)"""
    if not _core_says_nccl():
        return 0
    try:
        major, minor, patch = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - a CPU-only torch has no NCCL to ask
        return _nccl_library_version() or 1
    return major * 10000 + minor * 100 + patch if (major, minor) >= (2, 9) else major * 1000 + minor * 100 + patch


def is_homogeneous() -> bool:
    """Whether every host runs the same number of workers (byteps launches local_size per host)."""
    sizes = torch.zeros(_basics.size(), dtype=torch.int64)
    sizes[_basics.rank()] = _basics.local_size()
    from .hvd_allreduce import allreduce_async_  # noqa: PLC0415

    H.synchronize(allreduce_async_(sizes, name="is_homogeneous", op=C.Sum))
    return len(set(sizes.tolist())) == 1


def barrier(process_set=global_process_set) -> None:
    """Blocks until every worker of ``process_set`` has reached it (a one-element sum on the servers)."""
    if not _basics.is_initialized():
        raise C.internal_error(_NOT_INIT)
    process_set = C.check_process_set(process_set, "barrier")
    from .hvd_allreduce import allreduce_async_  # noqa: PLC0415

    handle = C.next_handle(process_set)  # Horovod's barrier consumes a handle too
    seq = C.barrier_number(process_set, handle)  # numbered alike on every member
    H.synchronize(allreduce_async_(torch.zeros(1, dtype=torch.int32), name=f"barrier.{seq}", op=C.Sum,
                                   process_set=process_set))


def join(device: int = -1) -> int:
    """Marks this worker as out of data and blocks until every worker has called ``join``; returns
    the rank of the last worker to join (the same on every worker).  Meanwhile the other workers'
    allreduces go on with this worker's share counted as zeros (Average still divides by
    ``size()``), and their allgathers, broadcasts, alltoalls and reducescatters fail with
    HorovodInternalError, as in Horovod.  The zeros are the servers' (``device`` only says where
    Horovod would allocate them; any int is accepted).  Global set only.  With several processes
    per host each joins alike; the host's local root runs the others' operations once it joined."""
    if not _basics.is_initialized():
        raise C.internal_error(_NOT_INIT)
    if isinstance(device, bool) or not isinstance(device, int):
        raise ValueError(f"join: device must be an int (a CUDA index, or -1 for the CPU), got {device!r}")
    C.next_handle(global_process_set)  # Horovod's join consumes a handle too
    return int(_basics.join())


def start_timeline(file_path, mark_cycles: bool = False) -> None:
    if not _basics.is_initialized():
        raise ValueError(_NOT_INIT)
    raise ValueError("start_timeline: byteps has no timeline yet (HOROVOD_TIMELINE is not read); use "
                     "BYTEPS_LOG_LEVEL=DEBUG to log each operation")


def stop_timeline() -> None:
    if not _basics.is_initialized():
        raise ValueError(_NOT_INIT)
