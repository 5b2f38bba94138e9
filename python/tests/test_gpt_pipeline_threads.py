"""examples/gpt/gpt_pipeline.py's stage threads (a Python thread per stage: stage_threads.py) and
its measured idle (pipeline_idle.py): the single controller's losses and parameters bit for bit,
a stalled or failed stage named and ending every wait, the refusal across processes, each
stage's idle and transfers, a transfer across processes counting its shorter side. The busy-device
stall test with stage threads is test_gpt_pipeline_example.py's; under mpirun:
python/tests/mpi/gpt_pipeline_under_mpirun.py."""
import os
import re
import sys
import time

import numpy as np
import pytest

import tessel

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
import gpt_pipeline  # noqa: E402
from pipeline_idle import shorter_sides  # noqa: E402
from pipeline_schedule import Action  # noqa: E402
from test_gpt_pipeline_example import MESHES, batches, small_config  # noqa: E402


def train_losses_and_params(pipeline, data):
    trainer = gpt_pipeline.Trainer(pipeline, pipeline.init(3))
    losses = [trainer.step(x, y) for x, y in data]
    return losses, [np.asarray(tessel.to_host(p)) for p in trainer.params]


@pytest.mark.parametrize("mesh_name,kind,microbatches,chunks,layers", [
    ("stage=2", "gpipe", 2, 1, 2), ("stage=2", "1f1b", 4, 1, 2),
    ("stage=2", "zero-bubble", 4, 1, 2), ("stage=2", "interleaved", 2, 2, 4),
    ("stage=2,model=2", "1f1b", 2, 1, 3), ("stage=2,batch=2", "zero-bubble", 2, 1, 2)])
def test_stage_threads_give_the_single_controllers_losses_bit_for_bit(mesh_name, kind,
                                                                      microbatches, chunks,
                                                                      layers):
    """A thread per stage issues each stage's ops in the same order as the single controller:
    3 steps' losses and the parameters after them equal, bit for bit (the tape's and the
    transfers' arithmetic does not depend on the issuing thread)."""
    config = small_config()
    config.n_layer = layers
    mesh = tessel.create_mesh(MESHES[mesh_name])
    data = batches(config, 3)
    runs = []
    for threads in (False, True):
        pipeline = gpt_pipeline.GptPipeline(config, mesh, kind, microbatches, chunks=chunks,
                                            stage_threads=threads)
        assert pipeline.stage_threads == threads
        runs.append(train_losses_and_params(pipeline, data))
    (one_losses, one_params), (threads_losses, threads_params) = runs
    assert threads_losses == one_losses
    for a, b in zip(one_params, threads_params):
        np.testing.assert_array_equal(a, b)


def test_a_stage_thread_that_does_not_send_is_named_within_the_deadline():
    """Stage 0's thread stalls 1 s before its first forward: stage 1's wait for the activation
    runs out after the 0.2 s deadline and the step raises DeadlineExceededError naming stage 0,
    the microbatch and the direction, once the stalled thread has come back (1 s) and seen the
    failure; the next step works."""
    config = small_config()
    stalled_at = []

    def before_action(action):
        if action == Action(0, 0, "F") and not stalled_at:  # the first step only
            stalled_at.append(time.monotonic())
            time.sleep(1.0)

    pipeline = gpt_pipeline.GptPipeline(config, tessel.create_mesh(MESHES["stage=2"]), "1f1b", 2,
                                        timeout=0.2, before_action=before_action,
                                        stage_threads=True)
    params = pipeline.init(3)
    (x, y), = batches(config, 1)
    with pytest.raises(tessel.DeadlineExceededError, match=re.escape(
            "pipeline: the forward activation of microbatch 0 from stage 0 to stage 1 did not "
            "arrive within 200 ms (stage 0 is late): it was not sent")) as e:
        pipeline.gradients(params, x, y)
    took = time.monotonic() - stalled_at[0]
    assert 1.0 <= took < 3.0, took
    assert e.value.__traceback__ is not None
    value, _ = pipeline.gradients(params, x, y)
    assert np.isfinite(value)


def test_a_failed_stage_thread_ends_every_other_stages_wait_at_once():
    """Stage 0 fails before its second forward (an exception in its thread) while stage 1 waits
    for that activation with a 60 s deadline: stage 1's wait ends at once and the step raises
    stage 0's exception."""
    config = small_config()

    def before_action(action):
        if action == Action(0, 1, "F"):
            raise RuntimeError("stage 0 broke at F1")

    pipeline = gpt_pipeline.GptPipeline(config, tessel.create_mesh(MESHES["stage=2"]), "gpipe", 2,
                                        timeout=60.0, before_action=before_action,
                                        stage_threads=True)
    params = pipeline.init(3)
    (x, y), = batches(config, 1)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="stage 0 broke at F1"):
        pipeline.gradients(params, x, y)
    assert time.monotonic() - start < 10.0


def test_stage_threads_are_refused_on_a_mesh_across_processes():
    """Two of the mesh's four devices in this process (as under mpirun): ValueError naming the
    counts; one controller takes the same mesh's figures."""
    devices = tessel.create_mesh(MESHES["stage=2,model=2"]).local_devices()
    mesh = tessel.Mesh(["stage", "batch", "model"], np.arange(4).reshape(2, 1, 2), [0, 1],
                       devices[:2], "")
    with pytest.raises(ValueError, match=re.escape(
            "pipeline: stage threads run every stage in this process; 2 of the mesh's 4 "
            "devices are here")):
        gpt_pipeline.GptPipeline(small_config(), mesh, "1f1b", 2, stage_threads=True)


@pytest.mark.parametrize("threads", [False, True])
def test_the_measured_idle_of_each_stage(threads):
    """measure_idle: each stage's devices (1 here), its idle fraction in [0, 1) with some
    computing, the step's 10 transfers (the 4 microbatches' activations and gradients, the tied
    embedding's copy and its gradient), each stage's transfer time > 0 and no more than its time
    in collectives (twice that with stage threads); the losses those of a step that does not
    measure."""
    config = small_config()
    mesh = tessel.create_mesh(MESHES["stage=2"])
    (x, y), = batches(config, 1)
    plain = gpt_pipeline.GptPipeline(config, mesh, "1f1b", 4, stage_threads=threads)
    params = plain.init(3)
    want, _ = plain.gradients(params, x, y)
    assert plain.idle is None
    pipeline = gpt_pipeline.GptPipeline(config, mesh, "1f1b", 4, stage_threads=threads,
                                        measure_idle=True)
    value, _ = pipeline.gradients(params, x, y)
    assert value == want
    idle = pipeline.idle
    assert idle.wall_seconds > 0 and idle.transfers == 10
    assert len(idle.stages) == 2
    for stage in idle.stages:
        assert stage.devices == 1
        assert 0 <= stage.idle_fraction < 1 and stage.computing_seconds > 0
        # With stage threads two transfers (stage 0's forward, stage 1's backward) may run at
        # once, each counting both: at most twice the time in collectives on 2 stages.
        assert 0 < stage.transfer_seconds <= stage.communication_seconds * (1 + threads) * 1.001
        assert stage.transfer_fraction == pytest.approx(stage.transfer_seconds / idle.wall_seconds)
        assert stage.idle_fraction == pytest.approx(1 - stage.computing_seconds /
                                                    idle.wall_seconds)
    assert len(idle.log) == 10 and {(f, t) for f, t, _ in idle.log} == {(0, 1), (1, 0)}
    assert pipeline.idle_everywhere(idle) is idle  # one process: this process's figures


def test_a_transfer_across_processes_counts_its_shorter_side():
    """shorter_sides (the C++'s transfer_seconds_across): stage 0's process saw the transfers
    0 -> 1 take 0.5 s (it waited) and 1 -> 0 0.1 s, stage 1's process 0.2 s and 0.3 s: each
    counts the shorter side for both stages; a side that did not take part (-1) is skipped; logs
    of other transfers are refused."""
    logs = [[(0, 1, 0.5), (1, 0, 0.1)], [(0, 1, 0.2), (1, 0, 0.3)]]
    assert shorter_sides(logs) == pytest.approx([0.3, 0.3])
    assert shorter_sides([[(0, 1, -1.0)], [(0, 1, 0.4)]]) == pytest.approx([0.4, 0.4])
    with pytest.raises(ValueError, match="the stages' transfer logs differ"):
        shorter_sides([[(0, 1, 0.5)], [(1, 0, 0.5)]])


def test_stage_threads_are_the_default_when_every_stage_is_here():
    """None (the default) takes a thread per stage in one process with 2 stages or more, one
    controller with a single stage; the losses are the single controller's bit for bit."""
    config = small_config()
    mesh = tessel.create_mesh(MESHES["stage=2"])
    assert gpt_pipeline.GptPipeline(config, mesh, "1f1b", 2).stage_threads
    assert not gpt_pipeline.GptPipeline(config, mesh, "1f1b", 2, stage_threads=False).stage_threads
    one_stage = tessel.create_mesh([("stage", 1), ("batch", 1), ("model", 1)])
    assert not gpt_pipeline.GptPipeline(config, one_stage, "1f1b", 2).stage_threads

