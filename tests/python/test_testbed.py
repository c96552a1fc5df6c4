"""Tests for the emulated cluster (tools/testbed): namespaces, shaping, teardown, jobs.

Every test builds its own testbeds with a unique prefix and checks at teardown (``testbeds``
fixture, in a finally) that none of its namespaces or records is left, also when it fails.
Skipped, with the reason, where network namespaces cannot be made (not root, no iproute2/tbf).
Timing tests use small rates (<= 200 Mbit/s on <= 3 hosts) so the two cores stay free.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import textwrap
import time

import pytest

from conftest import REPO, missing_core  # conftest puts tools/ on sys.path
from tools.testbed import netns
from tools.testbed.netns import TCP_GOODPUT_FACTOR, Testbed, TestbedError

PYTHON = "/usr/bin/python3"
CLI = [PYTHON, "-m", "tools.testbed"]
STEP_TIMEOUT = 30  # any single subprocess

_ok, _reason = Testbed.available()
pytestmark = pytest.mark.skipif(not _ok, reason=f"no emulated cluster here: {_reason}")


def unique_prefix() -> str:
    return f"bpst{secrets.token_hex(3)}t"


def leftovers(prefix: str) -> list[str]:
    """Namespaces (per ``ip netns list``) and records whose testbed prefix starts with *prefix*."""
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                             timeout=STEP_TIMEOUT, check=True).stdout
    names = [line.split()[0] for line in listing.splitlines() if line.strip()]
    left = [n for n in names if n.startswith(prefix)]
    if netns.RUN_DIR.exists():
        left += [f"record {p.name}" for p in netns.RUN_DIR.iterdir() if p.name.startswith(prefix)]
    return left


@pytest.fixture
def testbeds():
    """``make(n, **kw)`` -> Testbed with a unique prefix; everything is torn down and checked."""
    made: list[Testbed] = []
    prefixes: list[str] = []

    def make(n: int, **kw) -> Testbed:
        kw.setdefault("prefix", unique_prefix())
        prefixes.append(kw["prefix"])
        tb = Testbed(n, **kw)
        made.append(tb)
        return tb

    make.prefixes = prefixes
    try:
        yield make
    finally:
        for tb in made:
            tb.close()
        for prefix in prefixes:
            netns.destroy(prefix)  # after a failure inside the test too
        left = [name for prefix in prefixes for name in leftovers(prefix)]
        assert not left, f"left behind: {left}"


def cli(*args: str, timeout: float = STEP_TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def reach(run, src: int, dst_ip: str) -> bool:
    """Can host *src* reach *dst_ip*?  ``run(host, argv)`` runs a command inside a host."""
    if shutil.which("ping"):
        return run(src, ["ping", "-c1", "-W1", dst_ip]).returncode == 0
    # No ping: a TCP connect to a closed port is answered with RST (refused) only if the peer
    # exists; an unreachable address times out or fails with another error.
    probe = (f"import socket,sys\ntry: socket.create_connection(({dst_ip!r}, 9), timeout=1)\n"
             f"except ConnectionRefusedError: sys.exit(0)\nexcept OSError: sys.exit(1)\n")
    return run(src, [PYTHON, "-c", probe]).returncode == 0


# --------------------------------------------------------------------------------------------
# Life cycle


def test_cli_up_run_down():
    prefix = unique_prefix()
    try:
        up = cli("up", "--hosts", "3", "--rate", "0", "--prefix", prefix)
        assert up.returncode == 0, up.stderr
        assert f"prefix {prefix}" in up.stdout
        ips = re.findall(r"^h(\d+) \S+ (198\.18\.\d+\.\d+)$", up.stdout, re.M)
        assert ips == [("0", "198.18.0.1"), ("1", "198.18.0.2"), ("2", "198.18.0.3")], up.stdout

        def run(host: int, argv: list[str]) -> subprocess.CompletedProcess:
            return cli("run", "--prefix", prefix, "--host", str(host), "--", *argv)

        for src in range(3):
            for dst, ip in ips:
                if int(dst) != src:
                    assert reach(run, src, ip), f"h{src} cannot reach h{dst} ({ip})"
        # Isolated: the only route is the testbed's subnet (nothing reaches the real network).
        routes = run(0, ["ip", "-4", "route"]).stdout.strip().splitlines()
        assert len(routes) == 1 and routes[0].startswith("198.18.0.0/24 dev eth0"), routes
        assert run(1, ["sh", "-c", "exit 7"]).returncode == 7  # exit status passes through
        assert cli("list", "--prefix", prefix).stdout.split()[:2] == [prefix, "kept"]
        assert prefix not in cli("cleanup", "--prefix", prefix).stdout  # kept ones stay
        assert leftovers(prefix)
        down = cli("down", "--prefix", prefix)
        assert down.returncode == 0, down.stderr
        assert leftovers(prefix) == []
    finally:
        netns.destroy(prefix)


def test_exception_inside_with_kills_processes_and_deletes_namespaces(testbeds):
    with pytest.raises(RuntimeError, match="boom"):
        with testbeds(2, rate_mbit=None) as tb:
            child = tb.popen(0, ["sleep", "60"])
            # A daemon that is nobody's child of ours: found by its network namespace.
            daemon = int(tb.run(1, ["sh", "-c", "setsid sleep 60 </dev/null >/dev/null 2>&1 & "
                                    "echo $!"], timeout=STEP_TIMEOUT).stdout)
            assert netns.pid_alive(daemon)
            raise RuntimeError("boom")
    assert tb.closed and leftovers(tb.prefix) == []
    assert child.returncode == -signal.SIGKILL
    assert not netns.pid_alive(daemon)


def test_failed_creation_leaves_nothing(testbeds, monkeypatch):
    prefix = unique_prefix()
    real_batch = netns._batch

    def failing_batch(tool, lines, namespace=None, force=False):
        if tool == "tc":  # after the namespaces, links and addresses exist
            raise TestbedError("injected tc failure")
        return real_batch(tool, lines, namespace, force)

    monkeypatch.setattr(netns, "_batch", failing_batch)
    with pytest.raises(TestbedError, match="injected"):
        Testbed(3, rate_mbit=100, prefix=prefix)
    monkeypatch.undo()
    assert leftovers(prefix) == []

    # A prefix in use is refused without touching the testbed that has it.
    first = testbeds(1, rate_mbit=None)
    with pytest.raises(FileExistsError):
        Testbed(2, rate_mbit=None, prefix=first.prefix)
    assert set(first.namespaces) <= netns.existing_namespaces()
    assert first.run(0, ["true"], timeout=STEP_TIMEOUT).returncode == 0


# A program that creates a testbed and waits. SIGINT gets Python's usual handler even where the
# test runner was started in the background (a non-interactive shell starts background jobs with
# SIGINT ignored, which every child inherits: the creator then never saw the signal).
CREATOR = textwrap.dedent("""
    import signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path.insert(0, sys.argv[2])
    from tools.testbed import Testbed
    tb = Testbed(2, rate_mbit=None, prefix=sys.argv[1])
    tb.popen(0, ["sleep", "60"])
    print("ready", flush=True)
    time.sleep(60)
""")


def start_creator(prefix: str) -> subprocess.Popen:
    proc = subprocess.Popen([PYTHON, "-c", CREATOR, prefix, str(REPO)], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    line = proc.stdout.readline()  # the creator is bounded by its own sleep
    assert line == "ready\n", line
    return proc


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_to_creator_tears_down(sig):
    prefix = unique_prefix()
    proc = start_creator(prefix)
    try:
        assert len(leftovers(prefix)) == 4  # br, h0, h1, record
        proc.send_signal(sig)
        assert proc.wait(timeout=STEP_TIMEOUT) != 0
        assert leftovers(prefix) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        netns.destroy(prefix)


def test_cleanup_stale_removes_testbed_of_killed_creator(testbeds):
    base = unique_prefix()
    dead, alive = base + "k", base + "a"
    proc = start_creator(dead)
    try:
        mine = testbeds(1, rate_mbit=None, prefix=alive)
        [sleeper] = netns.namespace_pids([f"{dead}-h0"])[f"{dead}-h0"]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=STEP_TIMEOUT)
        assert len(leftovers(dead)) == 4 and netns.pid_alive(sleeper)
        assert [tb["state"] for tb in netns.list_testbeds(base)] == ["alive", "stale"]
        assert netns.cleanup_stale(base) == [dead]
        assert leftovers(dead) == [] and not netns.pid_alive(sleeper)
        assert set(mine.namespaces) <= netns.existing_namespaces()  # a live one stays
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        netns.destroy(dead)


# --------------------------------------------------------------------------------------------
# Shaping

TRANSFER = textwrap.dedent("""
    import socket, sys, threading, time
    mode, ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "recv":  # N senders, all read at once to EOF; time from the first accept
        n = int(sys.argv[4])
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((ip, port)); srv.listen(n); srv.settimeout(20)
        print("listening", flush=True)
        conns, counts, readers = [], [0] * n, []
        def drain(i, c):
            c.settimeout(20)
            while chunk := c.recv(1 << 20):
                counts[i] += len(chunk)
        for i in range(n):
            conns.append(srv.accept()[0])
            if i == 0:
                t0 = time.monotonic()
            readers.append(threading.Thread(target=drain, args=(i, conns[i])))
            readers[-1].start()
        for r in readers:
            r.join()
        elapsed, total = time.monotonic() - t0, sum(counts)
        for c in conns:
            c.sendall(b"k"); c.close()
        print(f"received {total} in {elapsed:.4f}")
    else:
        s = socket.create_connection((ip, port), timeout=20)
        s.sendall(b"x" * int(sys.argv[4])); s.shutdown(socket.SHUT_WR)
        assert s.recv(1) == b"k"
""")


def qdisc_sent(stats: str) -> list[int]:
    return [int(n) for n in re.findall(r"Sent (\d+) bytes", stats)]


@pytest.mark.parametrize("senders", [1, 2], ids=["one-flow", "incast"])
def test_tcp_transfer_takes_the_shaped_time(testbeds, tmp_path, senders):
    """12 MB at 100 Mbit/s takes 12e6*8/(0.956*100e6) s; with two senders into one host the
    receiver's ingress (the tbf on the bridge side) is what limits them.  Three transfers, the
    fastest compared with the model: CPU load only adds time (a starved sender or receiver is
    slower than the link), the shaping is what bounds the fastest."""
    rate, total, runs = 100, 12_000_000, 3
    script = tmp_path / "transfer.py"
    script.write_text(TRANSFER)
    tb = testbeds(senders + 1, rate_mbit=rate)
    dst = senders
    times = []
    for run in range(runs):
        port = str(5000 + run)
        recv = tb.popen(dst, [PYTHON, str(script), "recv", tb.hosts[dst].ip, port, str(senders)],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert recv.stdout.readline() == "listening\n"
        send = [tb.popen(i, [PYTHON, str(script), "send", tb.hosts[dst].ip, port,
                             str(total // senders)]) for i in range(senders)]
        out, err = recv.communicate(timeout=STEP_TIMEOUT)
        assert all(s.wait(timeout=STEP_TIMEOUT) == 0 for s in send)
        assert recv.returncode == 0, err
        received, elapsed = re.match(r"received (\d+) in ([\d.]+)", out).groups()
        assert int(received) == total
        times.append(float(elapsed))
    model = total * 8 / (TCP_GOODPUT_FACTOR * rate * 1e6)
    stats = tb.qdisc_stats(dst)
    fastest = min(times)
    print(f"{senders} sender(s): {total} B in {', '.join(f'{t:.3f}' for t in times)} s; model {model:.3f} s")
    assert abs(fastest / model - 1) < 0.10, (
        f"{senders} sender(s): {total} B took at best {fastest:.3f} s (of {times}), model {model:.3f} s\n{stats}")
    egress, ingress = qdisc_sent(stats)
    assert ingress >= runs * total and egress < runs * total // 10, stats  # it went through the shaped port


# --------------------------------------------------------------------------------------------
# Jobs


def test_run_on_hosts_fails_fast_and_stops_the_rest(testbeds):
    from tools.testbed.job import run_on_hosts
    tb = testbeds(2, rate_mbit=None)
    start = time.monotonic()
    result = run_on_hosts(tb, [(0, ["sleep", "30"], None, "sleeper"),
                               (1, ["sh", "-c", "echo hi from $0; exit 3"], None, None)],
                          timeout=STEP_TIMEOUT, grace=1)
    assert result.returncode == 3 and time.monotonic() - start < 10
    assert result.processes["sleeper"].returncode == -signal.SIGTERM
    assert result.output("proc:1") == "hi from sh\n"
    assert "[proc:1@h1] hi from sh\n" in result.transcript


def test_placement():
    from tools.testbed.job import hosts_needed, placement_hosts
    assert placement_hosts(2, 1) == ([0, 1], [2], 2)
    assert placement_hosts(2, 2, scheduler_host=4) == ([0, 1], [2, 3], 4)
    assert hosts_needed(2, 2, scheduler_host=4) == 5
    assert placement_hosts(3, 2, "colocated") == ([0, 1, 2], [0, 1], 0)
    with pytest.raises(ValueError):
        placement_hosts(1, 2, "colocated")


PUSH_PULL = textwrap.dedent("""
    import os, statistics, sys, time
    import numpy as np
    import byteps.numpy as bps
    nbytes, reps = int(sys.argv[1]), int(sys.argv[2])
    bps.init()
    x = np.ones(nbytes // 4, np.float32)
    times, sync = [], np.zeros(1, np.float32)
    for _ in range(reps + 1):  # the first is a warm-up (key setup)
        # Start together: a worker that started late would time a shorter push_pull (its peer's
        # data already at the server), faster than the model, and the fastest run is kept.
        bps.push_pull(sync, average=False, name="sync")
        t0 = time.monotonic()
        y = bps.push_pull(x, average=False, name="big")
        times.append(time.monotonic() - t0)
    assert y[0] == bps.size() and y[-1] == bps.size(), y[:4]
    print("node", os.environ["DMLC_NODE_HOST"], "times", " ".join(f"{t:.3f}" for t in times))
    print(f"median {statistics.median(times[1:]):.4f}")
    bps.shutdown()
""")


def test_byteps_push_pull_time_matches_the_server_link(testbeds, tmp_path):
    """2 workers (h0, h1), 1 server + scheduler (h2), 200 Mbit/s links, 16 MB push_pull.

    The server's link carries 2 x 16 MB each way and is the bottleneck.  The pulls of the last
    partitions cannot overlap any push: the server sums a partition only when it has arrived
    from both workers, and a worker sends its partitions over BYTEPS_CONNECTIONS_PER_PEER (2)
    connections, so the last 2 partitions (4096000 + 3712000 B) arrive together at the end.
    Model: t = 2 x (16e6 + 7.808e6) B / goodput = 1.99 s (the naive 2 x 16e6 B / goodput =
    1.34 s would need the pull of every byte to overlap the push of another). The fastest of 5
    runs must lie between the naive bound (the shaping holds) and the model + 10 % (byteps keeps
    its overlap); both workers start each run together.
    """
    reason = missing_core()
    if reason:
        pytest.skip(reason)
    from tools.testbed.job import run_job
    rate, nbytes, part, conns, workers = 200, 16_000_000, 4_096_000, 2, 2
    script = tmp_path / "push_pull.py"
    script.write_text(PUSH_PULL)
    tb = testbeds(3, rate_mbit=rate)
    result = run_job(tb, workers, 1, [PYTHON, str(script), str(nbytes), "5"],
                     env={"BYTEPS_START_TIMEOUT": "20", "BYTEPS_TIMEOUT": "30",
                          "BYTEPS_PARTITION_BYTES": str(part),
                          "BYTEPS_CONNECTIONS_PER_PEER": str(conns)},
                     timeout=60)
    assert result.returncode == 0, result
    goodput = TCP_GOODPUT_FACTOR * rate * 1e6 / 8
    sizes = [min(part, nbytes - off) for off in range(0, nbytes, part)]
    model = workers * (nbytes + sum(sizes[-conns:])) / goodput
    naive = workers * nbytes / goodput
    medians = []
    for i in range(workers):
        out = result.output(f"worker:{i}")
        assert f"node {tb.hosts[i].ip} " in out, out
        # the first push_pull is the warm-up; CPU load only adds time, so take the fastest
        times = [float(t) for t in re.search(r"times ([\d. ]+)", out).group(1).split()][1:]
        medians.append(min(times))
    fastest = min(medians)
    print(f"push_pull of {nbytes} B: {fastest:.3f} s; model {model:.3f} s (naive {naive:.3f} s)")
    # Below the naive bound the shaping failed; above the model by 10 % byteps lost overlap. In
    # between is timing (CI ran 10 % under the model once: how the last partitions share the two
    # connections varies), not a failure.
    assert naive * 0.97 < fastest < model * 1.10, (
        f"fastest {fastest:.3f} s vs model {model:.3f} s (naive {naive:.3f} s)\n{tb.qdisc_stats(2)}\n{result}")


SETTINGS_SCRIPT = textwrap.dedent("""
    import numpy as np
    import byteps.numpy as bps
    bps.init()
    y = bps.push_pull(np.ones(1 << 18, np.float32), average=False, name="t")
    assert y[0] == bps.size() and y[-1] == bps.size(), y[:4]
    bps.shutdown()
""")
CREDIT = re.compile(r"\[worker:0\].*settings: partition (\d+) bytes: [^;]*; credit (\d+) bytes: ([^;]*;)")


@pytest.mark.parametrize("placement", ["colocated", "separate"])
def test_servers_on_the_workers_hosts_keep_two_round_trips_in_flight(testbeds, tmp_path, placement):
    """docs/performance.md: with a server on every worker's host (several hosts), worker 0's
    start-up credit is max(2BR, 4 max(n, k) P, 16P) instead of max(2BR, 8 max(n, k) P, 16P) and
    its partition sqrt(M c B / (2 (n - 1))) (the same at n = 2): a worker's pushes and its
    host's server's replies share one NIC. Separate hosts keep the rules."""
    reason = missing_core()
    if reason:
        pytest.skip(reason)
    from tools.testbed.job import run_job
    script = tmp_path / "settings.py"
    script.write_text(SETTINGS_SCRIPT)
    tb = testbeds(2 if placement == "colocated" else 3, rate_mbit=1000)
    result = run_job(tb, 2, 1 if placement == "separate" else 2, [PYTHON, str(script)], placement=placement,
                     env={"BYTEPS_LOG_LEVEL": "INFO", "BYTEPS_START_TIMEOUT": "20", "BYTEPS_TIMEOUT": "30"},
                     timeout=60)
    assert result.returncode == 0, result
    m = CREDIT.search(result.output("worker:0"))
    assert m, result.output("worker:0")
    partition, credit, reason = int(m.group(1)), int(m.group(2)), m.group(3)
    assert credit >= 16 * partition, m.group(0)
    if placement == "colocated":
        assert reason.startswith("servers share the workers' hosts: max(2 B R"), reason
        assert "4 max(n, k) P = 4 * 2 * " in reason and "/ (2 (n - 1) = 2)" in m.group(0), m.group(0)
    else:
        assert "servers share" not in reason and "8 max(n, k) P = 8 * 2 * " in reason, reason


def test_link_monitor_sees_a_transfer_on_the_senders_egress_and_the_receivers_ingress(testbeds, tmp_path):
    """tools/testbed/linkmon.py: 6 MB from h0 to h1 at 100 Mbit/s appear in the sampled counters
    as h0's egress and h1's ingress (with framing, under 10 % more), at the shaped rate, while
    h1's egress carries only acknowledgements."""
    from tools.testbed import linkmon
    rate, total = 100, 6_000_000
    script = tmp_path / "transfer.py"
    script.write_text(TRANSFER)
    tb = testbeds(2, rate_mbit=rate)
    path = tmp_path / "links.txt"
    with linkmon.LinkMonitor(tb, path):
        recv = tb.popen(1, [PYTHON, str(script), "recv", tb.hosts[1].ip, "5100", "1"],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert recv.stdout.readline() == "listening\n"
        send = tb.popen(0, [PYTHON, str(script), "send", tb.hosts[1].ip, "5100", str(total)])
        out, err = recv.communicate(timeout=STEP_TIMEOUT)
        assert send.wait(timeout=STEP_TIMEOUT) == 0 and recv.returncode == 0, err
        time.sleep(0.1)
    trace = linkmon.load(path)
    assert trace.hosts == 2 and len(trace.times) > 100, len(trace.times)
    first, last = trace.counters[0], trace.counters[-1]
    h0_out, h0_in, h1_out, h1_in = (b - a for a, b in zip(first, last))
    assert total <= h0_out < 1.1 * total and total <= h1_in < 1.1 * total, (h0_out, h1_in)
    assert h1_out < total // 10 and h0_in < total // 10, (h1_out, h0_in)
    # Shaped, and the monitor saw it at speed. tbf lets its bucket (256 KiB) through at line
    # speed on top of the rate, which can land in one bin: up to 10.5 Mbit/s more in 0.2 s.
    bin_s, burst_mbit = 0.2, 256 * 1024 * 8 / 0.2 / 1e6
    peak = max(r[0] for _, r in linkmon.rates(trace, bin_s))
    assert 0.8 * rate < peak < 1.1 * rate + burst_mbit, peak
    summary = linkmon.idle_summary(trace, rate)
    assert summary["used_pct"]["h0 out"] > 70 and summary["used_pct"]["h1 out"] < 10, summary
    assert summary["idle_pct"]["h1 out"] > 50 and summary["idle_pct"]["h0 out"] < 30, summary
    # A torn last line (a sampler killed mid-write) is skipped.
    torn = tmp_path / "torn.txt"
    torn.write_text(path.read_text() + "123.0 1 2")
    assert len(linkmon.load(torn).times) == len(trace.times)
