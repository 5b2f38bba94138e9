"""PyTorch's distributed checkpoint loads a tessel checkpoint (scripts/dcp_read_checkpoint.py,
run by the torch virtual environment's interpreter; data exchanged through files). Skipped when
that environment does not exist (CI): make it with
    python3 -m venv build/torch-venv && build/torch-venv/bin/pip install torch safetensors numpy
or point TESSEL_TORCH_PYTHON at another interpreter with torch >= 2.8."""
import os
import pathlib
import subprocess

import numpy as np
import pytest

import tessel
from tessel import checkpoint as ckpt

ROOT = pathlib.Path(__file__).resolve().parents[2]
TORCH_PYTHON = os.environ.get("TESSEL_TORCH_PYTHON", str(ROOT / "build" / "torch-venv" / "bin" /
                                                         "python"))

pytestmark = pytest.mark.skipif(not os.path.exists(TORCH_PYTHON),
                                reason=f"no torch interpreter at {TORCH_PYTHON}")


@pytest.mark.parametrize("specs", [("x", "y"), ("x+y", "unsharded"), ("unsharded", "unsharded")])
def test_pytorch_dcp_loads_a_tessel_checkpoint(tmp_path, specs):
    rng = np.random.default_rng(4)
    arrays = {"model/w": rng.standard_normal((7, 5)).astype(np.float32),  # uneven over 2 and 4
              "model/b": rng.integers(-9, 9, (65, 3)).astype(np.int64),
              "opt/v": rng.standard_normal((6, 4)),                     # 6 over 4: 2, 2, 2, 0
              "one": np.array([[3]], np.int32)}                         # 1 over 4
    mesh = tessel.create_mesh([("x", 2), ("y", 2)])
    layout = tessel.Layout(list(specs), mesh)
    ckpt.save(str(tmp_path / "c"), {k: tessel.copy_to_mesh(v, layout) for k, v in arrays.items()})
    np.savez(tmp_path / "expected.npz", **{k.replace("/", "__"): v for k, v in arrays.items()})
    child = subprocess.run([TORCH_PYTHON, str(ROOT / "scripts" / "dcp_read_checkpoint.py"),
                            str(tmp_path / "c"), str(tmp_path / "expected.npz")],
                           capture_output=True, text=True, timeout=300,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert child.returncode == 0, child.stdout + child.stderr
    assert "dcp_read_checkpoint: torch" in child.stdout and "PASS" in child.stdout
