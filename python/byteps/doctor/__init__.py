"""``byteps doctor``: checks a deployment before training, each finding with its fix.

Run it as the workers' program of a job started the usual way (the scheduler and servers are the
normal byteps processes)::

    bpsrun -n 4 -s 4 -- byteps doctor
    bpslaunch byteps doctor            # on each worker machine, as for training

Each worker checks its own machine (open-file limit, /dev/shm, the job secret), joins the job
within the doctor's deadline (which proves it reaches the scheduler and every server), and then,
with the others: the settings are equal everywhere, the clocks agree, and every server's link
carries its share (the PS rule k*B_server >= n*B_worker), with the predicted speedup over
all-reduce.  Worker 0 prints the report (``--json``: as JSON too).  Each worker exits 0 when it
found no ERROR, 1 otherwise; worker 0's status is the job's verdict.  See docs/doctor.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Optional, Sequence

from .cluster import ProbeOptions, run_cluster_checks
from .exchange import gather_bytes
from .findings import ERROR, OK, Finding, exit_code, render, to_json
from .local import run_local_checks

DEFAULT_TIMEOUT_S = 30.0
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="byteps doctor", description="Checks a deployment before training, each "
                                "finding with its fix (docs/doctor.md).")
    p.add_argument("--timeout", type=float, default=None,
                   help=f"seconds to join the job (BYTEPS_START_TIMEOUT; default {DEFAULT_TIMEOUT_S:g} unless "
                        f"that is set) and for each exchange or probe round")
    p.add_argument("--probe-bytes", type=int, default=16 << 20,
                   help="bytes each worker push_pulls per round on each server (default 16 MiB)")
    p.add_argument("--probe-rounds", type=int, default=4, help="timed rounds per probe (default 4)")
    p.add_argument("--no-bandwidth", action="store_true", help="skip the bandwidth probe")
    p.add_argument("--json", action="store_true", help="print the report as JSON too")
    return p


def join_fix(message: str) -> str:
    """The fix for a failed init, from byteps' own message."""
    text = message.lower()
    if "secret" in text:
        return ("give every node the same BYTEPS_JOB_SECRET (bpsrun and bpslaunch set one for the whole "
                "job; by hand, export the same value on every machine)")
    if "refused" in text or "unreachable" in text or "cannot connect" in text or "resolve" in text:
        return ("check that the scheduler runs at DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT and that this machine "
                "reaches that address and port (firewall, routes)")
    if "time" in text:
        return ("start every node of the job (the scheduler, DMLC_NUM_SERVER servers and DMLC_NUM_WORKER "
                "workers: the counts must match what runs) and check that every machine reaches the "
                "others' DMLC_NODE_HOST addresses and ports (firewall, DMLC_INTERFACE)")
    return "see docs/troubleshooting.md for this message"


def _join(timeout: float) -> Finding:
    from .. import numpy as bps  # noqa: PLC0415 - needs the built core
    start = time.monotonic()
    try:
        bps.init()
    except (bps.BytePSError, ValueError) as err:
        return Finding("connectivity", ERROR, f"could not join the job within {timeout:g} s: {err}", join_fix(str(err)))
    return Finding("connectivity", OK,
                   f"joined the scheduler and {os.environ.get('DMLC_NUM_SERVER', '?')} servers with "
                   f"{bps.size()} workers in {time.monotonic() - start:.1f} s")


def _tagged(rank: int, findings: list[Finding]) -> list[Finding]:
    return [Finding(f"worker {rank} {f.check}", f.level, f.figure, f.fix) for f in findings]


def _print(findings: list[Finding], title: str, as_json: bool, extra: Optional[dict] = None) -> None:
    print(render(findings, title), flush=True)
    if as_json:
        print(to_json(findings, title, extra), flush=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.probe_bytes < 4 or args.probe_rounds < 1 or (args.timeout is not None and args.timeout <= 0):
        print("byteps doctor: --probe-bytes must be >= 4, --probe-rounds >= 1 and --timeout > 0", file=sys.stderr)
        return EXIT_USAGE
    if args.timeout is not None:
        os.environ["BYTEPS_START_TIMEOUT"] = f"{args.timeout:g}"
    os.environ.setdefault("BYTEPS_START_TIMEOUT", f"{DEFAULT_TIMEOUT_S:g}")
    timeout = float(os.environ["BYTEPS_START_TIMEOUT"])
    os.environ.setdefault("BYTEPS_TIMEOUT", f"{max(timeout, 60.0):g}")
    if os.environ.get("DMLC_PS_ROOT_URI"):
        os.environ.setdefault("BYTEPS_FORCE_DISTRIBUTED", "1")  # one worker still reaches the servers
    me = os.environ.get("DMLC_WORKER_ID", "?")

    local = run_local_checks(os.environ)
    joined = _join(timeout)
    if joined.level == ERROR:
        findings = [*local, joined]
        _print(findings, f"worker {me} could not join the job", args.json)
        return exit_code(findings)

    from .. import numpy as bps  # noqa: PLC0415
    rank, size = bps.rank(), bps.size()
    opts = ProbeOptions(args.probe_bytes, args.probe_rounds, max(timeout, 60.0))
    figures: dict = {}
    try:
        blobs = gather_bytes(json.dumps([f.__dict__ for f in local]).encode(), opts.timeout)
        everyone = [f for r, b in enumerate(blobs) for f in _tagged(r, [Finding(**d) for d in json.loads(b)])]
        cluster, figures = run_cluster_checks(os.environ, opts, bandwidth=not args.no_bandwidth)
        findings = [*everyone, joined, *cluster]
        mine = [*local, joined, *cluster]
    except (bps.BytePSError, ValueError) as err:
        failed = Finding("cluster checks", ERROR, f"a check's push_pull failed: {err}", join_fix(str(err)))
        findings = mine = [*local, joined, failed]
        rank = 0  # every worker reports what it saw
    try:
        bps.shutdown()
    except (bps.BytePSError, ValueError) as err:
        print(f"byteps doctor: worker {me}: leaving the job failed: {err}", file=sys.stderr, flush=True)
    if rank == 0:
        _print(findings, f"{size} workers, {os.environ.get('DMLC_NUM_SERVER', '?')} servers", args.json, figures)
    else:
        print(f"byteps doctor: worker {rank}: {'FAILED' if exit_code(mine) else 'passed'} here; worker 0 prints "
              f"the report", flush=True)
    return exit_code(findings if rank == 0 else mine)
