"""PyTorch FSDP2 beside `tessel train gpt --fsdp`: tessel's GPT (torch_gpt.py's nanoGPT model,
from tessel's initial parameters, on tessel's batches) trained data parallel over N gloo
processes with `fully_shard` on each block and the root, optionally with each block under
`torch.utils.checkpoint` (tessel's `--recompute full`).

    .venv-peers/bin/python bench/peers/torch_fsdp.py --config tiny --procs 4 --recompute full \
        --steps 10 --warmup 3 --schedule-steps 13 --json

Each process takes its contiguous quarter (1/N) of the global batch's rows, as tessel's `batch`
mesh dimension does; FSDP2 averages the gradients over the processes, so the loss curve is the
one-process run's (torch_gpt.py) up to float32 rounding. torch.set_num_threads(--threads,
default 1) per process: N processes on this machine's cores, as tessel's N devices share them.

Step time: every process starts a step after a barrier and times it from zero_grad to the loss
on the host; a step's time is the slowest process's (an all-reduce of the times, outside the
timed part); the median over --steps after --warmup untimed steps.

Peak memory per process, comparable with tessel's device counters (parameters + gradients +
optimizer state + activations + communication buffers): the bytes of the persistent state
(parameter shards and AdamW's moments, read off the tensors) plus the highest excess of tensor
bytes allocated over those freed during one more step, from torch.profiler's memory events
(profile_memory=True: each op's own allocations at its start and the frees outside ops). Read
on rank 0; the ranks' shards differ by at most one row.
Prints one JSON object with --json (else a short report).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

REPO = Path(__file__).resolve().parents[2]


def parse_args(argv=None):
    import gpt_recipe

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", choices=sorted(gpt_recipe.PRESETS), default="tiny")
    ap.add_argument("--procs", type=int, default=4, help="gloo processes (default 4)")
    ap.add_argument("--recompute", choices=["none", "full"], default="full",
                    help="full: each block under torch.utils.checkpoint (default)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps (median; default 5)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    ap.add_argument("--schedule-steps", type=int, default=None,
                    help="the learning-rate schedule of `tessel train gpt --steps N`")
    ap.add_argument("--dropout", type=float, default=0.0, help="default 0 (curves comparable)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--data", type=Path, default=REPO / "data" / "shakespeare_char" / "input.txt")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    if args.procs < 1 or args.steps < 1 or args.warmup < 0 or args.threads < 1:
        ap.error("--procs, --steps and --threads must be >= 1, --warmup >= 0")
    if not args.data.is_file():
        ap.error(f"--data {args.data}: no such file (tiny Shakespeare, as tessel's)")
    return args


def peak_excess_bytes(profiler) -> int:
    """The highest (allocated - freed) tensor bytes over the profiled span."""
    timeline = []
    for e in profiler.events():
        if e.name == "[memory]":
            timeline.append((e.time_range.start, e.cpu_memory_usage))
        elif e.self_cpu_memory_usage:
            timeline.append((e.time_range.start, e.self_cpu_memory_usage))
    live = peak = 0
    for _, delta in sorted(timeline, key=lambda t: t[0]):
        live += delta
        peak = max(peak, live)
    return peak


def local_bytes(t) -> int:
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def worker(rank: int, args, port: int, out_path: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.utils.checkpoint import checkpoint

    import gpt_recipe
    import torch_gpt

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.procs)
    mesh = init_device_mesh("cpu", (args.procs,))
    text = gpt_recipe.CharText.load(args.data)
    cfg = gpt_recipe.config(args.config, seed=args.seed, vocab_size=text.vocab_size,
                            dropout=args.dropout)
    if args.schedule_steps is not None:
        cfg = gpt_recipe.train_schedule(cfg, args.schedule_steps)
    if cfg.batch_size % args.procs != 0:
        raise SystemExit(f"torch_fsdp: batch {cfg.batch_size} is not divisible by "
                         f"--procs {args.procs}")
    rows = cfg.batch_size // args.procs

    model = torch_gpt.GPT(cfg)
    model.load_tessel(gpt_recipe.init_params(cfg))
    model.train()
    if args.recompute == "full":
        for block in model.h:
            plain = block.forward
            block.forward = (lambda x, plain=plain:
                             checkpoint(plain, x, use_reentrant=False))
    for block in model.h:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
    batches = []
    for s in range(args.warmup + args.steps + 1):
        x, y = text.batch(s, cfg)
        batches.append((torch.from_numpy(x[rank * rows:(rank + 1) * rows].copy()),
                        torch.from_numpy(y[rank * rows:(rank + 1) * rows].copy())))

    def step(s):
        x, y = batches[s]
        lr = gpt_recipe.learning_rate(cfg, s)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        # The global batch's loss: the mean of the processes' means (equal row counts).
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss)
        return global_loss.item() / args.procs

    losses, times = [], []
    for s in range(args.warmup + args.steps):
        dist.barrier()
        t0 = time.perf_counter()
        losses.append(step(s))
        dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        if s >= args.warmup:
            times.append(dt.item())

    # One more step under the profiler for the peak; the state read just before it. The
    # gradients are dropped first: their frees inside the step would not be seen (allocated
    # before the profiler started), so they would count twice.
    optimizer.zero_grad(set_to_none=True)
    state = sum(local_bytes(p) for p in model.parameters())
    state += sum(local_bytes(v) for st in optimizer.state.values() for v in st.values()
                 if torch.is_tensor(v))
    dist.barrier()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as profiler:
        step(args.warmup + args.steps)
    peak = state + peak_excess_bytes(profiler)
    if rank == 0:
        median = statistics.median(times)
        tokens = cfg.batch_size * cfg.block_size
        result = {
            "peer": "torch_fsdp2", "config": cfg.name, "procs": args.procs,
            "recompute": args.recompute, "threads_per_proc": args.threads,
            "versions": {"torch": torch.__version__}, "backend": "gloo",
            "params": sum(p.numel() for p in model.parameters()),
            "warmup_steps": args.warmup, "timed_steps": args.steps, "step_s": times,
            "median_step_s": median, "tokens_per_s": tokens / median, "losses": losses,
            "memory": {"peak_bytes": peak, "state_bytes": state,
                       "note": "rank 0: persistent state + the profiled step's peak excess"},
        }
        Path(out_path).write_text(json.dumps(result))
    dist.destroy_process_group()


def main(argv=None):
    args = parse_args(argv)
    from processes import spawn_ranks

    result = spawn_ranks(worker, args, args.procs)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"torch {result['versions']['torch']} FSDP2 over {args.procs} gloo processes, "
          f"{args.config}, recompute {args.recompute}: median step "
          f"{result['median_step_s'] * 1e3:.1f} ms, peak {result['memory']['peak_bytes'] / 2**20:.2f}"
          f" MiB per process (state {result['memory']['state_bytes'] / 2**20:.2f} MiB)")
    print("  losses " + " ".join(f"{l:.5f}" for l in result["losses"]))
    return 0 if all(math.isfinite(l) for l in result["losses"]) else 1


if __name__ == "__main__":
    sys.exit(main())
