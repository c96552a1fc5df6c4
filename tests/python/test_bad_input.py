"""Bad input across processes: every case must end with a clear error, within its timeout, and
leave no process behind.

Most jobs are started process by process (the ``cluster`` fixture) rather than through bpsrun,
because bpsrun stops the whole job at the first failure; here each process must reach its own
error and exit by itself.  Timeouts are small (BYTEPS_START_TIMEOUT / BYTEPS_TIMEOUT /
PS_HEARTBEAT_TIMEOUT), so a hang shows up as a process still running at the deadline.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time

import pytest

from conftest import CORE_BINARY, PYTHON, REPO, free_port, job_env, write_script  # conftest puts tools/ on sys.path
from tools.rawwire import FINISH, NODE_FAILED, REGISTER, REGISTER_REPLY, TERMINATE, frame, read_frame_arg

pytestmark = pytest.mark.usefixtures("require_core")

# Workers print this, then exit 2, when push_pull raises; the test checks the text.
PRELUDE = """
import os, socket, sys, time
import numpy as np
import byteps.numpy as bps

def report(err):
    print(f"PUSH_PULL_ERROR {type(err).__name__}: {err}", flush=True)
    sys.exit(2)

bps.init()
rank, n = bps.rank(), bps.size()
"""

FAST_FAIL = {"BYTEPS_START_TIMEOUT": "10", "BYTEPS_TIMEOUT": "10", "PS_HEARTBEAT_INTERVAL": "0.2",
             "PS_HEARTBEAT_TIMEOUT": "2"}


def assert_all_exited(cluster) -> None:
    assert not cluster.leftovers(), f"did not exit in time: {cluster.leftovers()}\n{cluster.dump()}"


def workers(cluster):
    return [p for label, p in cluster.procs.items() if label.startswith("worker")]


# --------------------------------------------------------------------------------------------
# workers that disagree about a tensor


MISMATCH = PRELUDE + """
spec = sys.argv[1:]                     # per worker: "<name>:<length>:<dtype>,..." in use order
mine = spec[rank].split(",")
handles = []
try:
    for item in mine:
        name, length, dtype = item.split(":")
        handles.append(bps.push_pull_async(np.ones(int(length), dtype), average=False, name=name))
    for h in handles:
        bps.synchronize(h)
except Exception as err:
    report(err)
print("NO ERROR", flush=True)
"""


@pytest.fixture
def mismatch(cluster):
    def run(spec0: str, spec1: str):
        env = cluster.env(2, 1, FAST_FAIL)
        script = write_script(cluster.dir, MISMATCH)
        cluster.scheduler(env)
        cluster.server(0, env)
        for i in range(2):
            cluster.worker(f"worker:{i}", script, {**env, "DMLC_WORKER_ID": str(i)}, args=(spec0, spec1))
        cluster.wait(timeout=25)
        assert_all_exited(cluster)
        for w in workers(cluster):
            assert w.returncode == 2 and "PUSH_PULL_ERROR" in w.output, cluster.dump()
        return [w.output for w in workers(cluster)]

    return run


def test_same_name_different_sizes(mismatch):
    for out in mismatch("grad:4:float32", "grad:5:float32"):
        assert "byteps.grad" in out and "16 bytes" in out and "20 bytes" in out


def test_same_name_different_dtypes(mismatch):
    for out in mismatch("grad:4:float32", "grad:4:int32"):  # same byte count
        assert "byteps.grad" in out and "float32" in out and "int32" in out


def test_different_declaration_order_is_no_error(cluster):
    # Keys come from the names (the scheduler's name service), not from the order of first use:
    # worker 1 uses the tensors the other way round and every sum is exact.
    env = cluster.env(2, 1, FAST_FAIL)
    script = write_script(cluster.dir, MISMATCH)
    cluster.scheduler(env)
    cluster.server(0, env)
    for i in range(2):
        cluster.worker(f"worker:{i}", script, {**env, "DMLC_WORKER_ID": str(i)},
                       args=("a:8:float32,b:9:float32", "b:9:float32,a:8:float32"))
    cluster.wait(timeout=25)
    assert_all_exited(cluster)
    for w in workers(cluster):
        assert w.returncode == 0 and "NO ERROR" in w.output, cluster.dump()


def test_mismatch_through_bpsrun(run_job):
    # The same case through the launcher: it stops the job at the first failure.
    result = run_job(2, 1, MISMATCH, args=("grad:4:float32", "grad:6:float32"), env=FAST_FAIL, timeout=30)
    assert result.returncode == 2, result
    assert "PUSH_PULL_ERROR" in result.stdout and "byteps.grad" in result.stdout, result
    assert result.elapsed < 20 and not result.leftovers, result


# --------------------------------------------------------------------------------------------
# wrong process counts, unreachable or busy scheduler


SIMPLE_JOB = PRELUDE + """
try:
    out = bps.push_pull(np.full(5, rank + 1, np.int64), average=False, name="x")
except Exception as err:
    report(err)
assert (out == n * (n + 1) // 2).all(), out
print("JOB OK", rank, flush=True)
"""


def test_one_worker_too_many(cluster):
    # DMLC_NUM_WORKER=2, but a third worker joins while the job runs (no DMLC_WORKER_ID anywhere:
    # the scheduler assigns ranks by arrival).  The two wait on stdin so the job outlives the
    # third one's attempt.
    env = cluster.env(2, 1, FAST_FAIL)
    script = write_script(cluster.dir, SIMPLE_JOB + "sys.stdin.readline()\n")
    cluster.scheduler(env)
    cluster.server(0, env)
    first = [cluster.worker(f"worker:{i}", script, env, piped=True) for i in range(2)]
    for w in first:
        w.expect("JOB OK", timeout=20)
    extra = cluster.worker("worker:extra", script, env)
    cluster.wait(timeout=20, labels=["worker:extra"])
    assert extra.returncode not in (0, None), cluster.dump()
    assert "one too many" in extra.output and "DMLC_NUM_WORKER" in extra.output, cluster.dump()
    for w in first:
        w.tell("done")
    cluster.wait(timeout=20)
    assert_all_exited(cluster)
    for label in ("worker:0", "worker:1", "scheduler", "server:0"):  # the job itself is unharmed
        assert cluster.procs[label].returncode == 0, cluster.dump()


def test_missing_worker(cluster):
    # The scheduler gives up after 3 s and tells everyone which ranks are missing.  The others
    # get more time of their own, so that the scheduler's verdict (not their own timer) ends them;
    # see test_missing_worker_started_before_the_scheduler for equal timeouts.
    env = cluster.env(2, 1, {**FAST_FAIL, "BYTEPS_START_TIMEOUT": "6"})
    script = write_script(cluster.dir, SIMPLE_JOB)
    cluster.scheduler({**env, "BYTEPS_START_TIMEOUT": "3"})
    cluster.server(0, env)
    cluster.worker("worker:0", script, {**env, "DMLC_WORKER_ID": "0"})
    cluster.wait(timeout=20)
    assert_all_exited(cluster)
    for proc in cluster.procs.values():  # everyone gives up, with the reason
        assert proc.returncode not in (0, None), cluster.dump()
        assert "1 of 2 workers registered (ranks 1 missing)" in proc.output, cluster.dump()
        assert proc.elapsed < 5.5, cluster.dump()
    assert "BYTEPS_START_TIMEOUT" in cluster.procs["worker:0"].output, cluster.dump()


def test_missing_worker_started_before_the_scheduler(cluster):
    # Launch order is arbitrary in a real cluster: here the worker starts 1 s before the
    # scheduler, with the same BYTEPS_START_TIMEOUT, so its own deadline comes first.  It
    # should still learn (or say) what the job is missing.
    env = cluster.env(2, 1, {**FAST_FAIL, "BYTEPS_START_TIMEOUT": "3"})
    script = write_script(cluster.dir, SIMPLE_JOB)
    worker = cluster.worker("worker:0", script, {**env, "DMLC_WORKER_ID": "0"})
    time.sleep(1.0)  # deliberate launch order, not a wait for a condition
    cluster.scheduler(env)
    cluster.server(0, env)
    cluster.wait(timeout=20)
    assert_all_exited(cluster)
    assert worker.returncode not in (0, None), cluster.dump()
    assert "2 workers" in worker.output and "missing" in worker.output, cluster.dump()


def test_scheduler_unreachable(tmp_path):
    port = free_port()  # nobody listens there
    env = job_env({"DMLC_NUM_WORKER": "2", "DMLC_NUM_SERVER": "1", "DMLC_WORKER_ID": "0",
                   "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(port), "BYTEPS_START_TIMEOUT": "2"})
    script = write_script(tmp_path, "import byteps.numpy as bps\nbps.init()\nprint('JOINED')\n")
    start = time.monotonic()
    r = subprocess.run([PYTHON, str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "JOINED" not in r.stdout
    assert "scheduler" in r.stderr and f"127.0.0.1:{port}" in r.stderr, r.stderr
    assert time.monotonic() - start < 15


@pytest.mark.parametrize("role", ["scheduler", "server"])
def test_port_already_in_use(tmp_path, role):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        extra = {"DMLC_NUM_WORKER": "2", "DMLC_NUM_SERVER": "1", "DMLC_PS_ROOT_URI": "127.0.0.1",
                 "DMLC_NODE_HOST": "127.0.0.1", "BYTEPS_START_TIMEOUT": "3", "DMLC_ROLE": role}
        if role == "scheduler":
            extra["DMLC_PS_ROOT_PORT"] = str(port)
        else:  # the server's own port is the busy one; the scheduler is not there either
            extra.update({"DMLC_PS_ROOT_PORT": str(free_port()), "DMLC_PORT": str(port)})
        r = subprocess.run([str(CORE_BINARY), role], env=job_env(extra), capture_output=True, text=True,
                           timeout=30)
    assert r.returncode != 0
    assert "already in use" in r.stderr and str(port) in r.stderr, r.stderr


def test_malformed_env_in_scheduler_and_worker(tmp_path):
    env = job_env({"DMLC_NUM_WORKER": "two", "DMLC_NUM_SERVER": "1", "DMLC_PS_ROOT_PORT": str(free_port())})
    r = subprocess.run([str(CORE_BINARY), "scheduler"], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "DMLC_NUM_WORKER='two'" in r.stderr, r.stderr
    script = write_script(tmp_path, "import byteps.numpy as bps\nbps.init()\n")
    r = subprocess.run([PYTHON, str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "ValueError" in r.stderr and "DMLC_NUM_WORKER='two'" in r.stderr, r.stderr


def test_malformed_env_through_bpsrun(run_job):
    # bpsrun passes --env to every process: the scheduler/servers and the worker all refuse it.
    result = run_job(2, 1, "import byteps.numpy as bps\nbps.init()\n", env={"BYTEPS_PARTITION_BYTES": "4k0"},
                     timeout=30)
    assert result.returncode not in (0, 124), result
    assert "BYTEPS_PARTITION_BYTES='4k0'" in result.output, result
    assert not result.leftovers, result


# --------------------------------------------------------------------------------------------
# a worker dies mid-job


ROUNDS_THEN = PRELUDE + """
action = sys.argv[1]
print("PID", os.getpid(), flush=True)
try:
    for it in range(1000):
        if rank == 1 and it == 3:
            os.kill(os.getpid(), {"kill": 9, "stop": 19}[action])
        out = bps.push_pull(np.full(1000, it + rank, np.float32), average=False, name="w")
        assert (out == 2 * it + 1).all()
except Exception as err:
    report(err)
print("FINISHED WITHOUT ERROR", flush=True)
"""


@pytest.mark.parametrize("action", ["kill", "stop"])
def test_worker_dies_mid_job(cluster, action):
    # kill: its connections close at once.  stop (SIGSTOP): connections stay open, heartbeats
    # stop; the scheduler must notice within PS_HEARTBEAT_TIMEOUT.
    env = cluster.env(2, 1, FAST_FAIL)
    script = write_script(cluster.dir, ROUNDS_THEN)
    cluster.scheduler(env)
    cluster.server(0, env)
    for i in range(2):
        cluster.worker(f"worker:{i}", script, {**env, "DMLC_WORKER_ID": str(i)}, args=(action,))
    survivor, victim = cluster.procs["worker:0"], cluster.procs["worker:1"]
    others = ["worker:0", "scheduler", "server:0"] + (["worker:1"] if action == "kill" else [])
    cluster.wait(timeout=20, labels=others)  # a stopped worker never exits by itself
    assert_all_exited(cluster)
    out = survivor.output
    assert survivor.returncode == 2 and "PUSH_PULL_ERROR" in out, cluster.dump()
    victim_pid = victim.output.split("PID ")[1].split()[0]
    assert "worker 1" in out and f"pid {victim_pid}" in out, cluster.dump()
    assert ("no heartbeat" if action == "stop" else "died") in out, cluster.dump()
    for label in ("scheduler", "server:0"):  # the job failed: they say so and exit
        assert cluster.procs[label].returncode not in (0, None), cluster.dump()
        assert f"pid {victim_pid}" in cluster.procs[label].output, cluster.dump()
    assert survivor.elapsed < 15, cluster.dump()
    if action == "kill":
        assert victim.returncode == -signal.SIGKILL


def test_server_killed_mid_job(cluster):
    # 4 KiB partitions: every round of the 64 KiB tensor needs both servers.  Worker 0 kills
    # server 0's process after a few rounds; the workers keep going until an error (at most
    # until the deadline, which they must not reach).
    env = cluster.env(2, 2, {**FAST_FAIL, "BYTEPS_PARTITION_BYTES": "4096"})
    script = write_script(cluster.dir, PRELUDE + """
deadline = time.monotonic() + 15
try:
    it = 0
    while time.monotonic() < deadline:
        if rank == 0 and it == 5:
            os.kill(int(os.environ["BPS_TEST_VICTIM"]), 9)
        out = bps.push_pull(np.full(16384, it + rank, np.float32), average=False, name="w")
        assert (out == 2 * it + 1).all()
        it += 1
except Exception as err:
    report(err)
print("FINISHED WITHOUT ERROR", flush=True)
""")
    cluster.scheduler(env)
    victim = cluster.server(0, env)
    cluster.server(1, env)
    for i in range(2):
        cluster.worker(f"worker:{i}", script, {**env, "DMLC_WORKER_ID": str(i),
                                               "BPS_TEST_VICTIM": str(victim.popen.pid)})
    cluster.wait(timeout=25)
    assert_all_exited(cluster)
    assert victim.returncode == -signal.SIGKILL
    assert cluster.procs["scheduler"].returncode not in (0, None), cluster.dump()  # a failed job
    for w in workers(cluster):  # both fail, naming the dead server
        assert w.returncode == 2 and "PUSH_PULL_ERROR" in w.output, cluster.dump()
        error = w.output.split("PUSH_PULL_ERROR")[1].splitlines()[0]
        # The first error may name the other server when it shut down (after the scheduler ended
        # the job) before this worker saw the dead one go; the failure notice names the dead one.
        assert "server" in error, cluster.dump()
        # The dead server is named (by the worker's own connection error or the scheduler's notice).
        assert f"pid {victim.popen.pid})" in w.output, cluster.dump()
        assert w.elapsed < 14, cluster.dump()


# --------------------------------------------------------------------------------------------
# garbage on the ports


GARBAGE = PRELUDE + """
import json, random
from tools.rawwire import HELLO, INIT_KEY, PUSH_PULL, REGISTER, frame

HEARTBEAT = 5
rng = random.Random(rank)
noise = [bytes(rng.getrandbits(8) for _ in range(4096)), b"GET / HTTP/1.0\\r\\n\\r\\n", b"\\xff" * 64, b"",
         frame(HEARTBEAT, version=7),                          # unsupported wire version
         frame(200),                                           # unknown opcode
         frame(REGISTER, payload_len=2**40),                   # absurd length
         frame(REGISTER, b"{not json"),                        # Register with a broken payload
         frame(REGISTER, json.dumps({"role": "worker", "requested_rank": -1, "host": "127.0.0.1", "port": 0,
                                     "pid": 1, "num_workers": 7, "num_servers": 7,
                                     "job_secret_hash": ""}).encode()),
         frame(PUSH_PULL, b"\\0" * 16, key=0),                 # PushPull before Hello
         frame(HELLO, sender=99),                              # Hello with an impossible rank
         frame(HELLO, sender=n - 1) + frame(INIT_KEY, b"[1, 2", key=12345 << 16),  # malformed InitKey
         frame(INIT_KEY, b"x" * 10, payload_len=1000)]         # truncated: the peer hangs up
targets = [("scheduler", int(os.environ["DMLC_PS_ROOT_PORT"]))]
targets += [(f"server {i}", int(p)) for i, p in enumerate(os.environ["BPS_TEST_SERVER_PORTS"].split(","))]
idle = []
for it in range(20):
    if rank == 0 and it in (3, 9):
        for what, port in targets:
            for payload in noise:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                    s.sendall(payload)
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))  # open, silent
    x = (np.arange(20000, dtype=np.int32) % 1000) * (it + 1) + rank
    out = bps.push_pull(x, average=False, name="g")
    want = (np.arange(20000, dtype=np.int32) % 1000) * (it + 1) * n + n * (n - 1) // 2
    assert np.array_equal(out, want), f"round {it}: wrong sum"
print("JOB OK", flush=True)
"""


def test_garbage_to_scheduler_and_server_ports(cluster):
    ports = [free_port(), free_port()]
    env = cluster.env(2, 2, {"BPS_TEST_SERVER_PORTS": ",".join(map(str, ports)),
                             "BYTEPS_PARTITION_BYTES": "16384"})
    env["PYTHONPATH"] += os.pathsep + str(REPO)  # the workers build their frames with tools.rawwire
    script = write_script(cluster.dir, GARBAGE)
    cluster.scheduler(env)
    for i, port in enumerate(ports):
        cluster.server(i, {**env, "DMLC_PORT": str(port)})
    for i in range(2):
        cluster.worker(f"worker:{i}", script, {**env, "DMLC_WORKER_ID": str(i)})
    cluster.wait(timeout=40)
    assert_all_exited(cluster)
    for proc in cluster.procs.values():
        assert proc.returncode == 0, cluster.dump()
    assert all("JOB OK" in w.output for w in workers(cluster)), cluster.dump()


# --------------------------------------------------------------------------------------------
# the scheduler's control protocol, driven by hand

def connect(port: int, timeout: float) -> socket.socket:
    """Connects to 127.0.0.1:port, retrying while the just-started process is not listening yet."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=timeout)
        except ConnectionRefusedError:
            if time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


def test_no_clean_terminate_after_a_failure(cluster):
    # Two fake workers and a fake server register; the server disconnects (the job fails), then
    # both workers send Finish, as real workers do when they call shutdown() before the failure
    # notice reaches them.  The scheduler must not announce a clean end after that.
    env = cluster.env(2, 1, {"PS_HEARTBEAT_INTERVAL": "0"})
    cluster.scheduler(env)
    nodes = []
    for role in ("worker", "worker", "server"):
        sock = connect(cluster.port, timeout=10)
        nodes.append(sock)
        request = {"role": role, "requested_rank": -1, "host": "127.0.0.1", "port": 1, "pid": os.getpid(),
                   "num_workers": 2, "num_servers": 1, "job_secret_hash": ""}
        sock.sendall(frame(REGISTER, json.dumps(request).encode()))
    for sock in nodes:
        assert read_frame_arg(sock)[0] == REGISTER_REPLY
    *fake_workers, fake_server = nodes
    fake_server.close()
    for sock in fake_workers:
        assert [read_frame_arg(sock)[:2] for _ in range(2)] == [(NODE_FAILED, 0), (TERMINATE, 1)]
        sock.sendall(frame(FINISH))
    late = []
    for sock in fake_workers:
        sock.settimeout(3)
        try:
            late.append(read_frame_arg(sock)[:2])
        except (socket.timeout, ConnectionError):
            pass
    cluster.wait(timeout=10)
    assert_all_exited(cluster)
    assert cluster.procs["scheduler"].returncode != 0, cluster.dump()
    assert (TERMINATE, 0) not in late, f"clean Terminate after the failure: {late}\n{cluster.dump()}"
