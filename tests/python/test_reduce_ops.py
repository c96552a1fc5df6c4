"""Min / max / product through real servers (``_basics.start_reduce``), int16 and bool through
allgather and broadcast, the local reduce applying the op (BYTEPS_LOCAL_SIZE=2), and workers that
disagree on a tensor's declaration attributes all getting BytePSError (a RuntimeError, not a
ValueError). Each job runs many cases and reports them in one RESULT line per process; expected
values are computed with NumPy from every rank's (deterministic) input."""
from conftest import LOCAL_SPAWNER, NUMPY_PRELUDE, job_results

# Helpers every job script starts with (after conftest's NUMPY_PRELUDE): deterministic inputs per
# rank, and a reduce through _basics.start_reduce. bfloat16 has no NumPy dtype here: its arrays are
# uint16 bit patterns (the top half of float32s that are small integers, so they are exact).
PRELUDE = NUMPY_PRELUDE + r'''
from byteps import _basics
c = _basics.core()
failures, checked = [], []
BF16 = "bfloat16"

def code_of(dt):
    return c.BFLOAT16 if dt == BF16 else bps._dtype_code(np.empty(0, dt))

def values(r, dt, n):
    """Rank r's input: small integers (-3..5; unsigned: 0..5), bool: a pattern."""
    if dt == np.bool_:
        return (np.arange(n) + r) % 3 != 0
    v = np.arange(n) % 5 + 2 * r - 3
    if dt != BF16 and np.dtype(dt).kind == "u":
        v = np.abs(v)
    if dt == BF16:
        return (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return v.astype(dt)

def as_float(x, dt):
    return (x.astype(np.uint32) << 16).view(np.float32) if dt == BF16 else x

def reduce(x, dt, op, name, average=False, attrs=""):
    out = np.empty_like(x)
    h = _basics.start_reduce(name, x.ctypes.data, out.ctypes.data, x.nbytes, code_of(dt), op, average, 0,
                             attrs=attrs, pending=_basics.Pending(x, out, ""))
    return _basics.synchronize(h)

def check(label, got, want):
    checked.append(label)
    if not np.array_equal(got, want):
        failures.append(f"{label}: got {got[:8].tolist()} want {want[:8].tolist()}")

def report(**extra):
    emit_result({"rank": rank, "failures": failures, "checked": len(checked), **extra})
'''

FLAT = PRELUDE + r'''
OPS = {"min": (c.OP_MIN, np.minimum), "max": (c.OP_MAX, np.maximum), "prod": (c.OP_PRODUCT, np.multiply)}
DTYPES = [np.float32, np.float64, np.float16, BF16, np.uint8, np.int8, np.int16, np.int32, np.int64, np.bool_]
for rnd in range(2):
    for opname, (op, ref) in OPS.items():
        for dt in DTYPES:
            for n in (37, 3000):  # one partition, and several (BYTEPS_PARTITION_BYTES=4096)
                dname = dt if dt == BF16 else np.dtype(dt).name
                inputs = [as_float(values(r, dt, n), dt) for r in range(size)]
                want = inputs[0]
                for x in inputs[1:]:
                    want = ref(want, x)
                got = reduce(values(rank, dt, n), dt, op, f"{opname}.{dname}.{n}")
                check(f"{opname} {dname} n={n} round {rnd}", as_float(got, dt), want)

# int16 and bool through allgather (every rank's slice, in rank order) and broadcast (from rank 1).
for dt in (np.int16, np.bool_):
    dname = np.dtype(dt).name
    n = 5
    mine = values(rank, dt, n)
    out = np.zeros(n * size, dt)
    h = _basics.start_allgather(f"gather.{dname}", mine.ctypes.data, mine.nbytes, out.ctypes.data, out.nbytes,
                                rank * mine.nbytes, code_of(dt), 0, mine, out, attrs=f"shape={n}")
    check(f"allgather {dname}", _basics.synchronize(h), np.concatenate([values(r, dt, n) for r in range(size)]))
    buf = values(rank, dt, n).copy()
    h = _basics.start_broadcast(f"bcast.{dname}", buf.ctypes.data, buf.nbytes, code_of(dt), 1, 0, buf,
                                attrs="root=1")
    check(f"broadcast {dname}", _basics.synchronize(h), values(1, dt, n))

# Local argument errors are ValueErrors naming the tensor.
errors = {}
for label, call in [("bool sum", lambda: reduce(values(rank, np.bool_, 4), np.bool_, c.OP_SUM, "flags")),
                    ("average max", lambda: reduce(values(rank, np.int32, 4), np.int32, c.OP_MAX, "m", True)),
                    ("bad op", lambda: reduce(values(rank, np.int32, 4), np.int32, 7, "bad"))]:
    try:
        call()
        errors[label] = "no error"
    except ValueError as err:
        errors[label] = f"ValueError: {err}"

# Workers that disagree on the attributes: every one gets the same BytePSError.
try:
    reduce(values(rank, np.float32, 4), np.float32, c.OP_MAX, "disagree", attrs=f"shape=4;root={rank}")
    errors["mismatch"] = "no error"
except Exception as err:  # noqa: BLE001 - the type is what is checked
    errors["mismatch"] = f"{type(err).__name__} runtime={isinstance(err, RuntimeError)} " \
                         f"value={isinstance(err, ValueError)} bps={isinstance(err, bps.BytePSError)}: {err}"
report(errors=errors)
bps.shutdown()
'''


def test_min_max_product_every_dtype_gather_broadcast_and_errors(run_job):
    r = run_job(2, 1, FLAT, env={"BYTEPS_PARTITION_BYTES": "4096"}, timeout=90, force_distributed=True)
    assert r.returncode == 0, r.output
    res = job_results(r.output)
    assert sorted(x["rank"] for x in res) == [0, 1], r.output
    for x in res:
        assert x["failures"] == [], x
        assert x["checked"] == 2 * 3 * 10 * 2 + 4, x
        e = x["errors"]
        assert e["bool sum"].startswith("ValueError") and "'byteps.flags'" in e["bool sum"] \
            and "bool tensors cannot be summed" in e["bool sum"], e
        assert e["average max"].startswith("ValueError") and "'byteps.m'" in e["average max"] \
            and "average applies to a sum only, not to a max" in e["average max"], e
        assert e["bad op"].startswith("ValueError") and "unknown reduce op 7" in e["bad op"], e
        assert "BytePSError runtime=True value=False bps=True" in e["mismatch"], e
        assert "tensor 'byteps.disagree'" in e["mismatch"], e
        # Whichever worker's declaration reached the server first is named first.
        assert ("root is 0 on worker 0 but 1 on worker 1" in e["mismatch"]
                or "root is 1 on worker 1 but 0 on worker 0" in e["mismatch"]), e


LOCAL = PRELUDE + r'''
for opname, op, ref in [("min", c.OP_MIN, np.minimum), ("max", c.OP_MAX, np.maximum)]:
    for dt in (np.float32, np.float16, np.int16, np.uint8, np.bool_):
        for n in (37, 3000):
            dname = np.dtype(dt).name
            want = values(0, dt, n)
            for r in range(1, size):
                want = ref(want, values(r, dt, n))
            for rnd in range(2):
                check(f"{opname} {dname} n={n} round {rnd}", reduce(values(rank, dt, n), dt, op, f"{opname}.{dname}.{n}"),
                      want)
report(local_size=bps.local_size())
bps.shutdown()
'''


def test_local_reduce_applies_min_and_max(run_job):
    # 2 hosts x 2 processes: each host's root reduces its processes' tensors, then the server
    # the hosts' results; with one host and no server the local reduce alone gives the answer.
    for hosts, servers in [(2, 1), (1, 0)]:
        env = {"BPS_LOCAL": "2", "BPS_CHILD": LOCAL, "BPS_CHILD_TIMEOUT": "80", "BYTEPS_PARTITION_BYTES": "4096"}
        r = run_job(hosts, max(servers, 1), LOCAL_SPAWNER, env=env, timeout=90, force_distributed=servers > 0)
        assert r.returncode == 0, r.output
        res = job_results(r.output)
        assert len(res) == 2 * hosts, r.output
        for x in res:
            assert x["local_size"] == 2 and x["failures"] == [], x
            assert x["checked"] == 2 * 5 * 2 * 2, x
