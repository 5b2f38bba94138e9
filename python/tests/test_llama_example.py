"""examples/llama/llama.py (the Llama in tessel's Python API) against the float64 JAX reference
dump on every mesh shape: logits, loss, every gradient (1e-5 relative in f32) and 10 AdamW steps
(1e-4), untied; the tied variant's logits, loss and gradients."""
import os
import sys

import numpy as np
import pytest

import tessel
from test_gpt_example import read_safetensors, relative

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "examples", "llama"))
import llama  # noqa: E402

REFERENCE = os.path.join(ROOT, "examples", "llama", "reference",
                         "llama_small_reference.safetensors")


def check_gradients(ref, config, mesh, prefix):
    """Logits, loss and gradients of the reference's parameters against "<prefix>*"."""
    names = [n for n, *_ in llama.parameter_specs(config, mesh)]
    params = llama.place({n: ref["param." + n].astype(np.float32) for n in names}, config, mesh)
    rows = tessel.Layout(["batch", llama.U], mesh)
    idx = tessel.copy_to_mesh(ref["idx"], rows)
    targets = tessel.copy_to_mesh(ref["targets"], rows)
    assert relative(tessel.to_host(llama.forward(params, idx, config)), ref[prefix + "logits"]) < 1e-5
    value, grads = tessel.value_and_grad(
        lambda ps: llama.loss(dict(zip(names, ps)), idx, targets, config), [params[n] for n in names])
    assert relative(tessel.to_host(value), ref[prefix + "loss"]) < 1e-5
    for name, g in zip(names, grads):
        assert tessel.fetch_layout(g) == tessel.fetch_layout(params[name]), name
        assert relative(tessel.to_host(g), ref[prefix + "grad." + name]) < 1e-5, name
    return params, idx, targets


# 1x4: two kv heads over a model dimension of 4, so wk and wv are replicated.
@pytest.mark.parametrize("batch,model", [(1, 1), (2, 1), (1, 2), (2, 2), (1, 4)])
def test_matches_the_jax_reference_in_f32(batch, model):
    ref = read_safetensors(REFERENCE)
    config = llama.Config("test")
    config.warmup_iters, config.lr_decay_iters = 3, 10
    mesh = tessel.create_mesh([("batch", batch), ("model", model)])
    params, idx, targets = check_gradients(ref, config, mesh, "")
    trainer = llama.gpt.Trainer(params, config, llama.loss)
    losses = [trainer.step(idx, targets) for _ in range(10)]
    np.testing.assert_allclose(losses, ref["step_losses"], atol=1e-4)

    config.tie_embeddings = True
    check_gradients(ref, config, mesh, "tied.")


def test_kv_heads_are_replicated_when_fewer_than_the_model_dimension():
    config = llama.Config("test")  # 4 heads, 2 kv heads
    for model, kv_spec in ((2, "model"), (4, tessel.UNSHARDED)):
        mesh = tessel.create_mesh([("batch", 1), ("model", model)])
        specs = {name: s for name, _, s, _ in llama.parameter_specs(config, mesh)}
        assert specs["layers.0.attention.wk"] == [llama.U, kv_spec]
        assert specs["layers.0.attention.wq"] == [llama.U, "model"]
    config.n_head, config.n_kv_head, config.n_embd = 6, 3, 36
    with pytest.raises(ValueError, match="n_head 6 is not a multiple"):
        llama.parameter_specs(config, tessel.create_mesh([("batch", 1), ("model", 4)]))
    with pytest.raises(ValueError, match="llama: unknown configuration 'baby'"):
        llama.Config("baby")
