"""examples/gpt/gpt_pipeline.py under mpirun -np 2, one stage per process (ctest
mpi.gpt_pipeline_python_np2; docs/pipeline.md, "From Python").

Every process makes the stage x batch x model mesh with gpt_pipeline.process_mesh (a stage's
devices on each process) and trains the pipeline 3 steps; each checks its losses against the
same pipeline with every stage in this process alone, and against gpt.py's plain Trainer on one
stage's batch x model mesh, within 1e-5: every process reports the step's loss (read after
everywhere()) and clips by the same global norm. Cases: stage=2 (1f1b, interleaved with 2 chunks
of 4 layers, zero-bubble with 4 microbatches) and stage=2 x model=2 (gpipe, zero-bubble; 2
devices per process); stage threads are refused there (a stage per process); measure_idle
measures this process's stage only, idle_everywhere both. Then main() for 2 steps: only the
first process prints. Prints "rank R: PASS".
"""
import contextlib
import io
import os
import sys

import numpy as np

import tessel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples", "gpt"))
import gpt  # noqa: E402
import gpt_pipeline  # noqa: E402

STEPS = 3
CASES = [("stage=2,batch=1,model=1", "1f1b", 2, 1, 2),
         ("stage=2,batch=1,model=1", "interleaved", 2, 2, 4),
         ("stage=2,batch=1,model=1", "zero-bubble", 4, 1, 2),
         ("stage=2,batch=1,model=2", "gpipe", 2, 1, 2),
         ("stage=2,batch=1,model=2", "zero-bubble", 2, 1, 2)]  # mesh, schedule, m, chunks, layers


def train(config, mesh, schedule, microbatches, chunks, data):
    pipeline = gpt_pipeline.GptPipeline(config, mesh, schedule, microbatches, timeout=60.0,
                                        chunks=chunks)
    trainer = gpt_pipeline.Trainer(pipeline, pipeline.init(3))
    return pipeline, [trainer.step(x, y) for x, y in data]


def main():
    mpi = tessel.MpiEnvironment()
    rank, size = tessel.mpi_rank(), tessel.mpi_size()
    assert size == 2, size
    for text, schedule, microbatches, chunks, layers in CASES:
        config = gpt.Config("test")
        config.warmup_iters, config.lr_decay_iters, config.n_layer = 2, 10, layers
        ids = np.random.default_rng(5).integers(0, config.vocab_size,
                                                (STEPS, 2, config.batch_size, config.block_size))
        data = ids.astype(np.int32)
        mesh = gpt_pipeline.process_mesh(text)
        assert mesh.num_local_devices() == mesh.size // 2, mesh.to_string()
        pipeline, piped = train(config, mesh, schedule, microbatches, chunks, data)
        here = [s for s, m in enumerate(pipeline.meshes) if m.num_local_devices() > 0]
        assert here == [rank], (here, rank)  # one stage per process
        assert not pipeline.stage_threads  # the default across processes: one controller
        try:  # stage threads need every stage in this process
            gpt_pipeline.GptPipeline(config, mesh, schedule, microbatches, chunks=chunks,
                                     stage_threads=True)
            raise AssertionError("stage threads were not refused across processes")
        except ValueError as e:
            assert "stage threads run every stage in this process" in str(e), e
        # The same mesh over this process's own devices (/job:worker/.../task:<rank>/...).
        prefix = mesh.local_devices()[0].rsplit(":", 1)[0]
        alone_mesh = tessel.create_mesh(list(zip(mesh.dim_names, mesh.shape())),
                                        devices=[f"{prefix}:{i}" for i in range(mesh.size)])
        alone_pipeline, alone = train(config, alone_mesh, schedule, microbatches, chunks, data)
        plain_mesh = alone_pipeline.meshes[0]
        trainer = gpt.Trainer(gpt.init(config, plain_mesh, 3), config)
        rows = tessel.Layout(["batch", gpt.U], plain_mesh)
        plain = [trainer.step(tessel.copy_to_mesh(x, rows), tessel.copy_to_mesh(y, rows))
                 for x, y in data]
        worst = max(np.max(np.abs(np.subtract(piped, alone))),
                    np.max(np.abs(np.subtract(piped, plain))))
        print(f"rank {rank}: {text} {schedule} (chunks {chunks}): losses {np.round(piped, 6)}, "
              f"largest difference to one process and to the plain run {worst:.3g}", flush=True)
        assert worst <= 1e-5, (piped, alone, plain)
        assert piped[-1] < piped[0], piped
    # The measured idle: each process measures its own stage (devices 1), the other's not (0).
    config = gpt.Config("test")
    pipeline = gpt_pipeline.GptPipeline(config, gpt_pipeline.process_mesh(
        "stage=2,batch=1,model=1"), "1f1b", 2, measure_idle=True)
    (x, y), = np.random.default_rng(5).integers(
        0, config.vocab_size, (1, 2, config.batch_size, config.block_size)).astype(np.int32)
    pipeline.gradients(pipeline.init(3), x, y)
    idle = pipeline.idle
    assert idle.transfers == 6, idle  # 2 activations, 2 gradients, the tied wte and its gradient
    assert [s.devices for s in idle.stages] == [int(rank == 0), int(rank == 1)], idle
    mine = idle.stages[rank]
    assert 0 <= mine.idle_fraction < 1 and mine.computing_seconds > 0, idle
    assert 0 < mine.transfer_seconds <= mine.communication_seconds * 1.001, idle
    # idle_everywhere: both stages' figures from their processes; every transfer is between the
    # two stages and counts its shorter side for both, no longer than either side.
    every = pipeline.idle_everywhere(idle)
    assert [s.devices for s in every.stages] == [1, 1], every
    assert every.stages[rank].computing_seconds == mine.computing_seconds, every
    assert every.stages[0].transfer_seconds == every.stages[1].transfer_seconds, every
    assert 0 < every.stages[rank].transfer_seconds <= mine.transfer_seconds * 1.001, every
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert gpt_pipeline.main(["--config", "test", "--mesh", "stage=2,batch=1,model=1",
                                  "--microbatches", "2", "--schedule", "interleaved",
                                  "--layers", "4", "--steps", "2"]) == 0
    printed = out.getvalue()
    if rank == 0:
        assert "schedule interleaved: 2 stages x 2 chunks" in printed, printed
        assert "virtual stage 3 (stage 1, chunk 1): layers 3..3, final norm and head" in printed
        assert "step    1 loss" in printed, printed
    else:
        assert printed == "", printed
    print(f"rank {rank}: PASS", flush=True)
    del mpi


if __name__ == "__main__":
    main()
