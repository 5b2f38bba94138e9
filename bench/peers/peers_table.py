"""The side-by-side runner's arithmetic and output: medians and spread over repetitions, the
ratio column, the nccl-tests-like table per workload and the JSON document.

Pure standard library, no peer imported: the runner (bench/peers/run_peers.py) uses it under
any Python, and python/tests/test_bench_peers.py tests it without the peers' environment.

Data model. One *sample* is what one run of one peer reports for one case of one workload:
the median time (microseconds) over that run's timed calls. A repetition runs every peer once
per workload, so a case gathers one sample per peer per repetition. A peer that cannot run a
workload gives a reason instead of samples, and the table prints the reason in place of
numbers.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field

TESSEL = "tessel"


@dataclass
class Cell:
    """One peer's samples for one case of a workload, or why it has none."""

    samples_us: list[float] = field(default_factory=list)
    unavailable: str | None = None  # the reason this peer cannot run the case
    extra: dict = field(default_factory=dict)  # peer-reported details (algorithm, versions...)

    def median_us(self) -> float | None:
        return statistics.median(self.samples_us) if self.samples_us else None

    def spread(self) -> float | None:
        """(max - min) / median over the repetitions: the run-to-run noise of this cell."""
        m = self.median_us()
        if m is None or m <= 0:
            return None
        return (max(self.samples_us) - min(self.samples_us)) / m


@dataclass
class Case:
    """One row group of a workload: a message size, a relayout, a model config..."""

    label: str
    bytes: int | None = None  # per-rank message bytes (all-reduce), for busbw
    count: int | None = None  # elements per rank (all-reduce)
    work: float | None = None  # units of work per call for the throughput column (tokens/step)
    cells: dict[str, Cell] = field(default_factory=dict)

    def cell(self, peer: str) -> Cell:
        return self.cells.setdefault(peer, Cell())


def ratio(peer_us: float | None, tessel_us: float | None) -> float | None:
    """Peer time / tessel time: above 1 means tessel is faster. None when either is missing."""
    if peer_us is None or tessel_us is None or tessel_us <= 0:
        return None
    return peer_us / tessel_us


def busbw_gbps(nbytes: int, time_us: float, ranks: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce: bytes/time * 2(n-1)/n, in GB/s."""
    if time_us <= 0:
        return math.nan
    return nbytes / (time_us * 1e-6) * 2 * (ranks - 1) / ranks / 1e9


@dataclass
class Workload:
    """One workload of the issue: its cases in order and how its table reads."""

    name: str
    title: str
    ranks: int
    peers: list[str]
    cases: list[Case] = field(default_factory=list)
    throughput_unit: str | None = None  # e.g. "tokens/s": prints work / time per case

    def case(self, label: str, **kw) -> Case:
        for c in self.cases:
            if c.label == label:
                return c
        c = Case(label, **kw)
        self.cases.append(c)
        return c

    def mark_unavailable(self, peer: str, reason: str) -> None:
        """The peer cannot run this workload at all: every case says why."""
        for c in self.cases:
            c.cell(peer).unavailable = reason


def _fmt(x: float | None, spec: str, width: int) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return f"{'-':>{width}}"
    return f"{x:>{width}{spec}}"


def format_table(w: Workload) -> str:
    """nccl-tests-like text: one line per (case, peer), tessel first, then the other peers."""
    sized = any(c.bytes is not None for c in w.cases)
    lines = [f"# {w.title}",
             "# time: median over repetitions of each run's median (us); spread: (max-min)/median "
             "over repetitions; ratio: peer time / tessel time (> 1: tessel faster)"]
    head = (f"{'size':>12} {'count':>10} {'type':>6} " if sized else f"{'case':<28} ")
    head += f"{'peer':<8} {'time_us':>12} {'spread':>7} "
    if sized:
        head += f"{'busbw_GB/s':>10} "
    if w.throughput_unit:
        head += f"{w.throughput_unit:>10} "
    head += f"{'ratio':>7}"
    lines.append("#" + head[1:] if head.startswith(" ") else head)
    for c in w.cases:
        t_us = c.cell(TESSEL).median_us()
        for peer in w.peers:
            cell = c.cell(peer)
            row = (f"{c.bytes:>12} {c.count:>10} {'float':>6} " if sized else f"{c.label:<28} ")
            row += f"{peer:<8} "
            if cell.unavailable is not None or not cell.samples_us:
                why = cell.unavailable or "no result"
                lines.append(row + f"n/a: {why}")
                continue
            m = cell.median_us()
            s = cell.spread()
            row += f"{_fmt(m, '.2f', 12)} {_fmt(None if s is None else 100 * s, '.0f', 6)}% "
            if sized:
                row += f"{_fmt(busbw_gbps(c.bytes, m, w.ranks), '.3f', 10)} "
            if w.throughput_unit:
                row += f"{_fmt(c.work / (m * 1e-6) if c.work else None, '.1f', 10)} "
            row += _fmt(ratio(m, t_us), '.2f', 7)
            lines.append(row)
    return "\n".join(lines)


def workload_json(w: Workload) -> dict:
    """The workload as plain data: every sample kept, medians and ratios computed."""
    cases = []
    for c in w.cases:
        t_us = c.cell(TESSEL).median_us()
        peers = {}
        for peer in w.peers:
            cell = c.cell(peer)
            m = cell.median_us()
            entry = {"samples_us": cell.samples_us, "median_us": m, "spread": cell.spread(),
                     "ratio": ratio(m, t_us), "unavailable": cell.unavailable}
            if c.bytes is not None and m:
                entry["busbw_gbps"] = busbw_gbps(c.bytes, m, w.ranks)
            if c.work and m:
                entry["throughput"] = c.work / (m * 1e-6)
            if cell.extra:
                entry["extra"] = cell.extra
            peers[peer] = entry
        cases.append({"case": c.label, "bytes": c.bytes, "count": c.count, "work": c.work,
                      "peers": peers})
    return {"workload": w.name, "title": w.title, "ranks": w.ranks,
            "throughput_unit": w.throughput_unit, "cases": cases}


def _finite(x):
    """JSON has no NaN or infinity: write them as null, as every tessel bench --json does."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def document_json(workloads: list[Workload], meta: dict) -> str:
    """The whole run as one JSON object: {"meta": ..., "workloads": [...]}."""
    return json.dumps(_finite({"meta": meta, "workloads": [workload_json(w) for w in workloads]}),
                      allow_nan=False)


# ---- loss curves ---------------------------------------------------------------------------


def compare_loss_curves(w: Workload, tolerance: float) -> list[dict]:
    """Every run of a peer that trained from tessel's inputs (its runs say "same_inputs_as":
    "tessel": the same initial parameters, batches and schedule) against every tessel run of the
    same case: the largest |loss difference| over the steps both ran, the step where it is, and
    whether it is within `tolerance`. One dict per (case, peer) that has such runs."""
    checks = []
    for c in w.cases:
        references = [r["losses"] for r in c.cell(TESSEL).extra.get("runs", []) if r.get("losses")]
        for peer in w.peers:
            runs = [r for r in c.cell(peer).extra.get("runs", [])
                    if r.get("same_inputs_as") == TESSEL and r.get("losses")]
            if peer == TESSEL or not runs or not references:
                continue
            worst, at, steps = 0.0, 0, None
            for run in runs:
                for ref in references:
                    n = min(len(run["losses"]), len(ref))
                    steps = n if steps is None else min(steps, n)
                    for k in range(n):
                        d = abs(run["losses"][k] - ref[k])
                        if not d <= worst:  # a NaN is the worst
                            worst, at = d, k
            checks.append({"case": c.label, "peer": peer, "steps": steps, "max_abs_diff": worst,
                           "at_step": at, "tolerance": tolerance,
                           "ok": math.isfinite(worst) and worst <= tolerance,
                           "initial_loss": runs[0]["losses"][0],
                           "tessel_initial_loss": references[0][0],
                           "ln_vocab": runs[0].get("ln_vocab")})
    return checks


def format_loss_checks(checks: list[dict]) -> str:
    lines = []
    for k in checks:
        ln = f"; ln V = {k['ln_vocab']:.4f}" if k.get("ln_vocab") is not None else ""
        lines.append(
            f"# loss curve {k['case']}, {k['peer']} vs tessel (same initial parameters, batches "
            f"and schedule, dropout 0): max |loss difference| {k['max_abs_diff']:.2e} at step "
            f"{k['at_step']} of {k['steps']} (tolerance {k['tolerance']:.0e}): "
            f"{'ok' if k['ok'] else 'DIFFERENT'}; initial loss {k['initial_loss']:.4f} "
            f"(tessel {k['tessel_initial_loss']:.4f}{ln})")
    return "\n".join(lines)
