"""nanoGPT's character-level GPT written with tessel's Python API: the same model, layouts and
training step as examples/gpt/gpt_model.cpp (read that file's header for the layouts).

    PYTHONPATH=build/python /usr/bin/python3 examples/gpt/gpt.py --steps 200 --mesh 2x2

Parameters are a dict name -> DTensor in nanoGPT's order; `loss(params, idx, targets)` is a plain
function, so `tessel.value_and_grad` differentiates it and every gradient comes back in its
parameter's layout.
"""
import argparse
import functools
import math
import os
import sys
import time

import numpy as np

import tessel

U = tessel.UNSHARDED


class Config:
    """The "test", "tiny" and "baby" configurations of examples/gpt/gpt_config.h, with the
    training hyper-parameters of examples/train/training_config.h."""

    MODEL = "gpt"
    PRESETS = {
        "tiny": dict(n_layer=4, n_head=4, n_embd=128, block_size=64, batch_size=12),
        "test": dict(n_layer=2, n_head=4, n_embd=32, block_size=16, batch_size=4),
        "baby": dict(n_layer=6, n_head=6, n_embd=384, block_size=256, batch_size=64, dropout=0.2),
    }

    def __init__(self, name="tiny"):
        if name not in self.PRESETS:
            raise ValueError(f"{self.MODEL}: unknown configuration '{name}': one of "
                             f"{sorted(self.PRESETS)}")
        self.dropout = 0.0
        # What the backward pass computes again instead of keeping (tessel.recompute_grad):
        # "none", "selective" (attention's [B, H, T, T] part) or "full" (each block).
        self.recompute = "none"
        # Attention's [B, H, T, T] part: "fused" (one tessel.causal_attention op, no map kept for
        # the backward pass) or "composed" (matmul, causal_softmax, dropout, matmul).
        self.attention = "fused"
        # Fully sharded parameters (ZeRO-3): stored sharded over `batch` as well (fsdp_specs),
        # each all-gathered where the forward pass uses it (gather), its gradient reduce-scattered.
        self.fsdp = False
        self.__dict__.update(self.PRESETS[name])
        self.vocab_size = 65
        self.learning_rate, self.min_lr = 1e-3, 1e-4
        self.warmup_iters, self.lr_decay_iters = 100, 2000
        self.weight_decay, self.grad_clip = 0.1, 1.0


def parameter_specs(config, mesh_dims):
    """[(name, shape, sharding specs, init stddev or 0 for ones)] in nanoGPT's order."""
    m = "model" if "model" in mesh_dims else U
    c = config.n_embd
    std, residual = 0.02, 0.02 / math.sqrt(2 * config.n_layer)
    specs = [("wte", (config.vocab_size, c), [m, U], std),     # vocabulary-parallel rows
             ("wpe", (config.block_size, c), [U, U], std)]
    for i in range(config.n_layer):
        h = f"h.{i}."
        specs += [(h + "ln_1.weight", (c,), [U], 0),
                  (h + "attn.wq", (c, c), [U, m], std),            # column-parallel: whole heads
                  (h + "attn.wk", (c, c), [U, m], std),
                  (h + "attn.wv", (c, c), [U, m], std),
                  (h + "attn.c_proj", (c, c), [m, U], residual),   # row-parallel: Partial sum
                  (h + "ln_2.weight", (c,), [U], 0),
                  (h + "mlp.c_fc", (c, 4 * c), [U, m], std),
                  (h + "mlp.c_proj", (4 * c, c), [m, U], residual)]
    specs.append(("ln_f.weight", (c,), [U], 0))
    return specs


def fsdp_specs(specs, mesh):
    """The stored specs of fully sharded parameters (examples/gpt/language_model.h): each
    parameter's first unsharded axis also over `batch`, in uneven blocks where its size does not
    divide; the specs unchanged without a `batch` dimension of size > 1."""
    if "batch" not in mesh.dim_names or mesh.dim_size("batch") == 1:
        return specs
    out = []
    for name, shape, s, std in specs:
        s = list(s)
        if U in s:
            s[s.index(U)] = "batch"
        out.append((name, shape, s, std))
    return out


def stored_specs(config, mesh, specs):
    """The layouts parameters are kept in: `specs`, or with config.fsdp fsdp_specs(specs)."""
    return fsdp_specs(specs, mesh) if getattr(config, "fsdp", False) else specs


def gather(params, name, config, mesh, specs=None):
    """Parameter `name` in its compute layout (specs: the model's parameter_specs): itself, or
    with fsdp its all-gather over `batch` (a relayout: the gradient tape reduce-scatters its
    gradient back to the shard)."""
    specs = specs if specs is not None else parameter_specs(config, mesh.dim_names)
    layout = tessel.Layout(next(s for n, _, s, _ in specs if n == name), mesh)
    w = params[name]
    return w if tessel.fetch_layout(w) == layout else tessel.relayout(w, layout)


def place(values, config, mesh, specs=None):
    """A dict name -> numpy array laid out on `mesh` as the model wants (specs: the model's
    parameter_specs, this module's by default)."""
    specs = stored_specs(config, mesh,
                         specs if specs is not None else parameter_specs(config, mesh.dim_names))
    return {name: tessel.copy_to_mesh(np.asarray(values[name]), tessel.Layout(s, mesh))
            for name, _, s, _ in specs}


def init(config, mesh, seed, specs=None, names=None):
    """nanoGPT's initialisation, keyed by (seed, parameter index): the same on every mesh.
    names: only these parameters (each still keyed by its index in the whole list), e.g. one
    pipeline stage's (gpt_pipeline.py)."""
    params = {}
    specs = stored_specs(config, mesh,
                         specs if specs is not None else parameter_specs(config, mesh.dim_names))
    for i, (name, shape, s, std) in enumerate(specs):
        if names is not None and name not in names:
            continue
        layout = tessel.Layout(s, mesh)
        params[name] = (tessel.ones(shape, layout) if std == 0 else
                        tessel.random_normal(shape, layout, seed * 1000 + i, 0.0, std))
    return params


# A block's parameters in the order block() takes them.
BLOCK_PARAMS = ("ln_1.weight", "attn.wq", "attn.wk", "attn.wv", "attn.c_proj", "ln_2.weight",
                "mlp.c_fc", "mlp.c_proj")


def fused_attention_runs(attention, mesh):
    """Whether attention "fused" runs as tessel.causal_attention on `mesh`: on GPU devices only
    when the op has a GPU kernel (host-staged, every block would go to the host and back) and
    TESSEL_GPU_FUSED_ATTENTION=1 opts in to it, as the C++ GPT decides (gpt_config.h)."""
    opted_in = os.environ.get("TESSEL_GPU_FUSED_ATTENTION", "")
    if opted_in not in ("", "0", "1"):
        raise ValueError(f"gpt: TESSEL_GPU_FUSED_ATTENTION='{opted_in}' is not 0 or 1")
    on_gpu = tessel.has_gpu_kernel("causal_attention") and opted_in == "1"
    return attention == "fused" and (mesh.device_type() != "GPU" or on_gpu)


def causal_self_attention(q, k, v, scale, fused, rate=0.0, seed=0):
    """Causal self-attention of q, k, v [B, T, heads, D]: one tessel.causal_attention op when
    `fused`, else the composed ops on the [B, heads, T, D] transposes (the same dropout mask)."""
    if fused:
        return tessel.causal_attention(q, k, v, scale, rate, seed)

    def swap(y):  # [B, T, heads, D] <-> [B, heads, T, D]
        return tessel.transpose(y, [0, 2, 1, 3])

    att = tessel.causal_softmax(tessel.matmul(swap(q), swap(k), transpose_b=True), scale)
    return swap(tessel.matmul(tessel.dropout(att, rate, seed) if rate else att, swap(v)))


def dropper(config, dropout_seed):
    """drop(y, site): config.dropout on y with the mask keyed by (dropout_seed, site, global
    element index); y itself without a dropout_seed (no training) or without dropout."""

    def drop(y, site):
        if dropout_seed is None or config.dropout == 0:
            return y
        return tessel.dropout(y, config.dropout, dropout_seed * 1000003 + site)

    return drop


def embed(params, idx, config, dropout_seed=None, wte=None):
    """The residual stream's start [B, T, C] of token ids [B, T]: token and position embeddings
    (a Partial sum over `model`, the positions added once), dropout site 1. wte: the token
    embedding already in its compute layout (gathered), else gathered here."""
    t = idx.shape[1]
    mesh = tessel.fetch_layout(idx).mesh
    wte = wte if wte is not None else gather(params, "wte", config, mesh)
    wpe = gather(params, "wpe", config, mesh)
    pos = wpe if t == config.block_size else tessel.slice(wpe, [0, 0], [t, -1])
    return dropper(config, dropout_seed)(tessel.embedding_lookup(wte, idx) + pos, 1)


def blocks(params, x, config, layers=None, dropout_seed=None):
    """The residual stream x [B, T, C] through the transformer blocks `layers` (block indices
    in order: all of them by default; a pipeline stage runs its own range)."""
    b, t, _ = x.shape
    heads, d = config.n_head, config.n_embd // config.n_head
    mesh = tessel.fetch_layout(x).mesh
    use = functools.partial(gather, config=config, mesh=mesh)  # fsdp: gathered where used
    drop = dropper(config, dropout_seed)

    def split_heads(y):  # [B, T, C] -> [B, T, heads, D], a view
        return tessel.reshape(y, (b, t, heads, d))

    fused = fused_attention_runs(config.attention, mesh)

    def attention(q, k, v, i):  # the [B, H, T, T] part, on [B, T, heads, D]
        rate = config.dropout if dropout_seed is not None else 0.0
        seed = dropout_seed * 1000003 + 3 * i + 2 if rate else 0  # dropper's key for site 3i+2
        return causal_self_attention(q, k, v, 1.0 / math.sqrt(d), fused, rate, seed)

    def block(i, x, *stored):
        # Gathered inside what full recomputation runs again: dropped after the block's forward
        # pass, gathered again in its backward pass.
        ln_1, wq, wk, wv, c_proj, ln_2, c_fc, mlp_proj = (
            use({f"h.{i}.{n}": w}, f"h.{i}.{n}") for n, w in zip(BLOCK_PARAMS, stored))
        h = tessel.layer_norm(x, ln_1)
        q, k, v = (split_heads(tessel.matmul(h, w)) for w in (wq, wk, wv))
        core = functools.partial(attention, i=i)
        if config.recompute == "selective" and not fused:
            core = tessel.recompute_grad(core)  # the fused op keeps no map to recompute
        y = tessel.reshape(core(q, k, v), (b, t, heads * d))
        x = x + drop(tessel.matmul(y, c_proj), 3 * i + 3)
        h = tessel.layer_norm(x, ln_2)
        return x + drop(tessel.matmul(tessel.gelu(tessel.matmul(h, c_fc), approximate=False),
                                      mlp_proj), 3 * i + 4)

    for i in (range(config.n_layer) if layers is None else layers):
        run = functools.partial(block, i)
        if config.recompute == "full":
            run = tessel.recompute_grad(run)
        x = run(x, *(params[f"h.{i}.{n}"] for n in BLOCK_PARAMS))
    return x


def head(params, x, config, wte=None):
    """Logits [B, T, V] (the vocabulary sharded over `model`) of the residual stream x: the
    final layer norm and the tied output head (wte: as in embed)."""
    mesh = tessel.fetch_layout(x).mesh
    wte = wte if wte is not None else gather(params, "wte", config, mesh)
    h = tessel.layer_norm(x, gather(params, "ln_f.weight", config, mesh))
    return tessel.matmul(h, wte, transpose_b=True)  # tied output head


def forward(params, idx, config, dropout_seed=None):
    """Logits [B, T, V] (the vocabulary sharded over `model`). With a dropout_seed (training),
    config.dropout applies to the embeddings (site 1), the attention probabilities and each
    block's outputs (sites 3i + 2, 3i + 3, 3i + 4 in block i); the masks are keyed by (seed, site,
    global element index): the same on every mesh, and in a recomputation."""
    wte = gather(params, "wte", config, tessel.fetch_layout(idx).mesh)  # gathered once (fsdp)
    x = embed(params, idx, config, dropout_seed, wte)
    return head(params, blocks(params, x, config, None, dropout_seed), config, wte)


def cross_entropy(logits, targets):
    """The mean cross-entropy of logits [B, T, V] against target ids [B, T]."""
    return tessel.reduce_mean(tessel.sparse_softmax_cross_entropy_with_logits(targets, logits))


def loss(params, idx, targets, config, dropout_seed=None):
    return cross_entropy(forward(params, idx, config, dropout_seed), targets)


class Trainer:
    """AdamW (decay on matrices), warm-up + cosine learning rate, clipping at global norm 1, on
    loss_fn(params, idx, targets, config, dropout_seed) (this module's loss by default)."""

    def __init__(self, params, config, loss_fn=None):
        self.names = list(params)
        self.params = [params[n] for n in self.names]
        self.config = config
        self.loss_fn = loss_fn or loss
        self.optimizer = tessel.AdamW(config.learning_rate, 0.9, 0.99, 1e-8, config.weight_decay)
        self.schedule = tessel.WarmupCosineDecay(config.learning_rate, config.min_lr,
                                                 config.warmup_iters, config.lr_decay_iters)
        self.step_count = 0

    def step(self, idx, targets):
        self.optimizer.learning_rate = self.schedule(self.step_count)
        as_dict = lambda ps: dict(zip(self.names, ps))
        seed = 7919 + self.step_count  # a new dropout mask every step
        value, grads = tessel.value_and_grad(
            lambda ps: self.loss_fn(as_dict(ps), idx, targets, self.config, seed), self.params)
        clipped, _ = tessel.clip_by_global_norm(grads, self.config.grad_clip)
        self.params = self.optimizer.apply(self.params, clipped)
        self.step_count += 1
        return float(np.asarray(tessel.to_host(value)))

    def state(self):
        """What a checkpoint holds (tessel.checkpoint.save): the parameters and AdamW's moments
        ("m", "v"), each a dict by parameter name, the optimizer's iterations and the step. The
        names are the model's on any mesh, so it restores onto another mesh or pipeline split."""
        names = self.names
        out = {slot: dict(zip(names, tensors)) for slot, tensors in self.optimizer.slots().items()}
        out.update(params=dict(zip(names, self.params)), iterations=self.optimizer.iterations,
                   step=self.step_count)
        return out

    def state_layouts(self):
        """The restore target (tessel.checkpoint.restore) of a state() saved after a step: this
        trainer's parameters' layouts for the parameters and the moments."""
        layouts = {n: tessel.fetch_layout(p) for n, p in zip(self.names, self.params)}
        return {"params": layouts, "m": layouts, "v": layouts}

    def load(self, state):
        """Continues from a restored state(): the next step is the saved trainer's next one."""
        self.params = [state["params"][n] for n in self.names]
        slots = {slot: [state[slot][n] for n in self.names] for slot in ("m", "v") if slot in state}
        self.optimizer.restore(int(state["iterations"]), self.params, slots)
        self.step_count = int(state["step"])


def main(model=None):
    """Trains `model` (a module with Config, init and loss: this one by default) on tiny
    Shakespeare."""
    model = model or sys.modules[__name__]
    parser = argparse.ArgumentParser(description=model.__doc__.split("\n")[0])
    parser.add_argument("--config", default="tiny")
    parser.add_argument("--mesh", default="2x2", help="batch x model")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--recompute", default="none", choices=["none", "selective", "full"])
    parser.add_argument("--attention", default="fused", choices=["fused", "composed"],
                        help="gpt: one causal_attention op, or matmul, causal_softmax, dropout, "
                             "matmul")
    parser.add_argument("--fsdp", action="store_true",
                        help="parameters, gradients and AdamW state sharded over batch (ZeRO-3)")
    parser.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                       "data", "shakespeare_char", "input.txt"))
    args = parser.parse_args()
    config = model.Config(args.config)
    config.recompute = args.recompute
    config.attention = args.attention
    config.fsdp = args.fsdp
    config.lr_decay_iters = args.steps
    config.warmup_iters = min(config.warmup_iters, args.steps // 10)
    batch_dim, model_dim = (int(v) for v in args.mesh.split("x"))
    mesh = tessel.create_mesh([("batch", batch_dim), ("model", model_dim)])
    text = open(args.data).read()
    chars = sorted(set(text))
    ids = np.array([chars.index(ch) for ch in text[: int(len(text) * 0.9)]], dtype=np.int32)
    rng = np.random.default_rng(1337)
    trainer = Trainer(model.init(config, mesh, 1337), config, model.loss)
    rows = tessel.Layout(["batch", U], mesh)
    start = time.time()
    for s in range(args.steps):
        offsets = rng.integers(0, len(ids) - config.block_size - 1, config.batch_size)
        x = np.stack([ids[o:o + config.block_size] for o in offsets])
        y = np.stack([ids[o + 1:o + 1 + config.block_size] for o in offsets])
        value = trainer.step(tessel.copy_to_mesh(x, rows), tessel.copy_to_mesh(y, rows))
        if s % 20 == 0 or s == args.steps - 1:
            print(f"step {s:4d} loss {value:.4f} ({time.time() - start:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
