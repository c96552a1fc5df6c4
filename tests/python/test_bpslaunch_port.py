"""bpslaunch's check, before it starts a scheduler, that DMLC_PS_ROOT_PORT is free on this host:
a named error and exit 2 with nothing started when a socket holds the port (roles given by hand
and roles derived from Slurm), no check for the roles without a scheduler, and a port held only
by the TIME_WAIT connections of an ended job counts as free (the scheduler binds with
SO_REUSEADDR).  The core is a fake that records being started.
"""

from __future__ import annotations

import errno
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import free_port
from test_bpslaunch import FAKE_CORE, LAUNCH, launch_env
from test_slurm_env import alloc

from byteps.launcher.ports import port_in_use


@pytest.fixture
def fake_core(tmp_path: Path) -> dict[str, str]:
    core = tmp_path / "byteps-core"
    core.write_text(FAKE_CORE)
    core.chmod(0o755)
    return {"BYTEPS_CORE_BINARY": str(core), "CORE_STARTED": str(tmp_path / "started"), "PATH": "/usr/bin:/bin"}


@pytest.fixture
def held_port():
    """A port with a listening socket on it (this test's), for the test's duration."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free_port()))
        sock.listen()
        yield sock.getsockname()[1]


def by_hand(role: str, port: int, **extra: str) -> dict[str, str]:
    return launch_env(DMLC_ROLE=role, DMLC_NUM_WORKER="2", DMLC_NUM_SERVER="1", DMLC_WORKER_ID="0",
                      DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(port), **extra)


def launch(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(LAUNCH + ["true"], env=env, capture_output=True, text=True, timeout=30)


def test_scheduler_by_hand_on_a_port_in_use(held_port: int, fake_core: dict[str, str]) -> None:
    r = launch(by_hand("scheduler", held_port, **fake_core))
    assert r.returncode == 2, r
    assert (f"bpslaunch: error: DMLC_PS_ROOT_PORT={held_port} is already in use on 127.0.0.1 (binding "
            f"0.0.0.0:{held_port}: ") in r.stderr, r.stderr
    assert "another job? give another port (DMLC_PS_ROOT_PORT)" in r.stderr
    assert not Path(fake_core["CORE_STARTED"]).exists()


def test_slurm_scheduler_task_on_a_port_in_use(held_port: int, fake_core: dict[str, str]) -> None:
    """The first node's task (scheduler + worker) stops before its worker or scheduler starts."""
    marker = Path(fake_core["CORE_STARTED"]).with_name("worker-ran")
    env = launch_env(**alloc("n[1-3]", 0), DMLC_PS_ROOT_PORT=str(held_port), **fake_core)
    r = subprocess.run(LAUNCH + ["--servers", "1", "touch", str(marker)], env=env, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2, r
    assert f"DMLC_PS_ROOT_PORT={held_port} is already in use on n1" in r.stderr, r.stderr
    assert not Path(fake_core["CORE_STARTED"]).exists() and not marker.exists()


@pytest.mark.parametrize("role", ["server", "worker", "joint"])
def test_no_check_without_a_scheduler(role: str, held_port: int, fake_core: dict[str, str]) -> None:
    r = launch(by_hand(role, held_port, **fake_core))
    assert r.returncode == 0, r
    assert "already in use" not in r.stderr


@pytest.mark.parametrize("node, roles", [(1, "worker"), (2, "server")])
def test_slurm_server_and_worker_tasks_are_not_checked(node: int, roles: str, held_port: int,
                                                       fake_core: dict[str, str]) -> None:
    env = launch_env(**alloc("n[1-3]", node), DMLC_PS_ROOT_PORT=str(held_port), **fake_core)
    r = subprocess.run(LAUNCH + ["--servers", "1", "true"], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and f"roles {roles};" in r.stderr, r
    assert "already in use" not in r.stderr
    started = Path(fake_core["CORE_STARTED"])
    assert (started.read_text().split() if started.exists() else []) == (["server", "server"] if roles == "server" else [])


def test_a_free_port_starts_the_scheduler(fake_core: dict[str, str]) -> None:
    r = launch(by_hand("scheduler", free_port(), **fake_core))
    assert r.returncode == 0, r
    assert Path(fake_core["CORE_STARTED"]).read_text().split() == ["scheduler", "scheduler"]


def test_time_wait_connections_leave_the_port_free() -> None:
    """An ended job's closed connections (TIME_WAIT on the scheduler's side, which closed first)
    do not block the scheduler's bind with SO_REUSEADDR; a listening socket does."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", free_port()))
        listener.listen()
        port = listener.getsockname()[1]
        assert "in use" in port_in_use("0.0.0.0", port)
        client = socket.create_connection(("127.0.0.1", port), timeout=5)
        accepted, _ = listener.accept()
        accepted.close()  # the scheduler's side closes first: its end goes to TIME_WAIT
        client.close()
    assert port_in_use("0.0.0.0", port) == ""
    # an address not of this host (the testbed's range, unassigned): the core's own error, not "in use"
    with socket.socket() as sock, pytest.raises(OSError) as err:
        sock.bind(("198.18.255.254", port))
    assert err.value.errno == errno.EADDRNOTAVAIL
    assert port_in_use("198.18.255.254", port) == ""
