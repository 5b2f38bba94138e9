"""bench/peers/compare_pipeline.py and torch_pipeline.py without the peers' venv: the PyTorch
peer's layer split against tessel's (`--print-schedule`), both programs' refusals, the two
command lines, the readers of each side's output (a real tessel run; PyTorch's from a canned
JSON line), the loss-curve check and the medians."""

import json
import pathlib
import re
import subprocess
import sys

import pytest

import tessel

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "peers"))
import compare_pipeline  # noqa: E402
import torch_pipeline  # noqa: E402  (imports torch only in its worker processes)

BUILD = pathlib.Path(tessel.__file__).resolve().parents[2]  # build/python/tessel -> build
CLI = BUILD / "tools" / "tessel"
needs_cli = pytest.mark.skipif(not CLI.exists(), reason="no tessel CLI")


@needs_cli
@pytest.mark.parametrize("layers,stages", [(4, 2), (5, 2), (5, 3), (5, 4), (7, 3), (7, 4)])
def test_the_peers_split_is_tessels(layers, stages):
    out = subprocess.run([str(CLI), "train", "gpt", "--config", "tiny", "--layers", str(layers),
                          "--mesh", f"stage={stages},batch=1,model=1", "--microbatches", "4",
                          "--schedule", "1f1b", "--print-schedule"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    tessels = [(int(a), int(b) + 1) for a, b in re.findall(r"layers (\d+)\.\.(\d+)", out)]
    assert torch_pipeline.stage_layers(layers, stages) == tessels


@pytest.mark.parametrize("args,message", [
    (["--stages", "1"], "at least 2 stages"),
    (["--microbatches", "8"], "batch of 12 rows does not split"),
    (["--stages", "5"], "4 layers do not fill 5 stages"),
    (["--schedule", "interleaved"], "invalid choice"),
    (["--steps", "0"], "must be >= 1"),
])
def test_the_torch_peer_refuses_what_tessel_refuses(args, message, capsys):
    with pytest.raises(SystemExit) as e:
        torch_pipeline.parse_args(args)
    assert e.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("args,message", [
    (["--stages", "1"], "at least 2 stages"),
    (["--schedules", "gpipe,zb"], "'zb': one of gpipe, 1f1b"),
    (["--microbatches", "4,x"], "comma-separated integers"),
    (["--microbatches", "0"], "each must be >= 1"),
    (["--repeat", "0"], "--repeat 0"),
    (["--tolerance", "nan"], "--tolerance nan"),
    (["--tessel-mode", "threads"], "invalid choice: 'threads'"),
])
def test_the_driver_refuses_bad_arguments(args, message, capsys, fake_programs):
    with pytest.raises(SystemExit) as e:
        compare_pipeline.parse_args(args + fake_programs)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_the_driver_says_where_the_venv_is_missing(tmp_path, capsys, fake_programs):
    with pytest.raises(SystemExit):
        compare_pipeline.parse_args(fake_programs[:2] +
                                    ["--venv-python", str(tmp_path / "none" / "python")])
    assert f"--venv-python {tmp_path}/none/python: not an executable" in capsys.readouterr().err


def test_both_sides_run_the_same_split_schedule_and_steps(tmp_path, fake_programs):
    args = compare_pipeline.parse_args(["--stages", "2", "--steps", "10", "--warmup", "3"]
                                       + fake_programs)
    t = compare_pipeline.tessel_command(args, "1f1b", 12, tmp_path / "m.csv")
    p = compare_pipeline.torch_command(args, "1f1b", 12)
    opt = lambda cmd, name: cmd[cmd.index(name) + 1]  # noqa: E731
    assert opt(t, "--mesh") == "stage=2,batch=1,model=1" and opt(p, "--stages") == "2"
    assert opt(t, "--schedule") == opt(p, "--schedule") == "1f1b"
    assert opt(t, "--microbatches") == opt(p, "--microbatches") == "12"
    assert opt(t, "--steps") == opt(p, "--schedule-steps") == "13"  # the same lr schedule
    assert opt(p, "--steps") == "10" and opt(p, "--warmup") == "3"
    assert opt(t, "--dropout") == opt(p, "--dropout") == "0"
    assert opt(t, "--metrics") == str(tmp_path / "m.csv") and "--json" in t and "--json" in p


def test_tessel_modes_run_its_stages_as_asked(tmp_path, fake_programs):
    """one-process: the plain command (tessel's default: a thread per stage); stage-threads:
    with --stage-threads; one-controller: with --one-controller; mpirun: a process per stage, as
    PyTorch's side."""
    def command(mode):
        args = compare_pipeline.parse_args(["--stages", "2", "--tessel-mode", mode]
                                           + fake_programs)
        return compare_pipeline.tessel_command(args, "1f1b", 4, tmp_path / "m.csv")
    plain = command("one-process")
    assert plain[0].endswith("tessel") and "--stage-threads" not in plain
    assert "--one-controller" not in plain
    assert command("stage-threads") == plain + ["--stage-threads"]
    assert command("one-controller") == plain + ["--one-controller"]
    assert command("mpirun") == ["mpirun", "--oversubscribe", "-np", "2"] + plain


@needs_cli
def test_tessels_side_is_the_median_after_the_warmup_of_a_real_run(tmp_path):
    args = compare_pipeline.parse_args(["--steps", "3", "--warmup", "1", "--tessel", str(CLI),
                                        "--venv-python", str(CLI)])
    metrics = tmp_path / "m.csv"
    out = compare_pipeline.run(compare_pipeline.tessel_command(args, "gpipe", 4, metrics))
    r = compare_pipeline.tessel_result(out, metrics, "tiny", warmup=1)
    assert r["losses"] == pytest.approx(json.loads(out)["losses"], abs=1e-5)  # JSON: 5 decimals
    assert len(r["losses"]) == 4 and len(r["step_s"]) == 3
    assert r["median_step_s"] == sorted(r["step_s"])[1]


def test_torchs_side_is_read_from_its_last_line():
    line = json.dumps({"median_step_s": 0.2, "step_s": [0.1, 0.2, 0.3], "losses": [4.2, 3.9],
                       "layers": [[0, 2], [2, 4]], "versions": {"torch": "2.15.0"}})
    r = compare_pipeline.torch_result("a warning\n" + line + "\n")
    assert r["median_step_s"] == 0.2 and r["losses"] == [4.2, 3.9]
    assert r["layers"] == [[0, 2], [2, 4]] and r["torch"] == "2.15.0"


def test_loss_curves_agree_only_within_the_tolerance_and_complete():
    check = compare_pipeline.compare_curves
    ok = check([4.2, 3.9, 3.7], [4.2, 3.90002, 3.69999], 1e-4)
    assert ok["ok"] and ok["at_step"] == 1 and ok["max_abs_diff"] == pytest.approx(2e-5)
    far = check([4.2, 3.9, 3.7], [4.2, 3.9, 3.71], 1e-4)
    assert not far["ok"] and far["at_step"] == 2
    assert not check([4.2, None], [4.2, 3.9], 1.0)["ok"]  # tessel writes NaN as null
    assert not check([4.2, 3.9], [4.2, float("nan")], 1.0)["ok"]
    assert not check([4.2, 3.9], [4.2], 1.0)["ok"]  # a curve cut short
    assert not check([], [], 1.0)["ok"]


def test_medians_per_schedule_and_microbatches():
    runs = [{"schedule": s, "microbatches": m, "tessel_ms": t, "torch_ms": p, "speed": p / t,
             "max_dloss": d}
            for s, m, t, p, d in [("gpipe", 4, 50, 100, 1e-6), ("1f1b", 4, 40, 60, 2e-6),
                                  ("gpipe", 4, 70, 70, 3e-6), ("1f1b", 4, 60, 120, 1e-6)]]
    gpipe, onef = compare_pipeline.medians(runs)
    assert (gpipe["schedule"], gpipe["rounds"], gpipe["tessel_ms"], gpipe["torch_ms"]) == \
        ("gpipe", 2, 60, 85)
    assert gpipe["speed"] == pytest.approx(1.5) and gpipe["max_dloss"] == 3e-6
    assert onef["speed"] == pytest.approx(1.75) and onef["torch_ms"] == 90
