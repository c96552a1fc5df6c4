"""The name service's first-use latency (issue 29), in one real job on loopback::

    /usr/bin/python3 -m bench.name_service.run [--workers 2] [--servers 2] [--tensors 200]
        [--tensor-bytes 1024] [--steps 5] [--rounds 15] [--out bench-results/name_service.json]

``bpsrun -n WORKERS -s SERVERS`` (a scheduler, the servers and the workers as real processes, no
settings). Every worker pushes ``--tensors`` distinct float32 tensors of ``--tensor-bytes`` each
per step (bench/name_service/worker.py): in each round a fresh set of names is used for the
first time (step 0: one name-service round trip per name, then the servers' declaration of the
new key) and then ``--steps`` more times (steady: the cache); and, as the baseline in the same
job, another fresh set is declared up front with its sizes (``declare_tensor``, which asks the
name service there) and then run the same way. The two modes alternate which goes first.

Per round and mode the slowest worker's figures are taken (every step ends with a sum over all
workers); printed are their medians over the rounds:

* ``first step`` and ``steady step``: step 0's time, and the median of steps 1..STEPS;
* ``per name``: (first step - steady step) / tensors, the first use's extra cost per name;
* ``first enqueue``: step 0's time spent enqueueing (a first use waits there for the name
  service), ``declare``: the declared mode's ``declare_tensor`` calls, per name;
* ``name service per name``: (first-use mode's first step - declared mode's first step) /
  tensors: what the round trips add to a first step, the rest of the first use (the servers'
  declaration) being paid by both modes;
* for scale, a plain TCP round trip on loopback between two Python processes (64 bytes each way,
  TCP_NODELAY; the median of 2,000, measured before the job).

Then a JSON line (``JSON {...}``). Exit status 1 when the job fails or a result is wrong.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tools.localjob import hermetic_env, run_bpsrun
from tools.progress import Progress

WORKER = Path(__file__).with_name("worker.py")
MODES = ("first-use", "declared")


def _echo(listener: socket.socket) -> None:
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while data := conn.recv(64):
        conn.sendall(data)


def tcp_round_trip_us(count: int = 2000) -> float:
    """The median round trip of 64 bytes over loopback TCP to an echoing process, in us."""
    listener = socket.create_server(("127.0.0.1", 0))
    echo = multiprocessing.get_context("fork").Process(target=_echo, args=(listener,), daemon=True)
    echo.start()
    times = []
    with socket.create_connection(listener.getsockname(), timeout=10) as c:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        payload = b"x" * 64
        for _ in range(count):
            t0 = time.perf_counter()
            c.sendall(payload)
            got = 0
            while got < len(payload):
                chunk = c.recv(64 - got)
                if not chunk:
                    raise RuntimeError("the loopback echo process closed the connection")
                got += len(chunk)
            times.append(time.perf_counter() - t0)
    echo.join(timeout=10)
    listener.close()
    return statistics.median(times) * 1e6


def summarize(workers: list[dict], tensors: int) -> dict:
    """Per mode, the medians over rounds of the slowest worker's figures (seconds; per name: us)."""
    rounds = len(workers[0]["rounds"])
    out = {}
    for mode in MODES:
        per_round = []
        for r in range(rounds):
            recs = [w["rounds"][r][mode] for w in workers]
            first = max(rec["step_s"][0] for rec in recs)
            steady = max(statistics.median(rec["step_s"][1:]) for rec in recs)
            per_round.append({"first_step_s": first, "steady_step_s": steady,
                              "per_name_us": (first - steady) / tensors * 1e6,
                              "first_enqueue_s": max(rec["enqueue_s"][0] for rec in recs),
                              "steady_enqueue_s": max(statistics.median(rec["enqueue_s"][1:]) for rec in recs),
                              **({"declare_per_name_us": max(rec["declare_s"] for rec in recs) / tensors * 1e6}
                                 if mode == "declared" else {})})
        out[mode] = {k: statistics.median(p[k] for p in per_round) for k in per_round[0]}
        out[mode]["rounds"] = per_round
    firsts = [(out["first-use"]["rounds"][r]["first_step_s"] - out["declared"]["rounds"][r]["first_step_s"])
              / tensors * 1e6 for r in range(rounds)]
    out["name_service_per_name_us"] = statistics.median(firsts)
    return out


def print_table(a: argparse.Namespace, s: dict) -> None:
    print(f"name service, first use: {a.workers} workers + {a.servers} servers on loopback, {a.tensors} tensors of "
          f"{a.tensor_bytes} B per step, {a.steps} steady steps, medians of {a.rounds} rounds (slowest worker)")
    print(f"{'mode':<10} {'first step ms':>13} {'steady step ms':>14} {'per name us':>11} "
          f"{'first enqueue ms':>16} {'steady enqueue ms':>17} {'declare us/name':>15}")
    for mode in MODES:
        m = s[mode]
        declare = f"{m['declare_per_name_us']:15.1f}" if mode == "declared" else f"{'-':>15}"
        print(f"{mode:<10} {m['first_step_s'] * 1e3:13.2f} {m['steady_step_s'] * 1e3:14.2f} {m['per_name_us']:11.1f} "
              f"{m['first_enqueue_s'] * 1e3:16.2f} {m['steady_enqueue_s'] * 1e3:17.2f} {declare}")
    print(f"name service per name on a first step (first-use first step - declared first step) / {a.tensors}: "
          f"{s['name_service_per_name_us']:.1f} us")
    print(f"for scale: a loopback TCP round trip between two Python processes: {s['tcp_round_trip_us']:.1f} us")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--tensors", type=int, default=200, help="distinct names per set")
    ap.add_argument("--tensor-bytes", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=5, help="steady steps after the first")
    ap.add_argument("--rounds", type=int, default=15, help="fresh sets per mode")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    a = ap.parse_args()
    if a.workers < 1 or a.servers < 1 or a.tensors < 1 or a.tensor_bytes < 4 or a.steps < 1 or a.rounds < 1:
        ap.error("--workers, --servers, --tensors, --steps, --rounds >= 1 and --tensor-bytes >= 4")
    with Progress(2, "name_service") as progress, tempfile.TemporaryDirectory(prefix="bench-name-service-") as work:
        progress.step("the loopback TCP round trip, for scale")
        tcp_us = tcp_round_trip_us()
        progress.step(f"one job: {a.workers} workers + {a.servers} servers, {a.rounds} rounds per mode")
        args = (str(a.tensors), str(a.tensor_bytes), str(a.steps), str(a.rounds))
        result = run_bpsrun(Path(work), a.workers, a.servers, WORKER.read_text(), hermetic_env(), a.timeout,
                            a.workers == 1, args)
    found = [json.loads(m) for m in re.findall(r"ROUNDS (\{.*\})", result.output)]
    if result.returncode != 0 or len(found) != a.workers:
        print(f"job failed (exit {result.returncode}, {len(found)} of {a.workers} workers reported):\n"
              f"{result.output[-4000:]}", file=sys.stderr)
        return 1
    s = summarize(sorted(found, key=lambda w: w["rank"]), a.tensors)
    s["tcp_round_trip_us"] = tcp_us
    print_table(a, s)
    record = {"benchmark": "name_service", "workers": a.workers, "servers": a.servers, "tensors": a.tensors,
              "tensor_bytes": a.tensor_bytes, "steps": a.steps, "rounds": a.rounds, **s}
    print("JSON " + json.dumps(record))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
