#!/usr/bin/env python3
"""Plots the loss curves of `tessel train gpt --metrics FILE` into a PNG.

Usage: plot_gpt_metrics.py METRICS.csv OUT.png [TITLE]

The CSV has rows `train,step,loss,lr,grad_norm,step_seconds,` and `eval,step,train_loss,,,,val_loss`.
Uses matplotlib (Debian's python3-matplotlib) without a display.
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    steps, losses, evals = [], [], []
    with open(sys.argv[1]) as f:
        for row in csv.DictReader(f):
            if row["kind"] == "train":
                steps.append(int(row["step"]))
                losses.append(float(row["loss"]))
            elif row["kind"] == "eval":
                evals.append((int(row["step"]), float(row["loss"]), float(row["val_loss"])))
    if not steps:
        print(f"plot_gpt_metrics: no training rows in {sys.argv[1]}", file=sys.stderr)
        return 1
    window = max(1, len(losses) // 50)
    smooth = [sum(losses[max(0, i - window + 1):i + 1]) / len(losses[max(0, i - window + 1):i + 1])
              for i in range(len(losses))]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    ax.plot(steps, losses, color="#bbbbbb", linewidth=0.6, label="train loss (per step)")
    ax.plot(steps, smooth, color="#1f77b4", linewidth=1.5, label=f"train loss ({window}-step mean)")
    if evals:
        ax.plot([e[0] for e in evals], [e[1] for e in evals], "o-", color="#2ca02c",
                label="train loss (estimate)")
        ax.plot([e[0] for e in evals], [e[2] for e in evals], "s-", color="#d62728",
                label="validation loss")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per character)")
    ax.set_title(sys.argv[3] if len(sys.argv) > 3 else "tessel train gpt")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(sys.argv[2])
    print(f"plot_gpt_metrics: wrote {sys.argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
