"""Horovod's errors in byteps.torch (issue 29): local argument checks raise ValueError on the
calling worker, cross-worker mismatches raise HorovodInternalError on every worker, and a long
mixed sequence with injected failures leaves the workers in step.  Plus the API surface
(names and positional order, no job needed) and name reuse."""

from __future__ import annotations

import inspect

import pytest

import byteps.torch as hvd
from byteps.torch import hvd_common
from test_hvd_ops import COMMON

# Horovod's positional order (reference section 5) for every collective.
SIGNATURES = {
    "allreduce": "tensor average name compression op prescale_factor postscale_factor process_set",
    "allreduce_async": "tensor average name op prescale_factor postscale_factor process_set",
    "allreduce_": "tensor average name op prescale_factor postscale_factor process_set",
    "allreduce_async_": "tensor average name op prescale_factor postscale_factor process_set",
    "grouped_allreduce": "tensors average name compression op prescale_factor postscale_factor process_set",
    "grouped_allreduce_async": "tensors average name op prescale_factor postscale_factor process_set",
    "grouped_allreduce_": "tensors average name op prescale_factor postscale_factor process_set",
    "grouped_allreduce_async_": "tensors average name op prescale_factor postscale_factor process_set",
    "sparse_allreduce_async": "tensor name op process_set",
    "allgather": "tensor name process_set", "allgather_async": "tensor name process_set",
    "grouped_allgather": "tensors name process_set", "grouped_allgather_async": "tensors name process_set",
    "broadcast": "tensor root_rank name process_set", "broadcast_async": "tensor root_rank name process_set",
    "broadcast_": "tensor root_rank name process_set", "broadcast_async_": "tensor root_rank name process_set",
    "alltoall": "tensor splits name process_set", "alltoall_async": "tensor splits name process_set",
    "reducescatter": "tensor name compression op process_set prescale_factor postscale_factor",
    "reducescatter_async": "tensor name op process_set prescale_factor postscale_factor",
    "grouped_reducescatter": "tensors name compression op process_set prescale_factor postscale_factor",
    "grouped_reducescatter_async": "tensors name op process_set prescale_factor postscale_factor",
    "barrier": "process_set", "join": "device", "allgather_object": "obj name",
    "DistributedOptimizer": "optimizer named_parameters compression backward_passes_per_step op "
                            "gradient_predivide_factor num_groups groups sparse_as_dense process_set "
                            "compression_params",  # byteps' addition (MXNet's), after Horovod's
    "init": "comm process_sets lazy", "start_timeline": "file_path mark_cycles",
}
OTHER_NAMES = ("shutdown is_initialized size rank local_size local_rank cross_size cross_rank mpi_built mpi_enabled "
               "mpi_threads_supported gloo_built gloo_enabled nccl_built ddl_built ccl_built cuda_built rocm_built "
               "poll synchronize broadcast_object broadcast_parameters broadcast_optimizer_state Compression "
               "ProcessSet global_process_set add_process_set remove_process_set stop_timeline").split()


def test_horovods_names_and_positional_order():
    for name, params in SIGNATURES.items():
        got = list(inspect.signature(getattr(hvd, name)).parameters)
        assert got == params.split(), f"{name}{got}"
    for name in OTHER_NAMES:
        assert callable(getattr(hvd, name)) or name == "global_process_set", name
    assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) == (0, 1, 2, 3, 4, 5)
    assert not (hvd.mpi_built() or hvd.mpi_enabled() or hvd.gloo_built() or hvd.ddl_built() or hvd.ccl_built()
                or hvd.rocm_built())
    with pytest.raises(ValueError):
        hvd.mpi_threads_supported()
    assert hvd.global_process_set.process_set_id == 0
    with pytest.raises(ValueError):
        hvd_common.ProcessSet(["a"])


@pytest.mark.usefixtures("require_core")
def test_nccl_built_is_a_real_version_code_or_zero():
    """Horovod-style gates read nccl_built() as NCCL's version code ("NCCL alltoall needs >= 2700");
    a core with NCCL groups must not answer 1 just because torch is CPU-only."""
    import ctypes
    import subprocess
    from pathlib import Path

    import byteps

    core = Path(byteps.__file__).resolve().parent / "_bin" / "byteps-core"
    info = subprocess.run([str(core), "info"], capture_output=True, text=True, timeout=60).stdout
    if "gpu groups: nccl" not in info:
        assert hvd.nccl_built() == 0
        return
    try:  # what libnccl itself says, asked independently of byteps
        lib, code = ctypes.CDLL("libnccl.so.2"), ctypes.c_int(0)
        assert lib.ncclGetVersion(ctypes.byref(code)) == 0
    except OSError:
        pytest.skip("this core has NCCL groups but libnccl.so.2 cannot be loaded here, so its version is unknown")
    got = hvd.nccl_built()
    assert got == code.value or got >= 2700, f"nccl_built()={got}, libnccl says {code.value}"
    assert got >= 2000, f"nccl_built()={got} is not an NCCL version code"


def test_attrs_string_names_what_must_agree():
    import torch
    s = hvd_common.call_attrs("allreduce", torch.zeros(2, 3), reduce="Sum", pre=1.0, post=0.5)
    assert s == "op=allreduce;dtype=float32;shape=2x3;reduce=Sum;pre=1.0;post=0.5"


ERRORS = COMMON + r"""
import torch
E = hvd.HorovodInternalError
assert issubclass(E, RuntimeError) and not issubclass(ValueError, E)
t = torch.ones(4)
# local argument checks: ValueError on this worker (both workers make the same bad calls)
expect("uint8 allreduce", ValueError, "Tensor type torch.ByteTensor is not supported", lambda: hvd.allreduce(
    torch.ones(2, dtype=torch.uint8)))
expect("bool reducescatter", ValueError, "is not supported", lambda: hvd.reducescatter(torch.ones(2).bool()))
expect("non-contiguous", ValueError, "not contiguous", lambda: hvd.allreduce_(torch.ones(4, 4).t()))
expect("op and average", ValueError, "either op= or", lambda: hvd.allreduce(t, average=True, op=hvd.Sum))
expect("bad root", ValueError, "not a worker rank", lambda: hvd.broadcast(t, n))
expect("splits length", ValueError, "splits for", lambda: hvd.alltoall(t, splits=[1]))
expect("splits sum", ValueError, "add up to more rows", lambda: hvd.alltoall(t, splits=[3, 3]))
expect("splits dtype", ValueError, "int32", lambda: hvd.alltoall(t, splits=torch.tensor([1, 1])))
expect("uneven alltoall", ValueError, "divide evenly", lambda: hvd.alltoall(torch.ones(3)))
expect("0-d reducescatter", ValueError, "0-d", lambda: hvd.reducescatter(torch.tensor(1.0)))
expect("reducescatter Max", E, "Average or hvd.Sum", lambda: hvd.reducescatter(t, op=hvd.Max))
expect("Adasum int32", ValueError, "Tensor type", lambda: hvd.allreduce(torch.ones(3, dtype=torch.int32), op=hvd.Adasum))
expect("process set", ValueError, "is not registered", lambda: hvd.allgather(t, process_set=hvd.ProcessSet([0])))
expect("add_process_set", ValueError, "HOROVOD_DYNAMIC_PROCESS_SETS", lambda: hvd.add_process_set([0]))
expect("timeline", ValueError, "no timeline", lambda: hvd.start_timeline("/tmp/x.json"))
hvd.stop_timeline()
h = hvd.allreduce_async(t, name="dup")
expect("duplicate in-flight name", ValueError, "already in flight", lambda: hvd.allreduce_async(t, name="dup"))
hvd.synchronize(h)
hvd.synchronize(hvd.allreduce_async(t, name="dup"))  # free again once synchronized
expect("poll unknown", ValueError, "unknown", lambda: hvd.poll(10 ** 9))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    hvd.allreduce(t, average=False, name="deprecated")
    if not any(issubclass(w.category, DeprecationWarning) for w in caught):
        fails.append("no DeprecationWarning for average=")
# coordinated errors: HorovodInternalError on every worker, and the next op still works
expect("allgather 0-d on one worker", E, "0-d", lambda: hvd.allgather(torch.ones(()) if r == 0 else torch.ones(2)))
expect("allgather dims", E, "only the first dimension", lambda: hvd.allgather(torch.ones(2, 2 + r)))
expect("allgather dtype", E, "dtypes differ", lambda: hvd.allgather(torch.ones(2, dtype=torch.float32 if r else
                                                                                torch.float64)))
expect("allreduce size", E, "bytes", lambda: hvd.allreduce(torch.ones(3 + r), name="sz"))
expect("allreduce dtype", E, "int32", lambda: hvd.allreduce(torch.ones(2, dtype=torch.float32 if r else torch.int32),
                                                             name="dt"))
expect("alltoall dims", E, "only the first dimension", lambda: hvd.alltoall(torch.ones(2, 1 + r)))
# equal bytes, different shape / root / op / scale factor: the servers compare the declarations' attributes
expect("allreduce shape", E, "shape is", lambda: hvd.allreduce(torch.ones((2, 3) if r else (3, 2)), name="shape"))
expect("broadcast root", E, "root is", lambda: hvd.broadcast(torch.ones(4), r, name="roots"))
expect("allreduce op", E, "at the same time", lambda: hvd.allreduce(torch.ones(4), op=hvd.Max if r else hvd.Min,
                                                              name="ops"))
expect("allreduce postscale", E, "post is", lambda: hvd.allreduce(torch.ones(4), name="post",
                                                                   postscale_factor=1.0 + r))
# the failed names work again (a new incarnation on every worker)
same("shape reused", hvd.allreduce(torch.ones(2, 3), op=hvd.Sum, name="shape"), torch.full((2, 3), float(n)))
same("roots reused", hvd.broadcast(torch.full((4,), float(r)), 1, name="roots"), torch.full((4,), 1.0))
same("after the errors", hvd.allreduce(torch.ones(3), op=hvd.Sum, name="after"), torch.full((3,), float(n)))

# a long mixed sequence with injected failures; every worker must stay in step
for i in range(40):
    kind = i % 8
    if kind == 0:
        same(f"seq {i} allreduce", hvd.allreduce(torch.full((3,), float(r)), op=hvd.Sum), torch.full((3,), n * (n - 1) / 2))
    elif kind == 1:
        expect(f"seq {i} bad dtype", ValueError, "not supported", lambda: hvd.allreduce(torch.ones(2, dtype=torch.int8)))
    elif kind == 2:
        same(f"seq {i} allgather", hvd.allgather(torch.full((r + 1,), r)), torch.cat([torch.full((w + 1,), w)
                                                                                   for w in range(n)]))
    elif kind == 3:
        expect(f"seq {i} mismatch", E, "", lambda: hvd.allgather(torch.ones(1, 1 + r)))
    elif kind == 4:
        same(f"seq {i} broadcast", hvd.broadcast(torch.full((2,), float(r)), i % n), torch.full((2,), float(i % n)))
    elif kind == 5:
        expect(f"seq {i} size mismatch", E, "", lambda: hvd.allreduce(torch.ones(2 + r), name=f"mm{i}"))
    elif kind == 6:
        out, rec = hvd.alltoall(torch.arange(n, dtype=torch.int64) + 10 * r, splits=[1] * n)
        same(f"seq {i} alltoall", out, torch.tensor([10 * s + r for s in range(n)]))
    else:
        expect(f"seq {i} bad root", ValueError, "root_rank", lambda: hvd.broadcast(t, -1))
        hvd.barrier()
finish()
"""


def test_errors_are_raised_as_horovods_on_every_worker(run_job):
    result = run_job(2, 1, ERRORS, timeout=200)
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 2, result


REUSE = COMMON + r"""
# a name reused at another size and dtype once its previous op has finished (Horovod allows it)
for i, (count, dtype) in enumerate([(3, torch.float32), (5, torch.float32), (2, torch.int64), (3, torch.float32)]):
    same(f"reuse {i}", hvd.allreduce(torch.ones(count, dtype=dtype), op=hvd.Sum, name="reused"),
         torch.full((count,), n, dtype=dtype))
finish()
"""


def test_a_name_can_be_reused_at_another_size(run_job):
    result = run_job(2, 1, REUSE, timeout=120)
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 2, result
