"""Writes gpt_small_reference.safetensors: the float64 numeric reference for tessel's GPT.

What: runs the JAX reference model (gpt_jax.py) in float64 (jax_enable_x64) on a small
configuration and dumps, in one safetensors file next to this script,

  param.<name>    every parameter's initial value (F64), names as in gpt_jax.param_names
  idx, targets    the batch [B, T] (I32)
  logits          [B, T, V] forward output at the initial parameters (F64)
  loss            [] mean cross-entropy over all B*T positions (F64, a 0-d tensor)
  grad.<name>     d loss / d parameter at the initial parameters, before clipping (F64)
  grad_norm       [] global L2 norm of all gradients, before clipping (F64)
  step_losses     [10] loss before each of 10 AdamW steps on the same batch (F64);
                  step_losses[0] == loss
  step_grad_norms [10] global gradient norm (before clipping) at each of those steps (F64)
  step_lrs        [10] learning rate used by each step (nanoGPT's get_lr) (F64)
  final.<name>    every parameter after the 10 steps (F64)

and ``__metadata__`` (string -> string, each value plain text or JSON) with the model and
training configuration, the init rule, the data source, which steps clipped, and versions.

Why: llm.c's method. tessel's GPT loads ``param.*``, runs the same batch, and must reproduce
the logits, loss, gradients and step losses; float64 here keeps the reference's own error
far below tessel's float32 tolerances (see README.md).

Configuration: n_layer 2, n_head 4, n_embd 32, block_size 16, batch 4, vocab 65, seed 1234.
Training: AdamW (beta1 0.9, beta2 0.99, eps 1e-8, weight decay 0.1 on ndim >= 2 tensors),
gradient clipping at global norm 1.0, lr 1e-3 with 3 warm-up iterations, cosine decay to
min_lr 1e-4 at iteration 10. At lr 1e-3 the gradient norm stays above 1.0 (about 1.03-1.23),
so clipping triggers in every one of the 10 steps; the metadata's ``clipped_steps`` records it.

Data: the batch is real text. The script reads the tiny Shakespeare corpus (the first
1,003,854 characters are nanoGPT's train split), maps characters to ids as nanoGPT's
prepare.py does (``sorted(set(text))`` over the whole file: 65 characters, '\\n' = 0,
' ' = 1, ...), and takes B windows at offsets ``np.random.default_rng(seed + 1).integers(0,
len(train) - T, size=B)``: idx = train[o : o+T], targets = train[o+1 : o+T+1]. It looks for
the file at --data, then the repository's copy data/shakespeare_char/input.txt, then
tinyshakespeare.txt in <repo>/shared/data/, <repo>/../shared/data/ and /work/shared/data/. Without the file it falls back to ids drawn from
the same generator over 0..64 (``integers(0, 65, size=(B, T+1))``, idx = [:, :-1],
targets = [:, 1:]) and says so in the metadata (``data_source``) and on stdout. Either way
the batch is stored in the dump, so tests that read the dump need no text file.

Run: scripts/peers-venv.sh && .venv-peers/bin/python examples/gpt/reference/make_reference.py
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import struct
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import safetensors  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(HERE))

import gpt_jax as G  # noqa: E402

CONFIG = G.GPTConfig(n_layer=2, n_head=4, n_embd=32, block_size=16, vocab_size=65)
BATCH = 4
SEED = 1234
STEPS = 10
TRAIN = G.TrainConfig(learning_rate=1e-3, min_lr=1e-4, warmup_iters=3, lr_decay_iters=10,
                      beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.1, grad_clip=1.0)
TRAIN_CHARS = 1_003_854  # nanoGPT's 90% train split of the 1,115,394-character file
DATA_NAME = "tinyshakespeare.txt"
OUT = HERE / "gpt_small_reference.safetensors"


def find_text(explicit: str | None) -> Path | None:
    candidates = [Path(explicit)] if explicit else []
    candidates += [REPO / "data" / "shakespeare_char" / "input.txt",
                   REPO / "shared" / "data" / DATA_NAME, REPO.parent / "shared" / "data" / DATA_NAME,
                   Path("/work/shared/data") / DATA_NAME]
    for c in candidates:
        if c.is_file():
            return c
    if explicit:
        raise SystemExit(f"make_reference: --data {explicit} does not exist")
    return None


def make_batch(text_path: Path | None, B: int, T: int, seed: int):
    """The fixed batch (see the module docstring); returns idx, targets (int32) and a note."""
    rng = np.random.default_rng(seed + 1)
    if text_path is None:
        ids = rng.integers(0, CONFIG.vocab_size, size=(B, T + 1)).astype(np.int32)
        return ids[:, :-1].copy(), ids[:, 1:].copy(), "synthetic: default_rng(seed+1).integers(0, 65)"
    text = text_path.read_text(encoding="utf-8")
    chars = sorted(set(text))
    if len(chars) != CONFIG.vocab_size:
        raise SystemExit(f"make_reference: {text_path} has {len(chars)} distinct characters, not 65")
    stoi = {c: i for i, c in enumerate(chars)}
    train = np.array([stoi[c] for c in text[:TRAIN_CHARS]], dtype=np.int32)
    offsets = rng.integers(0, len(train) - T, size=B)
    idx = np.stack([train[o:o + T] for o in offsets])
    targets = np.stack([train[o + 1:o + T + 1] for o in offsets])
    note = (f"tinyshakespeare train split (first {TRAIN_CHARS} chars), vocab sorted(set(text)), "
            f"window offsets {offsets.tolist()} from default_rng(seed+1).integers(0, len(train)-T, B)")
    return idx, targets, note


def canonicalize_header(path: str) -> None:
    """Rewrites the header with the metadata keys sorted, so that regenerating is byte-stable.

    safetensors writes ``__metadata__`` in hash-map order, which changes from run to run;
    the tensors' entries and data are already deterministic. The header keeps its length
    (same characters, other order), so the data offsets do not move.
    """
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n], object_pairs_hook=dict)
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if len(text) > n:
        raise SystemExit("make_reference: canonical header is longer than the original")
    text += b" " * (n - len(text))  # safetensors pads the header with spaces
    Path(path).write_bytes(raw[:8] + text + raw[8 + n:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help="the tiny Shakespeare text (default: data/shakespeare_char/input.txt, "
                    f"else {DATA_NAME} in shared/data)")
    ap.add_argument("--out", default=str(OUT), help="output file (default: %(default)s)")
    args = ap.parse_args()

    cfg, tc, B, T = CONFIG, TRAIN, BATCH, CONFIG.block_size
    text_path = find_text(args.data)
    idx, targets, data_note = make_batch(text_path, B, T, SEED)
    if text_path is None:
        print(f"make_reference: WARNING: {DATA_NAME} not found; using synthetic token ids")

    params0 = G.init_params(cfg, SEED, dtype=np.float64)
    params = {k: jnp.asarray(v) for k, v in params0.items()}
    assert all(p.dtype == jnp.float64 for p in params.values())

    # Forward, loss and gradients at the initial parameters.
    logits = np.asarray(G.jit_forward(params, idx, cfg=cfg))
    loss, grads = G.jit_loss_and_grads(params, idx, targets, cfg=cfg)
    grad_norm = G.global_norm(grads)

    # Ten AdamW steps on the same batch.
    opt = G.adamw_init(params)
    p = params
    step_losses, step_norms, step_lrs = [], [], []
    for it in range(STEPS):
        lr = G.get_lr(it, tc)
        p, opt, l, n = G.jit_train_step(p, opt, idx, targets, jnp.float64(lr), cfg=cfg, tc=tc)
        step_losses.append(float(l))
        step_norms.append(float(n))
        step_lrs.append(lr)
    clipped = [i for i, n in enumerate(step_norms) if tc.grad_clip / (n + 1e-6) < 1.0]
    if abs(step_losses[0] - float(loss)) > 1e-13 * abs(float(loss)):
        raise SystemExit(f"step 0 loss {step_losses[0]!r} != loss {float(loss)!r}")

    tensors = {}
    for name in G.param_names(cfg):
        tensors["param." + name] = params0[name]
    tensors["idx"] = idx.astype(np.int32)
    tensors["targets"] = targets.astype(np.int32)
    tensors["logits"] = logits
    tensors["loss"] = np.asarray(float(loss), dtype=np.float64)  # 0-d tensor (shape [])
    for name in G.param_names(cfg):
        tensors["grad." + name] = np.asarray(grads[name])
    tensors["grad_norm"] = np.asarray(float(grad_norm), dtype=np.float64)
    tensors["step_losses"] = np.array(step_losses, dtype=np.float64)
    tensors["step_grad_norms"] = np.array(step_norms, dtype=np.float64)
    tensors["step_lrs"] = np.array(step_lrs, dtype=np.float64)
    for name in G.param_names(cfg):
        tensors["final." + name] = np.asarray(p[name])
    for k, v in tensors.items():
        assert v.dtype in (np.float64, np.int32), (k, v.dtype)
        tensors[k] = np.array(v, order="C", copy=True)  # keeps 0-d tensors 0-d

    metadata = {
        "format": "tessel GPT reference v1: float64 JAX reference of nanoGPT model.py "
                  "(bias=False, no dropout); see examples/gpt/reference/README.md",
        "config": json.dumps(dataclasses.asdict(cfg)),
        "batch_size": str(B),
        "seq_len": str(T),
        "seed": str(SEED),
        "param_order": json.dumps(G.param_names(cfg)),
        "init_rule": (f"rng = numpy.random.default_rng({SEED}); for each parameter in param_order: "
                      "LayerNorm weights (*.weight) = ones and draw nothing; attn.c_proj and "
                      "mlp.c_proj = rng.standard_normal(shape) * 0.02/sqrt(2*n_layer); every "
                      "other tensor = rng.standard_normal(shape) * 0.02 (float64, C order)"),
        "model": ("pre-LN GPT: x = wte[idx] + wpe[:T]; per block x += attn(ln_1(x)), "
                  "x += mlp(ln_2(x)); logits = ln_f(x) @ wte.T; LayerNorm eps 1e-5 biased "
                  "variance no bias; attention softmax(q k^T/sqrt(D), causal) v, head j = "
                  "columns j*D..(j+1)*D of wq/wk/wv, then @ c_proj; mlp gelu_erf(x @ c_fc) @ "
                  "c_proj; weights [in, out]; loss mean cross-entropy over B*T"),
        "train": json.dumps(dataclasses.asdict(tc)),
        "optimizer": ("torch.optim.AdamW: p *= 1 - lr*wd (ndim >= 2 only); m = b1 m + (1-b1) g; "
                      "v = b2 v + (1-b2) g^2; p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps); "
                      "grads first clipped as clip_grad_norm_(max_norm=grad_clip): scale "
                      "min(1, max_norm/(norm+1e-6))"),
        "lr_schedule": ("nanoGPT get_lr: it < warmup_iters: lr*(it+1)/(warmup_iters+1); "
                        "it > lr_decay_iters: min_lr; else min_lr + 0.5*(1+cos(pi*ratio))*(lr-min_lr), "
                        "ratio = (it-warmup_iters)/(lr_decay_iters-warmup_iters)"),
        "steps": str(STEPS),
        "step_lrs": json.dumps(step_lrs),
        "clipped_steps": json.dumps(clipped),
        "clipping_note": (f"lr {tc.learning_rate} chosen as specified; the gradient norm is above "
                          f"{tc.grad_clip} at steps {clipped}, so clipping triggers there"),
        "data_source": data_note,
        "dtype": "F64 for every float tensor, I32 for idx and targets; little-endian, C order",
        "jax_version": jax.__version__,
        "numpy_version": np.__version__,
        "safetensors_version": safetensors.__version__,
        "generator": "examples/gpt/reference/make_reference.py",
    }
    save_file(tensors, args.out, metadata=metadata)
    canonicalize_header(args.out)

    size = Path(args.out).stat().st_size
    print(f"make_reference: wrote {args.out} ({size} bytes, {len(tensors)} tensors, "
          f"{G.count_params(params0)} parameters)")
    print(f"  config {dataclasses.asdict(cfg)}, batch {B}, seed {SEED}")
    print(f"  data: {data_note}")
    print(f"  loss {float(loss):.15f}  (ln 65 = {np.log(65):.15f})")
    print(f"  grad_norm {float(grad_norm):.15f}")
    print("  step losses " + " ".join(f"{x:.6f}" for x in step_losses))
    print("  step grad norms " + " ".join(f"{x:.4f}" for x in step_norms))
    print("  step lrs " + " ".join(f"{x:.3g}" for x in step_lrs))
    print(f"  clipped steps {clipped}")


if __name__ == "__main__":
    main()
