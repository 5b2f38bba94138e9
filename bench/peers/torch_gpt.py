"""The PyTorch side of bench/peers' gpt workload: tessel's GPT (examples/gpt) written as plain
PyTorch eager code, trained from tessel's initial parameters on tessel's batches.

    .venv-peers/bin/python bench/peers/torch_gpt.py --config tiny --steps 25 --warmup 5 \
        --schedule-steps 30 --dropout 0 --json

The model is nanoGPT's model.py (bias=False) as its users write it: nn.Linear layers (q, k and
v in one c_attn), nn.LayerNorm without bias, exact GELU, scaled_dot_product_attention with
is_causal, the output head tied to the token embedding, dropout where nanoGPT has it. Training
is nanoGPT's train.py step: cross-entropy, backward, clip_grad_norm_(1.0), torch.optim.AdamW
(betas 0.9/0.99, eps 1e-8, weight decay 0.1 on the 2-D parameters only), the learning rate of
WarmupCosineDecay set before each step. float32, eager (no torch.compile), one process,
torch.set_num_threads(--threads, default 2).

Same start and data as tessel (bench/peers/gpt_recipe.py recomputes them): the parameters of
GptModel::init(seed) (a [in, out] matrix becomes nn.Linear's weight transposed), window r of
step s of CharDataset::batch, the schedule of `tessel train gpt --steps N` with
--schedule-steps N (else the configuration's). With dropout 0 the losses are then tessel's up
to float32 rounding; the runner compares the curves (run_peers.py).

Timing: each step's wall time from zero_grad to the optimizer step and the loss on the host
(as tessel's GptTrainer::step times it); the median over --steps after --warmup untimed steps.
PyTorch's two OpenMP threads are fragile on a shared machine: with other processes taking half
of the 2 CPUs, a tiny step took 2.05 s here against 31 ms on the quiet machine (tessel's 2x2
step: 222 against 166 ms), so read its row beside the runner's "other processes" line.
Prints one JSON object with --json (else a short text report).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpt_recipe  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", choices=sorted(gpt_recipe.PRESETS), default="tiny")
    ap.add_argument("--steps", type=int, default=5, help="timed steps (median; default 5)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    ap.add_argument("--schedule-steps", type=int, default=None,
                    help="the learning-rate schedule of `tessel train gpt --steps N`")
    ap.add_argument("--dropout", type=float, default=None, help="default: the configuration's")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    ap.add_argument("--seed", type=int, default=1337, help="tessel's seed (init and batches)")
    ap.add_argument("--data", type=Path, default=REPO / "data" / "shakespeare_char" / "input.txt")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--profile", action="store_true",
                    help="run the timed steps under torch.profiler and print its table of ops "
                         "by self CPU time (ms per step) on stderr")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or args.threads < 1:
        ap.error("--steps and --threads must be >= 1, --warmup >= 0")
    if args.schedule_steps is not None and args.schedule_steps < 1:
        ap.error(f"--schedule-steps {args.schedule_steps}: must be >= 1")
    if args.dropout is not None and not 0 <= args.dropout < 1:
        ap.error(f"--dropout {args.dropout}: must be in [0, 1)")
    if not args.data.is_file():
        ap.error(f"--data {args.data}: no such file (tiny Shakespeare, as tessel's)")
    return args


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head, self.dropout = cfg.n_head, cfg.dropout
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        # head j owns columns j*D .. (j+1)*D: [B, T, C] -> [B, H, T, D]
        q, k, v = (y.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for y in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0,
                                           is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=False)
        self.gelu = nn.GELU()  # exact (erf)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=False)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=False)  # eps 1e-5, as tessel's
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=False)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=False)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.drop(self.wte(idx) + self.wpe.weight[:t])
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # the tied output head
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    @torch.no_grad()
    def load_tessel(self, params: dict):
        """tessel's parameters (name -> [in, out] arrays) into the nn.Linear layout."""
        t = lambda name: torch.from_numpy(params[name])  # noqa: E731
        self.wte.weight.copy_(t("wte"))
        self.wpe.weight.copy_(t("wpe"))
        for i, block in enumerate(self.h):
            p = f"h.{i}."
            block.ln_1.weight.copy_(t(p + "ln_1.weight"))
            block.attn.c_attn.weight.copy_(
                torch.cat([t(p + n).T for n in ("attn.wq", "attn.wk", "attn.wv")]))
            block.attn.c_proj.weight.copy_(t(p + "attn.c_proj").T)
            block.ln_2.weight.copy_(t(p + "ln_2.weight"))
            block.mlp.c_fc.weight.copy_(t(p + "mlp.c_fc").T)
            block.mlp.c_proj.weight.copy_(t(p + "mlp.c_proj").T)
        self.ln_f.weight.copy_(t("ln_f.weight"))


def blas_name() -> str:
    found = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    return found.group(1) if found else "?"


def print_profile(profiler, steps: int, rows: int = 30) -> None:
    """torch.profiler's ops by self CPU time, in ms per step (the table docs/benchmarks.md sets
    beside `tessel train gpt --profile`'s). The timed steps include the profiler's overhead."""
    events = sorted(profiler.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    print(f"--- torch.profiler: self CPU time, ms per step over {steps} steps ---", file=sys.stderr)
    print(f"{'op':<44} {'calls/step':>10} {'ms/step':>9} {'share':>7}", file=sys.stderr)
    for e in events[:rows]:
        print(f"{e.key[:44]:<44} {e.count / steps:>10.1f} "
              f"{e.self_cpu_time_total / 1e3 / steps:>9.3f} "
              f"{100 * e.self_cpu_time_total / max(total, 1):>6.1f}%", file=sys.stderr)
    print(f"{'all ops':<44} {'':>10} {total / 1e3 / steps:>9.3f}", file=sys.stderr)


def main(argv=None):
    args = parse_args(argv)
    load_before = os.getloadavg()[0]
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)  # dropout masks (not tessel's: compare curves at dropout 0)
    text = gpt_recipe.CharText.load(args.data)
    changes = {"seed": args.seed, "vocab_size": text.vocab_size}
    if args.dropout is not None:
        changes["dropout"] = args.dropout
    cfg = gpt_recipe.config(args.config, **changes)
    if args.schedule_steps is not None:
        cfg = gpt_recipe.train_schedule(cfg, args.schedule_steps)

    model = GPT(cfg)
    model.load_tessel(gpt_recipe.init_params(cfg))
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
    batches = [tuple(torch.from_numpy(a) for a in text.batch(s, cfg))
               for s in range(args.warmup + args.steps)]  # made before timing, as JAX's

    losses, norms, lrs, times = [], [], [], []
    profiler = None
    for step, (x, y) in enumerate(batches):
        if args.profile and step == args.warmup:
            profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            profiler.__enter__()
        lr = gpt_recipe.learning_rate(cfg, step)
        t0 = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        value = loss.item()
        dt = time.perf_counter() - t0
        if not math.isfinite(value):
            raise SystemExit(f"torch_gpt: step {step}: the loss is {value}")
        losses.append(value)
        norms.append(float(norm))
        lrs.append(lr)
        if step >= args.warmup:
            times.append(dt)

    if profiler is not None:
        profiler.__exit__(None, None, None)
        print_profile(profiler, args.steps)
    median = statistics.median(times)
    tokens = cfg.batch_size * cfg.block_size
    result = {
        "peer": "torch", "config": cfg.name, "versions": {"torch": torch.__version__,
                                                          "numpy": np.__version__,
                                                          "blas": blas_name()},
        "threads": torch.get_num_threads(), "eager": True, "dtype": "float32",
        "dropout": cfg.dropout, "seed": cfg.seed, "batch": cfg.batch_size,
        "schedule": {"warmup_iters": cfg.warmup_iters, "lr_decay_iters": cfg.lr_decay_iters},
        "inputs": "tessel's (gpt_recipe.py: GptModel::init and CharDataset::batch)",
        "params": sum(p.numel() for p in model.parameters()),
        "warmup_steps": args.warmup, "timed_steps": args.steps, "step_s": times,
        "median_step_s": median, "tokens_per_step": tokens, "tokens_per_s": tokens / median,
        "losses": losses, "grad_norms": norms, "lrs": lrs,
        "initial_loss": losses[0], "ln_vocab": math.log(cfg.vocab_size),
        "loadavg_1min": [load_before, os.getloadavg()[0]],
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"torch {torch.__version__} ({blas_name()}) GPT {cfg.name}: {cfg.n_layer}L {cfg.n_head}H "
          f"{cfg.n_embd}d T={cfg.block_size} batch {cfg.batch_size}, {result['params']:,} "
          f"parameters, dropout {cfg.dropout}, {torch.get_num_threads()} threads, eager f32")
    print(f"  initial loss {losses[0]:.4f} (ln {cfg.vocab_size} = {math.log(cfg.vocab_size):.4f})")
    for step, (l, n) in enumerate(zip(losses, norms)):
        k = step - args.warmup
        print(f"  step {step}: loss {l:.6f} grad_norm {n:.4f} lr {lrs[step]:.3e}"
              + (f" ({times[k] * 1e3:.1f} ms)" if k >= 0 else " (warm-up)"))
    print(f"  median step {median * 1e3:.1f} ms over {len(times)} steps; {tokens / median:,.0f} "
          "tokens/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
