"""examples/gpt/gpt.py (the GPT in tessel's Python API) against the float64 JAX reference dump on
every mesh shape: logits, loss, every gradient (1e-5 relative in f32) and 10 AdamW steps (1e-4)."""
import json
import os
import struct
import sys

import numpy as np
import pytest

import tessel

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
import gpt  # noqa: E402

REFERENCE = os.path.join(ROOT, "examples", "gpt", "reference", "gpt_small_reference.safetensors")
DTYPES = {"F64": np.float64, "F32": np.float32, "I32": np.int32, "I64": np.int64}


def read_safetensors(path):
    """A safetensors file with numpy alone: 8-byte length, JSON header, raw little-endian data."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + begin:8 + n + end],
                                  dtype=DTYPES[entry["dtype"]]).reshape(entry["shape"])
    return out


def relative(got, want):
    return np.max(np.abs(np.asarray(got, np.float64) - want)) / np.max(np.abs(want))


@pytest.mark.parametrize("batch,model", [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_matches_the_jax_reference_in_f32(batch, model):
    ref = read_safetensors(REFERENCE)
    config = gpt.Config("test")
    config.warmup_iters, config.lr_decay_iters = 3, 10
    mesh = tessel.create_mesh([("batch", batch), ("model", model)])
    names = [n for n, *_ in gpt.parameter_specs(config, mesh.dim_names)]
    params = gpt.place({n: ref["param." + n].astype(np.float32) for n in names}, config, mesh)
    rows = tessel.Layout(["batch", gpt.U], mesh)
    idx = tessel.copy_to_mesh(ref["idx"], rows)
    targets = tessel.copy_to_mesh(ref["targets"], rows)

    assert relative(tessel.to_host(gpt.forward(params, idx, config)), ref["logits"]) < 1e-5
    value, grads = tessel.value_and_grad(lambda ps: gpt.loss(dict(zip(names, ps)), idx, targets,
                                                             config), [params[n] for n in names])
    assert relative(tessel.to_host(value), ref["loss"]) < 1e-5
    for name, g in zip(names, grads):
        assert tessel.fetch_layout(g) == tessel.fetch_layout(params[name]), name
        assert relative(tessel.to_host(g), ref["grad." + name]) < 1e-5, name

    trainer = gpt.Trainer(params, config)
    losses = [trainer.step(idx, targets) for _ in range(10)]
    np.testing.assert_allclose(losses, ref["step_losses"], atol=1e-4)


def test_recomputation_gives_the_plain_runs_loss_and_gradients_bit_for_bit():
    config = gpt.Config("test")
    config.dropout = 0.1
    mesh = tessel.create_mesh([("batch", 2), ("model", 2)])
    names = [n for n, *_ in gpt.parameter_specs(config, mesh.dim_names)]
    params = gpt.init(config, mesh, 3)
    rows = tessel.Layout(["batch", gpt.U], mesh)
    ids = np.random.default_rng(5).integers(0, 65, (2, config.batch_size, config.block_size))
    idx, targets = (tessel.copy_to_mesh(a.astype(np.int32), rows) for a in ids)
    results = {}
    for recompute in ["none", "selective", "full"]:
        config.recompute = recompute
        value, grads = tessel.value_and_grad(
            lambda ps: gpt.loss(dict(zip(names, ps)), idx, targets, config, dropout_seed=11),
            [params[n] for n in names])
        results[recompute] = [tessel.to_host(value)] + [tessel.to_host(g) for g in grads]
    for recompute in ["selective", "full"]:
        for plain, got in zip(results["none"], results[recompute]):
            np.testing.assert_array_equal(got, plain, err_msg=recompute)
    # The composed attention (matmul, causal_softmax, dropout, matmul; the same dropout mask)
    # against the fused op: float rounding apart.
    config.recompute, config.attention = "none", "composed"
    value, grads = tessel.value_and_grad(
        lambda ps: gpt.loss(dict(zip(names, ps)), idx, targets, config, dropout_seed=11),
        [params[n] for n in names])
    for fused, composed in zip(results["none"], [tessel.to_host(value)] + [tessel.to_host(g) for g in grads]):
        np.testing.assert_allclose(fused, composed, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("module", ["gpt", "llama"])
@pytest.mark.parametrize("batch,model", [(2, 1), (2, 2)])
def test_fully_sharded_parameters_train_as_the_replicated_ones(module, batch, model):
    """config.fsdp: every parameter and AdamW moment stored sharded over batch, gathered where
    used; the losses of the replicated run within 1e-6."""
    sys.path.insert(0, os.path.join(ROOT, "examples", "llama"))
    import llama  # noqa: E402
    example = {"gpt": gpt, "llama": llama}[module]
    config = example.Config("test")
    mesh = tessel.create_mesh([("batch", batch), ("model", model)])
    rows = tessel.Layout(["batch", gpt.U], mesh)
    ids = np.random.default_rng(5).integers(0, 65, (2, config.batch_size, config.block_size))
    idx, targets = (tessel.copy_to_mesh(a.astype(np.int32), rows) for a in ids)
    losses = {}
    for fsdp in (False, True):
        config.fsdp = fsdp
        trainer = gpt.Trainer(example.init(config, mesh, 3), config, example.loss)
        losses[fsdp] = [trainer.step(idx, targets) for _ in range(5)]
        for p in trainer.params:
            assert ("batch" in tessel.fetch_layout(p).sharding_specs) == fsdp
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-6)


def test_the_fused_attention_runs_on_gpus_only_when_asked(monkeypatch):
    """On a GPU mesh gpt.py (and llama.py, which asks the same function) take the composed ops
    unless causal_attention has a GPU kernel and TESSEL_GPU_FUSED_ATTENTION=1 opts in."""

    class Devices:
        def __init__(self, kind):
            self.kind = kind

        def device_type(self):
            return self.kind

    assert gpt.fused_attention_runs("fused", Devices("CPU"))
    monkeypatch.delenv("TESSEL_GPU_FUSED_ATTENTION", raising=False)
    assert not gpt.fused_attention_runs("fused", Devices("GPU"))
    monkeypatch.setenv("TESSEL_GPU_FUSED_ATTENTION", "1")
    assert gpt.fused_attention_runs("fused", Devices("GPU")) == tessel.has_gpu_kernel("causal_attention")
    assert not gpt.fused_attention_runs("composed", Devices("CPU"))
    monkeypatch.setenv("TESSEL_GPU_FUSED_ATTENTION", "yes")
    with pytest.raises(ValueError, match="TESSEL_GPU_FUSED_ATTENTION='yes' is not 0 or 1"):
        gpt.fused_attention_runs("fused", Devices("CPU"))
