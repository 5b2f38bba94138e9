"""restore(..., stats=RestoreStats()) reports the bytes a restore read (crc-checked 256 KiB chunks)
and the bytes it needed, which for part of a shard are its chunks around that part only."""
import numpy as np
import pytest

import tessel
from tessel import checkpoint as ckpt


def test_restore_reads_only_the_chunks_it_needs(tmp_path):
    w = np.random.default_rng(2).standard_normal((4096, 256)).astype(np.float32)  # 4 MiB
    mesh = tessel.create_mesh([("x", 2)])
    ckpt.save(str(tmp_path / "c"), {"w": tessel.copy_to_mesh(w, tessel.Layout(["x", "unsharded"],
                                                                                mesh))})
    stats = ckpt.RestoreStats()
    back = ckpt.restore(str(tmp_path / "c"), {"w": tessel.Layout(["unsharded", "x"], mesh)},
                        stats=stats)
    np.testing.assert_array_equal(tessel.to_host(back["w"]), w)
    assert stats.bytes_needed == w.nbytes and stats.bytes_read == w.nbytes

    # Rows [0, 1024) as "process 0 of 4": a mesh of 4 devices of which only device 0 is ours.
    quarter = tessel.Mesh(["x"], np.arange(4), [0], [mesh.local_devices()[0]])
    stats = ckpt.RestoreStats()
    back = ckpt.restore(str(tmp_path / "c"), {"w": tessel.Layout(["x", "unsharded"], quarter)},
                        stats=stats)
    assert stats.bytes_needed == 1 << 20 and stats.bytes_read == 1 << 20
    np.testing.assert_array_equal(tessel.unpack(back["w"])[0], w[:1024])


RESTORE_PHASES = ("open_seconds", "read_seconds", "allocate_seconds", "crc_seconds",
                  "copy_seconds", "relayout_seconds")


def test_restore_stats_time_every_phase(tmp_path):
    w = np.random.default_rng(3).standard_normal((2048, 256)).astype(np.float32)  # 2 MiB
    mesh = tessel.create_mesh([("x", 2)])
    ckpt.save(str(tmp_path / "c"), {"w": tessel.copy_to_mesh(w, tessel.Layout(["x", "unsharded"],
                                                                                mesh))})
    for layout in (["x", "unsharded"], ["unsharded", "x"]):  # whole shards; strided parts
        stats = ckpt.RestoreStats()
        back = ckpt.restore(str(tmp_path / "c"), {"w": tessel.Layout(layout, mesh)}, stats=stats)
        np.testing.assert_array_equal(tessel.to_host(back["w"]), w)
        phases = [getattr(stats, p) for p in RESTORE_PHASES]
        assert all(p >= 0 for p in phases)
        assert stats.open_seconds > 0 and stats.copy_seconds > 0
        assert stats.relayout_seconds == 0  # no Partial target
        # The phases are disjoint spans within the restore.
        assert sum(phases) <= stats.total_seconds * (1 + 1e-9)
