"""Gradient compression in real jobs (2 workers x 2 servers, and 2 hosts x 2 local processes):
compressed tensors of several partitions next to uncompressed ones, every codec (and a fake-device
tensor), checked exactly
against a reference each worker computes with ``_core.codec_compress`` / ``codec_decompress``:
each worker's (or host's) payload decoded and summed in float32, the sum compressed again as the
server does (with the server's own error feedback for ef=vanilla), decoded and averaged. Also:
a tensor under BYTEPS_MIN_COMPRESS_BYTES is summed exactly; workers disagreeing on a parameter
get a kMismatch naming it; allgather and broadcast with a compressor are refused, naming the
tensor.

The random codecs draw from (seed, partition key, round); the test does not know the keys the
name service gave, so it finds the declared key whose round-1 reference matches (any other
implementation matches none of them) and keeps it for the later rounds."""
import pytest

from conftest import LOCAL_SPAWNER, NUMPY_PRELUDE, job_results

PRELUDE = NUMPY_PRELUDE + r'''
import itertools
from byteps import _basics, _core
c = _basics.core()
F32 = c.FLOAT32
PART = 4096  # BYTEPS_PARTITION_BYTES: 1024 float32 per partition
N = 3 * 1024  # three partitions
ROUNDS = 3
failures, checked = [], []
hosts = int(os.environ.get("BPS_HOSTS", str(size)))  # who pushes to the servers
local = size // hosts

def values(r, rnd, salt):
    rng = np.random.default_rng(1000 * r + 17 * rnd + salt)
    return rng.standard_normal(N).astype(np.float32)

def push(x, name, attrs, average=True, dtype=None, device=(0, 0, 0)):
    out = np.empty_like(x)
    h = _basics.start_reduce(name, x.ctypes.data, out.ctypes.data, x.nbytes, F32 if dtype is None else dtype,
                             c.OP_SUM, average, 0, device=device,
                             attrs=attrs, pending=_basics.Pending(x, out, ""))
    return _basics.synchronize(h)

def C(params, x, key, rnd):
    return _core.codec_compress(params, "ref", F32, np.ascontiguousarray(x, np.float32), len(x), key, rnd)

def D(params, payload, n):
    return np.frombuffer(_core.codec_decompress(params, "ref", F32, payload, n, 4), np.float32).copy()

def D_add(params, payload, acc):
    """acc plus the decoded payload, as the servers sum (randomk may draw an index twice: the order counts)."""
    return np.frombuffer(_core.codec_decompress(params, "ref", F32, payload, len(acc), 4, acc), np.float32).copy()

class Reference:
    """Rounds of one compressed tensor as the workers and servers compute them. Each server adds a
    partition's pushes in arrival order, which the rounding may show (randomk may draw an index
    twice), and each partition has its own order: every partition of a round is checked against
    every order of the hosts, and the server state of the order that matched goes on."""
    def __init__(self, params, ef, dk):
        self.params, self.ef, self.dk = params, ef, dk
        self.ew = {}  # (host, part) -> the worker's residual
        self.es = {}  # part -> the server's residual

    def matches(self, xs, rnd, got):
        """Whether some arrival order per partition gives `got`; then the state is kept."""
        out, ew, es, ok = [], dict(self.ew), dict(self.es), True
        for i in range(N // 1024):
            key = (self.dk << 16) | i
            pays = {}
            for h, x in enumerate(xs):
                g = x[i * 1024:(i + 1) * 1024]
                p = (g + self.ew.get((h, i), np.zeros(1024, np.float32))).astype(np.float32) if self.ef else g
                pays[h] = C(self.params, p, key, rnd)
                if self.ef:
                    ew[(h, i)] = (p - D(self.params, pays[h], 1024)).astype(np.float32)
            part_ok = False
            for order in itertools.permutations(range(len(xs))):
                acc = np.zeros(1024, np.float32)
                for h in order:
                    acc = D_add(self.params, pays[h], acc)
                p = (acc + self.es.get(i, np.zeros(1024, np.float32))).astype(np.float32) if self.ef else acc
                dec = D(self.params, C(self.params, p, key, rnd), 1024)
                want = (dec / np.float32(size)).astype(np.float32)
                if np.array_equal(want, got[i * 1024:(i + 1) * 1024]):
                    part_ok = True
                    break
            ok = ok and part_ok
            if self.ef:
                es[i] = (p - dec).astype(np.float32)
            out.append(want)
        if ok:
            self.ew, self.es = ew, es
        return ok, np.concatenate(out)

def host_inputs(rnd, salt):
    """What each host pushes: the sum of its local processes' inputs."""
    xs = []
    for h in range(hosts):
        s = values(h * local, rnd, salt)
        for j in range(1, local):
            s = (s + values(h * local + j, rnd, salt)).astype(np.float32)
        xs.append(s)
    return xs

def check(label, got, want):
    checked.append(label)
    if not np.array_equal(got, want):
        bad = np.flatnonzero(got != want)
        failures.append(f"{label}: {bad.size} elements differ, first {bad[:4].tolist()}: "
                        f"got {got[bad[:4]].tolist()} want {want[bad[:4]].tolist()}")

def report(**extra):
    emit_result({"rank": rank, "failures": failures, "checked": len(checked), **extra})

CASES = [  # (name, push_pull attrs, codec params, ef)
    ("onebit", "compressor=onebit;scaling=true;ef=vanilla", "compressor=onebit;scaling=true", True),
    ("topk", "compressor=topk;k=0.01;ef=vanilla", "compressor=topk;k=0.01", True),
    ("randomk", "compressor=randomk;k=0.05;seed=3", "compressor=randomk;k=0.05;seed=3", False),
    ("dithering", "compressor=dithering;k=8", "compressor=dithering;k=8", False),
    ("fp16", "cast=fp16", "cast=fp16", False),
    # A (fake) device tensor: copy-in, compress, push-pull, decompress, copy-out (the device group's
    # stages around them with several local processes).
    ("device.topk", "compressor=topk;k=0.02;ef=vanilla", "compressor=topk;k=0.02", True),
]

def run_cases():
    refs = {}
    for rnd in range(1, ROUNDS + 1):
        for salt, (name, attrs, params, ef) in enumerate(CASES):
            device = (c.DEVICE_FAKE, bps.local_rank(), 0) if name.startswith("device") else (0, 0, 0)
            got = push(values(rank, rnd, salt), f"c.{name}", f"shape={N};" + attrs, device=device)
            xs = host_inputs(rnd, salt)
            if name not in refs:  # round 1: find the declared key the name service gave
                for dk in range(0, 64):
                    ref = Reference(params, ef, dk)
                    ok, want = ref.matches(xs, rnd, got)
                    if ok:
                        break
                refs[name] = ref
            else:
                ok, want = refs[name].matches(xs, rnd, got)
            check(f"{name} round {rnd}", got, got if ok else want)
        # Uncompressed next to them: the exact float32 sum, averaged.
        plain = push(values(rank, rnd, 99), "plain", f"shape={N}")
        want = host_inputs(rnd, 99)
        s = want[0]
        for x in want[1:]:
            s = (s + x).astype(np.float32)
        check(f"plain round {rnd}", plain, (s / np.float32(size)).astype(np.float32))
        # Under BYTEPS_MIN_COMPRESS_BYTES (8 KiB): sent as is, summed exactly.
        small = np.arange(1000, dtype=np.float32) * (rank + 1)
        check(f"small round {rnd}", push(small, "small", "compressor=onebit", average=False),
              np.arange(1000, dtype=np.float32) * sum(r + 1 for r in range(size)))
'''

SUMS = PRELUDE + r'''
run_cases()
report()
bps.shutdown()
'''

ENV = {"BYTEPS_PARTITION_BYTES": "4096", "BYTEPS_MIN_COMPRESS_BYTES": "8192", "BYTEPS_AUTOTUNE": "0"}


def test_compressed_sums_equal_the_reference_next_to_uncompressed_ones(run_job):
    r = run_job(2, 2, SUMS, env=ENV, timeout=120, force_distributed=True)
    assert r.returncode == 0, r.output
    res = job_results(r.output)
    assert sorted(x["rank"] for x in res) == [0, 1], r.output
    for x in res:
        assert x["failures"] == [], x
        assert x["checked"] == 3 * (6 + 2), x


def test_the_local_reduce_comes_before_compression(run_job):
    env = {**ENV, "BPS_LOCAL": "2", "BPS_HOSTS": "2", "BPS_CHILD": SUMS, "BPS_CHILD_TIMEOUT": "110"}
    r = run_job(2, 2, LOCAL_SPAWNER, env=env, timeout=120, force_distributed=True)
    assert r.returncode == 0, r.output
    res = job_results(r.output)
    assert sorted(x["rank"] for x in res) == [0, 1, 2, 3], r.output
    for x in res:
        assert x["failures"] == [], x
        assert x["checked"] == 3 * (6 + 2), x


ERRORS = PRELUDE + r'''
errors = {}
x = values(rank, 1, 0)
# Workers that disagree on a parameter: every one gets the servers' kMismatch naming it.
try:
    push(x, "disagree", f"shape={N};compressor=topk;k={0.5 if rank == 0 else 0.25}")
    errors["mismatch"] = "no error"
except Exception as err:  # noqa: BLE001 - the type is what is checked
    errors["mismatch"] = f"{type(err).__name__} bps={isinstance(err, bps.BytePSError)}: {err}"
# Concatenations cannot be compressed: refused at once, naming the tensor.
out = np.zeros(N * size, np.float32)
for label, call in [
    ("allgather", lambda: _basics.start_allgather("g", x.ctypes.data, x.nbytes, out.ctypes.data, out.nbytes,
                                                  rank * x.nbytes, F32, 0, x, out, attrs="compressor=onebit")),
    ("broadcast", lambda: _basics.start_broadcast("b", x.ctypes.data, x.nbytes, F32, 0, 0, x,
                                                  attrs="root=0;compressor=topk;k=0.1")),
    ("int32", lambda: push(np.arange(N, dtype=np.int32), "ints", "compressor=onebit", False, c.INT32)),
]:
    try:
        call()
        errors[label] = "no error"
    except ValueError as err:
        errors[label] = f"ValueError: {err}"
# After those, a compressed tensor still goes through (the job is fine).
try:
    push(values(rank, 1, 5), "after", "cast=fp16")
    errors["after"] = "ok"
except Exception as err:  # noqa: BLE001
    errors["after"] = f"{type(err).__name__}: {err}"
report(errors=errors)
bps.shutdown()
'''


def test_mismatched_parameters_and_concatenations_are_named_errors(run_job):
    r = run_job(2, 1, ERRORS, env=ENV, timeout=90, force_distributed=True)
    assert r.returncode == 0, r.output
    res = job_results(r.output)
    assert sorted(x["rank"] for x in res) == [0, 1], r.output
    for x in res:
        e = x["errors"]
        assert "BytePSError bps=True" in e["mismatch"] and "'byteps.disagree'" in e["mismatch"], e
        assert "k is 0.5 on worker 0 but 0.25 on worker 1" in e["mismatch"] \
            or "k is 0.25 on worker 1 but 0.5 on worker 0" in e["mismatch"], e
        for label, op in [("allgather", "concatenation"), ("broadcast", "concatenation")]:
            assert e[label].startswith("ValueError") and f"a {op} cannot be compressed" in e[label], e
        assert "'byteps.g'" in e["allgather"] and "'byteps.b'" in e["broadcast"], e
        assert e["int32"].startswith("ValueError") and "'byteps.ints'" in e["int32"], e
        assert e["after"] == "ok", e


@pytest.fixture
def fault_job(cluster):
    from fault_jobs import FaultJob
    jobs = []

    def make(**kwargs):
        job = FaultJob(cluster, **kwargs)
        jobs.append(job)
        return job

    yield make
    cluster.kill_all()
    for job in jobs:
        job.close()


@pytest.mark.usefixtures("require_core")
def test_a_reconnect_in_the_middle_of_compressed_rounds_gives_the_same_results(fault_job):
    # The 1 MiB and 4 MiB tensors declared with cast=fp16 (byteps_declare_tensor_params); their
    # values are small integers, exact in float16, so the results are the exact sums, as without
    # compression, through two dropped data links.
    job = fault_job(env={"FJ_COMPRESS": "cast=fp16"}).start()
    proxy = job.server_proxy[0]
    for r in (30, 100):
        job.wait_round(r)
        assert proxy.reset_all() == 4
    job.assert_exact()
    assert proxy.stats()["accepted"] >= 12


@pytest.mark.usefixtures("require_core")
def test_declared_params_and_the_learning_rate_are_checked_at_once():
    from byteps import _core
    _core.declare_tensor_params("byteps.ok", {"byteps_compressor_type": "topk", "byteps_compressor_k": 0.01,
                                              "ef": "vanilla"})
    with pytest.raises(ValueError, match="'byteps.bad'.*compressor"):
        _core.declare_tensor_params("byteps.bad", {"byteps_compressor_type": "zip"})
    with pytest.raises(ValueError, match="'byteps.bad2'"):
        _core.declare_tensor_params("byteps.bad2", {"compressor": "onebit", "colour": "red"})
    _core.set_learning_rate(0.1)
    with pytest.raises(ValueError, match="must be a finite number > 0"):
        _core.set_learning_rate(0.0)
