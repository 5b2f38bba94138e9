"""Checks gpt_small_reference.safetensors with numpy alone (no jax, no safetensors package).

What: reads the dump written by make_reference.py with a hand-written safetensors reader and
recomputes, in numpy float64, independently of the JAX code:

  1. the initial parameters from the documented init rule (bit-exact),
  2. the forward pass: logits (to 1e-10 relative to the largest |logit|) and the loss,
  3. the gradients, by a hand-written backward pass (to 1e-10 relative, per tensor, to the
     tensor's largest magnitude) and the global gradient norm,
  4. the 10 clipped AdamW steps: step losses, step gradient norms and final parameters.

Why: it validates the committed reference without trusting JAX, and it spells out, in the
simplest code, both the file format that tessel's C++ reader must parse and every formula
of the model and optimizer (forward and backward) that tessel must match.

The safetensors format, as read here:
  bytes 0..8      N, the header length, unsigned 64-bit little-endian
  bytes 8..8+N    a UTF-8 JSON object (padded with spaces): for each tensor name
                  {"dtype": "F64" | "I32" | ..., "shape": [d0, d1, ...],
                   "data_offsets": [begin, end]}, plus an optional "__metadata__" object
                  of string -> string
  bytes 8+N..     the data: a tensor's bytes are [8+N+begin, 8+N+end), little-endian,
                  row-major (C order); shape [] is a scalar (one element)

Runs under the system python (/usr/bin/python3, numpy 1.x):
    python3 examples/gpt/reference/check_reference.py [path]
Exits 0 and prints "reference ok" when every check passes.
"""

import json
import math
import struct
import sys
from pathlib import Path

import numpy as np

DEFAULT = Path(__file__).resolve().parent / "gpt_small_reference.safetensors"
DTYPES = {"F64": "<f8", "F32": "<f4", "I32": "<i4", "I64": "<i8", "U8": "u1"}
LN_EPS = 1e-5


# --------------------------------------------------------------------------------------------
# File format
# --------------------------------------------------------------------------------------------


def read_safetensors(path):
    """Returns (tensors: name -> ndarray, metadata: dict) from a .safetensors file."""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    data = raw[8 + n:]
    tensors, spans = {}, []
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = np.dtype(DTYPES[info["dtype"]])
        count = int(np.prod(info["shape"], dtype=np.int64))
        if end - begin != count * dtype.itemsize:
            raise ValueError(f"{name}: {end - begin} bytes for shape {info['shape']}")
        arr = np.frombuffer(data[begin:end], dtype=dtype).reshape(info["shape"])
        tensors[name] = arr.astype(dtype.newbyteorder("="))
        spans.append((begin, end))
    spans.sort()  # the data section is exactly covered, without gaps or overlaps
    pos = 0
    for begin, end in spans:
        if begin != pos:
            raise ValueError(f"data gap or overlap at byte {pos}")
        pos = end
    if pos != len(data):
        raise ValueError(f"data section is {len(data)} bytes, tensors cover {pos}")
    return tensors, metadata


# --------------------------------------------------------------------------------------------
# Model (numpy float64), forward and backward
# --------------------------------------------------------------------------------------------

_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def gelu_grad(x):
    cdf = 0.5 * (1.0 + _erf(x / math.sqrt(2.0)))
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    return cdf + x * pdf


def layer_norm(x, w):
    mu = x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + LN_EPS)
    xhat = (x - mu) * rstd
    return xhat * w, (xhat, rstd)


def layer_norm_back(dy, w, cache):
    xhat, rstd = cache
    dw = (dy * xhat).reshape(-1, xhat.shape[-1]).sum(0)
    dxhat = dy * w
    dx = rstd * (dxhat - dxhat.mean(-1, keepdims=True)
                 - xhat * (dxhat * xhat).mean(-1, keepdims=True))
    return dx, dw


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def split_heads(y, H):
    B, T, C = y.shape
    return y.reshape(B, T, H, C // H).transpose(0, 2, 1, 3)


def merge_heads(y):
    B, H, T, D = y.shape
    return y.transpose(0, 2, 1, 3).reshape(B, T, H * D)


def attention(a, P, p, H):
    """a [B,T,C] -> out, cache. Head j uses columns j*D..(j+1)*D of wq, wk, wv."""
    T = a.shape[1]
    D = a.shape[2] // H
    q, k, v = (split_heads(a @ P[p + w], H) for w in ("attn.wq", "attn.wk", "attn.wv"))
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(D)
    s = np.where(np.tril(np.ones((T, T), dtype=bool)), s, -np.inf)
    att = softmax(s)
    y = merge_heads(att @ v)
    return y @ P[p + "attn.c_proj"], (a, q, k, v, att, y)


def attention_back(dout, P, p, H, cache, G):
    a, q, k, v, att, y = cache
    D = q.shape[-1]
    C = a.shape[-1]
    G[p + "attn.c_proj"] += y.reshape(-1, C).T @ dout.reshape(-1, C)
    dy = split_heads(dout @ P[p + "attn.c_proj"].T, H)
    datt = dy @ v.transpose(0, 1, 3, 2)
    dv = att.transpose(0, 1, 3, 2) @ dy
    ds = att * (datt - (datt * att).sum(-1, keepdims=True)) / math.sqrt(D)  # 0 where masked
    dq = ds @ k
    dk = ds.transpose(0, 1, 3, 2) @ q
    da = np.zeros_like(a)
    for w, d in (("attn.wq", dq), ("attn.wk", dk), ("attn.wv", dv)):
        d = merge_heads(d)
        G[p + w] += a.reshape(-1, C).T @ d.reshape(-1, C)
        da += d @ P[p + w].T
    return da


def forward(P, idx, targets, n_layer, n_head):
    """Returns logits, loss and the caches the backward pass needs."""
    B, T = idx.shape
    x = P["wte"][idx] + P["wpe"][:T]
    caches = []
    for i in range(n_layer):
        p = f"h.{i}."
        a1, ln1 = layer_norm(x, P[p + "ln_1.weight"])
        att_out, att_cache = attention(a1, P, p, n_head)
        x1 = x + att_out
        a2, ln2 = layer_norm(x1, P[p + "ln_2.weight"])
        h = a2 @ P[p + "mlp.c_fc"]
        g = gelu(h)
        x = x1 + g @ P[p + "mlp.c_proj"]
        caches.append((ln1, att_cache, ln2, a2, h, g))
    xf, lnf = layer_norm(x, P["ln_f.weight"])
    logits = xf @ P["wte"].T
    logp = logits - logits.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    loss = -np.take_along_axis(logp, targets[..., None], -1).mean()
    return logits, loss, (caches, xf, lnf, logp)


def backward(P, idx, targets, n_layer, n_head, fwd):
    """Gradients of the mean cross-entropy with respect to every parameter."""
    caches, xf, lnf, logp = fwd
    B, T = idx.shape
    V, C = P["wte"].shape
    G = {k: np.zeros_like(v) for k, v in P.items()}
    dlogits = np.exp(logp)
    np.put_along_axis(dlogits, targets[..., None],
                      np.take_along_axis(dlogits, targets[..., None], -1) - 1.0, -1)
    dlogits /= B * T
    G["wte"] += dlogits.reshape(-1, V).T @ xf.reshape(-1, C)  # tied output head
    dx, G["ln_f.weight"] = layer_norm_back(dlogits @ P["wte"], P["ln_f.weight"], lnf)
    for i in reversed(range(n_layer)):
        p = f"h.{i}."
        ln1, att_cache, ln2, a2, h, g = caches[i]
        # x = x1 + mlp(ln_2(x1))
        G[p + "mlp.c_proj"] += g.reshape(-1, 4 * C).T @ dx.reshape(-1, C)
        dh = (dx @ P[p + "mlp.c_proj"].T) * gelu_grad(h)
        G[p + "mlp.c_fc"] += a2.reshape(-1, C).T @ dh.reshape(-1, 4 * C)
        da2, G[p + "ln_2.weight"] = layer_norm_back(dh @ P[p + "mlp.c_fc"].T,
                                                   P[p + "ln_2.weight"], ln2)
        dx = dx + da2
        # x1 = x + attn(ln_1(x))
        da1 = attention_back(dx, P, p, n_head, att_cache, G)
        da1, G[p + "ln_1.weight"] = layer_norm_back(da1, P[p + "ln_1.weight"], ln1)
        dx = dx + da1
    np.add.at(G["wte"], idx.reshape(-1), dx.reshape(-1, C))  # embedding lookup
    G["wpe"][:T] += dx.sum(0)
    return G


# --------------------------------------------------------------------------------------------
# Init rule, schedule, AdamW
# --------------------------------------------------------------------------------------------


def init_params(names, shapes, n_layer, seed, residual=("attn.c_proj", "mlp.c_proj")):
    """The documented init rule, re-implemented from its description (`residual`: the endings of
    the residual projections' names)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in names:
        if name.endswith(".weight"):
            out[name] = np.ones(shapes[name])
        elif name.endswith(residual):
            out[name] = rng.standard_normal(shapes[name]) * (0.02 / math.sqrt(2 * n_layer))
        else:
            out[name] = rng.standard_normal(shapes[name]) * 0.02
    return out


def get_lr(it, tc):
    if it < tc["warmup_iters"]:
        return tc["learning_rate"] * (it + 1) / (tc["warmup_iters"] + 1)
    if it > tc["lr_decay_iters"]:
        return tc["min_lr"]
    ratio = (it - tc["warmup_iters"]) / (tc["lr_decay_iters"] - tc["warmup_iters"])
    return tc["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (tc["learning_rate"] - tc["min_lr"])


def adamw_step(P, G, m, v, t, lr, tc):
    """torch.optim.AdamW after clip_grad_norm_; t is the 1-based step. Returns the norm."""
    norm = math.sqrt(sum(float((g * g).sum()) for g in G.values()))
    scale = min(1.0, tc["grad_clip"] / (norm + 1e-6))
    bc1 = 1.0 - tc["beta1"] ** t
    bc2_sqrt = math.sqrt(1.0 - tc["beta2"] ** t)
    for name in P:
        g = G[name] * scale
        if P[name].ndim >= 2:
            P[name] = P[name] * (1.0 - lr * tc["weight_decay"])
        m[name] = tc["beta1"] * m[name] + (1.0 - tc["beta1"]) * g
        v[name] = tc["beta2"] * v[name] + (1.0 - tc["beta2"]) * g * g
        P[name] = P[name] - (lr / bc1) * m[name] / (np.sqrt(v[name]) / bc2_sqrt + tc["eps"])
    return norm


# --------------------------------------------------------------------------------------------


def close(name, got, want, rtol):
    """max |got - want| <= rtol * max |want| (relative to the largest magnitude)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        raise AssertionError(f"{name}: shape {got.shape} != {want.shape}")
    scale = max(float(np.abs(want).max()), 1e-300)
    err = float(np.abs(got - want).max()) / scale
    if not err <= rtol:
        raise AssertionError(f"{name}: relative error {err:.3e} > {rtol:.0e}")
    return err


def check_model(t, P0, forward_fn, backward_fn, tc, prefix="", steps=True):
    """Checks a model against the dump's tensors `t`, its parameters P0: forward_fn(P) -> (logits,
    loss, cache) against "<prefix>logits" and "<prefix>loss", backward_fn(P, cache) -> gradients
    against "<prefix>grad.<name>" (and the global norm against "grad_norm" when there is no
    prefix); with `steps`, the 10 clipped AdamW steps against "step_losses", "step_grad_norms" and
    "final.<name>". Returns the worst relative errors by name."""
    worst = {}
    logits, loss, fwd = forward_fn(P0)
    worst[prefix + "logits"] = close(prefix + "logits", logits, t[prefix + "logits"], 1e-10)
    worst[prefix + "loss"] = close(prefix + "loss", loss, t[prefix + "loss"], 1e-12)
    G = backward_fn(P0, fwd)
    worst[prefix + "grad"] = max(close(prefix + "grad." + n, G[n], t[prefix + "grad." + n], 1e-10)
                                 for n in P0)
    if not prefix:
        norm = math.sqrt(sum(float((g * g).sum()) for g in G.values()))
        worst["grad_norm"] = close("grad_norm", norm, t["grad_norm"], 1e-12)
    if not steps:
        return worst
    P = {n: p.copy() for n, p in P0.items()}
    m = {n: np.zeros_like(p) for n, p in P.items()}
    v = {n: np.zeros_like(p) for n, p in P.items()}
    losses, norms = [], []
    for it in range(len(t["step_losses"])):
        _, step_loss, f = forward_fn(P)
        losses.append(step_loss)
        norms.append(adamw_step(P, backward_fn(P, f), m, v, it + 1, get_lr(it, tc), tc))
    worst["step_losses"] = close("step_losses", losses, t["step_losses"], 1e-10)
    worst["step_grad_norms"] = close("step_grad_norms", norms, t["step_grad_norms"], 1e-10)
    worst["final"] = max(close("final." + n, P[n], t["final." + n], 1e-9) for n in P0)
    return worst


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT
    t, meta = read_safetensors(path)
    cfg = json.loads(meta["config"])
    tc = json.loads(meta["train"])
    names = json.loads(meta["param_order"])
    L, H = cfg["n_layer"], cfg["n_head"]
    idx, targets = t["idx"].astype(np.int64), t["targets"].astype(np.int64)
    P0 = {n: t["param." + n] for n in names}
    worst = {}

    # 1. init rule, bit-exact
    shapes = {n: P0[n].shape for n in names}
    regen = init_params(names, shapes, L, int(meta["seed"]))
    for n in names:
        if not np.array_equal(regen[n], P0[n]):
            raise AssertionError(f"param.{n} does not follow the documented init rule")

    # 2.-4. forward, backward, ten clipped AdamW steps on the same batch
    worst.update(check_model(
        t, P0, lambda P: forward(P, idx, targets, L, H),
        lambda P, fwd: backward(P, idx, targets, L, H, fwd), tc))
    if t["loss"].shape != ():
        raise AssertionError("loss should be a 0-d tensor")
    worst["step_lrs"] = close("step_lrs", [get_lr(i, tc) for i in range(len(t["step_lrs"]))],
                              t["step_lrs"], 1e-15)
    if float(t["step_losses"][0]) != float(t["loss"]):
        raise AssertionError("step_losses[0] != loss")

    print(f"checked {path}: {len(t)} tensors, config {cfg}")
    print("  worst relative errors: " + ", ".join(f"{k} {e:.1e}" for k, e in worst.items()))
    print(f"  loss {float(t['loss']):.12f}, grad_norm {float(t['grad_norm']):.12f}, "
          f"clipped steps {meta.get('clipped_steps')}")
    print("reference ok")


if __name__ == "__main__":
    main()
