"""tessel's pipelined GPT step beside PyTorch's `torch.distributed.pipelining` (issue 36's
side-by-side figure): `tessel train gpt --mesh stage=P,batch=1,model=1 --schedule S
--microbatches M` (P in-process CPU devices, one stage each) and bench/peers/torch_pipeline.py
(P gloo processes of one thread, `PipelineStage` + `Schedule1F1B` / `ScheduleGPipe`), the same
model split, initial parameters, batches, microbatches and learning-rate schedule, dropout 0,
alternating the two (tessel first in even rounds, PyTorch first in odd ones) for --repeat
rounds of every schedule and microbatch count. Run with Debian's python; PyTorch runs in the
peers' venv (scripts/peers-venv.sh). --tessel-mode says how tessel runs its stages: in one
process as tessel does by default (`one-process`, the default: a controller thread per stage),
in one process with a controller thread per stage asked for (`stage-threads`,
`--stage-threads`), in one process with one controller thread for the step (`one-controller`,
`--one-controller`), or one process per stage under `mpirun -np P --oversubscribe` (`mpirun`,
the process layout of PyTorch's side).

    /usr/bin/python3 bench/peers/compare_pipeline.py --config tiny --stages 2 \
        --schedules gpipe,1f1b --microbatches 4,12 --steps 10 --warmup 3 --repeat 2

Prints, per run and as medians per (schedule, microbatches): each side's median step time over
the --steps after --warmup (tessel: the step times of its --metrics file; PyTorch: the slowest
stage's, torch_pipeline.py's), tessel's speed as a multiple of PyTorch's (PyTorch's step time /
tessel's: at least 1 when tessel's step is as fast or faster), the largest loss difference
between the two curves, the 1-minute load average before and after, and the share of the CPU
other processes took meanwhile. Exit status 1 when a loss curve leaves --tolerance (the two
sides did not train the same model), 2 on bad arguments or a failed run. --json-out FILE
writes every run and the medians.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_args import add_program_args, check_programs  # noqa: E402
from peer_programs import rows_tessel_gpt  # noqa: E402
from processes import (cpu_sample, git_describe, machine_facts, other_cpu,  # noqa: E402
                       run_with_deadline)

REPO = Path(__file__).resolve().parents[2]
SCHEDULES = ("gpipe", "1f1b")
LOSS_TOLERANCE = 1e-4  # run_peers.py's for the GPT's curves (float32 rounding over the steps)
RUN_TIMEOUT_S = 1800
TESSEL_MODES = ("one-process", "stage-threads", "one-controller", "mpirun")


def int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integers") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: each must be >= 1")
    return values


def schedule_list(text: str) -> list[str]:
    names = text.split(",")
    for n in names:
        if n not in SCHEDULES:
            raise argparse.ArgumentTypeError(f"{n!r}: one of {', '.join(SCHEDULES)}")
    return names


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="tiny")
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--schedules", type=schedule_list, default=["gpipe", "1f1b"],
                    help="comma-separated: gpipe, 1f1b (default both)")
    ap.add_argument("--microbatches", type=int_list, default=[4],
                    help="comma-separated microbatch counts (default 4)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per run (median)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--repeat", type=int, default=2, help="alternating rounds")
    ap.add_argument("--tolerance", type=float, default=LOSS_TOLERANCE,
                    help=f"largest loss difference allowed (default {LOSS_TOLERANCE:g})")
    ap.add_argument("--tessel-mode", choices=TESSEL_MODES, default="one-process",
                    help="how tessel runs its stages (default one-process)")
    add_program_args(ap)
    ap.add_argument("--json-out", type=Path, default=None, help="write every run as JSON")
    args = ap.parse_args(argv)
    if args.stages < 2:
        ap.error(f"--stages {args.stages}: a pipeline needs at least 2 stages")
    if args.steps < 1 or args.warmup < 0 or args.repeat < 1:
        ap.error(f"--steps {args.steps}, --warmup {args.warmup}, --repeat {args.repeat}: "
                 "--steps and --repeat must be >= 1, --warmup >= 0")
    if not math.isfinite(args.tolerance) or args.tolerance <= 0:
        ap.error(f"--tolerance {args.tolerance}: must be a positive number")
    check_programs(ap, args)
    return args


def tessel_command(args, schedule: str, microbatches: int, metrics: Path) -> list[str]:
    total = args.warmup + args.steps
    cmd = [args.tessel, "train", "gpt", "--config", args.config, "--mesh",
           f"stage={args.stages},batch=1,model=1", "--schedule", schedule, "--microbatches",
           str(microbatches), "--steps", str(total), "--eval-interval", str(10 * total),
           "--eval-iters", "1", "--sample", "0", "--dropout", "0", "--metrics", str(metrics),
           "--json"]
    if args.tessel_mode in ("stage-threads", "one-controller"):
        cmd.append(f"--{args.tessel_mode}")
    if args.tessel_mode == "mpirun":
        # Rank 0 writes the metrics and the JSON line.
        cmd = ["mpirun", "--oversubscribe", "-np", str(args.stages)] + cmd
    return cmd


def torch_command(args, schedule: str, microbatches: int) -> list[str]:
    return [args.venv_python, str(REPO / "bench" / "peers" / "torch_pipeline.py"), "--config",
            args.config, "--stages", str(args.stages), "--schedule", schedule, "--microbatches",
            str(microbatches), "--steps", str(args.steps), "--warmup", str(args.warmup),
            "--schedule-steps", str(args.warmup + args.steps), "--dropout", "0", "--json"]


def run(cmd: list[str]) -> str:
    """The command's stdout; a failure or an overrun ends the comparison (exit status 2)."""
    env = dict(os.environ)
    if cmd[0] == "mpirun" and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    done = run_with_deadline(cmd, env, RUN_TIMEOUT_S)
    if done is None:
        raise SystemExit(f"compare_pipeline: {' '.join(cmd)} ran past {RUN_TIMEOUT_S} s; "
                         "stopped")
    rc, out, err = done
    if rc != 0:
        print(f"compare_pipeline: {' '.join(cmd)} failed ({rc}):\n{err[-3000:]}",
              file=sys.stderr)
        raise SystemExit(2)
    return out


def tessel_result(stdout: str, metrics: Path, config: str, warmup: int) -> dict:
    """{median_step_s, step_s, losses} of a tessel run: the steps after the warm-up."""
    row = rows_tessel_gpt([stdout], metrics, config, warmup)[0][0]
    return {"median_step_s": row["time_us"] / 1e6, "step_s": row["step_s"],
            "losses": row["losses"]}


def torch_result(stdout: str) -> dict:
    doc = json.loads(stdout.strip().splitlines()[-1])
    return {"median_step_s": doc["median_step_s"], "step_s": doc["step_s"],
            "losses": doc["losses"], "layers": doc["layers"],
            "torch": doc["versions"]["torch"]}


def compare_curves(tessel_losses: list, torch_losses: list, tolerance: float) -> dict:
    """The largest |difference| step by step, where it is, and whether it is within tolerance
    (both curves complete, every loss finite)."""
    steps = min(len(tessel_losses), len(torch_losses))
    worst, at = 0.0, None
    for s in range(steps):
        a, b = tessel_losses[s], torch_losses[s]
        d = abs(a - b) if a is not None and b is not None else math.inf
        if not math.isfinite(d):
            d = math.inf
        if at is None or d > worst:
            worst, at = d, s
    ok = (steps > 0 and len(tessel_losses) == len(torch_losses) and math.isfinite(worst)
          and worst <= tolerance)
    return {"max_abs_diff": worst, "at_step": at, "steps": steps, "ok": ok}


def medians(runs: list[dict]) -> list[dict]:
    """One row per (schedule, microbatches): the medians of its rounds."""
    out = []
    for key in dict.fromkeys((r["schedule"], r["microbatches"]) for r in runs):
        mine = [r for r in runs if (r["schedule"], r["microbatches"]) == key]
        out.append({"schedule": key[0], "microbatches": key[1], "rounds": len(mine),
                    "tessel_ms": statistics.median(r["tessel_ms"] for r in mine),
                    "torch_ms": statistics.median(r["torch_ms"] for r in mine),
                    "speed": statistics.median(r["speed"] for r in mine),
                    "max_dloss": max(r["max_dloss"] for r in mine)})
    return out


def measure_pair(args, schedule: str, m: int, torch_first: bool, tmp: Path) -> dict:
    metrics = tmp / f"tessel_{schedule}_{m}.csv"
    load_before = os.getloadavg()[0]
    cpu_before = cpu_sample()
    results = {}
    for side in (("torch", "tessel") if torch_first else ("tessel", "torch")):
        if side == "tessel":
            out = run(tessel_command(args, schedule, m, metrics))
            results[side] = tessel_result(out, metrics, args.config, args.warmup)
        else:
            results[side] = torch_result(run(torch_command(args, schedule, m)))
    t, p = results["tessel"], results["torch"]
    curves = compare_curves(t["losses"], p["losses"], args.tolerance)
    return {"schedule": schedule, "microbatches": m, "order": "torch first" if torch_first
            else "tessel first", "tessel_ms": t["median_step_s"] * 1e3,
            "torch_ms": p["median_step_s"] * 1e3,
            "speed": p["median_step_s"] / t["median_step_s"],
            "max_dloss": curves["max_abs_diff"], "curves": curves,
            "load": [load_before, os.getloadavg()[0]],
            "other_cpu": other_cpu(cpu_before, cpu_sample()), "torch": p["torch"],
            "layers": p["layers"], "tessel_step_s": t["step_s"], "torch_step_s": p["step_s"],
            "tessel_losses": t["losses"], "torch_losses": p["losses"]}


def format_run(r: dict, round_index: int) -> str:
    flag = "" if r["curves"]["ok"] else "  LOSSES DIFFER"
    return (f"{r['schedule']:>6} {r['microbatches']:>3} {round_index:>5} {r['tessel_ms']:>10.1f} "
            f"{r['torch_ms']:>10.1f} {r['speed']:>8.2f} {r['max_dloss']:>10.2e}  "
            f"{r['load'][0]:.1f}->{r['load'][1]:.1f} {100 * r['other_cpu']:>5.0f}%{flag}")


def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    m0, s0 = args.microbatches[0], args.schedules[0]
    print(f"# {' '.join(tessel_command(args, s0, m0, Path('METRICS.csv')))}\n"
          f"# {' '.join(torch_command(args, s0, m0))}\n"
          f"# commit {git_describe()}; {os.cpu_count()} CPUs; started {started}")
    print(f"{'sched':>6} {'m':>3} {'round':>5} {'tessel ms':>10} {'torch ms':>10} {'speed x':>8} "
          f"{'max dloss':>10}  load      other")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeat):
            for schedule in args.schedules:
                for m in args.microbatches:
                    run_ = measure_pair(args, schedule, m, torch_first=r % 2 == 1,
                                        tmp=Path(tmp))
                    run_["round"] = r
                    runs.append(run_)
                    print(format_run(run_, r), flush=True)
    summary = medians(runs)
    for s in summary:
        print(f"{s['schedule']:>6} {s['microbatches']:>3} {'med':>5} {s['tessel_ms']:>10.1f} "
              f"{s['torch_ms']:>10.1f} {s['speed']:>8.2f} {s['max_dloss']:>10.2e}")
    bad = [r for r in runs if not r["curves"]["ok"]]
    if args.json_out is not None:
        args.json_out.write_text(json.dumps({
            "started": started, "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "commit": git_describe(), "machine": machine_facts(), "config": args.config,
            "stages": args.stages, "steps": args.steps, "warmup": args.warmup,
            "tolerance": args.tolerance, "runs": runs, "medians": summary}, indent=1))
    if bad:
        print(f"compare_pipeline: {len(bad)} run(s) with loss curves further apart than "
              f"{args.tolerance:g}: the two sides did not train the same model", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
