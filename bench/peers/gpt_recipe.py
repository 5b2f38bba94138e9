"""tessel's GPT recipe recomputed with numpy: the configurations, the initial parameters, the
batches and the learning-rate schedule of examples/gpt, so that a peer written in another
framework (bench/peers/torch_gpt.py) trains from the same start on the same data and its loss
curve can be compared with tessel's step by step.

    from gpt_recipe import CharText, config, init_params, learning_rate
    cfg = config("tiny")
    params = init_params(cfg)                         # name -> float32 array, tessel's order
    idx, targets = CharText.load(path).batch(step, cfg)

Each rule is tessel's, element for element (integer arithmetic exact, float64 as tessel's):
- examples/gpt/gpt_config.cpp: the `tiny`, `baby` and `test` presets;
- examples/gpt/gpt_model.cpp GptModel::init: parameter i (nanoGPT's order) is
  random_normal(seed * 1000 + i, 0, std) or ones; src/core/tensor_random.cpp: element j of a
  normal tensor is Box-Muller's cosine branch on splitmix64 counters 2j and 2j + 1;
- examples/gpt/char_dataset.cpp: the byte vocabulary, the 90 % train split, window r of step s
  starting at a splitmix64 hash of (seed, split, s, r);
- src/dtensor/ops/optimizers.cpp WarmupCosineDecay, and tools/cmd_train.cpp's schedule of
  `tessel train gpt --steps N` (decay over N steps, warm-up min(100, N / 10)).
python/tests/test_bench_peers.py checks the initial parameters against tessel's random_normal.
numpy only (1.x or 2.x), so the same file serves Debian's python and the peers' venv.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's Weyl increment
MIX_1, MIX_2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


@dataclasses.dataclass(frozen=True)
class GptConfig:
    """The fields of examples/gpt/gpt_config.h that the training step uses."""

    name: str
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 64
    vocab_size: int = 65
    dropout: float = 0.0
    batch_size: int = 12
    learning_rate: float = 1e-3
    min_lr: float = 1e-4
    warmup_iters: int = 100
    lr_decay_iters: int = 2000
    beta1: float = 0.9
    beta2: float = 0.99
    eps: float = 1e-8
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 1337


PRESETS = {
    "tiny": {},  # nanoGPT's CPU recipe: 4 layers, 4 heads, width 128, context 64, batch 12
    "baby": dict(n_layer=6, n_head=6, n_embd=384, block_size=256, dropout=0.2, batch_size=64,
                 lr_decay_iters=5000),  # config/train_shakespeare_char.py
    "test": dict(n_layer=2, n_head=4, n_embd=32, block_size=16, batch_size=4),  # tests/gpt's
}


def config(name: str, **changes) -> GptConfig:
    if name not in PRESETS:
        raise ValueError(f"gpt_recipe: unknown configuration {name!r}: one of {sorted(PRESETS)}")
    return GptConfig(name, **{**PRESETS[name], **changes})


def train_schedule(cfg: GptConfig, steps: int) -> GptConfig:
    """The schedule `tessel train gpt --steps N` trains with (tools/cmd_train.cpp config_of)."""
    return dataclasses.replace(cfg, lr_decay_iters=steps, warmup_iters=min(cfg.warmup_iters,
                                                                           steps // 10))


def learning_rate(cfg: GptConfig, step: int) -> float:
    """WarmupCosineDecay (nanoGPT's get_lr) at a 0-based step."""
    if step < cfg.warmup_iters:
        return cfg.learning_rate * (step + 1) / (cfg.warmup_iters + 1)
    if step > cfg.lr_decay_iters:
        return cfg.min_lr
    ratio = (step - cfg.warmup_iters) / max(cfg.lr_decay_iters - cfg.warmup_iters, 1)
    return cfg.min_lr + 0.5 * (1 + math.cos(math.pi * ratio)) * (cfg.learning_rate - cfg.min_lr)


# ---- initial parameters -------------------------------------------------------------------


def param_specs(cfg: GptConfig) -> list[tuple[str, tuple, float]]:
    """[(name, shape [in, out] for matrices, init std or 0 for ones)] in GptModel's order."""
    c = cfg.n_embd
    std, residual = 0.02, 0.02 / math.sqrt(2.0 * cfg.n_layer)
    specs = [("wte", (cfg.vocab_size, c), std), ("wpe", (cfg.block_size, c), std)]
    for i in range(cfg.n_layer):
        h = f"h.{i}."
        specs += [(h + "ln_1.weight", (c,), 0.0), (h + "attn.wq", (c, c), std),
                  (h + "attn.wk", (c, c), std), (h + "attn.wv", (c, c), std),
                  (h + "attn.c_proj", (c, c), residual), (h + "ln_2.weight", (c,), 0.0),
                  (h + "mlp.c_fc", (c, 4 * c), std), (h + "mlp.c_proj", (4 * c, c), residual)]
    specs.append(("ln_f.weight", (c,), 0.0))
    return specs


def _mix64_array(z: np.ndarray) -> np.ndarray:
    """splitmix64's output function on a uint64 array (arithmetic wraps modulo 2^64)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX_1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX_2)
    return z ^ (z >> np.uint64(31))


def _mix64_int(z: int) -> int:
    z = ((z ^ (z >> 30)) * MIX_1) & MASK
    z = ((z ^ (z >> 27)) * MIX_2) & MASK
    return z ^ (z >> 31)


def random_normal(shape: tuple, seed: int, std: float) -> np.ndarray:
    """tessel's random_normal(shape, seed, mean 0, std) as float32 (Tensor::random_normal_block)."""
    n = int(np.prod(shape))
    start = np.uint64(_mix64_int((seed + GOLDEN) & MASK))
    counters = np.arange(n, dtype=np.uint64) * np.uint64(2)
    with np.errstate(over="ignore"):
        h1 = _mix64_array(start + counters * np.uint64(GOLDEN))
        h2 = _mix64_array(start + (counters + np.uint64(1)) * np.uint64(GOLDEN))
    u1 = ((h1 >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * 2.0 ** -53  # (0, 1]
    u2 = (h2 >> np.uint64(11)).astype(np.float64) * 2.0 ** -53  # [0, 1)
    z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)
    return (0.0 + std * z).astype(np.float32).reshape(shape)


def init_params(cfg: GptConfig) -> dict[str, np.ndarray]:
    """GptModel::init(cfg.seed): name -> float32 array ([in, out] matrices), tessel's order."""
    params = {}
    for i, (name, shape, std) in enumerate(param_specs(cfg)):
        params[name] = (np.ones(shape, np.float32) if std == 0.0 else
                        random_normal(shape, cfg.seed * 1000 + i, std))
    return params


# ---- batches ------------------------------------------------------------------------------


def _split_mix64(z: int) -> int:
    """char_dataset.cpp's mix64: the Weyl step, then splitmix64's output function."""
    return _mix64_int((z + GOLDEN) & MASK)


class CharText:
    """CharDataset: the text's distinct bytes, sorted, are the vocabulary; 90 % trains."""

    def __init__(self, data: bytes):
        chars = sorted(set(data))
        if len(chars) < 2:
            raise ValueError(f"gpt_recipe: the text has {len(chars)} distinct characters; "
                             "at least 2 are needed")
        lookup = np.zeros(256, np.int32)
        lookup[chars] = np.arange(len(chars), dtype=np.int32)
        self.vocab_size = len(chars)
        self.ids = lookup[np.frombuffer(data, np.uint8)]
        self.train_size = int(len(self.ids) * 0.9)

    @classmethod
    def load(cls, path) -> "CharText":
        with open(path, "rb") as f:
            return cls(f.read())

    def batch(self, step: int, cfg: GptConfig) -> tuple[np.ndarray, np.ndarray]:
        """CharDataset::batch(kTrain, step, batch_size, block_size, seed): int64 [B, T] pairs."""
        b, t, n = cfg.batch_size, cfg.block_size, self.train_size
        if n < t + 1:
            raise ValueError(f"gpt_recipe: a batch of {b} x {t} needs {t + 1} characters; the "
                             f"train split has {n}")
        stream = _split_mix64(cfg.seed ^ _split_mix64(1))  # 1: the train split
        starts = [_split_mix64(stream ^ _split_mix64((step * 1000003 + r) & MASK)) % (n - t)
                  for r in range(b)]
        x = np.stack([self.ids[s:s + t] for s in starts]).astype(np.int64)
        y = np.stack([self.ids[s + 1:s + t + 1] for s in starts]).astype(np.int64)
        return x, y
