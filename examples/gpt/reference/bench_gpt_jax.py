"""JAX peer for tessel's GPT training benchmark: the same model, sharded over a device mesh.

What: trains the reference GPT (gpt_jax.py, float32) with one jitted, buffer-donating
AdamW step on a ('batch', 'model') mesh of XLA host CPU devices, and reports the median step
time, tokens/s, model GFLOP/s and the loss of every step.

Why: tessel's GPT runs the same model with Megatron tensor parallelism over 'model' and data
parallelism over 'batch'; this is what JAX (GSPMD) does with the same layouts on the same
machine, so the two can be timed side by side.

Layouts (Megatron):
  wq, wk, wv, mlp.c_fc      column-sharded:   PartitionSpec(None, 'model')
  attn.c_proj, mlp.c_proj   row-sharded:      PartitionSpec('model', None)
  wte                       rows (vocabulary) over 'model': PartitionSpec('model', None)
  wpe, LayerNorm weights    replicated
  idx, targets              rows over 'batch': PartitionSpec('batch', None)
  AdamW moments             as their parameters
JAX requires a sharded dimension to divide evenly, so the 65-row ``wte`` is padded with zero
rows to a multiple of the 'model' size (66 for model=2, as Megatron pads its vocabulary); the
padded logits are masked to -inf (gpt_jax.forward), so the loss is the 65-token model's.
Activations are left to XLA's sharding propagation.

Configs:
  tiny  nanoGPT's CPU recipe: 4 layers, 4 heads, width 128, context 64, batch 12
  baby  nanoGPT shakespeare_char: 6 layers, 6 heads, width 384, context 256, batch 64
        (about 10.7 M parameters; dropout is 0 here)
  test  tessel's `test` preset (tests/gpt): 2 layers, 4 heads, width 32, context 16, batch 4
Training hyper-parameters are nanoGPT shakespeare_char's (lr 1e-3, warm-up 100, cosine to
1e-4 at 5000, beta2 0.99, weight decay 0.1, clip 1.0). Batches are nanoGPT-style random
windows of the tiny Shakespeare train split when the file is found (else random token ids),
made and placed on the devices before timing, so the timings are the steps alone.

Inputs: ``--inputs tessel`` trains from tessel's start instead (bench/peers/gpt_recipe.py
recomputes it): GptModel::init's parameters, CharDataset::batch's windows of
data/shakespeare_char/input.txt (its byte vocabulary) and the schedule of
``tessel train gpt --steps <warmup + steps>`` (``--schedule-steps N``: of ``--steps N``; 0: the
preset's own, warm-up 100 and decay over 2000 steps, as GptTrainer trains in tests/gpt), so with dropout 0 the losses are tessel's up to
rounding (bench/peers/compare_bf16.py compares them).

Precision: ``--dtype bf16`` is tessel's mixed precision (``tessel train gpt --dtype bf16``):
the matmuls of activations by weights (q, k, v, attention's output projection, the MLP's two,
the tied head) on bfloat16 operands with float32 sums, the product rounded to bfloat16
(gpt_jax.project); attention's q k^T and att v, the parameters, gradients and AdamW state
float32. The default f32 runs every matmul in float32.

Threads: ``--threads N`` pins the process to N CPUs (os.sched_setaffinity, the same as
``taskset -c 0..N-1``) before jax starts, which sizes XLA's CPU thread pools; N = 1 also sets
``--xla_cpu_multi_thread_eigen=false``. XLA has no other intra-op thread-count flag for the
CPU client. Without --threads the process keeps the CPUs it was given (run it under taskset
to choose them). The mesh's devices are all in this one process and share those threads.

Examples:
    .venv-peers/bin/python examples/gpt/reference/bench_gpt_jax.py --config tiny
    .venv-peers/bin/python examples/gpt/reference/bench_gpt_jax.py --config baby --steps 2
    .venv-peers/bin/python examples/gpt/reference/bench_gpt_jax.py --mesh 1x1 --json
    .venv-peers/bin/python examples/gpt/reference/bench_gpt_jax.py --config tiny --mesh 1x1 \
        --inputs tessel --dtype bf16 --steps 10 --warmup 0 --json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
DTYPES = {"f32": "float32", "bf16": "bfloat16"}  # --dtype: gpt_jax.GPTConfig.matmul_dtype
TRAIN_CHARS = 1_003_854
PEAK_GFLOPS = 187.1  # this machine kind's measured 2-thread OpenBLAS sgemm (machine-baselines)


def parse_mesh(text: str):
    """'batch=2,model=2', '2x2' or '1x1' -> (batch, model)."""
    m = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*", text)
    if m:
        return int(m.group(1)), int(m.group(2))
    sizes = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        if key.strip() not in ("batch", "model") or not value.strip().isdigit():
            raise argparse.ArgumentTypeError(f"bad --mesh {text!r}: use batch=B,model=M or BxM")
        sizes[key.strip()] = int(value)
    return sizes.get("batch", 1), sizes.get("model", 1)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", choices=("tiny", "baby", "test"), default="baby")
    ap.add_argument("--mesh", type=parse_mesh, default=(2, 2),
                    help="batch=B,model=M or BxM (default batch=2,model=2)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps (default 5)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    ap.add_argument("--threads", type=int, default=None,
                    help="pin to this many CPUs before jax starts (default: as launched)")
    ap.add_argument("--seed", type=int, default=None,
                    help="default 1234; with --inputs tessel, tessel's 1337")
    ap.add_argument("--dtype", choices=tuple(DTYPES), default="f32",
                    help="f32, or bf16: tessel's mixed precision (default f32)")
    ap.add_argument("--schedule-steps", type=int, default=None,
                    help="with --inputs tessel: the schedule of `tessel train gpt --steps N` "
                         "(default warmup + steps; 0: the preset's own)")
    ap.add_argument("--inputs", choices=("own", "tessel"), default="own",
                    help="own: gpt_jax.init_params and random windows; tessel: tessel's initial "
                         "parameters, batches and schedule (default own)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")
    if args.schedule_steps is not None and (args.schedule_steps < 0 or args.inputs != "tessel"):
        ap.error(f"--schedule-steps {args.schedule_steps}: >= 0, with --inputs tessel only")
    if args.seed is None:
        args.seed = 1337 if args.inputs == "tessel" else 1234
    return args


def setup_environment(args):
    """Everything that must happen before jax is imported; returns what was used."""
    b, m = args.mesh
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    flags.append(f"--xla_force_host_platform_device_count={b * m}")
    cpus = sorted(os.sched_getaffinity(0))
    if args.threads is not None:
        if not 1 <= args.threads <= len(cpus):
            raise SystemExit(f"--threads {args.threads}: this process may use {len(cpus)} CPUs")
        cpus = cpus[:args.threads]
        os.sched_setaffinity(0, cpus)
        if args.threads == 1:
            flags.append("--xla_cpu_multi_thread_eigen=false")
    os.environ["XLA_FLAGS"] = " ".join(flags)
    os.environ["JAX_PLATFORMS"] = "cpu"
    return {"cpus": cpus, "xla_flags": os.environ["XLA_FLAGS"]}


def load_train_ids():
    """Tiny Shakespeare's train split as ids (nanoGPT's mapping), or None when absent."""
    import numpy as np

    for path in (REPO / "data" / "shakespeare_char" / "input.txt",
                 REPO / "shared" / "data" / "tinyshakespeare.txt",
                 REPO.parent / "shared" / "data" / "tinyshakespeare.txt",
                 Path("/work/shared/data/tinyshakespeare.txt")):
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            stoi = {c: i for i, c in enumerate(sorted(set(text)))}
            return np.array([stoi[c] for c in text[:TRAIN_CHARS]], dtype=np.int32), str(path)
    return None, "random token ids (tinyshakespeare.txt not found)"


def tessel_inputs(args, G):
    """(GPTConfig, TrainConfig, batch, host params, [(x, y)], lr of step, note): tessel's start,
    batches and `tessel train gpt --steps N` schedule, recomputed by bench/peers/gpt_recipe.py."""
    sys.path.insert(0, str(REPO / "bench" / "peers"))
    import gpt_recipe as R

    path = REPO / "data" / "shakespeare_char" / "input.txt"
    text = R.CharText.load(path)
    total = args.warmup + args.steps
    rc = R.config(args.config, seed=args.seed, vocab_size=text.vocab_size)
    schedule_steps = total if args.schedule_steps is None else args.schedule_steps
    if schedule_steps:
        rc = R.train_schedule(rc, schedule_steps)
    cfg = G.GPTConfig(n_layer=rc.n_layer, n_head=rc.n_head, n_embd=rc.n_embd,
                      block_size=rc.block_size, vocab_size=rc.vocab_size,
                      matmul_dtype=DTYPES[args.dtype])
    tc = G.TrainConfig(learning_rate=rc.learning_rate, min_lr=rc.min_lr,
                       warmup_iters=rc.warmup_iters, lr_decay_iters=rc.lr_decay_iters,
                       beta1=rc.beta1, beta2=rc.beta2, eps=rc.eps,
                       weight_decay=rc.weight_decay, grad_clip=rc.grad_clip)
    batches = [tuple(a.astype("int32") for a in text.batch(s, rc)) for s in range(total)]
    return (cfg, tc, rc.batch_size, R.init_params(rc), batches,
            lambda it: R.learning_rate(rc, it), f"tessel's batches of {path}")


def own_inputs(args, G, np):
    """The same tuple as tessel_inputs for this benchmark's own start and random windows."""
    configs = {
        "tiny": (G.GPTConfig(n_layer=4, n_head=4, n_embd=128, block_size=64), 12),
        "baby": (G.GPTConfig(n_layer=6, n_head=6, n_embd=384, block_size=256), 64),
        "test": (G.GPTConfig(n_layer=2, n_head=4, n_embd=32, block_size=16), 4),
    }
    shape, batch = configs[args.config]
    cfg = G.GPTConfig(n_layer=shape.n_layer, n_head=shape.n_head, n_embd=shape.n_embd,
                      block_size=shape.block_size, matmul_dtype=DTYPES[args.dtype])
    tc = G.TrainConfig(learning_rate=1e-3, min_lr=1e-4, warmup_iters=100, lr_decay_iters=5000,
                       beta1=0.9, beta2=0.99, weight_decay=0.1, grad_clip=1.0)
    T = cfg.block_size
    train, data_note = load_train_ids()
    rng = np.random.default_rng(args.seed + 1)
    batches = []
    for _ in range(args.warmup + args.steps):
        if train is None:
            ids = rng.integers(0, cfg.vocab_size, size=(batch, T + 1)).astype(np.int32)
            x, y = ids[:, :-1], ids[:, 1:]
        else:
            off = rng.integers(0, len(train) - T, size=batch)
            x = np.stack([train[o:o + T] for o in off])
            y = np.stack([train[o + 1:o + T + 1] for o in off])
        batches.append((x, y))
    return (cfg, tc, batch, G.init_params(cfg, args.seed, dtype=np.float32), batches,
            lambda it: G.get_lr(it, tc), data_note)


def main(argv=None):
    args = parse_args(argv)
    load_before = os.getloadavg()[0]  # other work on the machine, before this process adds any
    env = setup_environment(args)

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    sys.path.insert(0, str(HERE))
    import gpt_jax as G

    if args.inputs == "tessel":
        cfg, tc, batch, host, host_batches, lr_of, data_note = tessel_inputs(args, G)
    else:
        cfg, tc, batch, host, host_batches, lr_of, data_note = own_inputs(args, G, np)
    nb, nm = args.mesh
    T = cfg.block_size
    if batch % nb:
        raise SystemExit(f"batch {batch} does not divide over batch={nb}")
    if cfg.n_head % nm or (4 * cfg.n_embd) % nm:
        raise SystemExit(f"{cfg.n_head} heads / {4 * cfg.n_embd} MLP columns do not divide over model={nm}")

    devices = jax.devices()
    mesh = Mesh(np.array(devices[:nb * nm]).reshape(nb, nm), ("batch", "model"))

    def spec(name):
        if name == "wte" or name.endswith("attn.c_proj") or name.endswith("mlp.c_proj"):
            return P("model", None)
        if name.endswith(("attn.wq", "attn.wk", "attn.wv", "mlp.c_fc")):
            return P(None, "model")
        return P()  # wpe, LayerNorm weights

    # Parameters: the documented init, wte padded to a multiple of the 'model' size.
    v_pad = -(-cfg.vocab_size // nm) * nm
    host["wte"] = np.concatenate(
        [host["wte"], np.zeros((v_pad - cfg.vocab_size, cfg.n_embd), np.float32)])
    param_sh = {k: NamedSharding(mesh, spec(k)) for k in host}
    params = {k: jax.device_put(v, param_sh[k]) for k, v in host.items()}
    rep = NamedSharding(mesh, P())
    opt_sh = {"step": rep, "m": param_sh, "v": param_sh}
    opt_state = jax.jit(G.adamw_init, out_shardings=opt_sh)(params)
    data_sh = NamedSharding(mesh, P("batch", None))

    # Batches, placed before timing.
    batches = [(jax.device_put(x, data_sh), jax.device_put(y, data_sh)) for x, y in host_batches]

    def step_fn(params, opt_state, idx, targets, lr):
        return G.train_step(params, opt_state, idx, targets, lr, cfg, tc)

    step = jax.jit(step_fn,
                   in_shardings=(param_sh, opt_sh, data_sh, data_sh, rep),
                   out_shardings=(param_sh, opt_sh, rep, rep),
                   donate_argnums=(0, 1))
    t0 = time.perf_counter()
    compiled = step.lower(params, opt_state, *batches[0], jnp.float32(tc.learning_rate)).compile()
    compile_s = time.perf_counter() - t0
    hlo = compiled.as_text()
    collectives = {op: len(re.findall(rf"\b{op}(?:-start)?\(", hlo))
                   for op in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                              "collective-permute")}

    losses, norms, times, cpu_times = [], [], [], []
    for it, (x, y) in enumerate(batches):
        lr = jnp.float32(lr_of(it))
        t0, c0 = time.perf_counter(), time.process_time()
        params, opt_state, loss, norm = compiled(params, opt_state, x, y, lr)
        jax.block_until_ready((params, opt_state, loss))
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        losses.append(float(loss))
        norms.append(float(norm))
        if it >= args.warmup:
            times.append(dt)
            cpu_times.append(dc)

    median = statistics.median(times)
    tokens = batch * T
    n_params = sum(int(np.prod(s)) for s in G.param_shapes(cfg).values())
    gflops = G.flops_per_token(cfg) * tokens / median / 1e9
    result = {
        "peer": "jax",
        "jax_version": jax.__version__,
        "config": args.config,
        "model": {"n_layer": cfg.n_layer, "n_head": cfg.n_head, "n_embd": cfg.n_embd,
                  "block_size": T, "vocab_size": cfg.vocab_size, "padded_vocab": v_pad,
                  "params": n_params},
        "batch": batch,
        "mesh": {"batch": nb, "model": nm},
        "devices": nb * nm,
        "threads": len(env["cpus"]),
        "cpus": env["cpus"],
        "xla_flags": env["xla_flags"],
        "data": data_note,
        "loadavg_1min": [load_before, os.getloadavg()[0]],
        "dtype": args.dtype,  # the matmuls' (f32 or bf16); parameters and AdamW float32
        "inputs": args.inputs,
        "seed": args.seed,
        "compile_s": compile_s,
        "warmup_steps": args.warmup,
        "timed_steps": args.steps,
        "step_s": times,
        "median_step_s": median,
        "step_cpu_s": cpu_times,  # CPU time of this process (all threads) per step
        "median_step_cpu_s": statistics.median(cpu_times),
        "tokens_per_step": tokens,
        "tokens_per_s": tokens / median,
        "tokens_per_s_per_device": tokens / median / (nb * nm),
        "model_gflops_per_s": gflops,
        "mfu_vs_2thread_sgemm": gflops / PEAK_GFLOPS,
        "flops_per_token": G.flops_per_token(cfg),
        "losses": losses,
        "grad_norms": norms,
        "lrs": [lr_of(it) for it in range(len(batches))],
        "collectives_in_step": collectives,
    }
    if args.json:
        print(json.dumps(result))
        return result
    print(f"jax {jax.__version__} GPT {args.config}: {cfg.n_layer}L {cfg.n_head}H {cfg.n_embd}d "
          f"T={T} batch={batch} ({n_params:,} params, {args.dtype} matmuls, {args.inputs} inputs); mesh batch={nb} model={nm} "
          f"on {nb * nm} host CPU devices, {len(env['cpus'])} CPU(s) {env['cpus']}")
    print(f"  XLA_FLAGS={env['xla_flags']}")
    print(f"  data: {data_note}")
    load_after = os.getloadavg()[0]
    busy = "  (other work was running: timings are inflated)" if load_before > 1.0 else ""
    print(f"  1-min load average at start / end: {load_before:.2f} / {load_after:.2f}{busy}")
    print(f"  compile {compile_s:.2f} s; collectives per step {collectives}")
    for it, (l, n) in enumerate(zip(losses, norms)):
        k = it - args.warmup
        tag = "warm-up" if k < 0 else f"{times[k]:.3f} s wall, {cpu_times[k]:.3f} s CPU"
        print(f"  step {it}: loss {l:.4f}  grad_norm {n:.4f}  ({tag})")
    print(f"  median step {median:.3f} s over {len(times)} steps "
          f"(CPU time {statistics.median(cpu_times):.3f} s); {tokens / median:,.0f} tokens/s "
          f"({tokens / median / (nb * nm):,.0f} per device); {gflops:.1f} model GFLOP/s "
          f"({100 * gflops / PEAK_GFLOPS:.1f}% of the 187.1 GFLOP/s 2-thread sgemm)")
    return result


if __name__ == "__main__":
    main()
