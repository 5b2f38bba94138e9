"""PyTorch's `torch.distributed.pipelining` beside `tessel train gpt --mesh stage=P,...`:
tessel's GPT (torch_gpt.py's nanoGPT model, from tessel's initial parameters, on tessel's
batches) cut into P pipeline stages the way examples/gpt/gpt_pipeline.cpp cuts it, one stage
per gloo process, run by `Schedule1F1B` or `ScheduleGPipe` over M microbatches.

    .venv-peers/bin/python bench/peers/torch_pipeline.py --config tiny --stages 2 \
        --microbatches 4 --schedule 1f1b --steps 10 --warmup 3 --schedule-steps 13 --json

The split is tessel's: the n_layer blocks in order over the P stages, the first n_layer % P
stages one block more; the token and position embeddings on stage 0, the final layer norm and
the output head on the last. The head is tied to the token embedding (nanoGPT): as tessel does,
each step stage 0 sends the embedding to the last stage, whose copy serves as the head, and the
copy's gradient comes back and is added to the embedding's own (Megatron's tied-embedding
exchange). Each stage is a `PipelineStage` of its own process; the schedule splits the batch
into M microbatches of consecutive rows (as tessel's), computes each microbatch's mean
cross-entropy on the last stage and divides the gradients by M (`scale_grads`), so a step's
gradient and loss (the mean of the microbatches' means) are the plain step's. Then gradient
clipping at norm 1 over the whole model (each stage's sum of squares, all-reduced; the tied
embedding counted once), torch.nn.utils.clip_grad_norm_'s scale, and AdamW on each stage's own
parameters (torch_gpt.py's groups and hyperparameters). Dropout 0 by default, float32, eager,
torch.set_num_threads(--threads, default 1) per process: P processes on this machine's cores,
as tessel's P in-process devices share them.

Step time: every process starts a step after a barrier and times it from zero_grad to the end
of its optimizer step (the last stage: the loss on the host); a step's time is the slowest
process's (an all-reduce of the times outside the timed part); the median over --steps after
--warmup untimed steps. Prints one JSON object with --json (else a short report).
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
SCHEDULES = ("1f1b", "gpipe")


def parse_args(argv=None):
    import gpt_recipe

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", choices=sorted(gpt_recipe.PRESETS), default="tiny")
    ap.add_argument("--stages", type=int, default=2, help="pipeline stages = gloo processes")
    ap.add_argument("--microbatches", type=int, default=4, help="microbatches per step")
    ap.add_argument("--schedule", choices=SCHEDULES, default="1f1b")
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
    if args.stages < 2:
        ap.error(f"--stages {args.stages}: a pipeline needs at least 2 stages")
    if args.microbatches < 1 or args.steps < 1 or args.warmup < 0 or args.threads < 1:
        ap.error("--microbatches, --steps and --threads must be >= 1, --warmup >= 0")
    if args.schedule_steps is not None and args.schedule_steps < 1:
        ap.error(f"--schedule-steps {args.schedule_steps}: must be >= 1")
    if not 0 <= args.dropout < 1:
        ap.error(f"--dropout {args.dropout}: must be in [0, 1)")
    if not args.data.is_file():
        ap.error(f"--data {args.data}: no such file (tiny Shakespeare, as tessel's)")
    cfg = gpt_recipe.config(args.config)
    if cfg.n_layer < args.stages:
        ap.error(f"--stages {args.stages}: {cfg.n_layer} layers do not fill {args.stages} stages")
    if cfg.batch_size % args.microbatches != 0:
        ap.error(f"--microbatches {args.microbatches}: the batch of {cfg.batch_size} rows does "
                 "not split into microbatches of equal size")
    return args


def stage_layers(n_layer: int, stages: int) -> list[tuple[int, int]]:
    """[first, end) of each stage's blocks: in order, the first n_layer % stages one more
    (examples/gpt/gpt_pipeline.cpp; 5 layers on 2 stages: 3 and 2)."""
    base, extra = divmod(n_layer, stages)
    bounds, start = [], 0
    for s in range(stages):
        end = start + base + (1 if s < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def make_stage_module(gpt, stage: int, stages: int):
    """The nn.Module of one stage, holding (not copying) torch_gpt.GPT's submodules; the last
    stage's head is a copy of the token embedding, refreshed from stage 0 every step."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    first, last = stage == 0, stage == stages - 1
    lo, hi = stage_layers(len(gpt.h), stages)[stage]

    class GptStage(nn.Module):
        def __init__(self):
            super().__init__()
            if first:
                self.wte, self.wpe, self.drop = gpt.wte, gpt.wpe, gpt.drop
            self.h = nn.ModuleList(gpt.h[lo:hi])
            if last:
                self.ln_f = gpt.ln_f
                self.head = nn.Parameter(gpt.wte.weight.detach().clone())

        def forward(self, x):  # torch_gpt.GPT.forward, cut at the stage's edges
            if first:
                x = self.drop(self.wte(x) + self.wpe.weight[:x.shape[1]])
            for block in self.h:
                x = block(x)
            return F.linear(self.ln_f(x), self.head) if last else x

    module = GptStage()
    module.train()
    return module, (lo, hi)


def worker(rank: int, args, port: int, out_path: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    import gpt_recipe
    import torch_gpt

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed + rank)  # dropout masks only (not tessel's)
    p, m = args.stages, args.microbatches
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=p)
    first, last = rank == 0, rank == p - 1
    text = gpt_recipe.CharText.load(args.data)
    cfg = gpt_recipe.config(args.config, seed=args.seed, vocab_size=text.vocab_size,
                            dropout=args.dropout)
    if args.schedule_steps is not None:
        cfg = gpt_recipe.train_schedule(cfg, args.schedule_steps)

    gpt = torch_gpt.GPT(cfg)
    gpt.load_tessel(gpt_recipe.init_params(cfg))
    module, layers = make_stage_module(gpt, rank, p)
    del gpt  # the stage keeps its own submodules
    owned = [prm for name, prm in module.named_parameters() if name != "head"]
    decay = [prm for prm in owned if prm.dim() >= 2]
    no_decay = [prm for prm in owned if prm.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)

    def loss_fn(logits, targets):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    stage = PipelineStage(module, rank, p, torch.device("cpu"))
    make = Schedule1F1B if args.schedule == "1f1b" else ScheduleGPipe
    schedule = make(stage, n_microbatches=m, loss_fn=loss_fn, scale_grads=True)
    batches = [tuple(torch.from_numpy(a) for a in text.batch(s, cfg))
               for s in range(args.warmup + args.steps)]  # made before timing
    head_grad = torch.empty_like(module.wte.weight) if first else None  # received each step

    def step(s):
        x, y = batches[s]
        for group in optimizer.param_groups:
            group["lr"] = gpt_recipe.learning_rate(cfg, s)
        optimizer.zero_grad(set_to_none=True)
        # The tied embedding: stage 0's weight becomes the last stage's head for this step.
        if first:
            dist.send(module.wte.weight.detach(), dst=p - 1)
        elif last:
            module.head.grad = None
            with torch.no_grad():
                dist.recv(module.head.data, src=0)
        losses = [] if last else None
        if first:
            schedule.step(x, return_outputs=False)
        elif last:
            schedule.step(target=y, losses=losses, return_outputs=False)
        else:
            schedule.step(return_outputs=False)
        # The head's share of the embedding's gradient goes back to stage 0.
        if last:
            dist.send(module.head.grad, dst=0)
        elif first:
            dist.recv(head_grad, src=p - 1)
            module.wte.weight.grad.add_(head_grad)
        # Clipping over the whole model: clip_grad_norm_(1.0)'s norm and scale across stages.
        grads = [prm.grad for prm in owned if prm.grad is not None]
        sumsq = torch.stack([torch.linalg.vector_norm(g, dtype=torch.float64) ** 2
                             for g in grads]).sum().reshape(1)
        dist.all_reduce(sumsq)
        norm = math.sqrt(sumsq.item())
        scale = min(1.0, cfg.grad_clip / (norm + 1e-6))
        if scale < 1.0:
            torch._foreach_mul_(grads, scale)
        optimizer.step()
        loss = sum(l.item() for l in losses) / m if last else 0.0
        return loss, norm

    losses, norms, times = [], [], []
    for s in range(args.warmup + args.steps):
        dist.barrier()
        t0 = time.perf_counter()
        loss, norm = step(s)
        dt = time.perf_counter() - t0
        # Outside the timed part: the slowest stage's time, the last stage's loss to rank 0.
        stats = torch.tensor([dt, loss], dtype=torch.float64)
        dist.all_reduce(stats[:1], op=dist.ReduceOp.MAX)
        dist.all_reduce(stats[1:], op=dist.ReduceOp.SUM)
        if not math.isfinite(stats[1].item()):
            raise SystemExit(f"torch_pipeline: step {s}: the loss is {stats[1].item()}")
        losses.append(stats[1].item())
        norms.append(norm)
        if s >= args.warmup:
            times.append(stats[0].item())

    if first:
        median = statistics.median(times)
        tokens = cfg.batch_size * cfg.block_size
        result = {
            "peer": "torch_pipelining", "config": cfg.name, "stages": p, "microbatches": m,
            "schedule": args.schedule, "threads_per_proc": args.threads, "backend": "gloo",
            "versions": {"torch": torch.__version__}, "dropout": cfg.dropout,
            "layers": stage_layers(cfg.n_layer, p),
            "lr_schedule": {"warmup_iters": cfg.warmup_iters,
                            "lr_decay_iters": cfg.lr_decay_iters},
            "warmup_steps": args.warmup, "timed_steps": args.steps, "step_s": times,
            "median_step_s": median, "tokens_per_s": tokens / median, "losses": losses,
            "grad_norms": norms,
        }
        Path(out_path).write_text(json.dumps(result))
    dist.destroy_process_group()


def main(argv=None):
    args = parse_args(argv)
    from processes import spawn_ranks

    result = spawn_ranks(worker, args, args.stages)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"torch {result['versions']['torch']} pipelining, {args.schedule}, {args.stages} "
          f"gloo processes (layers {result['layers']}), {args.microbatches} microbatches, "
          f"{args.config}: median step {result['median_step_s'] * 1e3:.1f} ms")
    print("  losses " + " ".join(f"{l:.5f}" for l in result["losses"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
