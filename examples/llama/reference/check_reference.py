"""Checks llama_small_reference.safetensors with numpy alone (no jax, no safetensors package).

What: reads the dump written by make_reference.py and recomputes, in numpy float64,
independently of the JAX code:

  1. the initial parameters from the documented init rule (bit-exact),
  2. the forward pass: logits (to 1e-10 relative to the largest |logit|) and the loss,
  3. the gradients, by a hand-written backward pass (to 1e-10 relative, per tensor),
  4. the 10 clipped AdamW steps: step losses, gradient norms and final parameters,
  5. the tied-embedding variant's logits, loss and gradients.

The formulation differs from llama_jax.py's where it can: the rotation here is written with
cos/sin tables, and the kv heads are repeated to the query heads (np.repeat) where the JAX
model groups the queries. The safetensors reader, the softmax, the schedule and the AdamW
step are the GPT reference check's (examples/gpt/reference/check_reference.py).

Runs under the system python (/usr/bin/python3, numpy 1.x):
    python3 examples/llama/reference/check_reference.py [path]
Exits 0 and prints "reference ok" when every check passes.
"""

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DEFAULT = HERE / "llama_small_reference.safetensors"
NORM_EPS = 1e-5
ROPE_THETA = 10000.0

_spec = importlib.util.spec_from_file_location(
    "gpt_check_reference", HERE.parents[1] / "gpt" / "reference" / "check_reference.py")
GPT = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(GPT)


# --------------------------------------------------------------------------------------------
# Layers, forward and backward
# --------------------------------------------------------------------------------------------


def rms_norm(x, w):
    r = 1.0 / np.sqrt((x * x).mean(-1, keepdims=True) + NORM_EPS)
    return x * r * w, (x * r, r)


def rms_norm_back(dy, w, cache):
    xhat, r = cache
    dw = (dy * xhat).reshape(-1, xhat.shape[-1]).sum(0)
    dxhat = dy * w
    return r * (dxhat - xhat * (dxhat * xhat).mean(-1, keepdims=True)), dw


def rope_tables(T, D):
    freq = ROPE_THETA ** (-np.arange(D // 2) * 2.0 / D)
    angle = np.outer(np.arange(T), freq)  # [T, D/2]
    return np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]  # broadcast over heads


def rope(x, cos, sin):
    """x [B, T, heads, D]; the pairs (j, j + D/2) rotated by the position's angle."""
    x1, x2 = np.split(x, 2, axis=-1)
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def rope_back(dy, cos, sin):
    """The rotation's transpose: by the negative angle."""
    return rope(dy, cos, -sin)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def attention(a, P, p, cfg):
    """a [B,T,C] -> out, cache. Query head h uses kv head h // g."""
    B, T, C = a.shape
    H, K = cfg["n_head"], cfg["n_kv_head"]
    D, g = C // H, H // K
    cos, sin = rope_tables(T, D)
    q = rope((a @ P[p + "attention.wq"]).reshape(B, T, H, D), cos, sin).transpose(0, 2, 1, 3)
    k = rope((a @ P[p + "attention.wk"]).reshape(B, T, K, D), cos, sin).transpose(0, 2, 1, 3)
    v = (a @ P[p + "attention.wv"]).reshape(B, T, K, D).transpose(0, 2, 1, 3)
    kr, vr = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)  # [B, H, T, D]
    s = q @ kr.transpose(0, 1, 3, 2) / math.sqrt(D)
    att = GPT.softmax(np.where(np.tril(np.ones((T, T), dtype=bool)), s, -np.inf))
    y = (att @ vr).transpose(0, 2, 1, 3).reshape(B, T, H * D)
    return y @ P[p + "attention.wo"], (a, q, kr, vr, att, y, cos, sin)


def attention_back(dout, P, p, cfg, cache, G):
    a, q, kr, vr, att, y, cos, sin = cache
    B, T, C = a.shape
    H, K = cfg["n_head"], cfg["n_kv_head"]
    D, g = C // H, H // K
    G[p + "attention.wo"] += y.reshape(-1, H * D).T @ dout.reshape(-1, C)
    dy = (dout @ P[p + "attention.wo"].T).reshape(B, T, H, D).transpose(0, 2, 1, 3)
    datt = dy @ vr.transpose(0, 1, 3, 2)
    dvr = att.transpose(0, 1, 3, 2) @ dy
    ds = att * (datt - (datt * att).sum(-1, keepdims=True)) / math.sqrt(D)
    dq = ds @ kr
    dkr = ds.transpose(0, 1, 3, 2) @ q
    # The repeat's transpose: each kv head gathers the gradients of its g query heads.
    dk = dkr.reshape(B, K, g, T, D).sum(2)
    dv = dvr.reshape(B, K, g, T, D).sum(2)
    da = np.zeros_like(a)
    for w, d, rotated in (("attention.wq", dq, True), ("attention.wk", dk, True),
                          ("attention.wv", dv, False)):
        d = d.transpose(0, 2, 1, 3)  # [B, T, heads, D]
        if rotated:
            d = rope_back(d, cos, sin)
        d = d.reshape(B * T, -1)
        G[p + w] += a.reshape(-1, C).T @ d
        da += (d @ P[p + w].T).reshape(B, T, C)
    return da


def head_of(P, cfg):
    return P["tok_embeddings"] if cfg["tie_embeddings"] else P["output"]


def forward(P, idx, targets, cfg):
    """Returns logits, loss and the caches the backward pass needs."""
    x = P["tok_embeddings"][idx]
    caches = []
    for i in range(cfg["n_layer"]):
        p = f"layers.{i}."
        a1, n1 = rms_norm(x, P[p + "attention_norm.weight"])
        att_out, att_cache = attention(a1, P, p, cfg)
        x1 = x + att_out
        a2, n2 = rms_norm(x1, P[p + "ffn_norm.weight"])
        u, w = a2 @ P[p + "feed_forward.w1"], a2 @ P[p + "feed_forward.w3"]
        m = u * sigmoid(u) * w
        x = x1 + m @ P[p + "feed_forward.w2"]
        caches.append((n1, att_cache, n2, a2, u, w, m))
    xf, nf = rms_norm(x, P["norm.weight"])
    logits = xf @ head_of(P, cfg).T
    logp = logits - logits.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    loss = -np.take_along_axis(logp, targets[..., None], -1).mean()
    return logits, loss, (caches, xf, nf, logp)


def backward(P, idx, targets, cfg, fwd):
    """Gradients of the mean cross-entropy with respect to every parameter."""
    caches, xf, nf, logp = fwd
    B, T = idx.shape
    V, C = P["tok_embeddings"].shape
    G = {k: np.zeros_like(v) for k, v in P.items()}
    dlogits = np.exp(logp)
    np.put_along_axis(dlogits, targets[..., None],
                      np.take_along_axis(dlogits, targets[..., None], -1) - 1.0, -1)
    dlogits /= B * T
    head = "tok_embeddings" if cfg["tie_embeddings"] else "output"
    G[head] += dlogits.reshape(-1, V).T @ xf.reshape(-1, C)
    dx, G["norm.weight"] = rms_norm_back(dlogits @ P[head], P["norm.weight"], nf)
    for i in reversed(range(cfg["n_layer"])):
        p = f"layers.{i}."
        n1, att_cache, n2, a2, u, w, m = caches[i]
        # x = x1 + (silu(u) * w) @ w2 with u = a2 @ w1, w = a2 @ w3
        F = u.shape[-1]
        G[p + "feed_forward.w2"] += m.reshape(-1, F).T @ dx.reshape(-1, C)
        dm = dx @ P[p + "feed_forward.w2"].T
        sig = sigmoid(u)
        du = dm * w * sig * (1.0 + u * (1.0 - sig))
        dw = dm * u * sig
        G[p + "feed_forward.w1"] += a2.reshape(-1, C).T @ du.reshape(-1, F)
        G[p + "feed_forward.w3"] += a2.reshape(-1, C).T @ dw.reshape(-1, F)
        da2 = du @ P[p + "feed_forward.w1"].T + dw @ P[p + "feed_forward.w3"].T
        da2, G[p + "ffn_norm.weight"] = rms_norm_back(da2, P[p + "ffn_norm.weight"], n2)
        dx = dx + da2
        # x1 = x + attention(rms_norm(x))
        da1 = attention_back(dx, P, p, cfg, att_cache, G)
        da1, G[p + "attention_norm.weight"] = rms_norm_back(da1, P[p + "attention_norm.weight"],
                                                            n1)
        dx = dx + da1
    np.add.at(G["tok_embeddings"], idx.reshape(-1), dx.reshape(-1, C))
    return G


# --------------------------------------------------------------------------------------------


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT
    t, meta = GPT.read_safetensors(path)
    cfg = json.loads(meta["config"])
    tc = json.loads(meta["train"])
    names = json.loads(meta["param_order"])
    idx, targets = t["idx"].astype(np.int64), t["targets"].astype(np.int64)
    P0 = {n: t["param." + n] for n in names}
    worst = {}

    regen = GPT.init_params(names, {n: P0[n].shape for n in names}, cfg["n_layer"],
                            int(meta["seed"]), residual=("attention.wo", "feed_forward.w2"))
    for n in names:
        if not np.array_equal(regen[n], P0[n]):
            raise AssertionError(f"param.{n} does not follow the documented init rule")

    worst.update(GPT.check_model(t, P0, lambda P: forward(P, idx, targets, cfg),
                                 lambda P, fwd: backward(P, idx, targets, cfg, fwd), tc))
    tied = dict(cfg, tie_embeddings=True)
    worst.update(GPT.check_model(t, {n: p for n, p in P0.items() if n != "output"},
                                 lambda P: forward(P, idx, targets, tied),
                                 lambda P, fwd: backward(P, idx, targets, tied, fwd), tc,
                                 prefix="tied.", steps=False))

    print(f"checked {path}: {len(t)} tensors, config {cfg}")
    print("  worst relative errors: " + ", ".join(f"{k} {e:.1e}" for k, e in worst.items()))
    print(f"  loss {float(t['loss']):.12f}, grad_norm {float(t['grad_norm']):.12f}")
    print("reference ok")


if __name__ == "__main__":
    main()
