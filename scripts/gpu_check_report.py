#!/usr/bin/env python3
"""The bookkeeping of scripts/gpu-check.sh: what each step's output means, and the one JSON.

    gpu_check_report.py gtest MODE GTEST_JSON OUTPUT SUMMARY_JSON   # a gtest binary's verdict
    gpu_check_report.py pystep STEP_JSON RC                   # a scripts/gpu_check.py step's verdict
    gpu_check_report.py bench CPU_JSON CUDA_JSON OUT_JSON GPUS  # byteps-core bench, CUDA against host
    gpu_check_report.py record RECORDS NAME STATUS SECONDS REASON [DETAIL_JSON]
    gpu_check_report.py final RECORDS MODE OUT_JSON           # gpu-check.json; exit 1 unless it passed

MODE is "gpu" (a machine with a GPU: a CUDA test that skipped, or a step that skipped, is a
failure) or "rehearsal" (no GPU: skips are expected and reported with their reason). The verdict
commands print "STATUS<TAB>REASON" on one line (STATUS: ok, failed or skipped).
Only the standard library: it runs with whatever python3 the machine has.
"""
from __future__ import annotations

import json
import os
import re
import sys
import time

# A test of the CUDA path: its name says so (Backends/DeviceTest.*/cuda, NcclGroup.*). Tests whose premise is a machine WITHOUT a GPU skip on a
# GPU machine by design ("...WithoutAGpu...") and are not counted.
CUDA_TEST = re.compile(r"cuda|nccl", re.IGNORECASE)
NO_GPU_PREMISE = re.compile(r"without(a)?gpu|nogpu", re.IGNORECASE)


def _message(case: dict) -> str:
    """A failure's message from gtest's JSON, in one line."""
    for item in case.get("failures") or []:
        msg = " ".join(ln.strip() for ln in (item.get("failure") or "").splitlines() if ln.strip())
        if msg:
            return msg
    return "no message"


def skip_reasons(output: str) -> dict[str, str]:
    """GTEST_SKIP's messages from a gtest binary's output (its JSON has none before 1.13):

        [ RUN      ] Suite.Name
        path/file.cc:257: Skipped
        the reason, one or more lines
        [  SKIPPED ] Suite.Name (0 ms)
    """
    reasons, current, lines, in_skip = {}, None, [], False
    for line in output.splitlines():
        run = re.match(r"\[ RUN      \] (\S+)", line)
        if run:
            current, lines, in_skip = run.group(1), [], False
            continue
        done = re.match(r"\[  SKIPPED \] (\S+)", line)
        if done:
            if done.group(1) == current and lines:
                reasons[current] = " ".join(lines)
            current, in_skip = None, False
            continue
        if current and re.search(r":\d+: Skipped$", line):
            in_skip = True
        elif in_skip and line.strip():
            lines.append(line.strip())
    return reasons


def summarize_gtest(report: dict, output: str = "") -> dict:
    """Counts of a gtest --gtest_output=json report, with each failure's and skip's name and reason
    (the reasons from the binary's output)."""
    reasons = skip_reasons(output)
    out = {"tests": 0, "passed": 0, "failed": [], "skipped": [], "cuda_passed": [], "cuda_skipped": []}
    for suite in report.get("testsuites", []):
        for case in suite.get("testsuite", []):
            if case.get("status", "RUN") != "RUN":  # DISABLED_ tests
                continue
            name = f"{suite.get('name')}.{case.get('name')}"
            out["tests"] += 1
            result = case.get("result", "COMPLETED")
            cuda = bool(CUDA_TEST.search(name)) and not NO_GPU_PREMISE.search(name)
            if result == "SKIPPED":
                entry = {"name": name, "reason": reasons.get(name, "no reason in the output")}
                out["skipped"].append(entry)
                if cuda:
                    out["cuda_skipped"].append(entry)
            elif case.get("failures"):
                out["failed"].append({"name": name, "failure": _message(case)})
            else:
                out["passed"] += 1
                if cuda:
                    out["cuda_passed"].append(name)
    return out


def gtest_verdict(mode: str, summary: dict) -> tuple[str, str]:
    if summary["tests"] == 0:
        return "failed", "no test ran (the filter matched nothing?)"
    if summary["failed"]:
        names = ", ".join(f["name"] for f in summary["failed"][:5])
        return "failed", f"{len(summary['failed'])} failed: {names}"
    if mode == "gpu" and summary["cuda_skipped"]:
        first = summary["cuda_skipped"][0]
        return "failed", (f"{len(summary['cuda_skipped'])} CUDA test(s) skipped on a GPU machine, e.g. "
                          f"{first['name']}: {first['reason']}")
    skipped = f", {len(summary['skipped'])} skipped" if summary["skipped"] else ""
    return "ok", f"{summary['passed']} passed{skipped} ({len(summary['cuda_passed'])} CUDA tests passed)"


def pystep_verdict(data: dict | None, rc: int) -> tuple[str, str]:
    """A gpu_check.py step wrote {"ok": bool, "skipped": reason?, ...}; rc is the launcher's."""
    if rc in (124, 137):
        return "failed", "timed out (its JSON, if any, is partial)"
    if data is None:
        return "failed", f"exit code {rc}, and it wrote no JSON"
    if data.get("skipped"):
        # On a GPU machine this fails the check (final): the GPU path did not run.
        return "skipped", str(data["skipped"])
    if rc != 0 or not data.get("ok"):
        why = data.get("reason") or data.get("error") or data.get("failures") or "ok is not true"
        return "failed", f"exit code {rc}: {why}" if rc else str(why)
    return "ok", str(data.get("summary", ""))


def bench_compare(cpu: dict | None, cuda: dict | None, gpus: int) -> tuple[dict, tuple[str, str]]:
    """byteps-core bench's sweeps with host and with CUDA tensors: the CUDA/host time per size."""
    result = {"cpu": cpu, "cuda": cuda, "cuda_time_over_cpu": {}}
    if cpu is None:
        return result, ("failed", "the host-tensor sweep wrote no JSON")
    if cuda is None:
        if gpus == 0:
            return result, ("skipped", "no GPU here: the CUDA-tensor sweep did not run")
        return result, ("failed", "the CUDA-tensor sweep wrote no JSON")
    host = {row["bytes"]: row["time_us_median"] for row in cpu.get("rows", [])}
    for row in cuda.get("rows", []):
        if host.get(row["bytes"]):
            result["cuda_time_over_cpu"][str(row["bytes"])] = round(row["time_us_median"] / host[row["bytes"]], 3)
    ratios = result["cuda_time_over_cpu"]
    if not ratios:
        return result, ("failed", "the two sweeps share no size")
    return result, ("ok", "CUDA/host time: " + ", ".join(f"{int(b) >> 20} MiB {r}x" for b, r in ratios.items()))


def load(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def final(records_path: str, mode: str, out_path: str) -> int:
    """gpu-check.json: every record, the machine, and the verdict with every failure's reason."""
    steps, order, preflight, machine = {}, [], [], {}
    lines = open(records_path).readlines() if os.path.exists(records_path) else []
    for line in lines:
        rec = json.loads(line)
        if rec["name"] == "preflight":
            preflight.append(rec)
        elif rec["name"] == "machine":
            machine = rec.get("detail") or {}
        else:
            if rec["name"] not in steps:
                order.append(rec["name"])
            steps[rec["name"]] = rec
    failures = [f"preflight: {p['reason']}" for p in preflight if p["status"] == "failed"]
    for name in order:
        rec = steps[name]
        if rec["status"] == "failed" or (rec["status"] != "ok" and mode == "gpu"):
            failures.append(f"{name}: {rec['status']}: {rec['reason']}")
    gtests = [r["detail"] for r in steps.values() if isinstance(r.get("detail"), dict) and "cuda_passed" in r["detail"]]
    if mode == "gpu" and steps and not any(g["cuda_passed"] for g in gtests):  # steps: not --preflight-only
        failures.append("C++ tests: no CUDA test passed on this GPU machine (each one skipped, failed or did not run)")
    result = {
        "mode": mode,
        "ok": not failures,
        "failures": failures,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": round(sum(r.get("seconds", 0) for r in steps.values()), 1),
        "machine": machine,
        "preflight": [{k: p[k] for k in ("status", "reason")} for p in preflight],
        "steps": {name: {k: v for k, v in steps[name].items() if k != "name"} for name in order},
    }
    with open(out_path + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(out_path + ".tmp", out_path)
    verdict = "PASSED" if result["ok"] else "FAILED"
    print(f"gpu-check ({mode}): {verdict}; {len(order)} steps, {result['seconds']} s")
    for name in order:
        print(f"  {name:16} {steps[name]['status']:8} {steps[name]['seconds']:7.1f} s  {steps[name]['reason']}")
    for failure in failures:
        print(f"  FAILURE {failure}")
    return 0 if result["ok"] else 1


def main(argv: list[str]) -> int:
    cmd, args = argv[0], argv[1:]
    if cmd == "gtest":
        mode, gtest_json, output, summary_json = args
        report = load(gtest_json)
        if report is None:
            print(f"failed\tno gtest report at {gtest_json} (the binary crashed or timed out)")
            return 0
        try:
            with open(output, errors="replace") as f:
                text = f.read()
        except OSError:
            text = ""
        summary = summarize_gtest(report, text)
        status, reason = gtest_verdict(mode, summary)
        with open(summary_json, "w") as f:
            json.dump(summary, f, indent=1)
        print(f"{status}\t{reason}")
    elif cmd == "pystep":
        step_json, rc = args
        status, reason = pystep_verdict(load(step_json), int(rc))
        print(f"{status}\t{reason}")
    elif cmd == "bench":
        cpu_json, cuda_json, out_json, gpus = args
        result, (status, reason) = bench_compare(load(cpu_json), load(cuda_json), int(gpus))
        with open(out_json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"{status}\t{reason}")
    elif cmd == "record":
        records, name, status, seconds, reason = args[:5]
        rec = {"name": name, "status": status, "seconds": round(float(seconds), 1), "reason": reason}
        if len(args) > 5 and args[5]:
            detail = load(args[5])
            rec["detail"] = detail if detail is not None else f"unreadable JSON: {args[5]}"
        with open(records, "a") as f:
            f.write(json.dumps(rec) + "\n")
    elif cmd == "final":
        return final(*args)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
