"""tessel's embedding from Python under mpirun (ctest mpi.embedding_python_np2).

Every process brings the accelerator system up (4 devices each), configures the embedding over
every device of the job, looks up its own devices' ids and applies gradients; the ids of every
device are generated from its global index, so each process computes the dense NumPy reference
of the whole step and checks its activations and the gathered table. Prints "rank R: PASS".
"""
import sys

import numpy as np

import tessel

BAGS = 3


def ids_of(device, step):
    rng = np.random.default_rng(100 * step + device)
    counts = np.concatenate([[0], rng.integers(1, 4, BAGS - 1)])
    splits = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return rng.integers(0, 17, int(splits[-1])).astype(np.int64), splits


def main():
    mpi = tessel.MpiEnvironment()
    info = tessel.initialize_accelerator_system()
    cfg = tessel.EmbeddingConfiguration(
        [tessel.TableDescriptor("t", 17, 4, tessel.OptimizationParameters(
            tessel.EmbeddingOptimizer.SGD, learning_rate=0.5), tessel.TablePlacement.ROW_WISE,
            tessel.EmbeddingCombiner.SUM)],
        [tessel.FeatureDescriptor("f", 0)], tessel.EmbeddingMode.TRAINING, BAGS,
        tessel.ShardingStrategy.DIV_DEFAULT)
    emb = tessel.configure_embedding(cfg, timeout=30)
    assert emb.num_devices == info.num_devices
    table = np.asarray(emb.get_table("t"), dtype=np.float64)
    mine = list(info.local_device_ids)
    for step in range(2):
        act = emb.lookup([[tessel.RaggedIds(*ids_of(d, step)) for d in mine]])
        grad_rows = np.zeros_like(table)
        grads = []
        for d in range(info.num_devices):
            ids, splits = ids_of(d, step)
            bag = np.repeat(np.arange(BAGS), np.diff(splits))
            want = np.zeros((BAGS, 4))
            np.add.at(want, bag, table[ids])
            g = np.full((BAGS, 4), 0.1 * (d + 1), dtype=np.float32)
            np.add.at(grad_rows, ids, g[bag])
            if d in mine:
                np.testing.assert_allclose(np.asarray(act[0][mine.index(d)]), want, rtol=1e-5,
                                           atol=1e-6)
                grads.append(g)
        emb.apply_gradients([grads])
        table -= 0.5 * grad_rows
        np.testing.assert_allclose(np.asarray(emb.get_table("t")), table, rtol=1e-5, atol=1e-5)
    tessel.shutdown_accelerator_system()
    assert emb.is_released and not tessel.is_embedding_initialized()
    print(f"rank {tessel.mpi_rank()}: PASS", flush=True)
    del mpi


if __name__ == "__main__":
    sys.exit(main())
