"""``byteps launch --hostfile`` without hosts: the hostfile parser, the placement rule, each role's
spec, and every bad input caught before any ssh (exit 2, named, nothing run).  The real jobs over
OpenSSH are in test_ssh_launch.py.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest

from conftest import PYTHON, job_env

from byteps.launcher import hostfile, ssh
from byteps.launcher.config_error import LaunchConfigError

STEP_TIMEOUT = 60

# --------------------------------------------------------------------------------------------
# The hostfile and the placement rule


def test_hostfile_forms_comments_and_slots() -> None:
    text = "# cluster\nnode1\n\nnode2 slots=4   # four GPUs\nnode3:2\nroot@node4 slots = 1\n"
    hosts = hostfile.parse(text, "hosts")
    assert [(h.ssh_target, h.address, h.slots, h.line) for h in hosts] == [
        ("node1", "node1", None, 2), ("node2", "node2", 4, 4), ("node3", "node3", 2, 5),
        ("root@node4", "node4", 1, 6)]


@pytest.mark.parametrize("text, message", [
    ("a\nb c\n", "hosts:2: malformed hostfile line 'b c'"),
    ("a slots=0\n", "hosts:1: malformed hostfile line 'a slots=0'"),
    ("a:x\n", "hosts:1: malformed hostfile line 'a:x'"),
    ("a max_slots=2\n", "hosts:1: malformed hostfile line"),
    ("a\nb\nu@a:2\n", "hosts: host a is listed twice \\(lines 1 and 3\\)"),
    ("# nothing\n\n", "hostfile hosts lists no host"),
])
def test_hostfile_errors(text: str, message: str) -> None:
    with pytest.raises(LaunchConfigError, match=message):
        hostfile.parse(text, "hosts")


def entries(count: int) -> list[hostfile.HostEntry]:
    return [hostfile.HostEntry(f"h{i}", None, i + 1) for i in range(count)]


@pytest.mark.parametrize("n_hosts, n, k, mode, servers", [
    (8, 4, 4, "separate", ["h4", "h5", "h6", "h7"]),
    (6, 4, 2, "separate", ["h4", "h5"]),
    (5, 4, 2, "colocated", ["h0", "h1"]),  # 4 + 2 > 5 hosts: on the first K worker hosts
    (4, 4, None, "colocated", ["h0", "h1", "h2", "h3"]),  # default, no spare host: one on each worker host
    (8, 2, None, "colocated", ["h0", "h1"]),  # default, two workers: CPU servers gain nothing (byteps plan)
    (8, 4, None, "separate", ["h4", "h5", "h6", "h7"]),  # default, as many spare hosts as workers
    (6, 4, None, "mixed", ["h0", "h1", "h2", "h3", "h4", "h5"]),  # default, fewer: mixed
])
def test_placement_rule(n_hosts: int, n: int, k: int, mode: str, servers: list[str]) -> None:
    p = ssh.place(entries(n_hosts), n, k, "hosts")
    assert (p.scheduler.address, [h.address for h in p.workers]) == ("h0", [f"h{i}" for i in range(n)])
    assert (p.mode, [h.address for h in p.servers]) == (mode, servers)
    if k is None:
        from byteps.sim.advice import server_plan

        advice = server_plan(n_workers=n, cpu_hosts=n_hosts - n)
        assert p.advice == advice.reason
        assert ssh.describe(p, 1234, True).endswith(f"(byteps plan: {advice.reason})")


def test_placement_errors() -> None:
    with pytest.raises(LaunchConfigError, match="too few hosts in hosts: 4 workers need 4 hosts .* lists 3"):
        ssh.place(entries(3), 4, None, "hosts")
    with pytest.raises(LaunchConfigError, match="--servers 3 with --workers 2: the hostfile hosts lists 4 hosts"):
        ssh.place(entries(4), 2, 3, "hosts")


def specs_for(n_hosts: int, n: int, k, env_base: dict[str, str]) -> list[ssh.RoleSpec]:
    hosts = [hostfile.HostEntry(f"h{i}", 2 if i == 1 else None, i + 1) for i in range(n_hosts)]
    opts = argparse.Namespace(env_base=env_base, pythonpath="/pp", remote_python="/py", command=["train", "-x"])
    return ssh.role_specs(opts, ssh.place(hosts, n, k, "hosts"), 9000, "s3cret")


def test_role_specs() -> None:
    specs = specs_for(3, 2, None, {"BYTEPS_METRICS_PORT": "7000", "DMLC_ROLE": "joint"})
    assert [(s.label, s.target) for s in specs] == [("h0:scheduler", "h0"), ("h0:server", "h0"), ("h1:server", "h1"),
                                                   ("h0:worker:0", "h0"), ("h1:worker:1", "h1")]
    assert {s.env["DMLC_ROLE"] for s in specs} == {"scheduler", "server", "worker"}
    for s in specs:
        assert (s.env["DMLC_NUM_WORKER"], s.env["DMLC_NUM_SERVER"], s.env["DMLC_PS_ROOT_URI"],
                s.env["DMLC_PS_ROOT_PORT"], s.env["BYTEPS_JOB_SECRET"], s.env["PYTHONPATH"]) == \
            ("2", "2", "h0", "9000", "s3cret", "/pp")
        assert s.env["DMLC_NODE_HOST"] == s.target
    worker0, worker1 = specs[3], specs[4]
    assert worker0.argv == ["/py", "-m", "byteps.launcher.bpslaunch", "--", "train", "-x"]
    assert "BYTEPS_LOCAL_SIZE" not in worker0.env and worker1.env["BYTEPS_LOCAL_SIZE"] == "2"
    assert specs[0].argv == ["/py", "-m", "byteps.launcher.bpslaunch"]
    # metrics ports: a host's worker ranks first (bpslaunch: P + rank), then its services
    assert [specs[i].env["BYTEPS_METRICS_PORT"] for i in range(3)] == ["7001", "7002", "7002"]
    # one worker: no scheduler or servers, unless forced
    assert [s.label for s in specs_for(2, 1, None, {})] == ["h0:worker:0"]
    assert len(specs_for(2, 1, None, {"BYTEPS_FORCE_DISTRIBUTED": "1"})) == 3


# --------------------------------------------------------------------------------------------
# Bad input that needs no host: exit 2, named, nothing run


@pytest.mark.parametrize("content, args, message", [
    (None, ["--workers", "1"], "cannot read hostfile {hosts}: No such file or directory"),
    ("dir", ["--workers", "1"], "cannot read hostfile {hosts}: Is a directory"),
    ("198.18.0.1\n198.18.0.2 slots=two\n", ["--workers", "2"], "{hosts}:2: malformed hostfile line"),
    ("198.18.0.1\n198.18.0.2\n198.18.0.1 slots=2\n", ["--workers", "2"],
     "{hosts}: host 198.18.0.1 is listed twice (lines 1 and 3)"),
    ("198.18.0.1\n198.18.0.2\n", ["--workers", "3"], "too few hosts in {hosts}: 3 workers need 3 hosts"),
    ("198.18.0.1\n198.18.0.2\n198.18.0.3\n", ["--workers", "2", "--servers", "3"],
     "--servers 3 with --workers 2: the hostfile {hosts} lists 3 hosts"),
])
def test_bad_input_before_any_ssh(tmp_path: Path, content, args: list[str], message: str) -> None:
    hosts = tmp_path / "hosts"
    if content == "dir":
        hosts.mkdir()
    elif content is not None:
        hosts.write_text(content)
    marker = tmp_path / "ran"
    cmd = [PYTHON, "-m", "byteps.cli", "launch", "--hostfile", str(hosts), *args, "--", "touch", str(marker)]
    r = subprocess.run(cmd, env=job_env(), capture_output=True, text=True, timeout=STEP_TIMEOUT)
    assert r.returncode == 2, r
    assert message.format(hosts=hosts) in r.stderr, r.stderr
    assert not marker.exists()
