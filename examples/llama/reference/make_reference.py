"""Writes llama_small_reference.safetensors: the float64 numeric reference for tessel's Llama.

What: runs the JAX reference model (llama_jax.py) in float64 (jax_enable_x64) on the small
"test" configuration with untied embeddings and dumps, in one safetensors file next to this
script,

  param.<name>     every parameter's initial value (F64), names as in llama_jax.param_names
  idx, targets     the batch [B, T] (I32)
  logits           [B, T, V] forward output at the initial parameters (F64)
  loss             [] mean cross-entropy over all B*T positions (F64)
  grad.<name>      d loss / d parameter at the initial parameters, before clipping (F64)
  grad_norm        [] global L2 norm of all gradients, before clipping (F64)
  step_losses      [10] loss before each of 10 AdamW steps on the same batch (F64)
  step_grad_norms  [10] global gradient norm (before clipping) at each of those steps (F64)
  step_lrs         [10] learning rate of each step (F64)
  final.<name>     every parameter after the 10 steps (F64)
  tied.logits, tied.loss, tied.grad.<name>
                   the same at the initial parameters with tied embeddings: the same
                   parameters less `output`, tok_embeddings serving as the output head too

and ``__metadata__`` (string -> string) with the configuration, the init rule, the model's
formulas, the data source and versions.

Configuration: n_layer 2, n_head 4, n_kv_head 2 (two query heads per kv head), n_embd 32
(head_dim 8), ffn_hidden 96, block_size 16, batch 4, vocab 65, seed 1234. Training, data and
the batch as the GPT's dump (examples/gpt/reference/make_reference.py, whose helpers this
script loads): AdamW (0.9, 0.99, eps 1e-8, weight decay 0.1 on ndim >= 2), clipping at norm
1, lr 1e-3 warmed up over 3 iterations and decayed to 1e-4 at 10; 4 windows of the tiny
Shakespeare train split at offsets from default_rng(seed + 1).

Run: /path/to/.venv-peers/bin/python examples/llama/reference/make_reference.py
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
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
sys.path.insert(0, str(HERE))

import llama_jax as L  # noqa: E402

# The GPT reference's generator, for its batch, text lookup and byte-stable header (loaded by
# path: its module name is this script's).
_spec = importlib.util.spec_from_file_location(
    "gpt_make_reference", HERE.parents[1] / "gpt" / "reference" / "make_reference.py")
GPT = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(GPT)

CONFIG = L.LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=32, ffn_hidden=96,
                       block_size=16, vocab_size=65, tie_embeddings=False)
TIED = dataclasses.replace(CONFIG, tie_embeddings=True)
BATCH = GPT.BATCH
SEED = GPT.SEED
STEPS = GPT.STEPS
TRAIN = GPT.TRAIN
OUT = HERE / "llama_small_reference.safetensors"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help="the tiny Shakespeare text (default: "
                    "data/shakespeare_char/input.txt)")
    ap.add_argument("--out", default=str(OUT), help="output file (default: %(default)s)")
    args = ap.parse_args()

    cfg, tc, B, T = CONFIG, TRAIN, BATCH, CONFIG.block_size
    text_path = GPT.find_text(args.data)
    idx, targets, data_note = GPT.make_batch(text_path, B, T, SEED)
    if text_path is None:
        print("make_reference: WARNING: the text was not found; using synthetic token ids")

    params0 = L.init_params(cfg, SEED, dtype=np.float64)
    params = {k: jnp.asarray(v) for k, v in params0.items()}
    logits = np.asarray(L.jit_forward(params, idx, cfg=cfg))
    loss, grads = L.jit_loss_and_grads(params, idx, targets, cfg=cfg)
    grad_norm = L.global_norm(grads)

    tied_params = {k: v for k, v in params.items() if k != "output"}
    tied_logits = np.asarray(L.jit_forward(tied_params, idx, cfg=TIED))
    tied_loss, tied_grads = L.jit_loss_and_grads(tied_params, idx, targets, cfg=TIED)

    opt = L.adamw_init(params)
    p = params
    step_losses, step_norms, step_lrs = [], [], []
    for it in range(STEPS):
        lr = L.get_lr(it, tc)
        p, opt, loss_it, norm_it = L.jit_train_step(p, opt, idx, targets, jnp.float64(lr),
                                                    cfg=cfg, tc=tc)
        step_losses.append(float(loss_it))
        step_norms.append(float(norm_it))
        step_lrs.append(lr)
    if abs(step_losses[0] - float(loss)) > 1e-13 * abs(float(loss)):
        raise SystemExit(f"step 0 loss {step_losses[0]!r} != loss {float(loss)!r}")

    names = L.param_names(cfg)
    tensors = {"param." + n: params0[n] for n in names}
    tensors["idx"] = idx.astype(np.int32)
    tensors["targets"] = targets.astype(np.int32)
    tensors["logits"] = logits
    tensors["loss"] = np.asarray(float(loss), dtype=np.float64)
    tensors.update({"grad." + n: np.asarray(grads[n]) for n in names})
    tensors["grad_norm"] = np.asarray(float(grad_norm), dtype=np.float64)
    tensors["step_losses"] = np.array(step_losses, dtype=np.float64)
    tensors["step_grad_norms"] = np.array(step_norms, dtype=np.float64)
    tensors["step_lrs"] = np.array(step_lrs, dtype=np.float64)
    tensors.update({"final." + n: np.asarray(p[n]) for n in names})
    tensors["tied.logits"] = tied_logits
    tensors["tied.loss"] = np.asarray(float(tied_loss), dtype=np.float64)
    tensors.update({"tied.grad." + n: np.asarray(tied_grads[n]) for n in L.param_names(TIED)})
    for k, v in tensors.items():
        assert v.dtype in (np.float64, np.int32), (k, v.dtype)
        tensors[k] = np.array(v, order="C", copy=True)

    metadata = {
        "format": "tessel Llama reference v1: float64 JAX reference of a Llama-style decoder "
                  "(examples/llama/reference/llama_jax.py)",
        "config": json.dumps(dataclasses.asdict(cfg)),
        "batch_size": str(B),
        "seq_len": str(T),
        "seed": str(SEED),
        "param_order": json.dumps(names),
        "init_rule": (f"rng = numpy.random.default_rng({SEED}); for each parameter in "
                      "param_order: norm weights (*.weight) = ones and draw nothing; "
                      "attention.wo and feed_forward.w2 = rng.standard_normal(shape) * "
                      "0.02/sqrt(2*n_layer); every other tensor = rng.standard_normal(shape) * "
                      "0.02 (float64, C order)"),
        "model": ("pre-norm Llama: x = tok_embeddings[idx]; per layer x += attn(rms(x)), "
                  "x += (silu(rms(x) @ w1) * (rms(x) @ w3)) @ w2; logits = rms(x) @ "
                  "output.T (tied: tok_embeddings.T); rms(x) = x / sqrt(mean(x^2) + 1e-5) * w; "
                  "attention softmax(rope(q) rope(k)^T / sqrt(D), causal) v, query head h "
                  "uses kv head h // (n_head / n_kv_head); rope rotates the pairs (j, j + D/2) "
                  "of each head at position t by t * 10000^(-2j/D); weights [in, out]"),
        "train": json.dumps(dataclasses.asdict(tc)),
        "steps": str(STEPS),
        "step_lrs": json.dumps(step_lrs),
        "tied": "tied.* tensors: the same parameters less output, tok_embeddings tied as head",
        "data_source": data_note,
        "dtype": "F64 for every float tensor, I32 for idx and targets; little-endian, C order",
        "jax_version": jax.__version__,
        "numpy_version": np.__version__,
        "safetensors_version": safetensors.__version__,
        "generator": "examples/llama/reference/make_reference.py",
    }
    save_file(tensors, args.out, metadata=metadata)
    GPT.canonicalize_header(args.out)

    size = Path(args.out).stat().st_size
    count = sum(int(np.prod(v.shape)) for v in params0.values())
    print(f"make_reference: wrote {args.out} ({size} bytes, {len(tensors)} tensors, "
          f"{count} parameters)")
    print(f"  config {dataclasses.asdict(cfg)}, batch {B}, seed {SEED}")
    print(f"  data: {data_note}")
    print(f"  loss {float(loss):.15f} (tied {float(tied_loss):.15f}; ln 65 = {np.log(65):.15f})")
    print(f"  grad_norm {float(grad_norm):.15f}")
    print("  step losses " + " ".join(f"{x:.6f}" for x in step_losses))
    print("  step grad norms " + " ".join(f"{x:.4f}" for x in step_norms))


if __name__ == "__main__":
    main()
