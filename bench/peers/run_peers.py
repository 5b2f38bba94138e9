#!/usr/bin/python3
"""Side by side with the peers: the same workloads on tessel, Open MPI, JAX and PyTorch, in one
run on this machine, with the ratio of each peer's time to tessel's.

    make bench-peers                          # makes .venv-peers once, then runs this
    /usr/bin/python3 bench/peers/run_peers.py [--quick] [--repeat R] [--json]
        [--workloads all_reduce,relayout,matmul,dispatch,gpt] [--peers tessel,mpi,jax,torch]
        [--build build] [--venv .venv-peers] [--out build/peers] [--plot FILE]
        [--torch-launch torchrun|same-session]

Workloads (f32; 4 devices or ranks unless said):
  all_reduce  4 KiB .. 64 MiB per rank: time and busbw (nccl-tests' definitions)
  relayout    4096x4096 rows-sharded (S(0)) -> columns-sharded (S(1)), and S(0) -> replicated
  matmul      2048^3, rows of A sharded over 2 devices, B replicated
  dispatch    a tiny elementwise add on a 2x2 mesh, eager, from Python: time per op
  gpt         the GPT training step (examples/gpt, dropout 0): time per step, tokens/s, and
              the loss curve of every peer that trains from tessel's start on tessel's batches
Peers, each set up as its users set it up:
  tessel  the CLI's benches (build/tools/tessel bench ... --json), for gpt its trainer (tessel
          train gpt on a 2x2 mesh, --metrics: every step's time and loss) and, for dispatch, the
          Python module under Debian's /usr/bin/python3 (bench/peers/tessel_peer.py)
  mpi     Open MPI's MPI_Allreduce, 4 processes (bench/mpi_allreduce.c, mpirun --oversubscribe)
  jax     one process, 4 host devices (--xla_force_host_platform_device_count=4), jit,
          NamedSharding / shard_map (bench/peers/jax_peer.py, examples/gpt/reference/
          bench_gpt_jax.py), in the peers' venv
  torch   torch.distributed over gloo and DTensor redistribute, 4 processes under torchrun
          (bench/peers/torch_peer.py), in the peers' venv; for gpt, the same model in PyTorch
          eager, one process with 2 threads (bench/peers/torch_gpt.py), from tessel's initial
          parameters on tessel's batches (bench/peers/gpt_recipe.py recomputes them)
Every repetition runs every workload on every peer, the peers taking turns in an order that
rotates between repetitions, so a burst of load elsewhere on the machine hits all of them.
Each run reports its own median over its timed calls; the table shows the median of those
over the repetitions, their spread, and the ratio peer time / tessel time (> 1: tessel is
faster). A peer that cannot run a workload (not installed, or no such operation) gets a row
saying why. Results are checked against exact or NumPy references, and PyTorch's GPT losses
against tessel's step by step (the largest difference is printed); the exit status is 1 if any
peer computed a wrong result or a loss curve left the tolerance, 2 on bad arguments or without
tessel's CLI.

Writes <out>/peers.json (every sample, the versions, the machine's load per run) and a PNG
plot (busbw vs size for the all-reduce, ratio bars for the rest; needs the venv's matplotlib).
--quick: fewer sizes, calls and repetitions and the `tiny` GPT, for a run of a few minutes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
from peer_programs import (NOT_APPLICABLE, PEERS, WORKLOADS, Peers, last_line,  # noqa: E402
                           plan_run)
from peers_table import (TESSEL, Workload, compare_loss_curves, document_json,  # noqa: E402
                         format_loss_checks, format_table)
from processes import (cpu_sample, git_describe, machine_facts, other_cpu,  # noqa: E402
                       run_with_deadline)


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    try:
        return int(t[:-1]) * units[t[-1]] if t and t[-1] in units else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 4096, 4K, 64M)") from None


def parse_list(allowed):
    def parse(text: str) -> list[str]:
        items = [s.strip() for s in text.split(",") if s.strip()]
        bad = [s for s in items if s not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"bad value {','.join(bad) or text!r}: choose from {','.join(allowed)}")
        return items
    return parse


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="run_peers.py", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a run of a few minutes")
    ap.add_argument("--repeat", type=int, default=None, help="repetitions (default 3; quick 2)")
    ap.add_argument("--workloads", type=parse_list(WORKLOADS), default=list(WORKLOADS))
    ap.add_argument("--peers", type=parse_list(PEERS), default=list(PEERS))
    ap.add_argument("-b", "--minbytes", type=parse_size, default=4 << 10)
    ap.add_argument("-e", "--maxbytes", type=parse_size, default=64 << 20)
    ap.add_argument("--gpt-config", choices=("tiny", "baby"), default=None,
                    help="GPT config (default baby; quick tiny)")
    ap.add_argument("--gpt-mesh", choices=("1x1", "2x2"), default="1x1",
                    help="tessel's and JAX's mesh in the gpt workload (default 1x1: on a 2-core "
                         "machine the best of each, as their users would run it; PyTorch is one "
                         "process either way)")
    ap.add_argument("--build", type=Path, default=REPO / "build")
    ap.add_argument("--venv", type=Path, default=REPO / ".venv-peers")
    ap.add_argument("--torch-launch", choices=("torchrun", "same-session"), default="torchrun",
                    help="how torch's ranks start (default torchrun, a session per rank)")
    ap.add_argument("--out", type=Path, default=None, help="folder for peers.json (default <build>/peers)")
    ap.add_argument("--plot", type=Path, default=None, help="PNG path (default <out>/peers.png)")
    ap.add_argument("--json", action="store_true", help="print the JSON document instead of tables")
    args = ap.parse_args(argv)
    if TESSEL not in args.peers:
        ap.error("--peers must include tessel (the ratios are to tessel's time)")
    if args.repeat is None:
        args.repeat = 2 if args.quick else 3
    if not 1 <= args.repeat <= 100:
        ap.error(f"--repeat {args.repeat}: must be 1..100")
    if not 16 <= args.minbytes <= args.maxbytes or args.minbytes % 16:
        ap.error(f"sizes {args.minbytes}..{args.maxbytes}: need 16 <= min <= max, min a multiple "
                 "of 16 (4 ranks x f32)")
    args.gpt_config = args.gpt_config or ("tiny" if args.quick else "baby")
    args.out = args.out or args.build / "peers"
    args.plot = args.plot or args.out / "peers.png"
    return args


class Settings:
    """Calls and sizes of each workload: the full run, or --quick."""

    def __init__(self, args):
        q = args.quick
        factor = 4 if q else 2
        sizes, s = [], args.minbytes
        while s <= args.maxbytes:
            sizes.append(s)
            s *= factor
        self.sizes = sizes
        self.allreduce_iters, self.allreduce_warmup = (10, 3) if q else (20, 5)
        self.relayout_n, self.relayout_iters = 4096, (5 if q else 10)
        self.matmul_n, self.matmul_iters = 2048, (3 if q else 5)
        self.dispatch_ops, self.dispatch_rounds = (300, 5) if q else (1000, 7)
        # Timed steps, odd: every peer's median is a step's time. Untimed steps first, the same
        # for every peer: baby's first steps on tessel are slower while the host memory settles
        # (18, 16, 10, 8.7, 8.6 s), JAX's first compiles. tiny's steps take a fraction of a
        # second: more of them, for a steadier median and a longer loss curve.
        self.gpt_config = args.gpt_config
        self.gpt_mesh = args.gpt_mesh
        if self.gpt_config == "tiny":
            self.gpt_steps, self.gpt_warmup = 25, 5
        else:
            self.gpt_steps, self.gpt_warmup = 3, (1 if q else 3)


# ---- the run -------------------------------------------------------------------------------

TITLES = {
    "all_reduce": "all_reduce f32 sum, 4 ranks (out of place; time per call on the slowest rank)",
    "relayout": "relayout of a 4096x4096 f32 tensor over 4 devices",
    "matmul": "2048^3 f32 matmul, rows of A sharded over 2 devices, B replicated",
    "dispatch": "eager dispatch of a tiny elementwise add on a 2x2 mesh, from Python (time per op)",
    "gpt": "GPT training step, dropout 0 (time per step; tokens/s): tessel and JAX on the "
           "--gpt-mesh (batch x model) mesh, PyTorch eager in one process with 2 threads",
}
RANKS = {"all_reduce": 4, "relayout": 4, "matmul": 2, "dispatch": 4, "gpt": 4}
# The largest |loss difference| allowed at any step between tessel's GPT and a peer trained from
# the same start on the same batches (float32, dropout 0). Measured here, PyTorch eager against
# tessel 2x2: tiny 30 steps (the runner's) 7.8e-6, at a step whose gradient norm jumps to 19;
# 13 steps 1.6e-5 (the same jump); 300 steps 2.4e-6, not growing along the curve; baby 6 steps
# (the runner's) 1.0e-5, 4 steps (--quick) 5.4e-7. Wrong inputs
# are far outside: the batches of the next step, or one matrix drawn from another seed, give
# differences of 7e-3 to 2e-2 at step 0 and 0.6 to 0.7 at their worst step over the 30.
LOSS_CURVE_TOLERANCE = 1e-4
# Each run of one peer on one workload is stopped after this many seconds.
TIMEOUT_S = {"all_reduce": 600, "relayout": 600, "matmul": 600, "dispatch": 300, "gpt": 1800}


def run_once(peers, settings, w: Workload, peer: str, rep: int, log: list) -> int:
    """One peer's run of one workload; adds its samples to w. Returns its wrong count."""
    cmds, parse = plan_run(peers, settings, w.name, peer)
    outs, wrong = [], 0
    s0, t0 = cpu_sample(), time.time()
    load = os.getloadavg()[0]
    error, last_stderr = None, ""
    for cmd in cmds:
        result = run_with_deadline(cmd, peers.env(peer), TIMEOUT_S[w.name])
        if result is None:
            error = f"timed out after {TIMEOUT_S[w.name]} s (stopped)"
            break
        rc, out, err = result
        last_stderr = err
        if rc not in (0, 1):  # 1: a wrong element (tessel bench), or a Python error: parse decides
            error = f"exit status {rc}: {last_line(err or out)}"
            break
        outs.append(out)
    entry = {"workload": w.name, "peer": peer, "repetition": rep, "load_1min": load,
             "wall_s": round(time.time() - t0, 2), "other_cpu": round(other_cpu(s0, cpu_sample()), 3)}
    if error is None:
        try:
            rows, versions = parse(outs)
        except (ValueError, KeyError, IndexError, OSError) as e:
            error = f"unreadable output ({e}): {last_line(last_stderr or (outs[-1] if outs else ''))}"
        else:
            peers.versions.setdefault(peer, {}).update(versions)
            wrong = add_rows(w, peer, rows)
    if error is not None:
        entry["error"] = error
        print(f"# {w.name}/{peer} repetition {rep}: {error}", file=sys.stderr)
    log.append(entry)
    return wrong


def add_rows(w: Workload, peer: str, rows: list[dict]) -> int:
    """One run's rows as samples of w's cases; returns the run's count of wrong elements."""
    wrong = 0
    for row in rows:
        c = w.case(str(row["case"]), bytes=row.get("bytes"), count=row.get("count"),
                   work=row.get("work"))
        cell = c.cell(peer)
        cell.samples_us.append(float(row["time_us"]))
        extra = {k: v for k, v in row.items() if k not in ("case", "bytes", "count", "work", "time_us")}
        cell.extra.setdefault("runs", []).append(extra)
        wrong += int(row.get("wrong", 0))
    return wrong


def give_reasons(w: Workload, peers: Peers, peer_names: list[str], log: list) -> None:
    """Every cell without samples says why: no such operation, not installed, or its error."""
    if not w.cases:  # even tessel failed: one placeholder case so the reasons print
        w.case("(no result)")
    for peer in peer_names:
        if (peer, w.name) in NOT_APPLICABLE:
            w.mark_unavailable(peer, NOT_APPLICABLE[(peer, w.name)])
        elif not peers.available(peer):
            w.mark_unavailable(peer, peers.unavailable[peer])
    for c in w.cases:
        for peer in peer_names:
            cell = c.cell(peer)
            if not cell.samples_us and cell.unavailable is None:
                errors = [e["error"] for e in log
                          if e["workload"] == w.name and e["peer"] == peer and "error" in e]
                cell.unavailable = f"failed: {errors[-1]}" if errors else "no result"


def main(argv=None):
    args = parse_args(argv)
    settings = Settings(args)
    peers = Peers(args)
    args.out.mkdir(parents=True, exist_ok=True)
    if not peers.tessel_cli.is_file():
        print(f"run_peers.py: error: no tessel CLI at {peers.tessel_cli} (make build, or pass "
              "--build)", file=sys.stderr)
        return 2
    peers.probe()
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load_start = os.getloadavg()
    print(f"# run_peers: {','.join(args.workloads)} on {','.join(args.peers)}; {args.repeat} "
          f"repetition(s){' (quick)' if args.quick else ''}; {started}; load average "
          f"{load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}", file=sys.stderr)
    for peer, why in peers.unavailable.items():
        print(f"# {peer} unavailable: {why}", file=sys.stderr)

    workloads = {name: Workload(name, TITLES[name], RANKS[name], list(args.peers),
                                throughput_unit="tokens/s" if name == "gpt" else None)
                 for name in args.workloads}
    log, wrong = [], 0
    # Which peer can run what: the rest get their reason once the cases are known.
    runnable = {name: [p for p in args.peers
                       if (p, name) not in NOT_APPLICABLE and peers.available(p)]
                for name in args.workloads}
    for rep in range(args.repeat):
        for name in args.workloads:
            order = runnable[name][rep % len(runnable[name]):] + runnable[name][:rep % len(runnable[name])]
            for peer in order:
                print(f"# repetition {rep + 1}/{args.repeat}: {name} on {peer}", file=sys.stderr)
                wrong += run_once(peers, settings, workloads[name], peer, rep, log)
    for w in workloads.values():
        give_reasons(w, peers, args.peers, log)
    loss_checks = {name: compare_loss_curves(w, LOSS_CURVE_TOLERANCE)
                   for name, w in workloads.items() if name == "gpt"}
    wrong += sum(not k["ok"] for checks in loss_checks.values() for k in checks)

    peers.versions.setdefault("tessel", {})["git"] = git_describe()
    meta = {"started": started, "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "quick": args.quick, "repetitions": args.repeat, "settings": vars(settings),
            "torch_launch": args.torch_launch,
            "machine": machine_facts(),
            "load_average_start": load_start, "load_average_end": os.getloadavg(),
            "loss_curves": [k for checks in loss_checks.values() for k in checks],
            "versions": peers.versions, "unavailable": peers.unavailable, "runs": log,
            "wrong": wrong}
    doc = document_json(list(workloads.values()), meta)
    (args.out / "peers.json").write_text(doc + "\n")
    if args.json:
        print(doc)
    else:
        print(format_header(meta))
        for w in workloads.values():
            print()
            print(format_table(w))
            if loss_checks.get(w.name):
                print(format_loss_checks(loss_checks[w.name]))
            if w.name == "gpt" and any(c.cell("jax").samples_us for c in w.cases):
                print("# jax trains from its own initial parameters on its own batches "
                      "(examples/gpt/reference/bench_gpt_jax.py): its losses are not compared")
            print(f"# other processes took {median_other_cpu(log, w.name)} of the CPU time during "
                  f"this workload's runs (median)")
    plot(peers, args)
    print(f"# wrote {args.out / 'peers.json'}" + (f" and {args.plot}" if args.plot.is_file() else ""),
          file=sys.stderr)
    return 1 if wrong else 0


def format_header(meta) -> str:
    lines = [f"# run_peers {meta['started']} .. {meta['finished']}; {meta['machine']['cpus']} CPUs, "
             f"{meta['machine']['cpu']}; load average {meta['load_average_start'][0]:.2f} at start, "
             f"{meta['load_average_end'][0]:.2f} at end; {meta['repetitions']} repetition(s)"]
    for peer, v in meta["versions"].items():
        lines.append(f"# {peer}: " + ", ".join(f"{k} {x}" for k, x in v.items()))
    for peer, why in meta["unavailable"].items():
        lines.append(f"# {peer}: unavailable ({why})")
    lines.append(f"# wrong results: {meta['wrong']}")
    busy = [e["other_cpu"] for e in meta["runs"]]
    # torchrun starts the ranks of every torch workload but gpt (one process of its own).
    torchrun = (meta.get("torch_launch", "torchrun") == "torchrun" and "torch" in meta["versions"]
                and any(e.get("peer") == "torch" and e.get("workload") != "gpt" for e in meta["runs"]))
    if (torchrun and meta["machine"].get("sched_autogroup") and busy
            and sorted(busy)[len(busy) // 2] > 0.5):
        lines.append("# warning: other processes took most of the CPU, and the kernel shares it "
                     "per session (sched_autogroup): torchrun's ranks, one session each, got more "
                     "of it than one tessel or JAX process; re-measure on a quiet machine "
                     "(or compare with --torch-launch same-session)")
    return "\n".join(lines)


def median_other_cpu(log, workload) -> str:
    xs = sorted(e["other_cpu"] for e in log if e["workload"] == workload)
    return f"{100 * xs[len(xs) // 2]:.0f}%" if xs else "?"


def plot(peers: Peers, args):
    """The PNG, drawn by the venv's matplotlib; without it, a note and no plot."""
    if not peers.venv_python.is_file():
        print("# no plot: the peers' venv (matplotlib) is missing", file=sys.stderr)
        return
    r = subprocess.run([str(peers.venv_python), str(HERE / "plot_peers.py"), str(args.out / "peers.json"),
                        str(args.plot)], capture_output=True, text=True, env=peers.env("jax"))
    if r.returncode:
        print(f"# no plot: {last_line(r.stderr)}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
