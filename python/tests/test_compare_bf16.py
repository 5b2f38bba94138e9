"""bench/peers/compare_bf16.py without the peers' venv: its refusals, the two sides' command
lines, the loss-curve figures and the verdict; with the venv (skipped without it), the JAX peer's
--inputs tessel f32 run against tessel's own curve, its bf16 run moving the losses, and
gpt_jax.project's bf16 product and gradients against the rounded f64 products."""

import json
import math
import pathlib
import subprocess
import sys

import pytest

import tessel

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "peers"))
import compare_bf16  # noqa: E402

BUILD = pathlib.Path(tessel.__file__).resolve().parents[2]  # build/python/tessel -> build
CLI = BUILD / "tools" / "tessel"
VENV_PYTHON = REPO / ".venv-peers" / "bin" / "python"
needs_cli = pytest.mark.skipif(not CLI.exists(), reason="no tessel CLI")
needs_venv = pytest.mark.skipif(not VENV_PYTHON.exists(),
                                reason="no peers' venv (scripts/peers-venv.sh)")


@pytest.mark.parametrize("args,message", [
    (["--meshes", "1x1,2"], "'2': a mesh is BxM"),
    (["--meshes", "0x1"], "'0x1': a mesh is BxM with B, M >= 1"),
    (["--config", "gpt3"], "invalid choice: 'gpt3'"),
    (["--steps", "0"], "--steps 0: must be >= 1"),
    (["--ratio-limit", "0"], "--ratio-limit 0.0: must be a positive number"),
    (["--f32-tolerance", "nan"], "--f32-tolerance nan: must be a positive number"),
    (["--jax-threads", "0"], "--jax-threads 0: must be >= 1"),
])
def test_the_driver_refuses_bad_arguments(args, message, capsys, fake_programs):
    with pytest.raises(SystemExit) as e:
        compare_bf16.parse_args(args + fake_programs)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_the_driver_says_where_the_venv_is_missing(tmp_path, capsys, fake_programs):
    with pytest.raises(SystemExit) as e:
        compare_bf16.parse_args(fake_programs[:2] +
                                ["--venv-python", str(tmp_path / "none" / "python")])
    assert e.value.code == 2
    assert f"--venv-python {tmp_path}/none/python: not an executable" in capsys.readouterr().err


def test_the_defaults_are_tiny_on_1x1_and_2x2_with_a_ratio_limit_of_2(fake_programs):
    args = compare_bf16.parse_args(fake_programs)
    assert (args.config, args.meshes, args.steps) == ("tiny", [(1, 1), (2, 2)], 10)
    assert args.ratio_limit == 2.0 and args.f32_tolerance == 1e-4  # run_peers.py's


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_both_sides_train_the_same_model_mesh_dtype_and_steps(dtype, tmp_path, fake_programs):
    args = compare_bf16.parse_args(["--config", "test", "--steps", "7"] +
                                   fake_programs)
    t = compare_bf16.tessel_command(args, (2, 1), dtype, tmp_path / "m.csv")
    j = compare_bf16.jax_command(args, (2, 1), dtype)
    opt = lambda cmd, name: cmd[cmd.index(name) + 1]  # noqa: E731
    assert t[1:3] == ["train", "gpt"] and j[1].endswith("bench_gpt_jax.py")
    assert opt(t, "--config") == opt(j, "--config") == "test"
    assert opt(t, "--mesh") == opt(j, "--mesh") == "2x1"
    assert opt(t, "--dtype") == opt(j, "--dtype") == dtype
    assert opt(t, "--steps") == opt(j, "--steps") == "7" and opt(j, "--warmup") == "0"
    assert opt(t, "--dropout") == "0" and opt(j, "--inputs") == "tessel"  # tessel's start
    assert opt(t, "--metrics") == str(tmp_path / "m.csv") and "--json" in t and "--json" in j


def test_the_largest_relative_difference_and_its_step():
    rel = compare_bf16.largest_relative_difference
    worst, at = rel([4.0, 3.003, 2.999], [4.0, 3.0, 3.0])
    assert at == 1 and worst == pytest.approx(1e-3)
    assert rel([4.0, 3.0], [4.0, 3.0]) == (0.0, 0)
    assert rel([4.0, float("nan")], [4.0, 3.0])[1] == 1  # a NaN is the worst
    assert math.isinf(rel([1.0], [0.0])[0])
    with pytest.raises(ValueError, match="1 losses against 2"):
        rel([4.0], [4.0, 3.0])
    with pytest.raises(ValueError, match="non-zero number of steps"):
        rel([], [])


def curves(jax_bf16, tessel_bf16, tessel_f32=(4.0, 3.0)):
    return {("jax", "f32"): [4.0, 3.0], ("jax", "bf16"): list(jax_bf16),
            ("tessel", "f32"): list(tessel_f32), ("tessel", "bf16"): list(tessel_bf16)}


def test_the_verdict_compares_tessels_deviation_with_a_multiple_of_jaxs():
    v = compare_bf16.verdict(curves([4.0, 3.003], [4.0, 3.0045]), 2.0, 1e-4)
    assert v["jax_bf16_deviation"] == pytest.approx(1e-3) and v["jax_at_step"] == 1
    assert v["tessel_bf16_deviation"] == pytest.approx(1.5e-3) and v["ratio"] == pytest.approx(1.5)
    assert v["ratio_ok"] and v["f32_ok"] and v["ok"]
    assert v["bf16_tessel_vs_jax"] == pytest.approx(1.5e-3 / 3.003) and v["bf16_tessel_vs_jax_at_step"] == 1
    too_far = compare_bf16.verdict(curves([4.0, 3.003], [4.0, 3.0075]), 2.0, 1e-4)
    assert too_far["ratio"] == pytest.approx(2.5) and not too_far["ratio_ok"] and not too_far["ok"]
    assert "TOO LARGE" in compare_bf16.format_mesh((1, 1), too_far)


def test_the_verdict_fails_when_the_f32_curves_differ_or_jax_did_not_move():
    other_model = compare_bf16.verdict(curves([4.0, 3.003], [4.0, 3.013], [4.0, 3.01]), 2.0, 1e-4)
    assert other_model["ratio_ok"] and not other_model["f32_ok"] and not other_model["ok"]
    assert other_model["f32_max_abs_diff"] == pytest.approx(1e-2)
    assert "DIFFERENT" in compare_bf16.format_mesh((2, 2), other_model)
    only_tessel_moved = compare_bf16.verdict(curves([4.0, 3.0], [4.0, 3.001]), 2.0, 1e-4)
    assert math.isinf(only_tessel_moved["ratio"]) and not only_tessel_moved["ok"]
    neither = compare_bf16.verdict(curves([4.0, 3.0], [4.0, 3.0]), 2.0, 1e-4)
    assert neither["ratio"] == 1.0 and neither["ok"]


def jax_losses(dtype, steps):
    cmd = [str(VENV_PYTHON), str(REPO / "examples" / "gpt" / "reference" / "bench_gpt_jax.py"),
           "--config", "test", "--mesh", "1x1", "--inputs", "tessel", "--dtype", dtype,
           "--steps", str(steps), "--warmup", "0", "--threads", "1", "--json"]
    doc = json.loads(subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                                    check=True).stdout.strip().splitlines()[-1])
    assert doc["dtype"] == dtype and doc["inputs"] == "tessel"
    return doc["losses"]


@needs_cli
@needs_venv
def test_the_jax_peer_trains_tessels_model_and_its_bf16_moves_the_losses(tmp_path):
    args = compare_bf16.parse_args(["--config", "test", "--steps", "4", "--tessel", str(CLI),
                                    "--venv-python", str(VENV_PYTHON)])
    tessel_f32 = compare_bf16.run_one(args, "tessel", (1, 1), "f32", tmp_path)
    jax_f32, jax_bf16 = jax_losses("f32", 4), jax_losses("bf16", 4)
    assert compare_bf16.compare_curves(tessel_f32, jax_f32, 1e-4)["ok"]
    moved = compare_bf16.largest_relative_difference(jax_bf16, jax_f32)[0]
    assert 0 < moved < 1e-2


PROJECT_CHECK = """
import sys
import numpy as np, jax, jax.numpy as jnp
sys.path.insert(0, sys.argv[1])
import gpt_jax as G
rng = np.random.default_rng(0)
x, w, c = (rng.standard_normal(s).astype(np.float32) for s in ((3, 7, 40), (40, 9), (3, 7, 9)))
bf = lambda a: np.asarray(jnp.asarray(a).astype(jnp.bfloat16).astype(jnp.float32), np.float64)
y = np.asarray(G.project(x, w, "bfloat16"))
gx, gw = jax.grad(lambda x, w: jnp.sum(G.project(x, w, "bfloat16") * c), (0, 1))(x, w)
assert (y == bf(bf(x) @ bf(w))).all()
assert (np.asarray(gx) == bf(bf(c) @ bf(w).T)).all()
assert (np.asarray(gw) == bf(np.einsum("btk,btn->kn", bf(x), bf(c)))).all()
assert (np.asarray(G.project(x, w)) == x @ w).all()
print("ok")
"""


@needs_venv
def test_jax_project_is_tessels_mixed_matmul():
    """gpt_jax.project "bfloat16": the forward product and both gradients are the f64 products
    of the bf16-rounded operands (and the bf16-rounded incoming gradient), rounded to bf16, as
    tessel's mixed_matmul and its VJP (the f32 sums' own rounding, far below bf16's, changes no
    bf16 result for these inputs); the float32 path is the plain x @ w."""
    out = subprocess.run([str(VENV_PYTHON), "-c", PROJECT_CHECK,
                          str(REPO / "examples" / "gpt" / "reference")],
                         capture_output=True, text=True, timeout=300,
                         env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
