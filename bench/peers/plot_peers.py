"""Draws run_peers.py's JSON as one PNG: busbw vs message size for the all-reduce (left) and,
for the other workloads, each peer's time relative to tessel's (right: a bar per case and
peer, log scale, 1 = as fast as tessel, above 1 = tessel faster).

    .venv-peers/bin/python bench/peers/plot_peers.py build/peers/peers.json docs/img/peers.png
    .venv-peers/bin/python bench/peers/plot_peers.py a.json b.json out.png   # runs merged

Runs in the peers' venv (matplotlib); the runner calls it after the tables. Several JSON files
(runs of different workloads) are drawn as one run; the title gives the first run's start.
"""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"tessel": "tab:blue", "mpi": "tab:orange", "jax": "tab:green", "torch": "tab:red"}


def main(sources: list[str], dst: str) -> int:
    docs = [json.load(open(src)) for src in sources]
    doc = {"meta": docs[0]["meta"], "workloads": [w for d in docs for w in d["workloads"]]}
    by_name = {w["workload"]: w for w in doc["workloads"]}
    others = [w for w in doc["workloads"] if w["workload"] != "all_reduce"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [1, 1.2]})

    ax = axes[0]
    ar = by_name.get("all_reduce")
    if ar:
        for peer in COLORS:
            pts = [(c["bytes"], c["peers"][peer]["busbw_gbps"]) for c in ar["cases"]
                   if peer in c["peers"] and c["peers"][peer].get("busbw_gbps")]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=peer, color=COLORS[peer])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("bytes per rank")
        ax.set_ylabel("busbw (GB/s, median over repetitions)")
        ax.legend()
    ax.set_title("all_reduce f32 sum, 4 ranks")
    ax.grid(True, which="both", alpha=0.3)

    ax = axes[1]
    labels, x = [], 0
    for w in others:
        for c in w["cases"]:
            bars = [(p, e["ratio"]) for p, e in c["peers"].items() if p != "tessel" and e["ratio"]]
            if not bars:
                continue
            for i, (peer, r) in enumerate(bars):
                ax.bar(x + i * 0.25, r, width=0.25, color=COLORS.get(peer, "gray"),
                       label=peer if peer not in ax.get_legend_handles_labels()[1] else None)
                ax.annotate(f"{r:.2g}", (x + i * 0.25, r), ha="center", va="bottom", fontsize=7)
            labels.append((x + 0.25 * (len(bars) - 1) / 2, f"{w['workload']}\n{c['case']}"))
            x += 1
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_yscale("log")
    if labels:
        ax.set_xticks([p for p, _ in labels], [t for _, t in labels], fontsize=7)
    ax.set_ylabel("peer time / tessel time (> 1: tessel faster)")
    ax.set_title("other workloads: ratio to tessel")
    ax.legend()
    ax.grid(True, axis="y", which="both", alpha=0.3)

    m = doc["meta"]
    fig.suptitle(f"tessel side by side with its peers, {m['started']}, {m['machine']['cpus']} CPUs, "
                 f"{m['repetitions']} repetition(s)", fontsize=10)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: plot_peers.py RESULTS.json [MORE.json ...] OUT.png")
    sys.exit(main(sys.argv[1:-1], sys.argv[-1]))
