"""A small GPT in plain JAX: the reference model that tessel's GPT is checked against.

What: nanoGPT's ``model.py`` with ``bias=False`` and no dropout, written as pure functions
over a flat ``dict`` of parameters, plus nanoGPT's training rule (AdamW exactly as
``torch.optim.AdamW``, global gradient-norm clipping as ``torch.nn.utils.clip_grad_norm_``,
and nanoGPT's warm-up + cosine learning-rate schedule).

Why: tessel re-implements this model on its distributed tensors. Following llm.c's method,
a dump of this model's logits, loss, gradients and optimizer-step losses (see
``make_reference.py``) is the exact target tessel's GPT is tested against, and the same code
(``bench_gpt_jax.py``) is the JAX peer in the benchmarks. No tessel code is used here.

Model (B batch, T time, C = n_embd, H = n_head, D = C / H, V = vocab_size = 65)::

    x = wte[idx] + wpe[:T]                                   # [B, T, C]
    for each block i:
        x = x + attn(ln_1(x))                                # pre-LN residual
        x = x + mlp(ln_2(x))
    logits = ln_f(x) @ wte.T                                 # tied output head, [B, T, V]
    loss = mean over all B*T positions of cross_entropy(logits, targets)

    ln(x)   = (x - mean) / sqrt(var + 1e-5) * weight         # biased variance, no bias
    attn(x) = merge_heads(softmax(q k^T / sqrt(D) + causal -inf mask) v) @ c_proj
              with q = x @ wq, k = x @ wk, v = x @ wv; head j owns columns j*D .. (j+1)*D
    mlp(x)  = gelu_erf(x @ c_fc) @ c_proj                    # exact (erf) GELU, 4C hidden

Parameters (weights stored [in, out], so y = x @ W), in the canonical order that
``param_names`` returns and that initialisation draws random numbers in::

    wte [V, C], wpe [block_size, C],
    h.{i}.ln_1.weight [C], h.{i}.attn.wq [C, C], h.{i}.attn.wk [C, C], h.{i}.attn.wv [C, C],
    h.{i}.attn.c_proj [C, C], h.{i}.ln_2.weight [C], h.{i}.mlp.c_fc [C, 4C],
    h.{i}.mlp.c_proj [4C, C]                                  for i = 0 .. n_layer-1,
    ln_f.weight [C]

Precision follows the parameters' dtype: enable ``jax_enable_x64`` and pass float64
parameters for the reference dump, float32 for benchmarks. ``GPTConfig.matmul_dtype``
"bfloat16" is tessel's mixed precision (``--dtype bf16``, examples/gpt/language_model.cpp
``mixed_matmul``): the seven matmuls of activations by weights per block and head (``project``)
take operands rounded to bfloat16, sum in float32 and round the product to bfloat16 before it
goes on in float32; attention's q k^T and att v, everything else, the parameters, gradients
and AdamW state stay float32.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict

import jax
import jax.numpy as jnp
import numpy as np

Params = Dict[str, jax.Array]

LN_EPS = 1e-5  # torch.nn.LayerNorm's default, as nanoGPT uses
INIT_STD = 0.02  # nanoGPT: every matrix and embedding ~ N(0, 0.02)


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    """Model shape. Frozen (hashable) so that it can be a static argument of jax.jit."""

    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    vocab_size: int = 65  # nanoGPT shakespeare_char's character vocabulary
    matmul_dtype: str = "float32"  # or "bfloat16": tessel's mixed precision (``project``)

    def __post_init__(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd {self.n_embd} is not a multiple of n_head {self.n_head}")
        if self.matmul_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"matmul_dtype {self.matmul_dtype!r}: float32 or bfloat16")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimiser and schedule: nanoGPT's train.py defaults with shakespeare_char's beta2."""

    learning_rate: float = 1e-3
    min_lr: float = 1e-4
    warmup_iters: int = 100
    lr_decay_iters: int = 5000
    beta1: float = 0.9
    beta2: float = 0.99
    eps: float = 1e-8
    weight_decay: float = 0.1
    grad_clip: float = 1.0  # 0 disables clipping, as in nanoGPT


# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


def param_shapes(cfg: GPTConfig) -> Dict[str, tuple]:
    """Every parameter's name and shape, in canonical order (insertion order of the dict)."""
    C, V = cfg.n_embd, cfg.vocab_size
    shapes = {"wte": (V, C), "wpe": (cfg.block_size, C)}
    for i in range(cfg.n_layer):
        p = f"h.{i}."
        shapes[p + "ln_1.weight"] = (C,)
        shapes[p + "attn.wq"] = (C, C)
        shapes[p + "attn.wk"] = (C, C)
        shapes[p + "attn.wv"] = (C, C)
        shapes[p + "attn.c_proj"] = (C, C)
        shapes[p + "ln_2.weight"] = (C,)
        shapes[p + "mlp.c_fc"] = (C, 4 * C)
        shapes[p + "mlp.c_proj"] = (4 * C, C)
    shapes["ln_f.weight"] = (C,)
    return shapes


def param_names(cfg: GPTConfig) -> list:
    return list(param_shapes(cfg))


def init_std(name: str, cfg: GPTConfig) -> float:
    """Standard deviation of a parameter's normal init; 0.0 marks a LayerNorm weight (ones).

    nanoGPT: N(0, 0.02) everywhere, except the two residual-stream projections
    (attn.c_proj, mlp.c_proj), which get N(0, 0.02 / sqrt(2 * n_layer)) (GPT-2's scaling).
    """
    if name.endswith(".weight"):  # ln_1, ln_2, ln_f
        return 0.0
    if name.endswith("attn.c_proj") or name.endswith("mlp.c_proj"):
        return INIT_STD / math.sqrt(2 * cfg.n_layer)
    return INIT_STD


def init_params(cfg: GPTConfig, seed: int, dtype=np.float32) -> Dict[str, np.ndarray]:
    """nanoGPT's initialisation, reproducible from numpy alone.

    Rule: ``rng = np.random.default_rng(seed)``; for each parameter in canonical order
    (``param_names``), a normal-initialised tensor is ``rng.standard_normal(shape) * std``
    (drawn in float64, C order, then cast to ``dtype``); LayerNorm weights are ones and draw
    nothing from ``rng``. Returns numpy arrays (put them on devices as you like).
    """
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in param_shapes(cfg).items():
        std = init_std(name, cfg)
        if std == 0.0:
            params[name] = np.ones(shape, dtype=dtype)
        else:
            params[name] = (rng.standard_normal(shape) * std).astype(dtype)
    return params


def count_params(params) -> int:
    """All parameters (wte counted once: it is tied with the output head)."""
    return sum(int(np.prod(p.shape)) for p in params.values())


# --------------------------------------------------------------------------------------------
# Forward pass
# --------------------------------------------------------------------------------------------


def layer_norm(x, weight, eps: float = LN_EPS):
    """LayerNorm over the last axis, no bias, biased variance (as torch.nn.LayerNorm)."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * weight


def project(x, w, matmul_dtype: str = "float32"):
    """x @ w, a matmul of activations by a weight. "bfloat16": as tessel's mixed_matmul, both
    operands rounded to bfloat16, the products summed in float32 (preferred_element_type), the
    sum rounded to bfloat16 and widened back. Autodiff gives the gradients tessel's VJP does:
    the incoming gradient rounded to bfloat16, its products with the bfloat16 operands summed
    in float32 and rounded to bfloat16, then widened to float32."""
    if matmul_dtype == "float32":
        return x @ w
    bf16 = jnp.bfloat16
    y = jax.lax.dot_general(x.astype(bf16), w.astype(bf16), (((x.ndim - 1,), (0,)), ((), ())),
                            preferred_element_type=jnp.float32)
    return y.astype(bf16).astype(x.dtype)


def causal_self_attention(x, wq, wk, wv, c_proj, n_head: int, matmul_dtype: str = "float32"):
    """Multi-head causal self-attention; x [B, T, C] -> [B, T, C]."""
    B, T, C = x.shape
    D = C // n_head

    def split_heads(y):  # [B, T, C] -> [B, H, T, D]; head j = columns j*D .. (j+1)*D
        return y.reshape(B, T, n_head, D).transpose(0, 2, 1, 3)

    q, k, v = (split_heads(project(x, w, matmul_dtype)) for w in (wq, wk, wv))
    att = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(D)  # [B, H, T, T]
    causal = jnp.tril(jnp.ones((T, T), dtype=bool))
    att = jnp.where(causal, att, -jnp.inf)  # row t sees positions 0..t
    att = jax.nn.softmax(att, axis=-1)
    y = att @ v  # [B, H, T, D]
    y = y.transpose(0, 2, 1, 3).reshape(B, T, C)  # merge heads back
    return project(y, c_proj, matmul_dtype)


def mlp(x, c_fc, c_proj, matmul_dtype: str = "float32"):
    """Position-wise MLP with the exact (erf) GELU, as torch.nn.GELU()."""
    return project(jax.nn.gelu(project(x, c_fc, matmul_dtype), approximate=False), c_proj,
                   matmul_dtype)


def block(x, params: Params, i: int, cfg: GPTConfig):
    """One pre-LN transformer block."""
    p = f"h.{i}."
    x = x + causal_self_attention(
        layer_norm(x, params[p + "ln_1.weight"]),
        params[p + "attn.wq"], params[p + "attn.wk"], params[p + "attn.wv"],
        params[p + "attn.c_proj"], cfg.n_head, cfg.matmul_dtype)
    x = x + mlp(layer_norm(x, params[p + "ln_2.weight"]),
                params[p + "mlp.c_fc"], params[p + "mlp.c_proj"], cfg.matmul_dtype)
    return x


def forward(params: Params, idx, cfg: GPTConfig):
    """Logits [B, T, V] for token ids idx [B, T] (T <= block_size).

    ``wte`` may have more rows than ``cfg.vocab_size`` (a benchmark pads the vocabulary so
    that it divides a mesh axis); the padded logit columns are then masked to -inf, so the
    loss and gradients are those of the unpadded model.
    """
    T = idx.shape[1]
    if T > cfg.block_size:
        raise ValueError(f"sequence length {T} exceeds block_size {cfg.block_size}")
    wte = params["wte"]
    x = wte[idx] + params["wpe"][:T]
    for i in range(cfg.n_layer):
        x = block(x, params, i, cfg)
    x = layer_norm(x, params["ln_f.weight"])
    logits = project(x, wte.T, cfg.matmul_dtype)  # weight tying: the output head is the token embedding
    if wte.shape[0] > cfg.vocab_size:
        real = jnp.arange(wte.shape[0]) < cfg.vocab_size
        logits = jnp.where(real, logits, -jnp.inf)
    return logits


def cross_entropy(logits, targets):
    """Mean negative log-likelihood of targets [B, T] over all B*T positions."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    picked = jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    return -jnp.mean(picked)


def loss_fn(params: Params, idx, targets, cfg: GPTConfig):
    return cross_entropy(forward(params, idx, cfg), targets)


# --------------------------------------------------------------------------------------------
# Training: schedule, clipping, AdamW
# --------------------------------------------------------------------------------------------


def get_lr(it: int, tc: TrainConfig) -> float:
    """nanoGPT's get_lr: linear warm-up, cosine decay to min_lr, then min_lr."""
    if it < tc.warmup_iters:
        return tc.learning_rate * (it + 1) / (tc.warmup_iters + 1)
    if it > tc.lr_decay_iters:
        return tc.min_lr
    ratio = (it - tc.warmup_iters) / (tc.lr_decay_iters - tc.warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return tc.min_lr + coeff * (tc.learning_rate - tc.min_lr)


def global_norm(tree: Params):
    """L2 norm of all leaves together (torch's total_norm with norm_type 2)."""
    return jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in jax.tree_util.tree_leaves(tree)))


def clip_by_global_norm(grads: Params, max_norm: float):
    """torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is < 1.

    Returns (clipped grads, norm before clipping).
    """
    norm = global_norm(grads)
    if max_norm <= 0:
        return grads, norm
    scale = jnp.minimum(1.0, max_norm / (norm + 1e-6)).astype(norm.dtype)
    return jax.tree_util.tree_map(lambda g: g * scale, grads), norm


def adamw_init(params: Params):
    """Optimizer state: step count and the first and second moments (zeros like params)."""
    def zeros():
        return jax.tree_util.tree_map(jnp.zeros_like, params)

    return {"step": jnp.zeros((), jnp.int32), "m": zeros(), "v": zeros()}


def decays(name: str, param) -> bool:
    """nanoGPT's optimizer groups: tensors with ndim >= 2 decay (wte, wpe, every matrix),
    LayerNorm weights (ndim 1) do not."""
    return param.ndim >= 2


def adamw_update(params: Params, grads: Params, state, lr, tc: TrainConfig):
    """One step of torch.optim.AdamW (amsgrad=False, maximize=False).

    Per parameter, with t = step + 1:
        p <- p * (1 - lr * wd)                         (only when decays(p); decoupled)
        m <- beta1 * m + (1 - beta1) * g
        v <- beta2 * v + (1 - beta2) * g * g
        p <- p - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
    """
    t = state["step"] + 1
    tf = t.astype(jnp.result_type(float))
    bc1 = 1.0 - tc.beta1 ** tf
    bc2_sqrt = jnp.sqrt(1.0 - tc.beta2 ** tf)
    new_p, new_m, new_v = {}, {}, {}
    for name, p in params.items():
        g = grads[name]
        dt = p.dtype
        lr_p = jnp.asarray(lr, dt)
        if decays(name, p) and tc.weight_decay != 0.0:
            p = p * (1.0 - lr_p * tc.weight_decay)
        m = tc.beta1 * state["m"][name] + (1.0 - tc.beta1) * g
        v = tc.beta2 * state["v"][name] + (1.0 - tc.beta2) * g * g
        step_size = lr_p / bc1.astype(dt)
        denom = jnp.sqrt(v) / bc2_sqrt.astype(dt) + tc.eps
        new_p[name] = p - step_size * m / denom
        new_m[name], new_v[name] = m, v
    return new_p, {"step": t, "m": new_m, "v": new_v}


def train_step_of(loss):
    """The training step of a model whose loss is ``loss(params, idx, targets, cfg)``:
    ``train_step`` below for this GPT, the Llama reference's for its model."""

    def step(params: Params, opt_state, idx, targets, lr, cfg, tc: TrainConfig):
        value, grads = jax.value_and_grad(loss)(params, idx, targets, cfg)
        grads, norm = clip_by_global_norm(grads, tc.grad_clip)
        params, opt_state = adamw_update(params, grads, opt_state, lr, tc)
        return params, opt_state, value, norm

    return step


# Loss and gradients on one batch, clip, AdamW update: train_step(params, opt_state, idx,
# targets, lr, cfg, tc). ``lr`` is an argument (not taken from the schedule inside) so that one
# compiled step serves every iteration: call ``get_lr(it, tc)`` on the host. ``cfg`` and ``tc``
# must be static under jit: use ``jit_train_step`` or ``jax.jit(..., static_argnames=("cfg",
# "tc"))``. Returns (new params, new optimizer state, loss before the update, grad norm before
# clipping).
train_step = train_step_of(loss_fn)


jit_train_step = jax.jit(train_step, static_argnames=("cfg", "tc"))
jit_loss_and_grads = jax.jit(jax.value_and_grad(loss_fn), static_argnames=("cfg",))
jit_forward = jax.jit(forward, static_argnames=("cfg",))


def flops_per_token(cfg: GPTConfig) -> float:
    """Training FLOPs per token, PaLM-style, as nanoGPT's estimate_mfu and torchtitan count:
    6 * N + 12 * n_layer * n_embd * block_size, where N is every parameter except wpe (a pure
    lookup; wte counts once, for the tied output matmul). Causal masking is not discounted."""
    n = sum(int(np.prod(s)) for k, s in param_shapes(cfg).items() if k != "wpe")
    return 6.0 * n + 12.0 * cfg.n_layer * cfg.n_embd * cfg.block_size
