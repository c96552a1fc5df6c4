"""``byteps trace merge DIR... [-o OUT]``: every node's timeline in one chrome trace.

    byteps trace merge ./trace                      # -> ./trace_merged.json
    byteps trace merge /mnt/a/trace /mnt/b/trace -o job.json

Every ``comm.json`` under the given directories (recursively) is read: the workers'
(``<BYTEPS_TRACE_DIR>/<local_rank>/comm.json``) and the servers'
(``<BYTEPS_TRACE_DIR>/server_<rank>/comm.json``).  Each file's ``otherData`` says which node wrote
it, the job's id and the node's clock offset to the scheduler (measured at the rendezvous): every
event's ``ts`` is shifted by that offset, so that all nodes read on the scheduler's clock, and its
``pid`` becomes ``worker <rank>: <pid>`` or ``server <rank>`` so that the nodes stay apart.  Files
of different jobs are refused (exit status 2), naming both files and both ids.  A file without
``otherData`` (the original BytePS writes none) is merged unshifted, its pids prefixed with its
folder, with a warning.  A host's other local processes (``BYTEPS_LOCAL_SIZE > 1``) do not register
with the scheduler, so their files carry no job or offset: they share their local root's machine
and clock, so they take the job and the offset of the local rank 0 file next to them
(``<dir>/0/comm.json``).  docs/tracing.md, "Servers, clocks and merging".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

EXIT_USAGE = 2
DEFAULT_OUT = "trace_merged.json"


class MergeError(ValueError):
    """Files that cannot be merged; the message names them and why."""


def find_traces(dirs: Sequence[str]) -> list[Path]:
    """Every comm.json under ``dirs`` (recursively), each once, in path order."""
    found: set[Path] = set()
    for d in dirs:
        root = Path(d)
        if not root.is_dir():
            raise MergeError(f"{d} is not a directory (give the BYTEPS_TRACE_DIR of the job's nodes)")
        found.update(p.resolve() for p in root.rglob("comm.json") if p.is_file())
    return sorted(found)


def load(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise MergeError(f"cannot read the trace {path}: {err}") from err
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise MergeError(f"{path} is not a chrome trace: it has no traceEvents list")
    return doc


def _label(other: dict, path: Path) -> str:
    role, rank = other.get("role"), other.get("rank")
    if role not in ("worker", "server") or not isinstance(rank, int):
        raise MergeError(f"{path}: otherData names no node (role {role!r}, rank {rank!r}); expected a byteps trace")
    return f"{role} {rank}"


def merge(paths: Sequence[Path], roots: Sequence[str] = ()) -> tuple[dict, list[str]]:
    """The merged trace of ``paths`` and the warnings to print.  Raises MergeError."""
    events: list[dict] = []
    nodes: list[dict] = []
    warnings: list[str] = []
    job, job_file = "", None
    docs = [(path, load(path)) for path in paths]
    roots_clock = _local_roots_clock(docs)
    for path, doc in docs:
        other = doc.get("otherData")
        if not isinstance(other, dict):
            prefix = _folder(path, roots)
            warnings.append(f"{path} has no otherData (a trace of the original BytePS?): merged without clock "
                            f"alignment, its pids prefixed with '{prefix}'")
            for e in doc["traceEvents"]:
                e = dict(e)
                e["pid"] = f"{prefix}: {e.get('pid', '')}"
                events.append(e)
            nodes.append({"file": str(path)})
            continue
        label = _label(other, path)
        inherited = not other.get("job") and other.get("role") == "worker" and other.get("local_rank", 0) != 0 \
            and path.parent.parent in roots_clock
        if inherited:  # a local process: its host's root's job and clock
            other = {**other, **roots_clock[path.parent.parent]}
        this_job = other.get("job") or ""
        if this_job and job and this_job != job:
            raise MergeError(f"{job_file} is from job {job} but {path} is from job {this_job}: traces of "
                             f"different jobs cannot be merged (give each job its own BYTEPS_TRACE_DIR)")
        if this_job and not job:
            job, job_file = this_job, path
        offset = other.get("clock_offset_us", 0)
        if not isinstance(offset, (int, float)):
            raise MergeError(f"{path}: otherData.clock_offset_us is {offset!r}, not a number")
        for e in doc["traceEvents"]:
            e = dict(e)
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] = e["ts"] + offset
            e["pid"] = label if other["role"] == "server" else f"{label}: {e.get('pid', '')}"
            events.append(e)
        nodes.append({"file": str(path), "role": other["role"], "rank": other["rank"], "job": this_job,
                      "clock_offset_us": offset, **({"clock_from": "local rank 0"} if inherited else {})})
    events.sort(key=lambda e: (e.get("ts", 0) if isinstance(e.get("ts"), (int, float)) else 0))
    merged = {"traceEvents": events, "displayTimeUnit": "ms",
              "otherData": {"job": job, "clock": "the scheduler's", "nodes": nodes}}
    return merged, warnings


def _local_roots_clock(docs: Sequence[tuple[Path, dict]]) -> dict[Path, dict]:
    """{the folder holding a host's <local_rank>/comm.json files: its local root's job and offset}."""
    out = {}
    for path, doc in docs:
        other = doc.get("otherData")
        if isinstance(other, dict) and other.get("role") == "worker" and other.get("local_rank") == 0 \
                and other.get("job"):
            out[path.parent.parent] = {"job": other["job"], "clock_offset_us": other.get("clock_offset_us", 0)}
    return out


def _folder(path: Path, roots: Sequence[str]) -> str:
    """The file's folder relative to the directory it was found under (else its own name)."""
    for r in roots:
        try:
            return str(path.parent.relative_to(Path(r).resolve())) or "."
        except ValueError:
            continue
    return path.parent.name


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="byteps trace", description="Work with byteps timelines (BYTEPS_TRACE_ON=1).")
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("merge", help="combine every node's comm.json into one chrome trace, on one clock")
    m.add_argument("dirs", nargs="+", metavar="DIR", help="trace directories, searched recursively for comm.json")
    m.add_argument("-o", "--output", default=DEFAULT_OUT, help=f"the merged trace (default ./{DEFAULT_OUT})")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        paths = find_traces(args.dirs)
        if not paths:
            raise MergeError(f"no comm.json under {', '.join(args.dirs)} (was the job run with BYTEPS_TRACE_ON=1 "
                             "and this BYTEPS_TRACE_DIR?)")
        merged, warnings = merge(paths, args.dirs)
    except MergeError as err:
        print(f"byteps trace merge: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    for w in warnings:
        print(f"byteps trace merge: warning: {w}", file=sys.stderr)
    out = Path(args.output)
    try:
        out.write_text(json.dumps(merged), encoding="utf-8")
    except OSError as err:
        print(f"byteps trace merge: error: cannot write {out}: {err}", file=sys.stderr)
        return EXIT_USAGE
    print(f"byteps trace merge: {len(paths)} files, {len(merged['traceEvents'])} events -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
