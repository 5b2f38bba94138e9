"""bench/peers' own logic, without the peers' venv: the medians, spread and ratio column, the
nccl-tests-like table, the JSON document (no NaN), the "peer unavailable" rows, one real run of
the runner with tessel alone and a missing venv, and for the gpt workload: gpt_recipe.py's
recomputation of tessel's initial parameters, batches and schedule, and the loss-curve check."""

import json
import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import tessel

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "peers"))
from peers_table import (Cell, Workload, busbw_gbps, document_json, format_table,  # noqa: E402
                         ratio)

BUILD = pathlib.Path(tessel.__file__).resolve().parents[2]  # build/python/tessel -> build
RUNNER = REPO / "bench" / "peers" / "run_peers.py"


def test_cell_median_and_spread():
    c = Cell([10.0, 14.0, 12.0])
    assert c.median_us() == 12.0
    assert c.spread() == pytest.approx(4.0 / 12.0)
    assert Cell().median_us() is None and Cell().spread() is None


def test_ratio_is_peer_over_tessel_and_none_when_missing():
    assert ratio(30.0, 10.0) == 3.0
    assert ratio(None, 10.0) is None and ratio(5.0, None) is None and ratio(5.0, 0.0) is None


def test_busbw_is_nccl_tests_definition():
    # 16 MiB in 10 ms over 4 ranks: algbw 1.6777 GB/s, busbw = algbw * 2*3/4
    assert busbw_gbps(16 << 20, 10_000.0, 4) == pytest.approx((16 << 20) / 0.01 * 1.5 / 1e9)
    assert math.isnan(busbw_gbps(4096, 0.0, 4))


def allreduce_workload():
    w = Workload("all_reduce", "all_reduce f32 sum, 4 ranks", 4, ["tessel", "mpi", "jax"])
    for nbytes, t, m in ((4096, [10.0, 12.0], [20.0, 30.0]), (1 << 20, [100.0], [350.0])):
        c = w.case(str(nbytes), bytes=nbytes, count=nbytes // 4)
        c.cell("tessel").samples_us.extend(t)
        c.cell("mpi").samples_us.extend(m)
    w.mark_unavailable("jax", "no peers' venv at /nowhere")
    return w


def test_table_has_ratio_busbw_and_the_unavailable_reason():
    text = format_table(allreduce_workload())
    lines = text.splitlines()
    assert lines[0] == "# all_reduce f32 sum, 4 ranks"
    assert "busbw_GB/s" in lines[2] and "ratio" in lines[2]
    mpi_4k = next(l for l in lines if l.split()[:1] == ["4096"] and " mpi " in l)
    assert mpi_4k.split()[-1] == "2.27"  # median 25 / median 11
    assert mpi_4k.split()[4] == "25.00" and mpi_4k.split()[5] == "40%"  # (30 - 20) / 25
    tessel_1m = next(l for l in lines if l.startswith("     1048576") and "tessel" in l)
    assert tessel_1m.split()[-1] == "1.00"
    jax_rows = [l for l in lines if " jax " in l]
    assert len(jax_rows) == 2 and all("n/a: no peers' venv at /nowhere" in l for l in jax_rows)


def test_table_without_sizes_prints_cases_and_throughput():
    w = Workload("gpt", "GPT step", 4, ["tessel", "jax", "torch"], throughput_unit="tokens/s")
    c = w.case("baby 2x2", work=16384)
    c.cell("tessel").samples_us.append(2e6)
    c.cell("jax").samples_us.append(4e6)
    c.cell("torch").unavailable = "no PyTorch port"
    lines = format_table(w).splitlines()
    assert "tokens/s" in lines[2] and "busbw" not in lines[2]
    jax = next(l for l in lines if " jax " in l)
    assert jax.startswith("baby 2x2") and jax.split()[-2] == "4096.0" and jax.split()[-1] == "2.00"
    assert any(l.endswith("n/a: no PyTorch port") for l in lines)


def test_json_keeps_samples_and_writes_no_nan():
    w = allreduce_workload()
    w.case("8192", bytes=8192, count=2048).cell("tessel").samples_us.append(0.0)  # busbw NaN
    doc = json.loads(document_json([w], {"note": float("nan")}),
                     parse_constant=lambda c: pytest.fail(f"bare {c} in JSON"))
    assert doc["meta"]["note"] is None
    case = doc["workloads"][0]["cases"][0]
    assert case["peers"]["mpi"]["samples_us"] == [20.0, 30.0]
    assert case["peers"]["mpi"]["ratio"] == pytest.approx(25.0 / 11.0)
    assert case["peers"]["jax"]["unavailable"] == "no peers' venv at /nowhere"
    assert case["peers"]["jax"]["median_us"] is None


def run_runner(*args, timeout=120):
    return subprocess.run([sys.executable, str(RUNNER), "--build", str(BUILD), *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(not (BUILD / "tools" / "tessel").exists(), reason="no tessel CLI")
def test_runner_with_tessel_alone_and_a_missing_venv(tmp_path):
    r = run_runner("--quick", "--repeat", "1", "--workloads", "all_reduce,dispatch",
                   "--peers", "tessel,jax,torch", "-b", "4K", "-e", "16K",
                   "--venv", str(tmp_path / "no-venv"), "--out", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc == json.loads((tmp_path / "peers.json").read_text())
    assert set(doc["meta"]["unavailable"]) == {"jax", "torch"}
    by_name = {w["workload"]: w for w in doc["workloads"]}
    sizes = [c["bytes"] for c in by_name["all_reduce"]["cases"]]
    assert sizes == [4096, 16384]  # --quick: a factor of 4
    for w in by_name.values():
        for c in w["cases"]:
            assert len(c["peers"]["tessel"]["samples_us"]) == 1
            assert c["peers"]["tessel"]["ratio"] == 1.0
            assert "no peers' venv" in c["peers"]["jax"]["unavailable"]
    assert doc["meta"]["wrong"] == 0
    assert "no plot" in r.stderr


@pytest.mark.parametrize("args,message", [
    (("--peers", "jax"), "must include tessel"),
    (("--workloads", "allreduce"), "choose from"),
    (("--repeat", "0"), "--repeat 0"),
    (("-b", "64M", "-e", "4K"), "sizes"),
])
def test_runner_refuses_bad_arguments(args, message):
    r = run_runner(*args, timeout=30)
    assert r.returncode == 2 and message in r.stderr


def test_runner_without_the_cli_says_where_it_looked(tmp_path):
    r = subprocess.run([sys.executable, str(RUNNER), "--build", str(tmp_path), "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert f"no tessel CLI at {tmp_path}/tools/tessel" in r.stderr


def test_header_names_versions_unavailable_peers_and_a_loaded_machine():
    import run_peers
    meta = {"started": "s", "finished": "f", "repetitions": 3, "wrong": 0,
            "machine": {"cpus": 2, "cpu": "x", "sched_autogroup": True},
            "load_average_start": [12.0, 0, 0], "load_average_end": [14.0, 0, 0],
            "versions": {"jax": {"jax": "0.10.2"}, "torch": {"torch": "2.15.0"}},
            "unavailable": {"mpi": "no mpirun"},
            "runs": [{"other_cpu": 0.8, "peer": "tessel", "workload": "matmul"},
                     {"other_cpu": 0.9, "peer": "torch", "workload": "matmul"}]}
    text = run_peers.format_header(meta)
    assert "# jax: jax 0.10.2" in text and "# mpi: unavailable (no mpirun)" in text
    assert "sched_autogroup" in text
    assert "sched_autogroup" not in run_peers.format_header({**meta, "torch_launch": "same-session"})
    gpt_only = [{**e, "workload": "gpt"} for e in meta["runs"]]  # torch's GPT: no torchrun
    assert "sched_autogroup" not in run_peers.format_header({**meta, "runs": gpt_only})
    meta["runs"] = [{"other_cpu": 0.1}]
    assert "sched_autogroup" not in run_peers.format_header(meta)


def test_a_run_that_overruns_is_stopped_with_its_process_group():
    import time

    from processes import run_with_deadline
    t0 = time.monotonic()
    assert run_with_deadline(["sh", "-c", "sleep 30 & sleep 30"], {}, 0.5) is None
    assert time.monotonic() - t0 < 5
    assert run_with_deadline(["sh", "-c", "echo out; echo oops >&2; exit 3"], {}, 10) == \
        (3, "out\n", "oops\n")


@pytest.mark.skipif(not (BUILD / "tools" / "tessel").exists(), reason="no tessel CLI")
def test_a_peer_that_crashes_gets_a_failed_row_with_its_error(tmp_path):
    # A venv whose python imports fine (the probe) but crashes when it runs a workload.
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    fake = tmp_path / "venv" / "bin" / "python"
    fake.write_text('#!/bin/sh\ncase "$2" in *import*) echo 0.0; exit 0;; esac\n'
                    'echo "boom: peer crashed" >&2; exit 3\n')
    fake.chmod(0o755)
    r = run_runner("--quick", "--repeat", "1", "--workloads", "dispatch", "--peers", "tessel,jax",
                   "--venv", str(tmp_path / "venv"), "--out", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    cell = json.loads(r.stdout)["workloads"][0]["cases"][0]["peers"]["jax"]
    assert cell["unavailable"] == "failed: exit status 3: boom: peer crashed"
    assert "dispatch/jax repetition 0: exit status 3" in r.stderr


def test_same_session_launch_starts_every_rank_with_the_rendezvous_variables(tmp_path):
    import types

    from peer_programs import torchrun
    from processes import run_with_deadline
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\necho "$RANK/$WORLD_SIZE $MASTER_PORT $2"\n')
    fake.chmod(0o755)
    peers = types.SimpleNamespace(venv_python=fake, args=types.SimpleNamespace(torch_launch="same-session"))
    cmd = torchrun(peers, 4, "dispatch", "--ops", "10")
    rc, out, _ = run_with_deadline(cmd, {"PATH": "/usr/bin:/bin"}, 10)
    lines = sorted(out.split("\n")[:-1])
    assert rc == 0 and [l.split()[0] for l in lines] == ["0/4", "1/4", "2/4", "3/4"]
    assert len({l.split()[1] for l in lines}) == 1 and all(l.endswith(" dispatch") for l in lines)
    peers.args.torch_launch = "torchrun"
    assert torchrun(peers, 2, "matmul")[1:5] == ["-m", "torch.distributed.run",
                                                         "--standalone", "--nproc-per-node=2"]


# ---- the gpt workload: tessel's inputs recomputed, the loss-curve check ----------------------


def test_gpt_recipe_init_is_tessels_random_normal():
    import gpt_recipe
    cfg = gpt_recipe.config("tiny")
    params = gpt_recipe.init_params(cfg)
    specs = gpt_recipe.param_specs(cfg)
    assert list(params) == [name for name, _, _ in specs] and len(params) == 2 + 8 * 4 + 1
    for i, (name, shape, std) in enumerate(specs):
        if std == 0.0:
            assert (params[name] == 1).all(), name
            continue
        want = tessel.random_normal(shape, "f32", seed=cfg.seed * 1000 + i, mean=0.0,
                                    stddev=std).numpy()
        # float64 Box-Muller in libm and in numpy: at most one float32 rounding apart
        np.testing.assert_allclose(params[name], want, rtol=2 ** -23, atol=0, err_msg=name)
    assert params["h.0.attn.c_proj"].std() == pytest.approx(0.02 / math.sqrt(8), rel=0.05)


def test_gpt_recipe_schedule_is_tessels():
    import gpt_recipe
    for steps in (3, 30, 5000):
        cfg = gpt_recipe.train_schedule(gpt_recipe.config("tiny"), steps)
        ref = tessel.WarmupCosineDecay(cfg.learning_rate, cfg.min_lr, cfg.warmup_iters,
                                       cfg.lr_decay_iters)
        for step in range(0, steps + 2, max(steps // 7, 1)):
            assert gpt_recipe.learning_rate(cfg, step) == pytest.approx(ref(step), rel=1e-15)


@pytest.mark.skipif(not (BUILD / "tools" / "tessel").exists(), reason="no tessel CLI")
def test_tessel_trains_on_the_recipes_batches_from_its_init(tmp_path):
    # tessel's first 3 losses against float64 numpy training (the reference's independent
    # forward, backward and AdamW) from gpt_recipe's parameters on gpt_recipe's batches: the
    # batches of steps 0..2, the init and the schedule are then tessel's.
    import gpt_recipe
    sys.path.insert(0, str(REPO / "examples" / "gpt" / "reference"))
    import check_reference as ref
    metrics = tmp_path / "m.csv"
    r = subprocess.run([str(BUILD / "tools" / "tessel"), "train", "gpt", "--config", "tiny",
                        "--mesh", "1x1", "--steps", "3", "--dropout", "0", "--eval-iters", "1",
                        "--sample", "0", "--metrics", str(metrics), "--json"],
                       capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr
    got = [float(line.split(",")[2]) for line in metrics.read_text().splitlines()
           if line.startswith("train,")]
    text = gpt_recipe.CharText.load(REPO / "data" / "shakespeare_char" / "input.txt")
    cfg = gpt_recipe.train_schedule(gpt_recipe.config("tiny", vocab_size=text.vocab_size), 3)
    P = {k: v.astype(np.float64) for k, v in gpt_recipe.init_params(cfg).items()}
    m = {k: np.zeros_like(v) for k, v in P.items()}
    v = {k: np.zeros_like(p) for k, p in P.items()}
    tc = {"grad_clip": cfg.grad_clip, "beta1": cfg.beta1, "beta2": cfg.beta2,
          "weight_decay": cfg.weight_decay, "eps": cfg.eps}
    want = []
    for step in range(3):
        idx, targets = text.batch(step, cfg)
        _, loss, fwd = ref.forward(P, idx, targets, cfg.n_layer, cfg.n_head)
        want.append(float(loss))
        grads = ref.backward(P, idx, targets, cfg.n_layer, cfg.n_head, fwd)
        ref.adamw_step(P, grads, m, v, step + 1, gpt_recipe.learning_rate(cfg, step), tc)
    assert got == pytest.approx(want, abs=2e-5)  # float32 against float64, printed to 1e-6
    assert abs(want[0] - math.log(65)) < 0.1


def gpt_workload(tessel_runs, torch_runs, jax_runs=()):
    w = Workload("gpt", "GPT step", 4, ["tessel", "jax", "torch"], throughput_unit="tokens/s")
    c = w.case("tiny", work=768)
    for peer, runs in (("tessel", tessel_runs), ("torch", torch_runs), ("jax", jax_runs)):
        for losses in runs:
            c.cell(peer).samples_us.append(1e5)
            extra = {"losses": losses}
            if peer == "torch":
                extra.update(same_inputs_as="tessel", ln_vocab=math.log(65))
            c.cell(peer).extra.setdefault("runs", []).append(extra)
    return w


def test_loss_curves_compare_every_run_with_every_tessel_run():
    from peers_table import compare_loss_curves, format_loss_checks
    w = gpt_workload([[4.2, 3.9, 3.7], [4.2, 3.9, 3.7001]], [[4.2, 3.90002, 3.7], [4.2, 3.9]],
                     jax_runs=[[4.3, 4.0, 3.8]])  # jax: its own inputs, not compared
    (check,) = compare_loss_curves(w, tolerance=1e-3)
    assert check["peer"] == "torch" and check["steps"] == 2
    assert check["max_abs_diff"] == pytest.approx(1e-4) and check["at_step"] == 2
    assert check["ok"] and check["initial_loss"] == 4.2
    text = format_loss_checks([check])
    assert "torch vs tessel" in text and "1.00e-04 at step 2 of 2" in text and ": ok;" in text
    (bad,) = compare_loss_curves(w, tolerance=1e-5)
    assert not bad["ok"] and "DIFFERENT" in format_loss_checks([bad])
    (nan,) = compare_loss_curves(gpt_workload([[4.2, 3.9]], [[4.2, float("nan")]]), 1.0)
    assert not nan["ok"] and nan["at_step"] == 1
    assert compare_loss_curves(gpt_workload([], [[4.2]]), 1.0) == []  # tessel failed: nothing


def test_tessel_gpt_row_is_the_median_after_the_warmup(tmp_path):
    from peer_programs import rows_tessel_gpt
    metrics = tmp_path / "m.csv"
    metrics.write_text("kind,step,loss,lr,grad_norm,step_seconds,val_loss\n"
                       + "".join(f"train,{s},{4 - s / 10},0.001,1.0,{t},\n"
                                 for s, t in enumerate([9.0, 0.3, 0.1, 0.2]))
                       + "eval,4,3.5,,,,3.6\n")
    rows, _ = rows_tessel_gpt(['{"tokens_per_second": 3840.0, "median_step_seconds": 0.2}'],
                              metrics, "tiny", warmup=1)
    assert rows[0]["time_us"] == pytest.approx(0.2e6) and rows[0]["work"] == 768
    assert rows[0]["losses"] == [4.0, 3.9, 3.8, 3.7] and rows[0]["step_s"] == [0.3, 0.1, 0.2]
