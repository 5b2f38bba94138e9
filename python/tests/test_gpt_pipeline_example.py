"""examples/gpt/gpt_pipeline.py (the GPT cut into pipeline stages from Python) against gpt.py's
plain run on one stage's batch x model mesh with the same global batch; the schedules as data
(against the C++'s, `tessel train gpt --print-schedule`); the refusals. Under mpirun:
python/tests/mpi/gpt_pipeline_under_mpirun.py."""
import os
import pathlib
import re
import subprocess
import sys
import time

import numpy as np
import pytest

import tessel

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
import gpt  # noqa: E402
import gpt_pipeline  # noqa: E402
import pipeline_schedule  # noqa: E402
from pipeline_schedule import Action  # noqa: E402

CLI = pathlib.Path(tessel.__file__).resolve().parents[2] / "tools" / "tessel"  # build/tools
ONE_CHUNK = pipeline_schedule.ONE_CHUNK_KINDS
STEPS = 5
MESHES = {"stage=2": [("stage", 2), ("batch", 1), ("model", 1)],
          "stage=2,batch=2": [("stage", 2), ("batch", 2), ("model", 1)],
          "stage=2,model=2": [("stage", 2), ("batch", 1), ("model", 2)]}


def batches(config, steps, seed=5):
    ids = np.random.default_rng(seed).integers(0, config.vocab_size,
                                               (steps, 2, config.batch_size, config.block_size))
    return ids.astype(np.int32)


def plain_losses(config, mesh, data):
    """gpt.py's Trainer on `mesh` (batch x model): a loss per step."""
    trainer = gpt.Trainer(gpt.init(config, mesh, 3), config)
    rows = tessel.Layout(["batch", gpt.U], mesh)
    return [trainer.step(tessel.copy_to_mesh(x, rows), tessel.copy_to_mesh(y, rows))
            for x, y in data]


def small_config():
    config = gpt.Config("test")  # 2 layers, batch 4
    config.warmup_iters, config.lr_decay_iters = 2, 10
    return config


def assert_losses_equal_the_plain_runs(dims, schedule, microbatches=2, chunks=1, **options):
    config = small_config()
    config.__dict__.update(options)
    mesh = tessel.create_mesh(dims)
    pipeline = gpt_pipeline.GptPipeline(config, mesh, schedule, microbatches, chunks=chunks)
    data = batches(config, STEPS)
    trainer = gpt_pipeline.Trainer(pipeline, pipeline.init(3))
    piped = [trainer.step(x, y) for x, y in data]
    plain = plain_losses(config, pipeline.meshes[0], data)
    np.testing.assert_allclose(piped, plain, atol=1e-5, rtol=0)
    assert piped[-1] < piped[0]  # it trains
    for p in trainer.params:  # fsdp: stored sharded over the stage's batch
        assert ("batch" in tessel.fetch_layout(p).sharding_specs) == (
            config.fsdp and pipeline.meshes[0].dim_size("batch") > 1)


@pytest.mark.parametrize("mesh_name", list(MESHES))
@pytest.mark.parametrize("schedule", ONE_CHUNK)
def test_losses_equal_the_plain_runs(mesh_name, schedule):
    assert_losses_equal_the_plain_runs(MESHES[mesh_name], schedule)


@pytest.mark.parametrize("mesh_name,microbatches,chunks,layers", [
    ("stage=2", 2, 2, 4), ("stage=2", 4, 2, 4), ("stage=2", 2, 2, 5), ("stage=2,model=2", 2, 2, 4),
    ("stage=2,batch=2", 2, 3, 6)])
def test_interleaved_losses_equal_the_plain_runs(mesh_name, microbatches, chunks, layers):
    """Interleaved 1F1B with v chunks: n_layer over the p v virtual stages (5 layers on 4: 2, 1,
    1, 1), virtual stage k on stage k % p."""
    assert_losses_equal_the_plain_runs(MESHES[mesh_name], "interleaved", microbatches, chunks,
                                       n_layer=layers)


@pytest.mark.parametrize("schedule", ONE_CHUNK)
def test_losses_equal_the_plain_runs_on_four_stages_with_uneven_layers(schedule):
    """stage=4, 5 layers (2, 1, 1, 1), 4 microbatches: against the plain run on one device."""
    assert_losses_equal_the_plain_runs([("stage", 4), ("batch", 1)], schedule, 4, n_layer=5)


@pytest.mark.parametrize("pipelined_first", [True, False])
def test_a_checkpoint_moves_between_the_pipeline_and_the_plain_mesh(tmp_path, pipelined_first):
    """2 steps on stage=2 x model=2 (1f1b) saved with tessel.checkpoint, 3 more on the plain
    batch x model mesh (and the other way round): the losses of 5 uninterrupted plain steps
    within 1e-5 (the parameter names are the model's whatever the split)."""
    config = small_config()
    mesh = tessel.create_mesh(MESHES["stage=2,model=2"])
    pipeline = gpt_pipeline.GptPipeline(config, mesh, "1f1b", 2)
    plain_mesh = pipeline.meshes[0]
    rows = tessel.Layout(["batch", gpt.U], plain_mesh)
    data = batches(config, STEPS)

    def plain_step(trainer, x, y):
        return trainer.step(tessel.copy_to_mesh(x, rows), tessel.copy_to_mesh(y, rows))

    piped = gpt_pipeline.Trainer(pipeline, pipeline.init(3))
    plain = gpt.Trainer(gpt.init(config, plain_mesh, 3), config)
    steps = [lambda x, y: piped.step(x, y), lambda x, y: plain_step(plain, x, y)]
    first, then = (piped, plain) if pipelined_first else (plain, piped)
    first_step, then_step = steps if pipelined_first else steps[::-1]
    losses = [first_step(x, y) for x, y in data[:2]]
    tessel.checkpoint.save(str(tmp_path / "c"), first.state())
    then.load(tessel.checkpoint.restore(str(tmp_path / "c"), then.state_layouts()))
    losses += [then_step(x, y) for x, y in data[2:]]
    for name, p in zip(then.names, then.params):
        assert tessel.fetch_layout(p) == then.state_layouts()["params"][name]
    np.testing.assert_allclose(losses, plain_losses(config, plain_mesh, data), atol=1e-5, rtol=0)


@pytest.mark.parametrize("options", [{"fsdp": True}, {"recompute": "full"},
                                     {"recompute": "selective", "fsdp": True}])
@pytest.mark.parametrize("schedule", ["1f1b", "zero-bubble"])
def test_gpts_other_options_work_inside_the_stages(options, schedule):
    """gpt.py's fsdp (over each stage's batch) and recomputation: the plain run's losses with
    the same options (zero-bubble: the recomputed forward's weight gradients at W)."""
    assert_losses_equal_the_plain_runs(MESHES["stage=2,batch=2"], schedule, **options)


def test_losses_equal_the_plain_runs_on_eight_devices():
    """stage=2 x batch=2 x model=2, 4 microbatches, both schedules: in a process of 8 CPU
    devices (TESSEL_CPU_DEVICES is read when the runtime starts)."""
    script = ("import test_gpt_pipeline_example as t\n"
              "for kind in t.ONE_CHUNK:\n"
              "    t.assert_losses_equal_the_plain_runs([('stage', 2), ('batch', 2), "
              "('model', 2)], kind, 4)\n"
              "print('ok')\n")
    # The subprocess runs in this folder: a relative PYTHONPATH (make test's build/python) is
    # made absolute first.
    paths = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, TESSEL_CPU_DEVICES="8", PYTHONPATH=os.pathsep.join(paths))
    done = subprocess.run([sys.executable, "-c", script], cwd=os.path.dirname(__file__), env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


@pytest.mark.parametrize("schedule", ["1f1b", "zero-bubble"])
def test_gradients_and_placement_equal_the_plain_runs(schedule):
    """Every gradient (the tied wte's with the head's share sent back) within 1e-5 of
    value_and_grad's on the plain mesh; each parameter on its stage's sub-mesh in gpt.py's
    layout there; an uneven split (3 layers on 2 stages: 2 and 1). Zero-bubble: the weights'
    gradients from backward_weight, each microbatch's after its input's backward_input."""
    config = small_config()
    config.n_layer = 3
    mesh = tessel.create_mesh(MESHES["stage=2,model=2"])
    pipeline = gpt_pipeline.GptPipeline(config, mesh, schedule, microbatches=4)
    assert [list(pipeline.layers(s)) for s in range(2)] == [[0, 1], [2]]
    params = pipeline.init(3)
    for name, w in params.items():
        stage = pipeline.stage_of(name)
        assert stage == (0 if name in ("wte", "wpe") or name.startswith(("h.0.", "h.1.")) else 1)
        specs = next(s for n, _, s, _ in gpt.parameter_specs(config, ["batch", "model"])
                     if n == name)
        assert tessel.fetch_layout(w) == tessel.Layout(specs, pipeline.meshes[stage]), name
    (x, y), = batches(config, 1)
    value, grads = pipeline.gradients(params, x, y)
    assert_gradients_equal_the_plain_runs(config, pipeline, params, x, y, value, grads)


def assert_gradients_equal_the_plain_runs(config, pipeline, params, x, y, value, grads):
    """The step's loss and every gradient (the tied wte's with the head's share sent back)
    within 1e-5 of value_and_grad's on the plain mesh, each in its parameter's layout; the
    global norm clip_by_global_norm's."""
    plain_mesh = pipeline.meshes[0]
    names = list(params)
    plain = gpt.init(config, plain_mesh, 3)
    rows = tessel.Layout(["batch", gpt.U], plain_mesh)
    want, want_grads = tessel.value_and_grad(
        lambda ps: gpt.loss(dict(zip(names, ps)), tessel.copy_to_mesh(x, rows),
                            tessel.copy_to_mesh(y, rows), config), [plain[n] for n in names])
    assert abs(value - float(np.asarray(tessel.to_host(want)))) < 1e-5
    for name, g in zip(names, want_grads):
        assert tessel.fetch_layout(grads[name]) == tessel.fetch_layout(params[name]), name
        expected = np.asarray(tessel.to_host(g))
        np.testing.assert_allclose(tessel.to_host(grads[name]), expected, rtol=0,
                                   atol=1e-5 * np.abs(expected).max(), err_msg=name)
    clipped, norm = pipeline.clip_by_global_norm(grads, 0.5)
    _, want_norm = tessel.clip_by_global_norm(list(want_grads), 0.5)
    assert norm == pytest.approx(float(np.asarray(tessel.to_host(want_norm))), rel=1e-5)
    total = sum(float(np.sum(np.square(tessel.to_host(g)))) for g in clipped.values())
    assert np.sqrt(total) == pytest.approx(min(norm, 0.5), rel=1e-5)


def test_1f1b_keeps_at_most_p_minus_s_microbatches_activations_on_stage_s():
    """What the gradient tapes keep at most on each stage's device (tape_memory_stats) in a
    step of 4 microbatches on 2 stages: 1f1b's is 2/4 of gpipe's on stage 0 and 1/4 on stage 1
    (+10 %): the executor lets each microbatch's tape go at its backward. Zero-bubble lets it go
    at W, one backward later on stage 1: at most p = 2 microbatches' activations on each stage
    and, between a microbatch's B and W, the output gradients its matmuls' weight gradients read
    (about half a microbatch's activations): within (p + 1) / m = 3/4 of gpipe's."""
    config = small_config()
    mesh = tessel.create_mesh(MESHES["stage=2"])  # one device per stage
    (x, y), = batches(config, 1)
    peaks = {}
    for kind in ONE_CHUNK:
        pipeline = gpt_pipeline.GptPipeline(config, mesh, kind, microbatches=4)
        params = pipeline.init(3)
        tessel.reset_tape_memory_peak()
        pipeline.gradients(params, x, y)
        stats = {s.device: s for s in tessel.tape_memory_stats()}
        peaks[kind] = [stats[m.local_devices()[0]].peak_bytes for m in pipeline.meshes]
        assert all(stats[m.local_devices()[0]].live_bytes == 0 for m in pipeline.meshes)
    assert min(peaks["gpipe"]) > 0
    for stage, share in enumerate([2 / 4, 1 / 4]):
        assert peaks["1f1b"][stage] <= 1.1 * share * peaks["gpipe"][stage], peaks
        assert peaks["zero-bubble"][stage] <= 1.1 * 3 / 4 * peaks["gpipe"][stage], peaks
    assert peaks["zero-bubble"][0] == peaks["1f1b"][0]  # W right after B on stage 0


@pytest.mark.parametrize("kind", ONE_CHUNK)
@pytest.mark.parametrize("p,m", [(1, 1), (2, 1), (2, 4), (3, 2), (4, 4), (4, 8), (5, 3)])
def test_schedules_hold_every_action_once_run_without_deadlock_and_idle_the_formula(kind, p, m):
    """gpipe and 1f1b idle (p - 1) / (m + p - 1) on every stage; zero-bubble (each backward B
    and W, of cost 1 each) (p - 1) / (3 m + p - 1) on every stage when m >= p and always less
    than 1f1b when p > 1."""
    s = pipeline_schedule.make_schedule(kind, p, m)
    ops = "FBW" if kind == "zero-bubble" else "FB"
    assert s.ops == ops
    want = {Action(st, mb, op) for st in range(p) for mb in range(m) for op in ops}
    assert sorted(s.actions()) == sorted(want)  # each once
    for st, actions in enumerate(s.per_stage):
        assert all(a.stage == st for a in actions)
    sim = pipeline_schedule.simulate(s)
    assert len(sim.timeline) == len(ops) * p * m  # ran to its end: no deadlock
    done = set()
    for t in sim.timeline:  # the issue order puts every action after what it needs
        assert all(d in done for d in pipeline_schedule.dependencies(s, t.action)), t
        done.add(t.action)
    bubble = pipeline_schedule.bubble_formula(kind, p, m)
    if kind == "zero-bubble":
        assert bubble == pytest.approx((p - 1) / (3 * m + p - 1))
        one_f_one_b = pipeline_schedule.simulate(pipeline_schedule.make_schedule("1f1b", p, m))
        if p > 1:
            assert max(sim.idle_fraction) < max(one_f_one_b.idle_fraction)
    else:
        assert bubble == pytest.approx((p - 1) / (m + p - 1))
    for idle in sim.idle_fraction:
        if kind != "zero-bubble" or m >= p:
            assert idle == pytest.approx(bubble)
    # 1f1b keeps at most p - s microbatches' activations on stage s; gpipe all m; zero-bubble
    # (freed at W) min(p, m) on every stage.
    for st, kept in enumerate(sim.max_in_flight):
        assert kept == {"1f1b": min(p - st, m), "gpipe": m, "zero-bubble": min(p, m)}[kind]


def test_the_schedule_prints_as_the_clis():
    text = str(pipeline_schedule.make_schedule("1f1b", 2, 4))
    assert text.splitlines()[1:] == [
        "stage 0: F0 F1 B0 F2 B1 F3 B2 B3",
        "stage 1: F0 B0 F1 B1 F2 B2 F3 B3",
        "time (one column per forward; a backward takes two):",
        "stage 0 |F0|F1|. |. |B0|B0|F2|B1|B1|F3|B2|B2|. |B3|B3|",
        "stage 1 |. |F0|B0|B0|F1|B1|B1|F2|B2|B2|F3|B3|B3|. |. |"]
    assert "bubble (p-1)/(m+p-1) = 0.2000" in text
    assert "activations kept at most: 2, 1 microbatches per stage" in text
    text = str(pipeline_schedule.make_schedule("zero-bubble", 2, 4))
    assert text.splitlines() == [
        "schedule zero-bubble: 2 stages x 1 chunk, 4 microbatches; bubble (p-1)/(3*m+p-1) = "
        "0.0769, simulated idle 0.0769 on the idlest stage (forward 1, input backward 1, weight "
        "backward 1); activations kept at most: 2, 2 microbatches per stage",
        "stage 0: F0 F1 B0 W0 F2 B1 W1 F3 B2 W2 B3 W3",
        "stage 1: F0 B0 F1 B1 W0 F2 B2 W1 F3 B3 W2 W3",
        "time (one column per forward, input backward or weight backward):",
        "stage 0 |F0|F1|. |B0|W0|F2|B1|W1|F3|B2|W2|B3|W3|",
        "stage 1 |. |F0|B0|F1|B1|W0|F2|B2|W1|F3|B3|W2|W3|"]


@pytest.mark.skipif(not CLI.exists(), reason=f"no tessel CLI at {CLI}")
@pytest.mark.parametrize("kind,p,m,v", [
    ("interleaved", 1, 2, 2), ("interleaved", 2, 2, 2), ("interleaved", 2, 4, 2),
    ("interleaved", 2, 4, 3), ("interleaved", 2, 6, 4), ("interleaved", 3, 3, 2),
    ("interleaved", 3, 6, 2), ("interleaved", 4, 4, 2), ("interleaved", 4, 12, 3),
    ("gpipe", 3, 4, 1), ("1f1b", 4, 6, 1), ("zero-bubble", 1, 2, 1), ("zero-bubble", 2, 4, 1),
    ("zero-bubble", 3, 2, 1), ("zero-bubble", 4, 12, 1), ("zero-bubble", 5, 3, 1)])
def test_schedules_equal_the_clis(kind, p, m, v):
    """str(make_schedule(...)): the header (bubble, simulated idle, activations kept), each
    stage's action list and the time chart (or its omission past 240 columns) as `tessel train
    gpt --print-schedule` prints them (the lines before its layer split)."""
    out = subprocess.run([str(CLI), "train", "gpt", "--mesh", f"stage={p},batch=1,model=1",
                          "--microbatches", str(m), "--schedule", kind, "--chunks", str(v),
                          "--layers", str(p * v), "--print-schedule"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    cut = next(i for i, line in enumerate(lines)
               if re.match(r"(virtual )?stage \d+.*: layers", line))
    assert str(pipeline_schedule.make_schedule(kind, p, m, chunks=v)).splitlines() == lines[:cut]


@pytest.mark.parametrize("p,m,v", [(1, 1, 2), (2, 2, 2), (2, 4, 2), (2, 8, 3), (3, 6, 2),
                                   (4, 4, 4), (4, 8, 2), (5, 10, 2)])
def test_interleaved_schedules_hold_every_action_once_and_idle_the_formula(p, m, v):
    s = pipeline_schedule.make_schedule("interleaved", p, m, chunks=v)
    assert (s.chunks, s.virtual_stages) == (v, p * v)
    want = {Action(k % p, mb, op, k // p) for k in range(p * v) for mb in range(m)
            for op in "FB"}
    assert sorted(s.actions()) == sorted(want)  # each once, on its virtual stage's stage
    sim = pipeline_schedule.simulate(s)
    assert len(sim.timeline) == 2 * p * v * m
    done = set()
    for t in sim.timeline:  # every action after what it needs: the previous / next chunk's
        assert all(d in done for d in pipeline_schedule.dependencies(s, t.action)), t
        done.add(t.action)
    bubble = pipeline_schedule.bubble_formula("interleaved", p, m, v)
    assert bubble == pytest.approx((p - 1) / (v * m + p - 1))
    assert max(sim.idle_fraction) == pytest.approx(bubble)
    assert bubble <= pipeline_schedule.bubble_formula("1f1b", p, m)  # interleaving cuts it


def test_interleaved_schedules_are_refused_naming_the_values():
    with pytest.raises(ValueError, match="interleaved needs >= 2 chunks per stage, got 1"):
        pipeline_schedule.make_schedule("interleaved", 2, 4)
    with pytest.raises(ValueError, match=re.escape("microbatches (6) to be a multiple of the "
                                                   "stages (4)")):
        pipeline_schedule.make_schedule("interleaved", 4, 6, chunks=2)
    with pytest.raises(ValueError, match="schedule 1f1b runs one chunk per stage, got 2 chunks"):
        pipeline_schedule.make_schedule("1f1b", 2, 4, chunks=2)
    with pytest.raises(ValueError, match="chunks must be an integer >= 1, got 0"):
        pipeline_schedule.make_schedule("interleaved", 2, 4, chunks=0)
    with pytest.raises(ValueError, match=re.escape("microbatches (3) to be a multiple")):
        pipeline_schedule.bubble_formula("interleaved", 2, 3, 2)
    s = pipeline_schedule.make_schedule("interleaved", 2, 2, chunks=2)
    s.per_stage[1].remove(Action(1, 1, "B", 1))
    with pytest.raises(ValueError, match=re.escape("schedule interleaved (2 stages, 2 "
                                                   "microbatches, 2 chunks): B1.1 of stage 1 is "
                                                   "missing")):
        pipeline_schedule.simulate(s)
    s = pipeline_schedule.make_schedule("interleaved", 2, 2, chunks=2)
    s.per_stage[0][0] = (0, 0, "F", 2)  # no chunk 2
    with pytest.raises(ValueError, match=r"stage 0 lists \(0, 0, 'F', 2\): not \(stage, "):
        pipeline_schedule.simulate(s)
    # Stage 0 runs its second chunk's forward first: it waits for stage 1's first chunk, which
    # waits for stage 0's first.
    s = pipeline_schedule.make_schedule("interleaved", 2, 2, chunks=2)
    first = s.per_stage[0].index(Action(0, 0, "F", 1))
    s.per_stage[0].insert(0, s.per_stage[0].pop(first))
    with pytest.raises(ValueError, match=re.escape("deadlock: stage 0 at F0.1 waits for F0.0 of "
                                                   "stage 1; stage 1 at F0.0 waits for F0.0 of "
                                                   "stage 0")):
        pipeline_schedule.simulate(s)


def test_interleaved_placement_and_gradients_equal_the_plain_runs():
    """5 layers over 2 stages x 2 chunks (virtual stages 0..3: layers [0, 1], [2], [3], [4];
    stage 0 holds layers 0, 1 and 3, stage 1 layers 2 and 4, the final norm and the head): every
    gradient of one step within 1e-5 of value_and_grad's on the plain mesh, in its parameter's
    layout on its stage."""
    config = small_config()
    config.n_layer = 5
    mesh = tessel.create_mesh(MESHES["stage=2,model=2"])
    # One controller: before_action then sees the schedule's order.
    pipeline = gpt_pipeline.GptPipeline(config, mesh, "interleaved", 2, chunks=2,
                                        stage_threads=False)
    assert [list(pipeline.layers(k)) for k in range(4)] == [[0, 1], [2], [3], [4]]
    assert {n: pipeline.stage_of(n) for n in ("wte", "wpe", "h.0.mlp.c_fc", "h.1.attn.wq",
                                              "h.2.ln_1.weight", "h.3.mlp.c_proj",
                                              "h.4.attn.wk", "ln_f.weight")} == {
        "wte": 0, "wpe": 0, "h.0.mlp.c_fc": 0, "h.1.attn.wq": 0, "h.2.ln_1.weight": 1,
        "h.3.mlp.c_proj": 0, "h.4.attn.wk": 1, "ln_f.weight": 1}
    names = pipeline.names
    assert pipeline.used_by(0) == [n for n in names if n in ("wte", "wpe") or
                                   n.startswith(("h.0.", "h.1."))]
    assert pipeline.used_by(2) == [n for n in names if n.startswith("h.3.")]
    assert pipeline.used_by(3) == [n for n in names if n in ("wte", "ln_f.weight") or
                                   n.startswith("h.4.")]  # the tied head's wte
    params = pipeline.init(3)
    (x, y), = batches(config, 1)
    seen = []
    pipeline.before_action = seen.append
    value, grads = pipeline.gradients(params, x, y)
    assert [t.action for t in pipeline.order] == seen
    assert_gradients_equal_the_plain_runs(config, pipeline, params, x, y, value, grads)


def test_bad_schedules_are_refused_naming_the_stuck_stages():
    s = pipeline_schedule.make_schedule("gpipe", 2, 2)
    # Stage 0 waits for a backward before sending stage 1 its forward of microbatch 1.
    s.per_stage[0] = [Action(0, 0, "F"), Action(0, 0, "B"), Action(0, 1, "F"), Action(0, 1, "B")]
    s.per_stage[1] = [Action(1, 0, "F"), Action(1, 1, "F"), Action(1, 0, "B"), Action(1, 1, "B")]
    with pytest.raises(ValueError, match="deadlock: stage 0 at B0 waits for B0 of stage 1; "
                                         "stage 1 at F1 waits for F1 of stage 0"):
        pipeline_schedule.simulate(s)
    s = pipeline_schedule.make_schedule("1f1b", 2, 2)
    s.per_stage[1].pop()
    with pytest.raises(ValueError, match="B1 of stage 1 is missing"):
        pipeline_schedule.simulate(s)
    s = pipeline_schedule.make_schedule("1f1b", 2, 2)
    s.per_stage[0][0], s.per_stage[0][2] = s.per_stage[0][2], s.per_stage[0][0]
    with pytest.raises(ValueError, match="stage 0 runs B0 before its forward"):
        pipeline_schedule.simulate(s)
    s = pipeline_schedule.make_schedule("gpipe", 2, 1)
    s.per_stage = [[(0, 0, "F"), (0, 0, "B")], [(1, 0, "F"), (1, 0, "B")]]  # plain tuples
    assert pipeline_schedule.simulate(s).max_in_flight == [1, 1]
    assert "stage 1: F0 B0" in str(s)
    s.per_stage[1][0] = (1, 2, "F")
    with pytest.raises(ValueError, match=r"stage 1 lists \(1, 2, 'F'\): not \(stage, "):
        pipeline_schedule.simulate(s)
    with pytest.raises(ValueError, match="unknown schedule 'zb'"):
        pipeline_schedule.make_schedule("zb", 2, 4)
    with pytest.raises(ValueError, match="microbatches must be an integer >= 1, got 0"):
        pipeline_schedule.make_schedule("gpipe", 2, 0)


def test_zero_bubble_schedules_are_refused_as_the_cpps():
    """chunks other than 1; a W in a schedule that does not split backwards, a missing W, a W
    before its B: the C++'s wording (pipeline_schedule.cpp)."""
    for call in (pipeline_schedule.make_schedule, pipeline_schedule.bubble_formula):
        with pytest.raises(ValueError, match="schedule zero-bubble runs one chunk per stage, got "
                                             "2 chunks"):
            call("zero-bubble", 2, 4, 2)
    s = pipeline_schedule.make_schedule("1f1b", 2, 2)
    s.per_stage[0].append(Action(0, 0, "W"))
    with pytest.raises(ValueError, match=re.escape("schedule 1f1b (2 stages, 2 microbatches, 1 "
                                                   "chunks): stage 0 lists W0: schedule 1f1b "
                                                   "does not split backwards")):
        pipeline_schedule.simulate(s)
    s = pipeline_schedule.make_schedule("zero-bubble", 2, 2)
    s.per_stage[1].remove(Action(1, 1, "W"))
    with pytest.raises(ValueError, match="W1 of stage 1 is missing"):
        pipeline_schedule.simulate(s)
    s = pipeline_schedule.make_schedule("zero-bubble", 2, 2)
    b0 = s.per_stage[0].index(Action(0, 0, "B"))
    s.per_stage[0].insert(b0, s.per_stage[0].pop(s.per_stage[0].index(Action(0, 0, "W"))))
    with pytest.raises(ValueError, match="stage 0 runs W0 before its input backward"):
        pipeline_schedule.simulate(s)
    s = pipeline_schedule.make_schedule("zero-bubble", 2, 2)
    s.per_stage[0][0] = (0, 0, "X")
    with pytest.raises(ValueError, match=re.escape("stage 0 lists (0, 0, 'X'): not (stage, "
                                                   "microbatch, 'F', 'B' or 'W'[, chunk])")):
        pipeline_schedule.simulate(s)


@pytest.mark.parametrize("threads", [False, True])
@pytest.mark.parametrize("kind", ONE_CHUNK)
@pytest.mark.parametrize("stalled,at,message", [
    (1, Action(1, 0, "F"), "the forward activation of microbatch 0 from stage 0 to stage 1 did "
                           "not arrive within 200 ms (stage 1 is late)"),
    (0, Action(1, 0, "B"), "the backward gradient of microbatch 0 from stage 1 to stage 0 did "
                           "not arrive within 200 ms (stage 0 is late)")])
def test_a_stalled_stage_is_named_by_its_neighbour_within_the_deadline(kind, stalled, at,
                                                                       message, threads):
    """A stage whose device is busy (two 3000^3 matmuls queued on its stream, about a second)
    as its neighbour transfers to or from it: DeadlineExceededError naming it, the microbatch and
    the direction, after the 0.2 s deadline and within 1.1x it (+ 0.3 s for a loaded machine).
    With stage threads the stalled stage is named as late, or its device (a launch waiting for
    room on its stream: the threads run in the deadline's RelayoutTimeoutScope), but which wait
    meets the stall first depends on the threads' timing (the other stage's wait in the mailbox,
    which names the stage that did not send, comes second), and the step ends when every thread
    has: within two deadlines."""
    config = small_config()
    mesh = tessel.create_mesh(MESHES["stage=2"])
    stall, stalled_at = [], []

    def before_action(action):
        if action == at and not stall:  # the first step only
            big = tessel.ones((3000, 3000), tessel.Layout([gpt.U, gpt.U], pipeline.meshes[stalled]))
            stall.append(tessel.matmul(tessel.matmul(big, big), big))
            stalled_at.append(time.monotonic())

    pipeline = gpt_pipeline.GptPipeline(config, mesh, kind, 2, timeout=0.2,
                                        before_action=before_action, stage_threads=threads)
    params = pipeline.init(3)
    (x, y), = batches(config, 1)
    pattern = re.escape(message)
    if threads:
        device = pipeline.meshes[stalled].local_devices()[0]
        pattern = (re.escape(f"did not arrive within 200 ms (stage {stalled} is late)") + "|" +
                   re.escape(f"{device}: the device's stream made no room within 200 ms"))
    with pytest.raises(tessel.DeadlineExceededError, match=pattern):
        pipeline.gradients(params, x, y)
    waited = time.monotonic() - stalled_at[0]
    tessel.to_host(tessel.reduce_sum(stall[0]))  # the stall ends before the next test
    assert 0.19 <= waited <= (1 + threads) * 0.2 * 1.1 + 0.3, waited
    value, _ = pipeline.gradients(params, x, y)  # the stages work again afterwards
    assert np.isfinite(value)


def test_bad_configurations_are_refused_naming_the_values():
    config = small_config()  # 2 layers, batch 4
    with pytest.raises(ValueError, match=r"the batch of 4 rows does not split into 3 microbatches"):
        gpt_pipeline.GptPipeline(config, tessel.create_mesh(MESHES["stage=2"]), "1f1b", 3)
    with pytest.raises(ValueError, match=re.escape("2 layers do not fill 4 virtual stages "
                                                   "(4 stages x 1 chunks)")):
        gpt_pipeline.GptPipeline(config, tessel.create_mesh([("stage", 4), ("batch", 1)]),
                                 "gpipe", 2)
    with pytest.raises(ValueError, match=r"`stage` as its first dimension.*\['batch', 'stage'\]"):
        gpt_pipeline.GptPipeline(config, tessel.create_mesh([("batch", 1), ("stage", 2)]),
                                 "1f1b", 2)
    with pytest.raises(ValueError, match=r"`stage` as its first dimension.*\['stage'\]"):
        gpt_pipeline.GptPipeline(config, tessel.create_mesh([("stage", 2)]), "1f1b", 2)
    with pytest.raises(ValueError, match="timeout must be > 0 seconds, got -1"):
        gpt_pipeline.GptPipeline(config, tessel.create_mesh(MESHES["stage=2"]), "1f1b", 2, -1)
    with pytest.raises(ValueError, match="unknown schedule 'zb'"):
        gpt_pipeline.GptPipeline(config, tessel.create_mesh(MESHES["stage=2"]), "zb", 2)
    with pytest.raises(ValueError, match=re.escape("2 layers do not fill 4 virtual stages "
                                                   "(2 stages x 2 chunks)")):
        gpt_pipeline.GptPipeline(config, tessel.create_mesh(MESHES["stage=2"]), "interleaved", 2,
                                 chunks=2)
    config.n_layer = 4
    with pytest.raises(ValueError, match=re.escape("microbatches (1) to be a multiple of the "
                                                   "stages (2)")):
        gpt_pipeline.GptPipeline(config, tessel.create_mesh(MESHES["stage=2"]), "interleaved", 1,
                                 chunks=2)
    with pytest.raises(ValueError, match="interleaved needs >= 2 chunks per stage, got 1"):
        gpt_pipeline.GptPipeline(config, tessel.create_mesh(MESHES["stage=2"]), "interleaved", 2)
    with pytest.raises(ValueError, match="schedule zero-bubble runs one chunk per stage, got 2"):
        gpt_pipeline.GptPipeline(config, tessel.create_mesh(MESHES["stage=2"]), "zero-bubble", 2,
                                 chunks=2)
    config.n_layer = 2
    pipeline = gpt_pipeline.GptPipeline(config, tessel.create_mesh(MESHES["stage=2"]), "1f1b", 2)
    x = np.zeros((3, config.block_size), np.int32)
    with pytest.raises(ValueError, match=r"token ids \[3, 16\] .* multiple of the 2 microbatches"):
        pipeline.gradients(pipeline.init(3), x, x)
    params = pipeline.init(3)
    with pytest.raises(ValueError, match=r"parameters \['h.0.attn.wq'\] missing or unknown"):
        pipeline.gradients({n: w for n, w in params.items() if n != "h.0.attn.wq"}, x, x)
    with pytest.raises(ValueError, match="clip_norm must be a finite number > 0, got 0"):
        pipeline.clip_by_global_norm(params, 0)


def test_process_mesh_gives_each_process_its_share(monkeypatch):
    """process_mesh under mpirun's variables (no MPI needed to make the mesh): process 1 of 2
    holds stage 1's devices; devices that do not split over 3 processes are refused."""
    for name in ["TESSEL_NUM_CLIENTS", "DTENSOR_NUM_CLIENTS", "TESSEL_CLIENT_ID",
                 "DTENSOR_CLIENT_ID", "TESSEL_JOB_NAME", "DTENSOR_JOB_NAME"]:
        monkeypatch.delenv(name, raising=False)
    assert gpt_pipeline.process_mesh("stage=2,batch=1,model=2").num_local_devices() == 4
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    mesh = gpt_pipeline.process_mesh("stage=2,batch=1,model=2")
    assert list(mesh.local_device_ids()) == [2, 3]
    assert [m.num_local_devices() for m in gpt_pipeline.stage_meshes(mesh)] == [0, 2]
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "3")
    with pytest.raises(ValueError, match=re.escape("the mesh stage=2,batch=1,model=2's 4 devices "
                                                   "do not split evenly over 3 processes")):
        gpt_pipeline.process_mesh("stage=2,batch=1,model=2")


def test_main_trains_and_prints_the_schedule(capsys):
    assert gpt_pipeline.main(["--config", "test", "--mesh", "stage=2,batch=1,model=2",
                              "--microbatches", "2", "--schedule", "gpipe", "--steps", "3"]) == 0
    out = capsys.readouterr().out
    assert "schedule gpipe: 2 stages x 1 chunk, 2 microbatches" in out
    assert "stage 1: layers 1..1, final norm and head" in out
    assert "step    2 loss" in out
    assert gpt_pipeline.main(["--config", "test", "--mesh", "stage=2,batch=1",
                              "--microbatches", "4", "--print-schedule"]) == 0
    assert "stage 1: F0 B0 F1 B1 F2 B2 F3 B3" in capsys.readouterr().out
    assert gpt_pipeline.main(["--config", "test", "--mesh", "stage=2,batch=1,model=1",
                              "--microbatches", "2", "--schedule", "interleaved", "--layers", "4",
                              "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "schedule interleaved: 2 stages x 2 chunks, 2 microbatches" in out
    assert "virtual stage 2 (stage 0, chunk 1): layers 2..2\n" in out
    assert "step    1 loss" in out
    assert gpt_pipeline.main(["--config", "test", "--mesh", "stage=2,batch=1",
                              "--microbatches", "4", "--schedule", "zero-bubble", "--steps",
                              "2"]) == 0
    out = capsys.readouterr().out
    assert "stage 1: F0 B0 F1 B1 W0 F2 B2 W1 F3 B3 W2 W3" in out
    assert "step    1 loss" in out
