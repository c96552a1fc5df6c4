"""byteps.numpy: the API in one process (no network), then real jobs through bpsrun.

Multi-process jobs check exact results: worker i contributes arrays derived from i, and every
worker compares its result with the sum (or average) that NumPy computes for all workers.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from conftest import PYTHON, PYTHON_DIR, job_env, wait_until_polled_done

pytestmark = pytest.mark.usefixtures("require_core")

DTYPES = ["float32", "float64", "float16", "uint8", "int8", "int32", "int64"]


@pytest.fixture
def bps(standalone):
    return standalone("byteps.numpy")


@pytest.fixture
def bps_down(bps):
    """byteps.numpy after shutdown: nothing is initialised."""
    bps.shutdown()
    return bps


def sample(dtype: str, shape=(3, 5)) -> np.ndarray:
    return (np.arange(np.prod(shape)) % 11 - (0 if dtype == "uint8" else 5)).astype(dtype).reshape(shape)


# --------------------------------------------------------------------------------------------
# one process


def test_init_rank_size(bps):
    assert (bps.rank(), bps.size(), bps.local_rank(), bps.local_size()) == (0, 1, 0, 1)
    bps.init()  # idempotent
    assert bps.size() == 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("average", [True, False])
def test_push_pull_returns_input(bps, dtype, average):
    x = sample(dtype)
    before = x.copy()
    out = bps.push_pull(x, average=average, name=f"t.{dtype}.{average}")
    assert out is not x and not np.shares_memory(out, x)
    assert out.dtype == x.dtype and out.shape == x.shape
    np.testing.assert_array_equal(out, before)
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("dtype", DTYPES)
def test_inplace_writes_into_the_array(bps, dtype):
    x = sample(dtype)
    before = x.copy()
    assert bps.push_pull_inplace(x, name=f"in.{dtype}") is x
    np.testing.assert_array_equal(x, before)
    h = bps.byteps_push_pull(x, average=False, name=f"in.{dtype}")
    assert bps.synchronize(h) is x


def test_async_poll_synchronize(bps):
    arrays = [np.full(n, n, np.float32) for n in range(1, 40)]
    handles = [bps.push_pull_async(a, name=f"async.{i}", priority=i % 3) for i, a in enumerate(arrays)]
    assert len(set(handles)) == len(handles) and all(h > 0 for h in handles)
    wait_until_polled_done(bps, handles)
    for h, a in zip(reversed(handles), reversed(arrays)):
        np.testing.assert_array_equal(bps.synchronize(h, timeout=5), a)
    with pytest.raises(ValueError, match="unknown byteps handle"):
        bps.synchronize(handles[0])
    with pytest.raises(ValueError, match="unknown byteps handle"):
        bps.poll(handles[0])


def test_zero_size_and_scalar(bps):
    empty = np.zeros((0, 4), np.int64)
    assert bps.push_pull(empty, name="empty").shape == (0, 4)
    scalar = np.array(2.5, np.float64)
    assert bps.push_pull(scalar, name="scalar")[()] == 2.5


def test_unnamed_calls_do_not_collide(bps):
    # The original gave every unnamed call the name "byteps.noname.0", so the second call (other
    # size/dtype) failed.  Here each gets its own name.
    a = bps.push_pull(np.ones(3, np.float32))
    b = bps.push_pull(np.ones(7, np.int8), average=False)
    c = bps.push_pull_inplace(np.ones((2, 2), np.float64))
    assert a.shape == (3,) and b.dtype == np.int8 and c.shape == (2, 2)
    from byteps import _basics
    assert _basics.core_name(None) != _basics.core_name(None)
    assert _basics.core_name("w") == "byteps.w"


def test_a_name_reused_at_another_size_and_dtype_is_a_new_key(bps):
    # Names are scoped to the operations in flight (issue 29): once one completed, the name may
    # come back at another size or dtype (a new incarnation, a new key on the servers).
    np.testing.assert_array_equal(bps.push_pull(np.ones(4, np.float32), name="fixed"), np.ones(4, np.float32))
    np.testing.assert_array_equal(bps.push_pull(np.full(5, 2, np.float32), name="fixed"), np.full(5, 2, np.float32))
    np.testing.assert_array_equal(bps.push_pull(np.arange(4, dtype=np.int32), name="fixed"),
                                  np.arange(4, dtype=np.int32))


def test_declare(bps):
    k = bps.declare("declared.a")
    assert isinstance(k, int)
    assert bps.declare("declared.a") == k
    assert bps.declare("declared.b") != k


def test_shutdown_then_init_again(bps):
    h = bps.push_pull_async(np.ones(3), name="x")
    bps.shutdown()
    with pytest.raises(ValueError, match="unknown byteps handle"):
        bps.synchronize(h)  # forgotten at shutdown
    bps.shutdown()  # idempotent
    bps.init()
    np.testing.assert_array_equal(bps.push_pull(np.ones(3), name="x"), np.ones(3))


# ---- errors


def test_queries_before_init_raise(bps_down):
    bps = bps_down
    for query in (bps.rank, bps.size, bps.local_rank, bps.local_size):
        with pytest.raises(bps.BytePSError, match="not initialized"):
            query()
    with pytest.raises(bps.BytePSError, match="not initialized"):
        bps.push_pull(np.ones(2), name="early")
    with pytest.raises(bps.BytePSError, match="not initialized"):
        bps.declare("early")


def test_int16_sums_and_bool_is_refused_naming_the_tensor(bps):
    x = np.array([1, -2, 32767], np.int16)
    assert np.array_equal(bps.push_pull(x, average=False, name="i16"), x)  # one worker: the sum is x
    with pytest.raises(ValueError, match="push_pull of 'byteps.flags': bool tensors cannot be summed"):
        bps.push_pull(np.zeros(3, bool), average=False, name="flags")


@pytest.mark.parametrize("value", [np.zeros(3, np.complex64), np.zeros(3, np.uint32), np.array([1, "a"], object),
                                   np.zeros(3, ">f4"), np.zeros(3, np.uint16), np.array(["ab"])])
def test_unsupported_dtype(bps, value):
    with pytest.raises(TypeError) as info:
        bps.push_pull(value, name="bad")
    text = str(info.value)
    assert value.dtype.str in text or value.dtype.name in text
    assert "float32" in text and "int64" in text  # lists what is supported
    with pytest.raises(TypeError):
        bps.push_pull_async_inplace(value, name="bad")


@pytest.mark.parametrize("view", [lambda a: a[:, 0], lambda a: a.T, lambda a: a[::2]])
def test_non_contiguous(bps, view):
    x = view(np.zeros((4, 6), np.float32))
    for fn in (bps.push_pull, bps.push_pull_async, bps.push_pull_inplace):
        with pytest.raises(ValueError, match=r"not C-contiguous; pass np.ascontiguousarray\(x\)"):
            fn(x, name="nc")


def test_read_only_inplace(bps):
    x = np.arange(4, dtype=np.int32)
    x.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        bps.push_pull_inplace(x, name="ro")
    with pytest.raises(ValueError, match="read-only"):
        bps.push_pull_async_inplace(x, name="ro")
    np.testing.assert_array_equal(bps.push_pull(x, name="ro"), x)  # out-of-place is fine


def test_bad_arguments(bps):
    with pytest.raises(TypeError, match="numpy.ndarray"):
        bps.push_pull([1.0, 2.0], name="list")
    with pytest.raises(TypeError, match="name must be a str"):
        bps.push_pull(np.ones(2), name=3)
    with pytest.raises(ValueError, match="must not be empty"):
        bps.push_pull(np.ones(2), name="")
    with pytest.raises(TypeError, match="priority"):
        bps.push_pull(np.ones(2), name="p", priority=1.5)


@pytest.mark.parametrize("handle", [0, -1, 12345])
def test_unknown_handle(bps, handle):
    with pytest.raises(ValueError, match="unknown byteps handle"):
        bps.synchronize(handle)
    with pytest.raises(ValueError, match="unknown byteps handle"):
        bps.poll(handle)


def test_malformed_env_names_the_variable(bps_down, monkeypatch):
    bps = bps_down
    monkeypatch.setenv("DMLC_NUM_WORKER", "two")
    with pytest.raises(ValueError, match="DMLC_NUM_WORKER='two'"):
        bps.init()
    monkeypatch.delenv("DMLC_NUM_WORKER")
    monkeypatch.setenv("BYTEPS_PARTITON_BYTES", "4096")
    with pytest.raises(ValueError, match="did you mean BYTEPS_PARTITION_BYTES"):
        bps.init()
    monkeypatch.delenv("BYTEPS_PARTITON_BYTES")
    bps.init()  # a failed init leaves nothing behind
    assert bps.size() == 1


# ---- packaging-level behaviour, in fresh interpreters


def run_python(code: str, env=None, timeout=30) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-c", code], env=env or job_env(), capture_output=True, text=True,
                          timeout=timeout)


def test_import_does_not_load_the_core():
    r = run_python("import sys, byteps, byteps.numpy, byteps.launcher.bpsrun\n"
                   "assert 'byteps._core' not in sys.modules, 'imported the core'\n"
                   "print(byteps.__version__)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0.1.0"


def test_missing_core_is_a_clear_import_error(tmp_path):
    pkg = tmp_path / "byteps"
    pkg.mkdir()
    for source in (PYTHON_DIR / "byteps").glob("*.py"):  # the package's modules, without the core
        (pkg / source.name).write_text(source.read_text())
    env = job_env()
    env["PYTHONPATH"] = str(tmp_path)
    r = run_python("import byteps.numpy as b\ntry:\n    b.init()\nexcept ImportError as e:\n    print(e)\n"
                   "else:\n    raise SystemExit('init worked without a core')", env=env)
    assert r.returncode == 0, r.stderr
    assert "byteps native core not built" in r.stdout and "pip install ." in r.stdout


def test_cli_forwards_to_the_core():
    r = subprocess.run([PYTHON, "-m", "byteps.cli", "info"], env=job_env({"BYTEPS_PARTITION_BYTES": "8192"}),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert any(line.split()[:3] == ["BYTEPS_PARTITION_BYTES", "8K", "[env]"] for line in r.stdout.splitlines())
    r = subprocess.run([PYTHON, "-m", "byteps.cli", "info"], env=job_env({"DMLC_NUM_WORKER": "two"}),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "DMLC_NUM_WORKER='two'" in r.stderr
    r = subprocess.run([PYTHON, "-m", "byteps.cli", "info"], env=job_env({"BYTEPS_CORE_BINARY": "/nonexistent"}),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 127 and "BYTEPS_CORE_BINARY" in r.stderr


# --------------------------------------------------------------------------------------------
# jobs through bpsrun

# Shared by the worker scripts: exact comparison with a readable failure.
PRELUDE = """
import os, random, sys, time
import numpy as np
import byteps.numpy as bps

def check(name, got, want):
    if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
        bad = np.flatnonzero(got.ravel() != want.ravel())[:5] if got.shape == want.shape else []
        print(f"MISMATCH {name}: dtype {got.dtype}/{want.dtype} shape {got.shape}/{want.shape} "
              f"at {list(bad)}: got {got.ravel()[bad]} want {want.ravel()[bad]}", flush=True)
        sys.exit(3)

bps.init()
rank, n = bps.rank(), bps.size()
assert n == int(os.environ["DMLC_NUM_WORKER"]), n
"""


def ok_count(result, n) -> None:
    assert result.returncode == 0, result
    assert result.stdout.count("ALL OK") == n, result
    assert len(result.pids) >= n and not result.leftovers, result


EVERY_DTYPE = PRELUDE + """
DTYPES = ["float32", "float64", "float16", "uint8", "int8", "int32", "int64"]

def contribution(dtype, i, length=37):
    b = np.arange(length)
    if dtype == "uint8":
        return ((b % 9) + 2 * i).astype(dtype)
    if dtype == "int64":
        return ((b % 9) - 4 - 2 * i + (i + 1) * 2**40 * np.where(b % 2, 1, -1)).astype(dtype)
    if dtype.startswith("int"):
        return ((b % 9) - 4 - 2 * i).astype(dtype)
    return ((b % 13) - 6 + 0.5 * i).astype(dtype)  # exact in every float type

for dtype in DTYPES:
    parts = [contribution(dtype, i) for i in range(n)]
    total = parts[0].copy()
    for p in parts[1:]:
        total = total + p
    if np.issubdtype(total.dtype, np.integer):
        mean = np.floor_divide(total.astype(np.int64), n).astype(dtype)
    else:
        mean = (total / np.array(n, dtype)).astype(dtype)
    mine = parts[rank]
    check(f"sum {dtype}", bps.push_pull(mine, average=False, name=f"sum.{dtype}"), total)
    check(f"mean {dtype}", bps.push_pull(mine, average=True, name=f"mean.{dtype}"), mean)
    x = mine.copy()
    check(f"inplace {dtype}", bps.push_pull_inplace(x, average=False, name=f"inplace.{dtype}"), total)
    check(f"input kept {dtype}", mine, contribution(dtype, rank))
print("ALL OK", rank, flush=True)
"""


@pytest.mark.parametrize("n,s", [(2, 1), (3, 2)])
def test_exact_sums_every_dtype(run_job, n, s):
    ok_count(run_job(n, s, EVERY_DTYPE, timeout=60), n)


def test_integer_average_is_floor_division(run_job):
    # Rank 0 contributes x, the others zeros: the sum is x and the mean floor(x / n), not the
    # truncated quotient (-4 // 3 == -2, not -1).
    script = PRELUDE + """
x = np.array([-4, -3, -2, -1, 0, 1, 2, 5, 127], np.int64)
for dtype in ("int8", "int32", "int64"):
    mine = x.astype(dtype) if rank == 0 else np.zeros(len(x), dtype)
    check(dtype, bps.push_pull(mine, average=True, name=dtype), np.floor_divide(x, n).astype(dtype))
check("uint8", bps.push_pull(np.full(4, 250 if rank == 0 else 1, np.uint8), name="u8"),
      np.full(4, (250 + n - 1) // n, np.uint8))
print("ALL OK", flush=True)
"""
    ok_count(run_job(3, 1, script), 3)


MIXED_SIZES = PRELUDE + """
SIZES = [0, 1, 2, 3, 7, 1023, 1024, 1025, 4095, 4097, 10001, 100003]
DTYPES = ["float32", "int8", "float64", "int64", "float16", "uint8", "int32"]
specs = [(f"mixed.{k}", SIZES[k % len(SIZES)], DTYPES[k % len(DTYPES)]) for k in range(len(SIZES) * 2)]

def value(k, size, dtype, i):
    v = (np.arange(size) * (k + 1) + 3 * i) % 50
    return v.astype(dtype)

outs = []
for k, (name, size, dtype) in enumerate(specs):
    x = value(k, size, dtype, rank)
    outs.append((k, name, size, dtype, x, bps.push_pull_async(x, average=False, name=name)))
for k, name, size, dtype, x, h in outs:
    want = sum(value(k, size, dtype, i).astype(np.int64) for i in range(n)).astype(dtype)
    check(name, bps.synchronize(h), want)
# unnamed calls, in the same order on every worker
for size in (5, 4097, 0):
    check(f"unnamed {size}", bps.push_pull(np.full(size, rank + 1, np.int32), average=False),
          np.full(size, n * (n + 1) // 2, np.int32))
print("ALL OK", flush=True)
"""


@pytest.mark.parametrize("n,s", [(2, 2), (3, 1)])
def test_many_tensors_of_mixed_sizes(run_job, n, s):
    # 4 KiB partitions: the big tensors are split into up to ~200 partitions over the servers.
    ok_count(run_job(n, s, MIXED_SIZES, env={"BYTEPS_PARTITION_BYTES": "4096"}, timeout=90), n)


REPEATED_ROUNDS = PRELUDE + """
for it in range(20):
    big = (np.arange(30011, dtype=np.float32) % 97) * (it + 1) + rank
    want_big = (np.arange(30011, dtype=np.float32) % 97) * (it + 1) * n + n * (n - 1) // 2
    small = np.array([it * 10 + rank], np.int64)
    if it % 2:
        check(f"big {it}", bps.push_pull(big, average=False, name="big"), want_big)
    else:
        check(f"big {it}", bps.push_pull_inplace(big, average=False, name="big"), want_big)
    check(f"small {it}", bps.push_pull(small, average=False, name="small"),
          np.array([n * it * 10 + n * (n - 1) // 2], np.int64))
print("ALL OK", flush=True)
"""


def test_repeated_rounds(run_job):
    ok_count(run_job(2, 2, REPEATED_ROUNDS, env={"BYTEPS_PARTITION_BYTES": "4096"}), 2)


ASYNC_OVERLAP = PRELUDE + """
rng = random.Random(1234)                  # same tensor list on every worker
specs = [(f"ov.{k}", rng.choice([1, 17, 1000, 5000, 40000])) for k in range(60)]
started = []
for k, (name, size) in enumerate(specs):
    x = np.full(size, (k + 1) * (rank + 1), np.float64)
    started.append((k, name, size, bps.push_pull_async(x, average=False, name=name, priority=k % 5)))
# Two rounds of one name in flight at once: they must complete as rounds 1 and 2.
twice = [bps.push_pull_async(np.full(3000, r * 100 + rank, np.int32), average=False, name="twice")
         for r in range(2)]
deadline = time.monotonic() + 20
pending = {h for *_, h in started}
while pending and time.monotonic() < deadline:
    pending = {h for h in pending if not bps.poll(h)}
assert not pending, f"{len(pending)} handles not finished after 20 s"
random.Random(rank).shuffle(started)      # synchronize in a different order on each worker
for k, name, size, h in started:
    check(name, bps.synchronize(h), np.full(size, (k + 1) * n * (n + 1) / 2, np.float64))
for r in reversed(range(2)):
    check(f"twice {r}", bps.synchronize(twice[r]), np.full(3000, n * r * 100 + n * (n - 1) // 2, np.int32))
print("ALL OK", flush=True)
"""


@pytest.mark.parametrize("n,s", [(2, 2), (3, 2)])
def test_async_overlap_and_out_of_order_synchronize(run_job, n, s):
    ok_count(run_job(n, s, ASYNC_OVERLAP, env={"BYTEPS_PARTITION_BYTES": "16384"}, timeout=90), n)


def test_force_distributed_single_worker(run_job):
    script = PRELUDE + """
x = np.arange(10, dtype=np.int32)
check("sum", bps.push_pull(x, average=False, name="x"), x)
check("mean", bps.push_pull(x, average=True, name="x"), x)
print("ALL OK", flush=True)
"""
    result = run_job(1, 1, script, force_distributed=True)
    ok_count(result, 1)
    assert "[scheduler]" in result.stdout + result.stderr or "starting scheduler" in result.stderr


def test_synchronize_timeout_keeps_the_handle(run_job):
    # Worker 0 waits for "late" before worker 1 has pushed it: synchronize(timeout) raises, the
    # handle stays valid, and a second synchronize returns the sum once worker 1 pushes.
    script = PRELUDE + """
bps.declare("late")
bps.declare("barrier")
if rank == 0:
    h = bps.push_pull_async(np.full(100, 1.0), average=False, name="late")
    t = time.monotonic()
    try:
        bps.synchronize(h, timeout=0.3)
    except bps.BytePSError as err:
        assert "did not complete" in str(err) and "byteps.late" in str(err), err
    else:
        raise AssertionError("synchronize did not time out")
    assert 0.25 < time.monotonic() - t < 5
    assert not bps.poll(h)
    bps.push_pull(np.zeros(1), name="barrier")
    check("late", bps.synchronize(h), np.full(100, 3.0))
else:
    bps.push_pull(np.zeros(1), name="barrier")
    check("late", bps.push_pull(np.full(100, 2.0), average=False, name="late"), np.full(100, 3.0))
print("ALL OK", flush=True)
"""
    ok_count(run_job(2, 1, script), 2)
