"""Randomized fault trials: one short job per trial, one fault at a random time, a verdict.

    /usr/bin/python3 -m bench.faults.run --trials 200 --seed 1 --out DIR
    /usr/bin/python3 -m bench.faults.run --seed 1 --only 17        # rerun trial 17 alone
    /usr/bin/python3 -m bench.faults.run --trials 20 --faults kill-server,garbage

Run from the repository root.  Every trial starts a scheduler, 2 servers and 2 worker hosts
(one worker process each; with probability ``--local-prob`` two per host, so that the shared
memory and local socket paths are exercised too), each process started by itself
(bench/faults/job.py) so that each must end by itself.  The workers (bench/faults/worker.py)
push_pull three tensors for a number of rounds and check every sum exactly.  The fault, drawn
from the trial's own RNG (``seed`` and trial number, so any trial can be rerun alone):

* kill-worker / kill-server / kill-scheduler: SIGKILL that process at a random time in
  [0, ``--window``] s after the launch (start-up, training or shutdown);
* proxy-reset / proxy-cut / proxy-delay / proxy-corrupt / proxy-truncate / proxy-duplicate /
  proxy-refuse: one link (the scheduler's or one server's) goes through
  ``tools.faultproxy.FaultProxy``; at the random time the fault is applied to it (corrupt and
  duplicate with BYTEPS_CHECKSUM=1 everywhere; refuse: every connection reset and new ones
  refused for good);
* wrong-secret: a peer that runs the authentication handshake with a wrong secret, against
  the scheduler or a server; garbage: a peer that sends one of several malformed messages;
* none.

Verdict of a trial, first that applies:

* CRASH: a process other than the victim died by a signal we did not send, or printed an abort
  (``terminate called``, a sanitizer report, ...);
* HANG: a process was still running at the hard deadline (then killed), or a failing
  process exited after its detection deadline;
* WRONG: a worker printed a wrong sum;
* ORPHAN: after every process we started was gone, a process with the job's secret remained;
* LEAK: /dev/shm segments of the job remained;
* completed-exact: every worker checked every round and shut down cleanly;
* failed-clear: the job failed, within the deadline, and every worker that failed names the
  cause (the killed node by role and rank or pid, the faulty link's peer, or the checksum);
* failed-unclear: failed in time, but some worker's error does not name the cause.

Deadlines (from the settings below): detection D = BYTEPS_RECONNECT_TIMEOUT +
PS_HEARTBEAT_TIMEOUT + ``--slack``; a failed job must be over by max(fault, launch) + D, or
launch + BYTEPS_START_TIMEOUT + slack when the victim may not have registered yet; the hard
deadline adds ``--job-budget`` for jobs that recover and finish.

Settings the built core does not know yet are left out (a job would refuse them) and listed in
the JSON; fault kinds that need a missing piece (the proxy, BYTEPS_CHECKSUM) are skipped and
listed too.

Output: a table (trials per fault and verdict) on stdout, and ``DIR/results.json`` (rewritten
after every trial): settings, per-trial records (fault, time, target, verdict, detection time,
each process's exit code and exit time, each failing worker's first error line), totals.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Optional

from . import peers
from . import job as joblib
from .job import REPO, Job, Layout, eprint, free_port, known_settings, relative

from tools.procinfo import job_processes, shm_leftovers  # job put tools/ on sys.path
from tools.progress import track

KILLS = ["kill-worker", "kill-server", "kill-scheduler"]
PROXY = ["proxy-reset", "proxy-cut", "proxy-delay", "proxy-corrupt", "proxy-truncate",
         "proxy-duplicate", "proxy-refuse"]
# Faults a job is expected to survive and complete: transient link faults (the connection is
# re-established within BYTEPS_RECONNECT_TIMEOUT and the lost data resent), bad peers, none.
# proxy-refuse keeps the link down for good: the peer behind it becomes unreachable.
EXPECT_COMPLETE = {"proxy-reset", "proxy-cut", "proxy-delay", "proxy-corrupt", "proxy-truncate",
                   "proxy-duplicate", "wrong-secret", "garbage", "none"}
PEERS = ["wrong-secret", "garbage"]
FAULTS = KILLS + PROXY + PEERS + ["none"]
VERDICTS = ["completed-exact", "failed-clear", "failed-unclear", "CRASH", "HANG", "WRONG", "ORPHAN",
            "LEAK"]
BAD = {"CRASH", "HANG", "WRONG", "ORPHAN", "LEAK"}
# Output of a process that died of its own fault rather than failing with an error.
CRASH_MARKS = ("terminate called", "Segmentation fault", "AddressSanitizer", "ThreadSanitizer",
               "Fatal Python error", "core dumped", "Assertion `")

SETTINGS = {
    "BYTEPS_PARTITION_BYTES": "16384",
    "BYTEPS_START_TIMEOUT": "6",
    "BYTEPS_TIMEOUT": "15",
    "PS_HEARTBEAT_INTERVAL": "0.5",
    "PS_HEARTBEAT_TIMEOUT": "3",
    "BYTEPS_RECONNECT_TIMEOUT": "2",
    "BYTEPS_AUTH_TIMEOUT": "2",
}
SERVICE_SETTINGS = {"BYTEPS_LOG_LEVEL": "INFO"}  # servers log under "[server:<rank>]"
WORKER_SCRIPT = (Path(__file__).with_name("worker.py")).read_text()


def load_proxy():
    try:
        from tools.faultproxy import FaultProxy  # noqa: PLC0415 - optional, written separately
    except Exception as err:  # noqa: BLE001 - ImportError or a broken module: skip those faults
        return None, f"{type(err).__name__}: {err}"
    return FaultProxy, None


# --------------------------------------------------------------------------------------------
# one trial


class Trial:
    def __init__(self, index: int, seed: int, args: argparse.Namespace, settings: dict[str, str],
                 faults: list[str], proxy_cls) -> None:
        self.index, self.args, self.proxy_cls = index, args, proxy_cls
        self.rng = random.Random(seed * 1_000_003 + index)
        self.fault = self.rng.choice(faults)
        self.at = round(self.rng.uniform(0.0, args.window), 3) if self.fault != "none" else 0.0
        self.local_size = 2 if self.rng.random() < args.local_prob else 1
        self.settings = dict(settings)
        # Altered or duplicated bytes inside a payload are only caught by checksums (TCP never
        # does that itself; a broken middlebox can): these trials run the way such a link must.
        if self.fault in ("proxy-corrupt", "proxy-duplicate"):
            self.settings["BYTEPS_CHECKSUM"] = "1"
        self.record: dict = {"trial": index, "fault": self.fault, "at_s": self.at,
                             "local_size": self.local_size}
        self.proxy = None
        self.proxy_target: Optional[str] = None
        self.victim = None
        self.peer_thread: Optional[threading.Thread] = None
        self.peer_result: list[str] = []
        self.undelay: Optional[threading.Timer] = None  # ends a proxy delay; cancelled at clean-up

    # -- set-up

    def layout(self) -> Layout:
        sched = free_port()
        layout = Layout(sched, sched, [free_port() for _ in range(2)])
        if self.fault in PROXY:
            self.proxy_target = self.rng.choice(["scheduler", "server:0", "server:1"])
            if self.proxy_target == "scheduler":
                self.proxy = self.proxy_cls(upstream=("127.0.0.1", sched), listen=("127.0.0.1", 0))
                layout.root_port = self.proxy.port
            else:
                i = int(self.proxy_target[-1])
                self.proxy = self.proxy_cls(upstream=("127.0.0.1", layout.server_ports[i]),
                                            listen=("127.0.0.1", 0))
                layout.advertise_ports = [None, None]
                layout.advertise_ports[i] = self.proxy.port
            self.record["target"] = self.proxy_target
        return layout

    # -- the fault

    def inject(self, job: Job) -> None:
        f, rng = self.fault, self.rng
        if f in KILLS:
            role = f.split("-")[1]
            choices = [p for p in job.procs.values() if p.role == role]
            self.victim = rng.choice(choices)
            self.record["target"] = self.victim.label
            self.record["victim_rank"] = self.victim.rank_from_log()
            alive = job.kill(self.victim)
            self.record["detail"] = "killed" if alive else "had already exited"
        elif f in PROXY:
            direction = rng.choice(["up", "down"])
            if f == "proxy-reset":
                self.proxy.reset_all()
                detail = "reset_all"
            elif f == "proxy-cut":
                self.proxy.cut_all()
                detail = "cut_all"
            elif f == "proxy-delay":
                if rng.random() < 0.5:
                    delay = round(rng.uniform(0.01, 0.1), 3)
                    self.proxy.set_delay(delay)
                    self.undelay = threading.Timer(1.0, self.end_delay)
                    self.undelay.start()
                    detail = f"delay {delay}s for 1s"
                else:
                    pause = round(rng.uniform(0.2, 1.5), 3)
                    self.proxy.pause(pause)
                    detail = f"pause {pause}s"
            elif f == "proxy-corrupt":
                self.proxy.corrupt_next(direction=direction, count=1)
                detail = f"corrupt_next {direction}"
            elif f == "proxy-truncate":
                self.proxy.truncate_next(direction=direction)
                detail = f"truncate_next {direction}"
            elif f == "proxy-duplicate":
                self.proxy.duplicate_next(direction=direction, count=1)
                detail = f"duplicate_next {direction}"
            else:
                self.proxy.refuse(True)
                detail = f"refuse + reset_all ({self.proxy.reset_all()} pairs)"
            self.record["detail"] = detail
        elif f in PEERS:
            target = rng.choice(["scheduler", "server:0", "server:1"])
            port = job.layout.scheduler_port if target == "scheduler" else \
                job.layout.server_ports[int(target[-1])]
            self.record["target"] = target
            peer_rng = random.Random(rng.random())
            if f == "wrong-secret":
                work = lambda: self.peer_result.append(peers.wrong_secret_peer(port))  # noqa: E731
            else:
                work = lambda: self.peer_result.append(peers.garbage_peer(port, peer_rng))  # noqa: E731
            self.peer_thread = threading.Thread(target=work, daemon=True)
            self.peer_thread.start()

    def end_delay(self) -> None:
        try:
            self.proxy.set_delay(0)
        except RuntimeError:
            pass  # the trial ended first and closed the proxy

    def landed(self) -> bool:
        """Did the fault hit the job: workers still ran when it came, and (counted proxy faults)
        the proxy actually applied it to a chunk or a connection?"""
        if self.fault == "none" or not self.record.get("workers_running_at_fault"):
            return False
        if self.fault in KILLS:
            return self.record.get("detail") == "killed"
        stats = self.record.get("proxy_stats")
        if self.fault in PROXY and self.fault != "proxy-delay" and isinstance(stats, dict):
            return stats.get("faults", 0) > 0
        return True

    # -- the cause a failing worker should name

    def cause_names(self) -> list[str]:
        if self.victim is not None:
            v = self.victim
            if v.role == "scheduler":
                return ["scheduler"]
            if v.role == "server":
                rank = v.rank_from_log()
                names = [f"pid {v.pid}", "servers registered"]
                return names + ([f"server {rank}"] if rank is not None else [])
            host, _, local = v.label.split(":")[1].partition(".")
            names = [f"worker {host}", f"pid {v.pid}", f"ranks {host} missing"]
            return names + ([f"local rank {local}"] if local else [])
        if self.proxy_target is not None:
            names = [self.proxy_target.split(":")[0]]
            return names + (["checksum", "CRC", "crc"] if self.fault in ("proxy-corrupt", "proxy-duplicate") else [])
        return []

    # -- run and judge

    def run(self, workdir: Path) -> dict:
        s = self.settings
        detect = (float(s.get("BYTEPS_RECONNECT_TIMEOUT", 0)) + float(s["PS_HEARTBEAT_TIMEOUT"])
                  + self.args.slack)
        start_bound = float(s["BYTEPS_START_TIMEOUT"]) + self.args.slack
        layout = self.layout()
        job = Job(workdir, workers=2, servers=2, script=WORKER_SCRIPT, env=s, layout=layout,
                  local_size=self.local_size, service_env=SERVICE_SETTINGS)
        try:
            launch = time.monotonic()
            job.start_all()
            fault_time = launch + self.at
            injected = None
            hard = None
            while True:
                now = time.monotonic()
                running = job.poll()
                if injected is None and now >= fault_time:
                    self.record["workers_running_at_fault"] = sum(1 for p in running if p.role == "worker")
                    if self.fault != "none":
                        self.inject(job)
                    injected = time.monotonic()
                    hard = max(injected, launch) + max(detect, start_bound) + self.args.job_budget
                if not running and injected is not None:
                    break
                if not running and injected is None:
                    self.record["detail"] = "job ended before the fault time"
                    injected = now
                    break
                if hard is not None and now >= hard:
                    break
                time.sleep(0.02)
            hung = [p.label for p in job.poll()]
            job.close()
            if self.peer_thread is not None:
                self.peer_thread.join(5)
            if self.proxy is not None:
                self.record["proxy_stats"] = safe_stats(self.proxy)
            time.sleep(0.05)  # let the last exits settle before looking for orphans
            orphans = job_processes(job.secret)
            shm = shm_leftovers(job.secret)
            return self.judge(job, launch, injected, hung, orphans, shm, detect, start_bound)
        finally:
            job.close()
            if self.undelay is not None:
                self.undelay.cancel()
            if self.proxy is not None:
                self.proxy.close()

    def judge(self, job: Job, launch: float, injected: float, hung: list[str], orphans: list[int],
              shm: list[str], detect: float, start_bound: float) -> dict:
        rec = self.record
        rec["peer"] = self.peer_result
        procs = {}
        workers_ok, wrong, failing = True, [], []
        for p in job.procs.values():
            out = p.output()
            procs[p.label] = {"rc": p.returncode, "exit_s": relative(p.exited, launch)}
            if p.role != "worker" or p is self.victim:
                continue
            if "WRONG" in out:
                wrong.append(p.label)
            if not ("DONE" in out and p.returncode == 0):
                workers_ok = False
                failing.append((p, first_error(out)))
        rec["processes"] = procs
        rec["errors"] = {p.label: line for p, line in failing}
        survivors = [p for p in job.procs.values() if p is not self.victim]
        last_exit = max((p.exited for p in survivors if p.exited is not None), default=launch)
        rec["detect_s"] = round(last_exit - injected, 3) if not workers_ok else None
        bound = max(injected + detect, launch + start_bound)
        late = [p.label for p in survivors if not workers_ok and p.exited and p.exited > bound + 0.001]
        # Killed by a signal we did not send (hung ones are killed by us at the deadline), or an
        # abort message in the output.
        crashed = [p.label for p in survivors if p.label not in hung and
                   ((p.returncode is not None and p.returncode < 0) or any(m in p.output() for m in CRASH_MARKS))]
        if crashed:
            verdict = "CRASH"
            rec["why"] = "; ".join(f"{label}: rc {job.procs[label].returncode}, "
                                   f"{crash_line(job.procs[label].output())}" for label in crashed)
        elif hung or late:
            verdict = "HANG"
            rec["why"] = f"still running at the hard deadline: {hung}" if hung else \
                f"exited after the deadline ({bound - launch:.1f}s after launch): {late}"
        elif wrong:
            verdict, rec["why"] = "WRONG", f"wrong sums in {wrong}"
        elif orphans:
            verdict, rec["why"] = "ORPHAN", f"processes left: {orphans}"
        elif shm:
            verdict, rec["why"] = "LEAK", f"shared memory left: {shm}"
        elif workers_ok:
            verdict = "completed-exact"
        else:
            names = self.cause_names()
            unclear = [p.label for p, _ in failing if not any(n in p.output() for n in names)]
            verdict = "failed-unclear" if unclear or not names else "failed-clear"
            if verdict == "failed-unclear":
                rec["why"] = f"no mention of {names or 'any cause'} in {unclear or 'the output'}"
        rec["verdict"] = verdict
        rec["landed"] = self.landed()
        if self.fault in EXPECT_COMPLETE and verdict != "completed-exact":
            rec["unexpected"] = True  # a fault the job should have survived
        if orphans:  # never leave them running, whatever the verdict
            kill_pids(orphans)
        return rec


def build_info() -> dict:
    """The commit and the core binary's time, so that a result can be matched to a build."""
    import subprocess  # noqa: PLC0415

    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "src"], capture_output=True,
                                text=True).stdout.strip())
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(joblib.CORE_BINARY.stat().st_mtime))
    return {"git_head": head, "src_modified": dirty, "core_binary_mtime_utc": stamp}


def crash_line(output: str) -> str:
    for line in output.splitlines():
        if any(m in line for m in CRASH_MARKS):
            return line.strip()[:300]
    return "killed by a signal"


def first_error(output: str) -> str:
    for line in output.splitlines():
        if "_ERROR " in line or "WRONG" in line or "Error" in line or "error" in line:
            return line.strip()[:400]
    return (output.strip().splitlines() or [""])[-1][:400]


def safe_stats(proxy) -> object:
    try:
        stats = proxy.stats()
        json.dumps(stats)
        return stats
    except Exception as err:  # noqa: BLE001
        return f"unavailable: {err}"


def kill_pids(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


# --------------------------------------------------------------------------------------------
# the run


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python3 -m bench.faults.run", description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--transport", default="auto", choices=["auto", "tcp", "shm", "ucx"],
                   help="BYTEPS_TRANSPORT of every process (auto: shared memory between processes of a host)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--only", type=int, action="append", help="run just this trial number (repeatable)")
    p.add_argument("--out", default=str(REPO / "bench-results" / "faults"))
    p.add_argument("--faults", help=f"comma-separated subset of {','.join(FAULTS)}")
    p.add_argument("--window", type=float, default=1.6, help="fault time drawn from [0, WINDOW] s")
    p.add_argument("--local-prob", type=float, default=0.25,
                   help="probability of two worker processes per host")
    p.add_argument("--slack", type=float, default=4.0, help="added to every deadline (s)")
    p.add_argument("--job-budget", type=float, default=8.0,
                   help="time a recovering job gets to finish, on top of the detection deadline")
    p.add_argument("--keep-logs", action="store_true", help="keep the logs of every trial")
    p.add_argument("--no-snapshot", action="store_true",
                   help="run python/byteps in place (default: a copy in DIR, safe from rebuilds)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not args.no_snapshot:
        eprint(f"running the byteps package copied to {joblib.use_snapshot(out / 'snapshot')}")
    known = known_settings()
    wanted = {**SETTINGS, "BYTEPS_TRANSPORT": args.transport}
    settings = {k: v for k, v in wanted.items() if k in known}
    dropped = sorted(set(wanted) - set(settings))
    faults = args.faults.split(",") if args.faults else list(FAULTS)
    unknown = [f for f in faults if f not in FAULTS]
    if unknown:
        eprint(f"unknown faults {unknown}; choose from {FAULTS}")
        return 2
    skipped = {}
    proxy_cls, why = load_proxy()
    if proxy_cls is None:
        skipped.update({f: f"tools.faultproxy unavailable ({why})" for f in PROXY if f in faults})
    elif "BYTEPS_CHECKSUM" not in known and "proxy-corrupt" in faults:
        skipped["proxy-corrupt"] = "the core has no BYTEPS_CHECKSUM yet"
    faults = [f for f in faults if f not in skipped]
    if dropped:
        eprint(f"note: the built core does not know {dropped}; trials run without them")
    for f, reason in skipped.items():
        eprint(f"note: skipping {f}: {reason}")
    indices = args.only or list(range(args.trials))
    report = {"command": " ".join(sys.argv), "seed": args.seed, "build": build_info(),
              "settings": settings,
              "service_settings": SERVICE_SETTINGS, "settings_dropped": dropped,
              "faults": faults, "faults_skipped": skipped, "trials": []}
    started = time.monotonic()
    # A trial's fault and time are drawn from its own RNG when it is made: the labels can name them.
    trials = [Trial(i, args.seed, args, settings, faults, proxy_cls) for i in indices]
    for n, trial in enumerate(track(trials, "faults", lambda t: f"trial {t.index} {t.fault} at {t.at:g} s")):
        i = trial.index
        workdir = out / "logs" / f"trial{i:04d}"
        rec = trial.run(workdir)
        report["trials"].append(rec)
        keep = args.keep_logs or rec.get("unexpected") or rec["verdict"] not in ("completed-exact", "failed-clear")
        if not keep:
            for f in workdir.iterdir():
                f.unlink()
            workdir.rmdir()
        else:
            rec["logs"] = str(workdir)
        detect = f" detect {rec['detect_s']:.1f}s" if rec.get("detect_s") is not None else ""
        print(f"[{n + 1}/{len(indices)}] trial {i:4d} {rec['fault']:<16} at {rec['at_s']:5.2f}s "
              f"{rec.get('target', ''):<10} {'' if rec['landed'] or rec['fault'] == 'none' else '(missed) '}"
              f"{rec['verdict']}{' (unexpected)' if rec.get('unexpected') else ''}"
              f"{detect}"
              f"{' - ' + rec['why'] if rec.get('why') else ''}", flush=True)
        report["totals"] = totals(report["trials"])
        report["elapsed_s"] = round(time.monotonic() - started, 1)
        (out / "results.json").write_text(json.dumps(report, indent=1))
    print()
    print(table(report["trials"]))
    t = report["totals"]
    print(f"\n{t['trials']} trials in {report['elapsed_s']:.0f}s: {t['survived']} survived "
          f"(no crash, hang, wrong result, orphan or leak); CRASH {t['CRASH']}, HANG {t['HANG']}, WRONG {t['WRONG']}, "
          f"ORPHAN {t['ORPHAN']}, LEAK {t['LEAK']}; bad inputs sent: {t['bad_inputs']}; "
          f"failed although the fault is one to survive: {t['unexpected']}; faults that hit a "
          f"running job: {t['landed']} (the others came after the workers were done, or a proxy "
          f"fault found no chunk left to act on)")
    print(f"JSON: {out / 'results.json'}")
    return 0 if t["survived"] == t["trials"] else 1


def totals(trials: list[dict]) -> dict:
    c = Counter(r["verdict"] for r in trials)
    out = {v: c.get(v, 0) for v in VERDICTS}
    out["trials"] = len(trials)
    out["survived"] = sum(1 for r in trials if r["verdict"] not in BAD)
    out["bad_inputs"] = sum(1 for r in trials if r["fault"] in PEERS)
    out["unexpected"] = sum(1 for r in trials if r.get("unexpected"))
    out["landed"] = sum(1 for r in trials if r.get("landed"))
    out["landed_by_fault"] = dict(Counter(r["fault"] for r in trials if r.get("landed")))
    detects = sorted(r["detect_s"] for r in trials if r.get("detect_s") is not None)
    if detects:
        out["detect_s_median"] = detects[len(detects) // 2]
        out["detect_s_max"] = detects[-1]
    return out


def table(trials: list[dict]) -> str:
    kinds = [f for f in FAULTS if any(r["fault"] == f for r in trials)]
    width = max(len(v) for v in VERDICTS)
    head = f"{'fault':<16}" + "".join(f"{v:>{width + 1}}" for v in VERDICTS) + f"{'total':>7}"
    lines = [head, "-" * len(head)]
    for f in kinds:
        c = Counter(r["verdict"] for r in trials if r["fault"] == f)
        lines.append(f"{f:<16}" + "".join(f"{c.get(v, 0):>{width + 1}}" for v in VERDICTS)
                     + f"{sum(c.values()):>7}")
    c = Counter(r["verdict"] for r in trials)
    lines.append(f"{'all':<16}" + "".join(f"{c.get(v, 0):>{width + 1}}" for v in VERDICTS)
                 + f"{len(trials):>7}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
