"""The pure part of the byteps settings sweep: cases, the grid, row environments, the autotune
check, choosing the best grid point, ratios, and the tables.  No I/O; unit-tested in
bench/sweep/test_sweep.py.

Vocabulary: a *case* is one cluster shape and link rate (n workers, k servers, placement, R); a
*row* is one thing measured in a case: ``gloo`` (all_reduce, the baseline), ``defaults`` (byteps
with no BYTEPS_* variable), ``autotune`` (byteps with only BYTEPS_AUTOTUNE=1) or ``grid`` (one
point of BYTEPS_PARTITION_BYTES x BYTEPS_SCHEDULING_CREDIT x BYTEPS_CONNECTIONS_PER_PEER); a
*measurement* is one row at one tensor size (a dict, see :func:`measurement`).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping, MutableMapping, Optional, Sequence

from bench.collective import model

TOLERANCE = 0.05  # "within 5 % of best": t_row <= (1 + TOLERANCE) * t_best
AUTOTUNE_VAR = "BYTEPS_AUTOTUNE"
AUTOTUNE_MISSING = f"{AUTOTUNE_VAR} not in this build"
GRID_VARS = ("BYTEPS_PARTITION_BYTES", "BYTEPS_SCHEDULING_CREDIT", "BYTEPS_CONNECTIONS_PER_PEER")
# Kept in the runner's environment: a path, not a setting of the core.
KEEP_VARS = ("BYTEPS_CORE_BINARY",)
KINDS = ("gloo", "defaults", "autotune", "grid")

# --------------------------------------------------------------------------------------------
# Cases


@dataclass(frozen=True)
class Case:
    """One cluster shape: n workers, k servers as a bench.collective token (n, n/2,
    colocated), the requested per-host rate."""

    name: str
    n: int
    k_token: str
    rate_mbit: float

    @property
    def k(self) -> int:
        return model.parse_k(self.k_token, self.n)[0]

    @property
    def placement(self) -> str:
        return model.parse_k(self.k_token, self.n)[1]

    @property
    def k_label(self) -> str:
        return model.parse_k(self.k_token, self.n)[2]

    @property
    def hosts(self) -> int:
        """Hosts of the largest testbed of the case (byteps'; gloo needs n)."""
        return self.n + self.k if self.placement == model.SEPARATE else self.n

    def used_rate(self, budget_mbit: float) -> float:
        """The rate every row of the case runs at: bench.collective's CPU budget cap."""
        return model.capped_rate(self.rate_mbit, self.hosts, budget_mbit)


CASES: list[Case] = [
    Case("n4k4-500", 4, "n", 500),
    Case("n4k4-1000", 4, "n", 1000),
    Case("n4k4-2500", 4, "n", 2500),
    Case("n8k8-1000", 8, "n", 1000),
    Case("n4k2-1000", 4, "n/2", 1000),
    Case("n4coloc-1000", 4, "colocated", 1000),
]
CASES_BY_NAME = {c.name: c for c in CASES}


def select_cases(names: Sequence[str]) -> list[Case]:
    """The named cases in the order given; ValueError names the unknown ones."""
    unknown = [n for n in names if n not in CASES_BY_NAME]
    if unknown:
        raise ValueError(f"unknown case(s) {', '.join(unknown)}; known: "
                         f"{', '.join(CASES_BY_NAME)}")
    return [CASES_BY_NAME[n] for n in dict.fromkeys(names)]


# --------------------------------------------------------------------------------------------
# Grid and rows


@dataclass(frozen=True)
class Point:
    """One grid point: partition bytes, scheduling credit (0 = no cap), connections per peer."""

    partition_bytes: int
    credit: int
    connections: int

    @property
    def label(self) -> str:
        return (f"part={model.format_size(self.partition_bytes)} credit={self.credit} "
                f"conns={self.connections}")

    def env(self) -> dict[str, str]:
        values = (self.partition_bytes, self.credit, self.connections)
        return {k: str(v) for k, v in zip(GRID_VARS, values)}


def expand_grid(partitions: Iterable[int], credits: Iterable[int],
                connections: Iterable[int]) -> list[Point]:
    """Every combination, partitions outermost, duplicates dropped, order kept."""
    axes = [list(dict.fromkeys(a)) for a in (partitions, credits, connections)]
    return [Point(p, c, k) for p, c, k in itertools.product(*axes)]


@dataclass(frozen=True)
class RowSpec:
    """What one configuration of a case runs: its kind, label, byteps environment, and why it
    is skipped (None: it runs)."""

    kind: str
    label: str
    env: Mapping[str, str] = field(default_factory=dict)
    point: Optional[Point] = None
    skip_reason: Optional[str] = None

    @property
    def system(self) -> str:
        return "gloo" if self.kind == "gloo" else "byteps"


def autotune_skip_reason(info_text: str) -> Optional[str]:
    """None when ``byteps-core info`` lists BYTEPS_AUTOTUNE (a line starting with it), else
    the reason the autotune row is skipped."""
    for line in info_text.splitlines():
        words = line.split()
        if words and words[0] == AUTOTUNE_VAR:
            return None
    return AUTOTUNE_MISSING


def row_specs(points: Sequence[Point], autotune_reason: Optional[str]) -> list[RowSpec]:
    """The rows of one case in run order: gloo, defaults, autotune, the grid."""
    rows = [RowSpec("gloo", "gloo all_reduce"),
            RowSpec("defaults", "defaults"),
            RowSpec("autotune", "autotune", {AUTOTUNE_VAR: "1"}, skip_reason=autotune_reason)]
    rows += [RowSpec("grid", p.label, p.env(), p) for p in points]
    return rows


def strip_byteps_environment(environ: MutableMapping[str, str]) -> list[str]:
    """Removes every BYTEPS_* variable but KEEP_VARS from *environ* (the runner's environment
    reaches every process of a job), so that "defaults" means the core's defaults.  Returns the
    names removed."""
    names = sorted(k for k in environ if k.startswith("BYTEPS_") and k not in KEEP_VARS)
    for k in names:
        del environ[k]
    return names


# What worker 0 of ``byteps-core bench`` says it ran with (its JSON, else its "# byteps bench:"
# line): proof the grid's settings reached the core, and what the defaults / autotune chose.
REPORTED_KEYS = ("partition_bytes_reported", "credit_bytes_reported", "credit_reported",
                 "settings_reported")


def reported_settings(bench_json: Optional[Mapping], log: str = "") -> dict:
    """The partition bytes, credit and the core's explanation of them (``settings``) from the
    bench JSON; without one, from the log line "partition P B, credit C[ B]" (C is bytes with
    " B", else partitions, as older builds print it)."""
    if bench_json and "partition_bytes" in bench_json:
        out = {"partition_bytes_reported": bench_json["partition_bytes"]}
        if "credit_bytes" in bench_json:
            out["credit_bytes_reported"] = bench_json["credit_bytes"]
        if bench_json.get("settings"):
            out["settings_reported"] = bench_json["settings"]
        return out
    m = re.search(r"# byteps bench: .*?partition (\d+) B, credit (\d+)( B)?", log)
    if not m:
        return {}
    key = "credit_bytes_reported" if m.group(3) else "credit_reported"
    return {"partition_bytes_reported": int(m.group(1)), key: int(m.group(2))}


def chosen(row: Mapping) -> str:
    """"; core: part=128K, credit=2M bytes" if the row has what the core reported, else ""."""
    if row.get("partition_bytes_reported") is None:
        return ""
    text = f"; core: part={model.format_size(row['partition_bytes_reported'])}"
    if row.get("credit_bytes_reported") is not None:
        text += f", credit={model.format_size(row['credit_bytes_reported'])} bytes"
    elif row.get("credit_reported") is not None:
        text += f", credit={row['credit_reported']}"
    return text


# --------------------------------------------------------------------------------------------
# Measurements, best point, ratios


def measurement(case: Case, spec: RowSpec, rate_mbit: float, nbytes: int,
                time_s: Optional[float], iters: Optional[int] = None, status: str = "ok",
                reason: str = "") -> dict:
    """One row at one size, with the ideal time (ring for gloo, PS for byteps) and ideal/t."""
    ideal = model.ideal_time(spec.system, nbytes, case.n, model.goodput_Bps(rate_mbit), case.k,
                             case.placement)
    p = spec.point
    return {"case": case.name, "kind": spec.kind, "label": spec.label, "n": case.n,
            "k": case.k, "placement": case.placement, "rate_mbit": rate_mbit, "bytes": nbytes,
            "size": model.format_size(nbytes), "iters": iters, "time_s": time_s,
            "partition_bytes": p.partition_bytes if p else None,
            "credit": p.credit if p else None, "connections": p.connections if p else None,
            "ideal_s": ideal,
            "pct_model": model.pct_of_model(ideal, time_s) if time_s else None,
            "status": status, "reason": reason}


def best_of(rows: Iterable[Mapping]) -> Optional[Mapping]:
    """The grid row with the smallest (median) time; the first of equals; None if no grid row
    was measured."""
    timed = [r for r in rows if r["kind"] == "grid" and r.get("time_s")]
    return min(timed, key=lambda r: r["time_s"]) if timed else None


def within(t_best: Optional[float], t_row: Optional[float],
           tolerance: float = TOLERANCE) -> Optional[bool]:
    """t_row <= (1 + tolerance) t_best; None when either is missing."""
    if not t_best or not t_row:
        return None
    return t_row <= (1.0 + tolerance) * t_best


def _groups(rows: Iterable[dict]) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        out.setdefault((r["case"], r["bytes"]), []).append(r)
    return out


def annotate(rows: Iterable[dict], tolerance: float = TOLERANCE) -> list[dict]:
    """Sets on every row of a (case, size): ``to_best`` = t_best / t_row, ``vs_gloo`` =
    t_gloo / t_row, ``within_tol`` and ``is_best``.  Returns the rows."""
    rows = list(rows)
    for group in _groups(rows).values():
        best = best_of(group)
        t_best = best["time_s"] if best else None
        gloo = [r["time_s"] for r in group if r["kind"] == "gloo" and r.get("time_s")]
        t_gloo = gloo[0] if gloo else None
        for r in group:
            r["to_best"] = model.speed_ratio(t_best, r.get("time_s"))
            r["vs_gloo"] = model.speed_ratio(t_gloo, r.get("time_s"))
            r["within_tol"] = within(t_best, r.get("time_s"), tolerance)
            r["is_best"] = r is best
    return rows


def summary_rows(rows: Iterable[dict], tolerance: float = TOLERANCE) -> list[dict]:
    """Per (case, size), in order: gloo, the best grid point, defaults, autotune (each with
    ``row`` = its role, ``setting`` = what it ran or why it has no time)."""
    out = []
    for (case, nbytes), group in _groups(annotate(rows, tolerance)).items():
        by_kind = {r["kind"]: r for r in group if r["kind"] != "grid"}
        best = best_of(group)
        for role, r in (("gloo", by_kind.get("gloo")), ("best", best),
                        ("defaults", by_kind.get("defaults")),
                        ("autotune", by_kind.get("autotune"))):
            if r is None:
                continue
            setting = {"gloo": "all_reduce (ring)", "defaults": "no BYTEPS_* variable",
                       "autotune": f"{AUTOTUNE_VAR}=1"}.get(role, r["label"])
            if role in ("defaults", "autotune"):
                setting += chosen(r)
            if not r.get("time_s"):
                setting = f"{r['status']}: {r['reason'] or '?'}"
            out.append({**r, "row": role, "setting": setting,
                        "within": _yes_no(r["within_tol"]) if role != "gloo" else None})
    return out


def _yes_no(flag: Optional[bool]) -> Optional[str]:
    return None if flag is None else ("yes" if flag else "NO")


def grid_table_rows(rows: Iterable[dict], case: str, tolerance: float = TOLERANCE) -> list[dict]:
    """Every row of one case, sizes ascending, measured ones fastest first."""
    sel = [r for r in annotate(rows, tolerance) if r["case"] == case]
    for r in sel:
        r["within"] = _yes_no(r["within_tol"]) if r["kind"] != "gloo" else None
        r["row_label"] = r["label"] + (" *" if r.get("is_best") else "")
    return sorted(sel, key=lambda r: (r["bytes"], r["time_s"] is None, r["time_s"] or 0))


# --------------------------------------------------------------------------------------------
# Tables

SUMMARY_COLUMNS: list[tuple[str, str, str]] = [
    ("case", "case", "{}"), ("rate_mbit", "R_Mbit", "{:g}"), ("size", "size", "{}"),
    ("row", "row", "{}"), ("time_s", "time_s", "{:.4f}"), ("to_best", "best/t", "{:.3f}"),
    ("vs_gloo", "vs_gloo", "{:.2f}"), ("within", "within5%", "{}"),
    ("setting", "setting", "{}"),
]
GRID_COLUMNS: list[tuple[str, str, str]] = [
    ("size", "size", "{}"), ("row_label", "row", "{}"),
    ("iters", "iters", "{}"), ("time_s", "time_s", "{:.4f}"), ("pct_model", "%model", "{:.1f}"),
    ("to_best", "best/t", "{:.3f}"), ("vs_gloo", "vs_gloo", "{:.2f}"),
    ("within", "within5%", "{}"), ("status", "status", "{}"),
]


def summary_table(rows: Iterable[dict], tolerance: float = TOLERANCE) -> str:
    return model.format_table(summary_rows(rows, tolerance), SUMMARY_COLUMNS)


def markdown_report(doc: Mapping) -> str:
    """results.md: how it was run, the summary, every case's full grid, skipped and failed
    configurations."""
    meta, rows = doc["meta"], doc["rows"]
    tol = meta.get("tolerance", TOLERANCE)
    lines = ["# byteps settings sweep", "",
             f"Run {meta.get('started', '?')} on the emulated cluster (tools/testbed), "
             f"`{meta.get('command', '')}`{'' if meta.get('complete') else ' (incomplete)'}.",
             "", "Cases (R = per-host rate actually used; the request is lowered to keep "
             f"hosts x R <= {meta.get('rate_budget_mbit', '?')} Mbit/s):", ""]
    for c in doc.get("cases", []):
        lowered = (f" (requested {c['requested_rate_mbit']:g}, CPU budget)"
                   if c["rate_mbit"] < c["requested_rate_mbit"] else "")
        lines.append(f"- {c['name']}: n={c['n']}, k={c['k']} {c['placement']}, "
                     f"{c['hosts']} hosts, R = {c['rate_mbit']:g} Mbit/s{lowered}")
    lines += ["", f"time_s: median; best/t = t_best / t_row (t_best: fastest grid point); "
              f"vs_gloo = t_gloo / t_row; within5% = t_row <= {1 + tol:g} t_best; "
              "%model = ideal/t (PS model for byteps, ring for gloo).  Grid: part = "
              "BYTEPS_PARTITION_BYTES, credit = BYTEPS_SCHEDULING_CREDIT (0 = no cap), conns = "
              "BYTEPS_CONNECTIONS_PER_PEER.", "", "## Summary", "",
              model.format_markdown(summary_rows(rows, tol), SUMMARY_COLUMNS)]
    for c in doc.get("cases", []):
        case_rows = grid_table_rows(rows, c["name"], tol)
        if case_rows:
            lines += ["", f"## {c['name']} (R = {c['rate_mbit']:g} Mbit/s), * = best", "",
                      model.format_markdown(case_rows, GRID_COLUMNS)]
    told = [c for c in doc.get("configs", []) if c.get("settings_reported")
            and c.get("kind") in ("defaults", "autotune")]
    if told:
        lines += ["", "## What the core chose (worker 0's explanation)", ""]
        lines += [f"- {c['case']} {c['label']}: {c['settings_reported']}" for c in told]
    not_run = [c for c in doc.get("configs", []) if c["status"] in ("failed", "skipped")]
    if not_run:
        lines += ["", "## Not measured", ""]
        lines += [f"- {c['case']} {c['label']}: {c['status']}: "
                  f"{(c['error'] or '?').splitlines()[0]}" for c in not_run]
    return "\n".join(lines) + "\n"
