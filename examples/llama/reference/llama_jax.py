"""A small Llama in plain JAX: the reference model that tessel's Llama is checked against.

What: a Llama-style decoder (Llama 2's ``model.py`` shape: RMSNorm, rotary position
embeddings, SwiGLU MLP, grouped-query attention, no biases, tied or untied embeddings)
written as pure functions over a flat ``dict`` of parameters, with no dropout. The training
rule (AdamW as ``torch.optim.AdamW``, clipping as ``torch.nn.utils.clip_grad_norm_``, nanoGPT's
warm-up + cosine schedule) is the GPT reference's (``examples/gpt/reference/gpt_jax.py``),
imported from there.

Why: tessel builds the same model from its ops on distributed tensors (examples/llama/).
``make_reference.py`` dumps this model's logits, loss, gradients and 10 AdamW-step losses in
float64; tessel must reproduce them (llm.c's method). No tessel code is used here, and the
formulation differs on purpose from tessel's: the rotation is a complex product (tessel: its
rotary_embedding op), the query groups attend through a grouped einsum (tessel: the kv heads
repeated to the query heads).

Model (B batch, T time, C = n_embd, H = n_head, K = n_kv_head, g = H / K, D = C / H,
F = ffn_hidden, V = vocab_size = 65)::

    x = tok_embeddings[idx]                                   # [B, T, C]; no position table
    for each layer i:
        x = x + attention(rms_norm(x, attention_norm))        # pre-norm residual
        x = x + feed_forward(rms_norm(x, ffn_norm))
    logits = rms_norm(x, norm) @ W.T      W = tok_embeddings (tied) or output (untied), [V, C]
    loss = mean over all B*T positions of cross_entropy(logits, targets)

    rms_norm(x, w) = x / sqrt(mean(x^2 over C) + 1e-5) * w
    rope(x)[t]     : for each head, the pairs (x_j, x_{j + D/2}), j < D/2, are rotated by the
                     angle t * theta^(-2j/D) (theta 10000): "rotate_half", as Hugging Face's
                     Llama (Meta's checkpoint interleaves the pairs instead; the two differ by a
                     fixed permutation of wq's and wk's columns within each head)
    attention(x)   = merge(softmax(rope(q) rope(k)^T / sqrt(D), causal) v) @ wo,
                     q = x @ wq [B,T,H,D], k = x @ wk, v = x @ wv [B,T,K,D];
                     query head h attends with kv head h // g (Llama's repeat_kv);
                     head h owns columns h*D .. (h+1)*D of wq (of wk, wv for kv heads)
    feed_forward(x) = (silu(x @ w1) * (x @ w3)) @ w2         # SwiGLU

Parameters, weights stored [in, out] (y = x @ W) except the [V, C] tables, in the canonical
order that ``param_names`` returns and initialisation draws random numbers in::

    tok_embeddings [V, C],
    layers.{i}.attention_norm.weight [C], layers.{i}.attention.wq [C, H*D],
    layers.{i}.attention.wk [C, K*D], layers.{i}.attention.wv [C, K*D],
    layers.{i}.attention.wo [H*D, C], layers.{i}.ffn_norm.weight [C],
    layers.{i}.feed_forward.w1 [C, F], layers.{i}.feed_forward.w2 [F, C],
    layers.{i}.feed_forward.w3 [C, F]                         for i = 0 .. n_layer-1,
    norm.weight [C], output [V, C] (untied only)

Precision follows the parameters' dtype (enable ``jax_enable_x64`` for float64).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path
from typing import Dict

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpt" / "reference"))

# The training rule is the GPT reference's: nanoGPT's schedule, torch's clipping and AdamW.
from gpt_jax import (TrainConfig, adamw_init, cross_entropy, get_lr,  # noqa: E402,F401
                     global_norm, train_step_of)

Params = Dict[str, jax.Array]

NORM_EPS = 1e-5   # Llama 2's rms_norm_eps
ROPE_THETA = 10000.0
INIT_STD = 0.02   # every matrix and table ~ N(0, 0.02); wo, w2 scaled by 1/sqrt(2 n_layer)


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Model shape. Frozen (hashable) so that it can be a static argument of jax.jit."""

    n_layer: int
    n_head: int
    n_kv_head: int
    n_embd: int
    ffn_hidden: int
    block_size: int
    vocab_size: int = 65
    tie_embeddings: bool = False

    def __post_init__(self):
        if self.n_embd % self.n_head or self.n_head % self.n_kv_head:
            raise ValueError(f"n_embd {self.n_embd}, n_head {self.n_head}, n_kv_head "
                             f"{self.n_kv_head}: need n_head | n_embd and n_kv_head | n_head")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even (rotary pairs)")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


def param_shapes(cfg: LlamaConfig) -> Dict[str, tuple]:
    """Every parameter's name and shape, in canonical order (insertion order of the dict)."""
    C, V, F = cfg.n_embd, cfg.vocab_size, cfg.ffn_hidden
    q, kv = cfg.n_head * cfg.head_dim, cfg.n_kv_head * cfg.head_dim
    shapes = {"tok_embeddings": (V, C)}
    for i in range(cfg.n_layer):
        p = f"layers.{i}."
        shapes[p + "attention_norm.weight"] = (C,)
        shapes[p + "attention.wq"] = (C, q)
        shapes[p + "attention.wk"] = (C, kv)
        shapes[p + "attention.wv"] = (C, kv)
        shapes[p + "attention.wo"] = (q, C)
        shapes[p + "ffn_norm.weight"] = (C,)
        shapes[p + "feed_forward.w1"] = (C, F)
        shapes[p + "feed_forward.w2"] = (F, C)
        shapes[p + "feed_forward.w3"] = (C, F)
    shapes["norm.weight"] = (C,)
    if not cfg.tie_embeddings:
        shapes["output"] = (V, C)
    return shapes


def param_names(cfg: LlamaConfig) -> list:
    return list(param_shapes(cfg))


def init_std(name: str, cfg: LlamaConfig) -> float:
    """Standard deviation of a parameter's normal init; 0.0 marks an RMSNorm weight (ones)."""
    if name.endswith(".weight"):
        return 0.0
    if name.endswith("attention.wo") or name.endswith("feed_forward.w2"):
        return INIT_STD / math.sqrt(2 * cfg.n_layer)
    return INIT_STD


def init_params(cfg: LlamaConfig, seed: int, dtype=np.float32) -> Dict[str, np.ndarray]:
    """``rng = np.random.default_rng(seed)``; in canonical order, a normal tensor is
    ``rng.standard_normal(shape) * std`` (float64, C order, then cast); norms are ones and draw
    nothing."""
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in param_shapes(cfg).items():
        std = init_std(name, cfg)
        params[name] = (np.ones(shape, dtype=dtype) if std == 0.0 else
                        (rng.standard_normal(shape) * std).astype(dtype))
    return params


# --------------------------------------------------------------------------------------------
# Forward pass
# --------------------------------------------------------------------------------------------


def rms_norm(x, weight, eps: float = NORM_EPS):
    return x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + eps) * weight


def rope(x):
    """x [B, T, heads, D]: the pairs (x_j, x_{j+D/2}) as complex numbers times e^{i t w_j}."""
    T, D = x.shape[1], x.shape[3]
    half = D // 2
    freq = ROPE_THETA ** (-np.arange(half, dtype=np.float64) * 2.0 / D)
    angle = np.arange(T, dtype=np.float64)[:, None] * freq[None, :]   # [T, D/2]
    rotation = jnp.asarray(np.exp(1j * angle))[None, :, None, :]      # [1, T, 1, D/2]
    z = jax.lax.complex(x[..., :half], x[..., half:]) * rotation
    return jnp.concatenate([jnp.real(z), jnp.imag(z)], axis=-1).astype(x.dtype)


def attention(x, wq, wk, wv, wo, cfg: LlamaConfig):
    """Grouped-query causal self-attention; x [B, T, C] -> [B, T, C]."""
    B, T, _ = x.shape
    H, K, D = cfg.n_head, cfg.n_kv_head, cfg.head_dim
    g = H // K
    q = rope((x @ wq).reshape(B, T, H, D)).reshape(B, T, K, g, D)  # head h = (h // g, h % g)
    k = rope((x @ wk).reshape(B, T, K, D))
    v = (x @ wv).reshape(B, T, K, D)
    scores = jnp.einsum("btkgd,bskd->bkgts", q, k) / math.sqrt(D)  # [B, K, g, T, T]
    causal = jnp.tril(jnp.ones((T, T), dtype=bool))
    probs = jax.nn.softmax(jnp.where(causal, scores, -jnp.inf), axis=-1)
    y = jnp.einsum("bkgts,bskd->btkgd", probs, v).reshape(B, T, H * D)
    return y @ wo


def feed_forward(x, w1, w2, w3):
    return (jax.nn.silu(x @ w1) * (x @ w3)) @ w2


def forward(params: Params, idx, cfg: LlamaConfig):
    """Logits [B, T, V] for token ids idx [B, T] (T <= block_size)."""
    if idx.shape[1] > cfg.block_size:
        raise ValueError(f"sequence length {idx.shape[1]} exceeds block_size {cfg.block_size}")
    x = params["tok_embeddings"][idx]
    for i in range(cfg.n_layer):
        p = f"layers.{i}."
        x = x + attention(rms_norm(x, params[p + "attention_norm.weight"]),
                          params[p + "attention.wq"], params[p + "attention.wk"],
                          params[p + "attention.wv"], params[p + "attention.wo"], cfg)
        x = x + feed_forward(rms_norm(x, params[p + "ffn_norm.weight"]),
                             params[p + "feed_forward.w1"], params[p + "feed_forward.w2"],
                             params[p + "feed_forward.w3"])
    head = params["tok_embeddings"] if cfg.tie_embeddings else params["output"]
    return rms_norm(x, params["norm.weight"]) @ head.T


def loss_fn(params: Params, idx, targets, cfg: LlamaConfig):
    return cross_entropy(forward(params, idx, cfg), targets)


# Loss and gradients on one batch, clip, AdamW (as gpt_jax.train_step): returns (params,
# optimizer state, loss before the update, gradient norm before clipping).
train_step = train_step_of(loss_fn)


jit_train_step = jax.jit(train_step, static_argnames=("cfg", "tc"))
jit_loss_and_grads = jax.jit(jax.value_and_grad(loss_fn), static_argnames=("cfg",))
jit_forward = jax.jit(forward, static_argnames=("cfg",))
