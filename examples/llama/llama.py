"""A Llama-style character model written with tessel's Python API: the same model, layouts and
training step as examples/llama/llama_model.cpp (read that file's header for the layouts).

    PYTHONPATH=build/python /usr/bin/python3 examples/llama/llama.py --steps 200 --mesh 2x2

Parameters are a dict name -> DTensor in Llama's order; `loss(params, idx, targets, config)` is a
plain function, so `tessel.value_and_grad` differentiates it and every gradient comes back in its
parameter's layout. The parameter placement, the training step and the training loop are the
GPT example's (examples/gpt/gpt.py).
"""
import math
import os
import sys

import tessel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpt"))
import gpt  # noqa: E402

U = tessel.UNSHARDED


class Config(gpt.Config):
    """The "tiny" and "test" configurations of examples/llama/llama_config.h."""

    MODEL = "llama"
    PRESETS = {
        "tiny": dict(n_layer=4, n_head=4, n_kv_head=2, n_embd=128, ffn_hidden=384, block_size=64,
                     batch_size=12, tie_embeddings=True),
        "test": dict(n_layer=2, n_head=4, n_kv_head=2, n_embd=32, ffn_hidden=96, block_size=16,
                     batch_size=4, tie_embeddings=False),
    }
    rope_theta = 10000.0
    norm_eps = 1e-5


def parameter_specs(config, mesh):
    """[(name, shape, sharding specs, init stddev or 0 for ones)] in Llama's order."""
    m = "model" if "model" in mesh.dim_names else U
    model_size = mesh.dim_size("model") if m == "model" else 1
    if config.n_head % model_size:
        raise ValueError(f"llama: n_head {config.n_head} is not a multiple of the model "
                         f"dimension's size {model_size}: heads are split whole")
    c, f, d = config.n_embd, config.ffn_hidden, config.n_embd // config.n_head
    q, kv = config.n_head * d, config.n_kv_head * d
    # The kv heads are split whole over `model` when they can be, else every device has them all.
    kv_spec = m if config.n_kv_head % model_size == 0 else U
    std, residual = 0.02, 0.02 / math.sqrt(2 * config.n_layer)
    specs = [("tok_embeddings", (config.vocab_size, c), [m, U], std)]  # vocabulary-parallel rows
    for i in range(config.n_layer):
        p = f"layers.{i}."
        specs += [(p + "attention_norm.weight", (c,), [U], 0),
                  (p + "attention.wq", (c, q), [U, m], std),          # column-parallel heads
                  (p + "attention.wk", (c, kv), [U, kv_spec], std),
                  (p + "attention.wv", (c, kv), [U, kv_spec], std),
                  (p + "attention.wo", (q, c), [m, U], residual),     # row-parallel: Partial sum
                  (p + "ffn_norm.weight", (c,), [U], 0),
                  (p + "feed_forward.w1", (c, f), [U, m], std),
                  (p + "feed_forward.w2", (f, c), [m, U], residual),
                  (p + "feed_forward.w3", (c, f), [U, m], std)]
    specs.append(("norm.weight", (c,), [U], 0))
    if not config.tie_embeddings:
        specs.append(("output", (config.vocab_size, c), [m, U], std))
    return specs


def place(values, config, mesh):
    """A dict name -> numpy array laid out on `mesh` as the model wants."""
    return gpt.place(values, config, mesh, parameter_specs(config, mesh))


def init(config, mesh, seed):
    """normal(0, 0.02) (wo, w2: 0.02 / sqrt(2 n_layer)), norms 1, keyed by (seed, parameter
    index): the same on every mesh and as the C++ model's."""
    return gpt.init(config, mesh, seed, parameter_specs(config, mesh))


def repeat_kv(x, groups):
    """[B, T, K, D] -> [B, T, K * groups, D]: kv head k serves query heads k g .. k g + g - 1."""
    if groups == 1:
        return x
    b, t, k, d = x.shape
    one = tessel.reshape(x, (b, t, k, 1, d))
    return tessel.reshape(tessel.concat([one] * groups, 3), (b, t, k * groups, d))


def forward(params, idx, config):
    """Logits [B, T, V] (the vocabulary sharded over `model`)."""
    b, t = idx.shape
    heads, kv_heads, d = config.n_head, config.n_kv_head, config.n_embd // config.n_head
    theta = config.rope_theta
    mesh = tessel.fetch_layout(idx).mesh
    whole = tessel.Layout(["batch" if "batch" in mesh.dim_names else U, U, U], mesh)
    # With config.fsdp, every parameter all-gathered over `batch` from its shard (gpt.gather).
    specs = parameter_specs(config, mesh)
    params = {name: gpt.gather(params, name, config, mesh, specs) for name in params}

    def project(h, w, n):
        return tessel.reshape(tessel.matmul(h, w), (b, t, n, d))

    fused = gpt.fused_attention_runs("fused", mesh)

    x = tessel.embedding_lookup(params["tok_embeddings"], idx)  # Partial over model
    for i in range(config.n_layer):
        p = lambda n: params[f"layers.{i}.{n}"]
        x = tessel.relayout(x, whole)  # the Partial residual reduced once, for norm and add
        h = tessel.rms_norm(x, p("attention_norm.weight"), config.norm_eps)
        q = tessel.rotary_embedding(project(h, p("attention.wq"), heads), theta)  # [B, T, H, D]
        k = repeat_kv(tessel.rotary_embedding(project(h, p("attention.wk"), kv_heads), theta),
                      heads // kv_heads)
        v = repeat_kv(project(h, p("attention.wv"), kv_heads), heads // kv_heads)
        out = gpt.causal_self_attention(q, k, v, 1.0 / math.sqrt(d), fused)
        y = tessel.reshape(out, (b, t, heads * d))
        x = tessel.relayout(x + tessel.matmul(y, p("attention.wo")), whole)
        h = tessel.rms_norm(x, p("ffn_norm.weight"), config.norm_eps)
        gate = tessel.silu(tessel.matmul(h, p("feed_forward.w1")))
        x = x + tessel.matmul(gate * tessel.matmul(h, p("feed_forward.w3")), p("feed_forward.w2"))
    h = tessel.rms_norm(tessel.relayout(x, whole), params["norm.weight"], config.norm_eps)
    head = params["tok_embeddings"] if config.tie_embeddings else params["output"]
    return tessel.matmul(h, head, transpose_b=True)


def loss(params, idx, targets, config, dropout_seed=None):
    """Mean next-character cross-entropy (dropout_seed: unused, the model has no dropout)."""
    del dropout_seed
    logits = forward(params, idx, config)
    return tessel.reduce_mean(tessel.sparse_softmax_cross_entropy_with_logits(targets, logits))


if __name__ == "__main__":
    sys.exit(gpt.main(sys.modules[__name__]))
