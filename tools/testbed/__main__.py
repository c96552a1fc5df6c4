"""Command line of the emulated cluster (run from the repository root, as root)::

    python3 -m tools.testbed up --hosts 4 --rate 1000 [--burst 256] [--prefix P]
    python3 -m tools.testbed run --prefix P --host 0 -- ip addr
    python3 -m tools.testbed set-rate --prefix P --host 0 --rate 500      # 0: unshaped
    python3 -m tools.testbed link --prefix P --host 0 down|up
    python3 -m tools.testbed stats --prefix P [--host 0]                  # tc -s qdisc
    python3 -m tools.testbed list
    python3 -m tools.testbed down --prefix P
    python3 -m tools.testbed cleanup [--all]          # stale testbeds (creator dead); --all: kept too
    python3 -m tools.testbed job --workers 2 --servers 1 --rate 1000 [--hosts N]
        [--placement separate|colocated|mixed] [--scheduler-host I] [--timeout S] [--env K=V]
        -- python3 worker.py ...

``job --placement mixed --workers N --servers S``: a colocated server on each of the N worker
hosts plus S - N servers on hosts of their own (N + (S - N) hosts; the scheduler on host N, or
host 0 when S = N).

``up`` leaves the testbed running after it returns (until ``down`` or ``cleanup --all``) and
prints its prefix and host addresses.  ``job`` makes a testbed, runs a BytePS job on it
(tools/testbed/job.py), tears it down and exits with the job's status.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from . import netns
from .netns import Testbed


def _split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, []


def _env_pair(text: str) -> tuple[str, str]:
    """bpsrun's KEY=VALUE parser."""
    from . import job  # noqa: F401,PLC0415 - puts the checkout's python/ on sys.path
    from byteps.launcher.bpsrun import env_pair  # noqa: PLC0415

    return env_pair(text)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m tools.testbed",
                                description="Emulated cluster: hosts in network namespaces on a "
                                            "shaped bridge (198.18.0.0/15).")
    sub = p.add_subparsers(dest="cmd", required=True)

    def shape(sp: argparse.ArgumentParser, hosts_required: bool) -> None:
        sp.add_argument("--hosts", type=int, required=hosts_required, metavar="N")
        sp.add_argument("--rate", type=float, default=1000, metavar="MBIT",
                        help="per-link rate in Mbit/s, both directions (0: unshaped; default 1000)")
        sp.add_argument("--burst", type=int, default=256, metavar="KIB",
                        help="tbf bucket in KiB (default 256; keep >= 256)")
        sp.add_argument("--latency", type=float, default=50, metavar="MS",
                        help="tbf queue limit in ms (default 50)")
        sp.add_argument("--prefix", help="namespace prefix (default bpst + random hex)")

    shape(sub.add_parser("up", help="create a testbed and leave it up"), True)
    sp = sub.add_parser("run", help="run a command inside a host: run --prefix P --host I -- CMD")
    sp.add_argument("--prefix", required=True)
    sp.add_argument("--host", type=int, required=True)
    sp = sub.add_parser("down", help="tear a testbed down (kills what runs inside)")
    sp.add_argument("--prefix", required=True)
    sp = sub.add_parser("set-rate", help="change a host's link rate")
    sp.add_argument("--prefix", required=True)
    sp.add_argument("--host", type=int, required=True)
    sp.add_argument("--rate", type=float, required=True, metavar="MBIT")
    sp = sub.add_parser("link", help="cut (down) or restore (up) a host's link")
    sp.add_argument("--prefix", required=True)
    sp.add_argument("--host", type=int, required=True)
    sp.add_argument("state", choices=("down", "up"))
    sp = sub.add_parser("stats", help="tc -s qdisc of a host's link (or all hosts)")
    sp.add_argument("--prefix", required=True)
    sp.add_argument("--host", type=int)
    sp = sub.add_parser("list", help="list testbeds and their state")
    sp.add_argument("--prefix", default=netns.DEFAULT_PREFIX, help="prefix filter (default bpst)")
    sp = sub.add_parser("cleanup", help="remove testbeds whose creator is dead")
    sp.add_argument("--prefix", default=netns.DEFAULT_PREFIX, help="prefix filter (default bpst)")
    sp.add_argument("--all", action="store_true", help="also those left up by 'up'")
    sp = sub.add_parser("job", help="testbed + BytePS job + teardown: job [opts] -- CMD")
    shape(sp, False)
    sp.add_argument("--workers", type=int, required=True, metavar="N")
    sp.add_argument("--servers", type=int, required=True, metavar="K")
    sp.add_argument("--placement", choices=("separate", "colocated", "mixed"), default="separate",
                    help="mixed: a server on each worker host plus SERVERS - WORKERS on hosts "
                         "of their own")
    sp.add_argument("--scheduler-host", type=int, metavar="I",
                    help="default: the first server host")
    sp.add_argument("--port", type=int, default=9000, help="scheduler port (default 9000)")
    sp.add_argument("--timeout", type=float, default=600, metavar="SECONDS")
    sp.add_argument("--grace", type=float, default=2.0, metavar="SECONDS")
    sp.add_argument("--env", type=_env_pair, action="append", default=[], metavar="KEY=VALUE")
    sp.add_argument("--core-binary", metavar="PATH")
    return p


def _up(opts: argparse.Namespace) -> int:
    tb = Testbed(opts.hosts, rate_mbit=opts.rate or None, burst_kb=opts.burst,
                 prefix=opts.prefix, latency_ms=opts.latency)
    tb.detach()
    rate = f"{opts.rate:g} Mbit/s" if opts.rate else "unshaped"
    print(f"prefix {tb.prefix}  ({len(tb.hosts)} hosts, {rate}, bridge namespace "
          f"{tb.bridge_namespace})")
    for h in tb.hosts:
        print(f"{h.name} {h.namespace} {h.ip}")
    print(f"run:  python3 -m tools.testbed run --prefix {tb.prefix} --host 0 -- CMD")
    print(f"down: python3 -m tools.testbed down --prefix {tb.prefix}")
    return 0


def _job(opts: argparse.Namespace, command: list[str]) -> int:
    from . import job  # imports byteps.launcher
    try:
        needed = job.hosts_needed(opts.workers, opts.servers, opts.placement, opts.scheduler_host)
    except ValueError as err:
        print(f"testbed: {err}", file=sys.stderr)
        return 2
    hosts = opts.hosts or needed
    if hosts < needed:
        print(f"testbed: --hosts {hosts} is too few; this placement needs {needed}",
              file=sys.stderr)
        return 2
    with Testbed(hosts, rate_mbit=opts.rate or None, burst_kb=opts.burst, prefix=opts.prefix,
                 latency_ms=opts.latency) as tb:
        print(f"testbed: {tb!r}", file=sys.stderr, flush=True)
        try:
            result = job.run_job(tb, opts.workers, opts.servers, command,
                                 placement=opts.placement, scheduler_host=opts.scheduler_host,
                                 env=dict(opts.env), timeout=opts.timeout, port=opts.port,
                                 core_binary=opts.core_binary, grace=opts.grace)
        except FileNotFoundError as err:
            print(f"testbed: {err}", file=sys.stderr)
            return 127
    print(f"testbed: job exited with {result.returncode} after {result.elapsed:.2f}s",
          file=sys.stderr)
    return result.returncode


def main(argv: Optional[Sequence[str]] = None) -> int:
    args, command = _split_command(list(sys.argv[1:] if argv is None else argv))
    parser = _parser()
    opts = parser.parse_args(args)
    if opts.cmd in ("run", "job") and not command:
        parser.error(f"{opts.cmd} needs a command after '--'")
    if opts.cmd not in ("run", "job") and command:
        parser.error(f"{opts.cmd} takes no command after '--'")
    ok, reason = Testbed.available() if opts.cmd in ("up", "job") else (True, "")
    if not ok:
        print(f"testbed: cannot build a testbed here: {reason}", file=sys.stderr)
        return 1
    try:
        if opts.cmd == "up":
            return _up(opts)
        if opts.cmd == "job":
            return _job(opts, command)
        if opts.cmd == "list":
            for tb in netns.list_testbeds(opts.prefix):
                hosts = [ns for ns in tb["namespaces"] if not ns.endswith("-br")]
                print(f"{tb['prefix']:<20} {tb['state']:<8} {len(hosts)} hosts")
            return 0
        if opts.cmd == "cleanup":
            removed = netns.cleanup_stale(opts.prefix, include_kept=opts.all)
            print("removed: " + (" ".join(removed) if removed else "nothing"))
            return 0
        if opts.cmd == "down":
            if not netns.destroy(opts.prefix):
                print(f"testbed: no namespaces of {opts.prefix!r}", file=sys.stderr)
                return 1
            return 0
        tb = Testbed.attach(opts.prefix)
        if opts.cmd == "run":
            argv = tb.exec_argv(opts.host, command)
            os.execvp(argv[0], argv)  # the command's exit status is ours
        if opts.cmd == "set-rate":
            tb.set_rate(opts.host, opts.rate or None)
            record = netns._read_record(tb.prefix) or {}
            if record:
                record["rates"] = tb.rates
                netns._write_record(tb.prefix, record, exclusive=False)
            return 0
        if opts.cmd == "link":
            (tb.link_down if opts.state == "down" else tb.link_up)(opts.host)
            return 0
        if opts.cmd == "stats":
            hosts = [opts.host] if opts.host is not None else range(len(tb.hosts))
            print("\n".join(tb.qdisc_stats(i) for i in hosts))
            return 0
    except (netns.TestbedError, FileExistsError, FileNotFoundError, IndexError,
            ValueError) as err:
        print(f"testbed: {err}", file=sys.stderr)
        return 1
    parser.error(f"unknown command {opts.cmd}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
