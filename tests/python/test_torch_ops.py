"""byteps.torch operations: the API in one process (no network), then real jobs through bpsrun.

Multi-process jobs check exact results: worker i contributes tensors derived from i, and every
worker compares its result with the sum (or average) torch computes for all workers.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import PYTHON, job_env, wait_until_polled_done

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.usefixtures("require_core")

DTYPES = ["float32", "float64", "float16", "bfloat16", "uint8", "int8", "int32", "int64"]


@pytest.fixture
def bps(standalone):
    return standalone("byteps.torch")


def sample(dtype: str, shape=(3, 5)) -> "torch.Tensor":
    base = torch.arange(int(torch.tensor(shape).prod())) % 11 - (0 if dtype == "uint8" else 5)
    return base.to(getattr(torch, dtype)).reshape(shape)


# --------------------------------------------------------------------------------------------
# one process


def test_init_rank_size(bps):
    assert (bps.rank(), bps.size(), bps.local_rank(), bps.local_size()) == (0, 1, 0, 1)
    bps.init()  # idempotent
    assert bps.size() == 1


def test_exports():
    import byteps.torch as bps
    import byteps.torch.ops as ops
    from byteps.torch.parallel import DistributedDataParallel

    for name in ("init", "shutdown", "suspend", "resume", "size", "local_size", "rank", "local_rank", "declare",
                 "push_pull", "push_pull_async", "push_pull_async_inplace", "byteps_push_pull", "push_pull_inplace",
                 "poll", "synchronize", "broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
                 "Compression", "DistributedOptimizer", "_DistributedOptimizer"):
        assert callable(getattr(bps, name)) or name == "Compression", name
    assert bps.byteps_push_pull is bps.push_pull_async_inplace
    assert ops.push_pull_group_sync_inplace and ops.byteps_torch_set_num_grads
    assert bps.Compression.none and bps.Compression.fp16 and DistributedDataParallel


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("average", [True, False])
def test_push_pull_returns_input(bps, dtype, average):
    x = sample(dtype)
    before = x.clone()
    out = bps.push_pull(x, average=average, name=f"t.{dtype}.{average}")
    assert out is not x and out.data_ptr() != x.data_ptr()
    assert out.dtype == x.dtype and out.shape == x.shape
    assert torch.equal(out, before) and torch.equal(x, before)


@pytest.mark.parametrize("dtype", DTYPES)
def test_inplace_writes_into_the_tensor(bps, dtype):
    x = sample(dtype)
    before = x.clone()
    assert bps.push_pull_inplace(x, name=f"in.{dtype}") is x
    assert torch.equal(x, before)
    h = bps.byteps_push_pull(x, average=False, name=f"in.{dtype}")
    assert bps.synchronize(h) is x


def test_async_poll_synchronize(bps):
    tensors = [torch.full((n,), float(n)) for n in range(1, 30)]
    handles = [bps.push_pull_async(t, name=f"async.{i}", priority=-i) for i, t in enumerate(tensors)]
    assert len(set(handles)) == len(handles) and all(h > 0 for h in handles)
    wait_until_polled_done(bps, handles)
    for h, t in zip(reversed(handles), reversed(tensors)):
        assert torch.equal(bps.synchronize(h), t)
    with pytest.raises(ValueError, match="unknown byteps handle"):
        bps.synchronize(handles[0])
    with pytest.raises(ValueError, match="unknown byteps handle"):
        bps.poll(handles[0])


def test_zero_size_scalar_and_views(bps):
    assert bps.push_pull(torch.zeros(0, 4, dtype=torch.int64), name="empty").shape == (0, 4)
    assert bps.push_pull(torch.tensor(2.5, dtype=torch.float64), name="scalar").item() == 2.5
    big = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    row = big[1]  # contiguous view at an offset
    assert torch.equal(bps.push_pull(row, name="row"), torch.tensor([4.0, 5, 6, 7]))


def test_unnamed_calls_do_not_collide(bps):
    # The original gave every unnamed call the name "byteps.noname.0", so the second call (other
    # size/dtype) failed.  Here each gets its own name.
    a = bps.synchronize(bps.push_pull_async(torch.ones(3)))
    b = bps.synchronize(bps.push_pull_async(torch.ones(7, dtype=torch.int8), average=False))
    c = bps.push_pull_inplace(torch.ones(2, 2, dtype=torch.float64))
    assert a.shape == (3,) and b.dtype == torch.int8 and c.shape == (2, 2)


def test_push_pull_needs_a_name(bps):
    with pytest.raises(AssertionError, match="you must specify a name by name="):
        bps.push_pull(torch.ones(3))


def test_push_pull_is_differentiable(bps):
    x = torch.arange(4, dtype=torch.float64).requires_grad_()
    y = bps.push_pull(x, average=False, name="grad.x")
    assert y.requires_grad and torch.equal(y.detach(), x.detach())
    (y * torch.tensor([1.0, 2, 3, 4], dtype=torch.float64)).sum().backward()
    assert torch.equal(x.grad, torch.tensor([1.0, 2, 3, 4], dtype=torch.float64))


def test_fp16_compression(bps):
    x = torch.tensor([1.5, -2.25, 1000.0, 1e-3])
    out = bps.push_pull(x, name="fp16", compression=bps.Compression.fp16)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, x, rtol=1e-3, atol=1e-6)
    # The cast is the core's now (attrs "cast=fp16"): compress/decompress in Python are identities.
    assert bps.Compression.fp16.attrs == "cast=fp16" and bps.Compression.bf16.attrs == "cast=bf16"
    compressed, ctx = bps.Compression.fp16.compress(x.double())
    assert compressed.dtype == torch.float64 and bps.Compression.fp16.decompress(compressed, ctx) is compressed
    assert bps.Compression.none.compress(x) == (x, None)


def test_a_finished_name_may_change_size_and_dtype(bps):
    # (A name in flight keeping its size is checked with a real job: cluster_test's
    # OrderFreeNamesAndReuseAtANewSize; alone, a push_pull completes at once.)
    assert torch.equal(bps.push_pull(torch.ones(4), name="fixed"), torch.ones(4))
    assert torch.equal(bps.push_pull(torch.ones(5), name="fixed"), torch.ones(5))  # a new key
    assert torch.equal(bps.push_pull(torch.ones(4, dtype=torch.int32), name="fixed"), torch.ones(4, dtype=torch.int32))


def test_declare_and_resume_replays_declarations(bps, monkeypatch):
    for key in ("DMLC_NUM_WORKER", "DMLC_NUM_SERVER", "BYTEPS_GLOBAL_RANK"):
        monkeypatch.delenv(key, raising=False)  # resume sets them; restored afterwards
    keys = {name: bps.declare(name) for name in ("resume.a", "resume.b")}
    assert bps.declare("resume.a") == keys["resume.a"] and keys["resume.a"] != keys["resume.b"]
    bps.push_pull(torch.ones(3), name="resume.c")
    keys["resume.c"] = bps.declare("resume.c")
    bps.suspend()
    bps.resume(1, 0)
    assert os.environ["DMLC_NUM_WORKER"] == "1" and os.environ["DMLC_NUM_SERVER"] == "0"
    assert bps.size() == 1
    assert bps.declare("resume.c") == keys["resume.c"]  # replayed in the same order: same keys
    assert bps.declare("resume.b") == keys["resume.b"]
    assert bps.declare("resume.a") == keys["resume.a"]
    bps.resume(1, 0, global_rank=0)  # while initialized: shuts down first
    assert bps.declare("resume.c") == keys["resume.c"]


def test_group_sync_counter(bps):
    from byteps.torch import ops

    ops.byteps_torch_set_num_grads(2)
    counts = [ops.push_pull_group_sync_inplace(torch.ones(2), name=f"group.{i % 2}")[1] for i in range(4)]
    assert counts == [1, 2, 1, 2]


def test_single_process_broadcasts(bps):
    params = {"b": torch.ones(2), "a": torch.arange(3)}
    bps.broadcast_parameters(params, root_rank=0)
    assert torch.equal(params["a"], torch.arange(3))
    bps.broadcast_parameters([torch.ones(2), ("named", torch.zeros(3, dtype=torch.bool))], root_rank=0)
    with pytest.raises(ValueError, match="invalid params of type"):
        bps.broadcast_parameters((p for p in [torch.ones(1)]), root_rank=0)
    with pytest.raises(ValueError, match="root_rank 1 is not a rank"):
        bps.broadcast_parameters([torch.ones(1)], root_rank=1)
    obj = {"x": [1, 2, 3], "y": "text"}
    assert bps.broadcast_object(obj) == obj


# ---- errors


def test_before_init_raises(bps):
    bps.shutdown()
    with pytest.raises(bps.BytePSError, match="not initialized"):
        bps.push_pull(torch.ones(2), name="early")
    with pytest.raises(bps.BytePSError, match="not initialized"):
        bps.push_pull_async(torch.ones(2))
    with pytest.raises(bps.BytePSError, match="not initialized"):
        bps.rank()


@pytest.mark.parametrize("dtype", ["complex64", "complex128", "float8_e4m3fn", "quint8"])
def test_unsupported_dtype(bps, dtype):
    if not hasattr(torch, dtype):
        pytest.skip(f"torch {torch.__version__} has no {dtype}")
    if dtype == "quint8":
        value = torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8)
    else:
        value = torch.zeros(3, dtype=getattr(torch, dtype))
    for fn in (bps.push_pull_async, bps.push_pull_async_inplace, bps.push_pull_inplace):
        with pytest.raises(TypeError) as info:
            fn(value, name="bad")
        text = str(info.value)
        assert f"torch.{dtype}" in text and "float32" in text and "bfloat16" in text


@pytest.mark.parametrize("view", [lambda t: t[:, 0], lambda t: t.t(), lambda t: t[::2]])
def test_non_contiguous(bps, view):
    x = view(torch.zeros(4, 6))
    for fn in (bps.push_pull, bps.push_pull_async, bps.push_pull_inplace, bps.push_pull_async_inplace):
        with pytest.raises(ValueError, match=r"not contiguous; pass tensor.contiguous\(\)"):
            fn(x, name="nc")


def test_bad_arguments(bps):
    with pytest.raises(TypeError, match="torch.Tensor"):
        bps.push_pull([1.0, 2.0], name="list")
    with pytest.raises(TypeError, match="torch.Tensor"):
        bps.push_pull_async(3.0)
    with pytest.raises(TypeError, match="name must be a str"):
        bps.push_pull(torch.ones(2), name=3)
    with pytest.raises(TypeError, match="priority"):
        bps.push_pull_async(torch.ones(2), name="p", priority=1.5)
    with pytest.raises(ValueError, match="sparse"):
        bps.push_pull_async(torch.eye(3).to_sparse(), name="sparse")
    with pytest.raises(ValueError, match="device meta"):
        bps.push_pull_async(torch.empty(3, device="meta"), name="meta")


class _LooksLikeCuda(torch.Tensor):
    """A CPU tensor that reports a CUDA device: the rejection path without a GPU."""

    @property
    def device(self):
        return torch.device("cuda", 0)

    @property
    def is_cuda(self):
        return True


def test_cuda_tensor_message_without_a_gpu(bps):
    if torch.cuda.is_available():  # its premise; a GPU machine runs scripts/gpu-check.sh's CUDA steps
        pytest.skip("torch sees a CUDA GPU here: this checks the message on machines without one")
    from byteps import _basics

    core = _basics.core()
    fake = torch.ones(3).as_subclass(_LooksLikeCuda)
    # Built without CUDA: how to rebuild. Built with it, but torch has no GPU here: says so.
    want = ("torch finds no CUDA device" if core.device_built(core.DEVICE_CUDA)
            else "this byteps was built without CUDA: rebuild with the CUDA toolkit")
    for fn in (bps.push_pull_async, bps.push_pull_async_inplace):
        with pytest.raises(ValueError, match=want):
            fn(fake, name="cuda")
    for call in (lambda: bps.ops.broadcast_async_inplace(fake, 0, name="cuda.b"),
                 lambda: bps.ops.allgather_async_into(fake, fake, 0, name="cuda.g")):
        with pytest.raises(ValueError, match=want):
            call()


def test_import_does_not_load_the_core():
    r = subprocess.run([PYTHON, "-c", "import sys, byteps.torch, byteps.torch.parallel\n"
                        "assert 'byteps._core' not in sys.modules, 'imported the core'"],
                       env=job_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


# --------------------------------------------------------------------------------------------
# jobs through bpsrun

PRELUDE = """
import os, sys, time
import torch
import byteps.torch as bps

def check(what, got, want):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        print(f"MISMATCH {what}: dtype {got.dtype}/{want.dtype} shape {tuple(got.shape)}/{tuple(want.shape)} "
              f"got {got.flatten()[:8].tolist()} want {want.flatten()[:8].tolist()}", flush=True)
        sys.exit(3)

bps.init()
rank, n = bps.rank(), bps.size()
assert n == int(os.environ["DMLC_NUM_WORKER"]), n
"""

EVERY_DTYPE = PRELUDE + """
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8, torch.int8, torch.int32,
          torch.int64]

def contribution(dtype, i, length=37):
    b = torch.arange(length)
    if dtype == torch.uint8:
        return ((b % 9) + 2 * i).to(dtype)
    if dtype == torch.int64:
        return ((b % 9) - 4 - 2 * i + (i + 1) * 2**40 * torch.where(b % 2 == 1, 1, -1)).to(dtype)
    if not dtype.is_floating_point:
        return ((b % 9) - 4 - 2 * i).to(dtype)
    return ((b % 13) - 6 + 0.5 * i).to(dtype)  # exact in every float type

for dtype in DTYPES:
    tag = str(dtype).replace("torch.", "")
    parts = [contribution(dtype, i) for i in range(n)]
    wide = torch.float64 if dtype.is_floating_point else torch.int64
    total = sum(p.to(wide) for p in parts).to(dtype)
    if dtype.is_floating_point:  # the core divides half types in float32, others in their own type
        mean = (total.to(torch.float64 if dtype == torch.float64 else torch.float32) / n).to(dtype)
    else:
        mean = torch.div(total.to(torch.int64), n, rounding_mode="floor").to(dtype)
    mine = parts[rank]
    check(f"sum {tag}", bps.push_pull(mine, average=False, name=f"sum.{tag}"), total)
    check(f"mean {tag}", bps.push_pull(mine, average=True, name=f"mean.{tag}"), mean)
    x = mine.clone()
    assert bps.push_pull_inplace(x, average=False, name=f"inplace.{tag}") is x
    check(f"inplace {tag}", x, total)
    x = mine.clone()
    h = bps.byteps_push_pull(x, average=True, name=f"inplace.mean.{tag}")
    deadline = time.monotonic() + 20
    while not bps.poll(h):
        assert time.monotonic() < deadline, "poll never became true"
        time.sleep(0.001)
    assert bps.synchronize(h) is x
    check(f"inplace mean {tag}", x, mean)
    h = bps.push_pull_async(mine, average=False, name=f"async.{tag}", priority=3)
    check(f"async {tag}", bps.synchronize(h), total)
    check(f"input kept {tag}", mine, contribution(dtype, rank))

# integer average is floor division: rank 0 contributes x, the others zeros
x = torch.tensor([-4, -3, -2, -1, 0, 1, 2, 5, 127])
for dtype in (torch.int8, torch.int32, torch.int64):
    mine = x.to(dtype) if rank == 0 else torch.zeros(len(x), dtype=dtype)
    check(f"floor {dtype}", bps.push_pull(mine, name=f"floor.{dtype}"),
          torch.div(x, n, rounding_mode="floor").to(dtype))

# unnamed calls, in the same order on every worker
for size in (5, 4097, 0):
    check(f"unnamed {size}", bps.synchronize(bps.push_pull_async(torch.full((size,), rank + 1, dtype=torch.int32),
                                                                 average=False)),
          torch.full((size,), n * (n + 1) // 2, dtype=torch.int32))
    y = torch.full((size,), float(rank))
    bps.synchronize(bps.push_pull_async_inplace(y))
    check(f"unnamed inplace {size}", y, torch.full((size,), (n - 1) / 2))

# autograd: the gradient is push_pulled too
w = torch.arange(6, dtype=torch.float64).reshape(2, 3) + 1
x = (torch.arange(6, dtype=torch.float64).reshape(2, 3) + rank).requires_grad_()
y = bps.push_pull(x, average=False, name="autograd.sum")
check("autograd forward", y.detach(), sum(torch.arange(6, dtype=torch.float64).reshape(2, 3) + i for i in range(n)))
(y * w).sum().backward()
check("autograd backward", x.grad, n * w)
x = torch.ones(4, dtype=torch.float64, requires_grad=True)
(bps.push_pull(x, name="autograd.mean") * (torch.arange(4.0, dtype=torch.float64) + rank)).sum().backward()
check("autograd mean backward", x.grad, torch.arange(4.0, dtype=torch.float64) + (n - 1) / 2)

# a tensor whose size differs between workers: an error naming it on every worker
try:
    bps.push_pull(torch.ones(3 + rank), name="mismatch")
except bps.BytePSError as err:  # the workers disagree: every one gets it alike, not a ValueError
    assert not isinstance(err, ValueError) and "byteps.mismatch" in str(err), err
    print("MISMATCH_ERROR", err, flush=True)
else:
    print("mismatched sizes were not detected", flush=True)
    sys.exit(4)
check("still works", bps.push_pull(torch.ones(2), average=False, name="after.mismatch"), torch.full((2,), float(n)))

# fp16 compression (a core cast): values exact in float16.  After the mismatch: the servers that
# the mismatched sizes above land on depend on the bytes placed before them, which this changes.
v = torch.tensor([0.5, -3.0, 1024.0]) * (rank + 1)
check("fp16", bps.push_pull(v, average=False, name="fp16", compression=bps.Compression.fp16),
      torch.tensor([0.5, -3.0, 1024.0]) * (n * (n + 1) // 2))
print("ALL OK", rank, flush=True)
"""


@pytest.mark.parametrize("n,s", [(2, 1), (3, 2)])
def test_every_dtype_across_workers(run_job, n, s):
    result = run_job(n, s, EVERY_DTYPE, timeout=60, env={"BYTEPS_TIMEOUT": "15"})
    assert result.returncode == 0, result
    assert result.stdout.count("ALL OK") == n, result
    assert result.stdout.count("MISMATCH_ERROR") == n, result
    assert not result.leftovers, result


def test_force_distributed_single_worker(run_job):
    # One worker through a server: the same API, real network path.
    script = PRELUDE + """
check("sum", bps.push_pull(torch.arange(5), average=False, name="one"), torch.arange(5))
check("mean", bps.push_pull(torch.arange(5.0), name="one.mean"), torch.arange(5.0))
print("ALL OK", flush=True)
"""
    result = run_job(1, 1, script, force_distributed=True, timeout=60)
    assert result.returncode == 0 and "ALL OK" in result.stdout, result
