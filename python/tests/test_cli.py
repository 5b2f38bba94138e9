"""The tessel CLI's machine-readable output: every --json is one valid JSON document (no bare
NaN or infinity: those are null), and a diverging training run fails instead of passing."""

import json
import math
import os
import pathlib
import subprocess
import time

import pytest

import tessel

# build/python/tessel/__init__.py -> build/tools/tessel
CLI = pathlib.Path(tessel.__file__).resolve().parents[2] / "tools" / "tessel"
pytestmark = pytest.mark.skipif(not CLI.exists(), reason=f"no CLI at {CLI}")
SOURCE = pathlib.Path(__file__).resolve().parents[2]
TINY_DEMO = ["--steps", "2", "--batch", "16", "--features", "8", "--width", "8", "--hidden", "8",
             "--classes", "4"]


def run(*args, timeout=120):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def strict_json(text):
    """json.loads that refuses NaN and Infinity (which Python's json accepts by default)."""
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("args", [
    ["demo", *TINY_DEMO, "--json"],
    ["demo", *TINY_DEMO, "--no-check", "--json"],
    ["bench", "all_reduce", "-b", "4K", "-e", "8K", "--devices", "2", "--iters", "2", "--json"],
    ["bench", "fusion", "--tensors", "4", "--bytes", "1K", "--devices", "2", "--iters", "2", "--json"],
    ["bench", "relayout", "--shape", "16,16", "--mesh", "x=2", "--from", "x,unsharded", "--to",
     "unsharded,x", "-n", "2", "-w", "1", "--rounds", "1", "--json"],
    ["bench", "matmul", "--n", "64", "--rounds", "1", "--json"],
    ["bench", "dispatch", "--devices", "2", "--ops", "10", "--rounds", "1", "--json"],
    ["bench", "replicate", "--replicas", "2", "--batch", "4", "--features", "8", "--hidden", "8",
     "--classes", "2", "--steps", "2", "--rounds", "1", "--json"],
    ["train", "gpt", "--config", "test", "--mesh", "1x2", "--steps", "2", "--eval-iters", "1",
     "--sample", "0", "--data", str(SOURCE / "data/shakespeare_char/input.txt"), "--json"],
    ["train", "llama", "--config", "test", "--mesh", "1x4", "--steps", "2", "--eval-iters", "1",
     "--sample", "0", "--data", str(SOURCE / "data/shakespeare_char/input.txt"), "--json"],
], ids=["demo", "demo --no-check", "bench all_reduce", "bench fusion", "bench relayout",
        "bench matmul", "bench dispatch", "bench replicate", "train gpt", "train llama"])
def test_json_output_is_valid_json(args):
    r = run(*args)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 1, r.stdout
    doc = strict_json(lines[0])
    assert isinstance(doc, dict) and doc
    # Every number is finite; a value that has none is null.
    def numbers(v):
        if isinstance(v, dict):
            for x in v.values():
                yield from numbers(x)
        elif isinstance(v, list):
            for x in v:
                yield from numbers(x)
        elif isinstance(v, float):
            yield v
    assert all(math.isfinite(x) for x in numbers(doc))


def test_bench_gpt_takes_its_warmup_steps():
    r = run("bench", "gpt", "--config", "test", "--meshes", "1x1", "--steps", "1", "--warmup", "2",
            "--sgemm-threads", "1", "--data", str(SOURCE / "data/shakespeare_char/input.txt"),
            "--json")
    assert r.returncode == 0, r.stderr
    doc = strict_json(r.stdout)
    assert doc["warmup_steps"] == 2 and doc["meshes"][0]["step_seconds"] > 0
    bad = run("bench", "gpt", "--warmup", "-1")
    assert bad.returncode == 2 and "--warmup" in bad.stderr


def test_bench_gpt_splits_the_peak_and_compares_with_korthikanti():
    docs = {}
    for recompute in ["none", "full"]:
        r = run("bench", "gpt", "--config", "test", "--meshes", "1x1", "--steps", "1", "--warmup",
                "1", "--sgemm-threads", "1", "--dropout", "0.1", "--recompute", recompute,
                "--batch", "8", "--data", str(SOURCE / "data/shakespeare_char/input.txt"), "--json")
        assert r.returncode == 0, r.stderr
        docs[recompute] = strict_json(r.stdout)
    none, full = docs["none"], docs["full"]
    assert none["recompute"] == "none" and none["batch"] == 8
    m = none["meshes"][0]["memory"]
    assert m["peak_bytes"] == none["meshes"][0]["peak_bytes_per_device"]
    assert m["gradient_bytes"] == m["parameter_bytes"] > 0
    assert m["optimizer_bytes"] == 2 * m["parameter_bytes"]
    assert m["activation_bytes"] == (m["peak_bytes"] - m["parameter_bytes"] - m["gradient_bytes"]
                                     - m["optimizer_bytes"])
    assert 0 < m["saved_activation_bytes"] and 0 < m["korthikanti_bytes"]
    assert math.isclose(m["saved_ratio"], m["saved_activation_bytes"] / m["korthikanti_bytes"],
                        rel_tol=1e-3)
    # Each block recomputed: the tape keeps less, the losses are the same bit for bit.
    assert full["meshes"][0]["memory"]["saved_activation_bytes"] < m["saved_activation_bytes"]
    assert full["meshes"][0]["losses"] == none["meshes"][0]["losses"]
    bad = run("bench", "gpt", "--recompute", "some")
    assert bad.returncode == 2 and "unknown recomputation 'some'" in bad.stderr


def test_train_gpt_reports_memory_and_takes_recompute():
    args = ["train", "gpt", "--config", "test", "--mesh", "2x1", "--steps", "2", "--eval-iters",
            "1", "--sample", "0", "--dropout", "0.1", "--data",
            str(SOURCE / "data/shakespeare_char/input.txt")]
    plain = strict_json(run(*args, "--json").stdout)
    selective = strict_json(run(*args, "--recompute", "selective", "--json").stdout)
    assert selective["recompute"] == "selective" and selective["losses"] == plain["losses"]
    devices = plain["memory"]["devices"]
    assert len(devices) == 2 and all(d["peak_bytes"] > d["parameter_bytes"] > 0 for d in devices)
    assert plain["memory"]["korthikanti_bytes_per_device"] > 0
    text = run(*args, "--recompute", "full")
    assert text.returncode == 0, text.stderr
    assert "recompute full" in text.stdout and "memory: peak " in text.stdout
    bad = run("train", "gpt", "--recompute", "all")
    assert bad.returncode == 2 and "--recompute expects none, selective or full" in bad.stderr


def test_demo_without_check_writes_null_not_nan():
    doc = strict_json(run("demo", *TINY_DEMO, "--no-check", "--json").stdout)
    assert doc["max_rel_loss_diff"] is None and doc["single_device_step_us"] is None
    assert doc["steps"] == 2 and math.isfinite(doc["final_loss"])


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_diverging_demo_fails_naming_the_step_and_value(json_flag):
    r = run("demo", *TINY_DEMO[2:], "--steps", "20", "--lr", "1e30", *json_flag)
    assert r.returncode == 1
    assert r.stdout == "" if json_flag else "within" not in r.stdout
    assert r.stderr.startswith("tessel: error: demo: step ")
    assert "the mesh loss is " in r.stderr and "training stopped" in r.stderr
    value = r.stderr.split("the mesh loss is ")[1].split()[0]
    assert not math.isfinite(float(value))


def test_non_finite_learning_rate_is_a_usage_error():
    for lr in ("nan", "inf", "-inf"):
        r = run("demo", *TINY_DEMO, "--lr", lr)
        assert r.returncode == 2 and f"--lr expects a number, got '{lr}'" in r.stderr


def environment_of(process, wanted, timeout=10.0):
    """The environment of a running process once it holds `wanted` (None if it never does)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            env = dict(item.split("=", 1) for item in
                       pathlib.Path(f"/proc/{process.pid}/environ").read_text().split("\0") if "=" in item)
        except OSError:
            env = {}
        if wanted in env:
            return env
        time.sleep(0.02)
    return None


def test_bench_runs_openblas_and_openmp_single_threaded():
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    process = subprocess.Popen([str(CLI), "bench", "all_reduce", "--devices", "2", "-b", "16M", "-e", "16M",
                                "-n", "200"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        seen = environment_of(process, "TESSEL_BENCH_THREADS_PINNED")
    finally:
        process.kill()
        process.wait()
    assert seen is not None, "tessel bench did not re-execute with its thread settings"
    assert seen["OPENBLAS_NUM_THREADS"] == "1" and seen["OMP_NUM_THREADS"] == "1"


def test_bench_names_a_thread_count_the_user_set():
    result = subprocess.run([str(CLI), "bench", "matmul", "--n", "64", "--devices", "1"],
                            capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, OPENBLAS_NUM_THREADS="3", OMP_NUM_THREADS="1"))
    assert result.returncode == 0, result.stderr
    assert "running with OPENBLAS_NUM_THREADS=3 as set" in result.stderr
