"""Horovod's PyTorch API on byteps, so that a Horovod script runs by changing its import
(``import horovod.torch as hvd`` -> ``import byteps.torch as hvd``).

Every call goes through the summation servers.  The implementation is split by family:

* :mod:`.hvd_common`: reduce ops (``Average=0 ... Product=5``), ``HorovodInternalError``
  (byteps' core error type), process sets (hvd_process_sets.py), dtype checks,
  op names (``"<op>.<name>"`` / ``"<op>.noname.<handle>"``, unique while in flight), handles;
* :mod:`.hvd_allreduce`: the allreduce family (async / in-place / grouped);
* :mod:`.hvd_gather`: allgather, grouped allgather, alltoall, sparse allreduce, allgather_object;
* :mod:`.hvd_bcast_scatter`: broadcast and reducescatter families;
* :mod:`.hvd_autograd`: the differentiable forms, with Horovod's backward rules;
* :mod:`.hvd_basics`: init/shutdown, build queries, barrier, join, timeline.

docs/migration.md lists Horovod's names one by one with what byteps does for each.
"""

from __future__ import annotations

from .hvd_allreduce import (allreduce_, allreduce_async, allreduce_async_, grouped_allreduce_,
                            grouped_allreduce_async, grouped_allreduce_async_)
from .hvd_autograd import (allgather, allreduce, alltoall, broadcast, grouped_allgather, grouped_allreduce,
                           grouped_reducescatter, reducescatter)
from .hvd_basics import (barrier, ccl_built, cuda_built, ddl_built, gloo_built, gloo_enabled, init,
                         is_homogeneous, is_initialized, join, mpi_built, mpi_enabled, mpi_threads_supported,
                         nccl_built, rocm_built, shutdown, start_timeline, stop_timeline)
from .hvd_bcast_scatter import (broadcast_, broadcast_async, broadcast_async_, grouped_reducescatter_async,
                                reducescatter_async)
from .hvd_common import (Adasum, Average, Max, Min, Product, ProcessSet, Sum, add_process_set, global_process_set,
                         remove_process_set)
from .hvd_handles import poll, synchronize
from .hvd_gather import (allgather_async, allgather_object, alltoall_async, grouped_allgather_async,
                         sparse_allreduce_async)

__all__ = [
    "init", "shutdown", "is_initialized", "mpi_built", "mpi_enabled", "mpi_threads_supported", "gloo_built",
    "gloo_enabled", "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built", "is_homogeneous",
    "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce", "grouped_allreduce_",
    "grouped_allreduce_async", "grouped_allreduce_async_", "sparse_allreduce_async",
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "alltoall", "alltoall_async", "reducescatter", "reducescatter_async", "grouped_reducescatter",
    "grouped_reducescatter_async", "poll", "synchronize", "join", "barrier", "allgather_object",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    "start_timeline", "stop_timeline",
]


def __getattr__(name: str):
    if name == "HorovodInternalError":  # lazily: importing this module needs no built core
        from .hvd_common import internal_error_type  # noqa: PLC0415

        return internal_error_type()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
