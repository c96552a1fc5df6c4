"""Transient network faults injected into real byteps jobs with tools.faultproxy.

Two workers, two servers; server 0's data link (and for some tests the scheduler link) runs
through a proxy (tests/python/fault_jobs.py).  The workers push_pull 200 rounds of tensors from
1 KiB to 4 MiB and compare every result exactly; the test injects the fault mid-job.  Transient
faults must be survived (reconnect within BYTEPS_RECONNECT_TIMEOUT, resend, exact results); a
server that stays unreachable must fail every worker naming it, with every process gone.
"""

from __future__ import annotations

import time

import pytest

from fault_jobs import FaultJob

pytestmark = pytest.mark.usefixtures("require_core")

RECONNECT_S = 5.0  # BYTEPS_RECONNECT_TIMEOUT default


@pytest.fixture
def fault_job(cluster):
    jobs: list[FaultJob] = []

    def make(**kwargs) -> FaultJob:
        job = FaultJob(cluster, **kwargs)
        jobs.append(job)
        return job

    yield make
    cluster.kill_all()
    for job in jobs:
        job.close()


def test_baseline_through_proxies(fault_job):
    # The harness itself: every link proxied, no fault, exact results.
    job = fault_job(proxied_servers=(0, 1), proxy_scheduler=True, sleep=0).start()
    job.assert_exact(timeout=30)
    stats = job.stats()
    for name, s in stats.items():
        assert s["accepted"] >= 2 and s["faults"] == 0, (name, s)
    for i in (0, 1):  # 2 workers x BYTEPS_CONNECTIONS_PER_PEER (2), pushes went through
        assert stats[f"server:{i}"]["accepted"] == 4 and stats[f"server:{i}"]["bytes_up"] > 10 << 20, stats


@pytest.mark.parametrize("how", ["reset", "cut"])
def test_data_link_dropped_mid_job(fault_job, how):
    job = fault_job().start()
    proxy = job.server_proxy[0]
    for r in (30, 100):
        job.wait_round(r)
        closed = proxy.reset_all() if how == "reset" else proxy.cut_all()
        assert closed == 4, f"expected 2 workers x 2 connections, closed {closed}"
    job.assert_exact()
    assert proxy.stats()["accepted"] >= 12  # everyone reconnected twice


def test_data_link_truncated(fault_job):
    job = fault_job().start()
    proxy = job.server_proxy[0]
    job.wait_round(30)
    proxy.truncate_next("up")
    job.wait_round(80)
    proxy.truncate_next("down")
    job.assert_exact()
    assert proxy.stats()["by_fault"]["truncate"] == 2


def test_data_link_duplicated(fault_job):
    # A duplicated push must not count twice: either the server recognises (worker, key, round)
    # or the stray bytes break framing, the connection closes and the worker resends.
    job = fault_job().start()
    proxy = job.server_proxy[0]
    job.wait_round(30)
    proxy.duplicate_next("up", count=3)
    job.wait_round(80)
    proxy.duplicate_next("down", count=2)
    job.assert_exact()
    assert proxy.stats()["by_fault"]["duplicate"] == 5


def test_data_link_delayed(fault_job):
    job = fault_job().start()
    proxy = job.server_proxy[0]
    job.wait_round(30)
    proxy.set_delay(2.0)
    time.sleep(4)
    proxy.set_delay(0)
    job.assert_exact()


def test_data_link_paused(fault_job):
    job = fault_job().start()
    proxy = job.server_proxy[0]
    job.wait_round(30)
    proxy.pause(3.0)
    job.assert_exact()


@pytest.mark.parametrize("direction", ["up", "down"])
def test_corruption_detected_with_checksum(fault_job, direction):
    job = fault_job(env={"BYTEPS_CHECKSUM": "1"}).start()
    proxy = job.server_proxy[0]
    job.wait_round(30)
    proxy.corrupt_next(direction, count=1)
    job.wait_round(80)
    proxy.corrupt_next(direction, count=3)
    job.assert_exact()
    assert proxy.stats()["by_fault"]["corrupt"] == 4
    logs = "".join(p.output for p in job.cluster.procs.values())
    assert "checksum" in logs, "the corruption was not reported"


def test_corruption_without_checksum_does_not_hang(fault_job):
    # Without BYTEPS_CHECKSUM a flipped byte may land in a header (bad magic / bad field:
    # connection closed, resent, exact) or in a payload (silently wrong sum: the worker script
    # reports MISMATCH).  Either way nothing may hang: every process ends by itself.
    job = fault_job().start()
    proxy = job.server_proxy[0]
    job.wait_round(30)
    proxy.corrupt_next("up", count=3, offset=0)
    job.finish(timeout=40)
    dump = job.cluster.dump()
    assert not job.cluster.leftovers(), f"hung: {job.cluster.leftovers()}\n{dump}"
    workers = job.worker_procs
    if all(p.returncode == 0 for p in workers):
        assert all("ALL OK" in p.output for p in workers), dump
    else:
        failed = [p for p in workers if p.returncode != 0]
        assert all("MISMATCH" in p.output or "FAILED" in p.output for p in failed), dump


def test_scheduler_link_reset(fault_job):
    job = fault_job(proxied_servers=(), proxy_scheduler=True).start()
    proxy = job.scheduler_proxy
    job.wait_round(30)
    assert proxy.reset_all() == 4  # 2 servers + 2 workers
    job.wait_round(100)
    proxy.reset_all()
    job.assert_exact()
    assert proxy.stats()["accepted"] >= 8  # everyone registered again


def test_server_unreachable_fails_every_worker_naming_it(fault_job):
    reconnect = 3.0
    job = fault_job(env={"BYTEPS_RECONNECT_TIMEOUT": str(reconnect)}).start()
    proxy = job.server_proxy[0]
    job.wait_round(30)
    proxy.refuse(True)
    assert proxy.reset_all() == 4
    injected = time.monotonic()
    job.finish(timeout=reconnect + 20)
    dump = job.cluster.dump()
    assert not job.cluster.leftovers(), f"still running: {job.cluster.leftovers()}\n{dump}"
    for proc in job.cluster.procs.values():
        assert proc.returncode != 0, f"{proc.label} exited 0 although server 0 was unreachable\n{dump}"
    for proc in job.worker_procs:
        ended = proc.started + proc.elapsed - injected
        assert ended <= reconnect + 6, f"{proc.label} failed only {ended:.1f}s after the fault\n{dump}"
        failure = [line for line in proc.output.splitlines() if line.startswith("FAILED")]
        assert failure and "server 0" in failure[0], f"{proc.label}: no failure naming server 0\n{dump}"
        assert "ALL OK" not in proc.output
