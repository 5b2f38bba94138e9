"""save(..., stats=SaveStats()) reports what the save wrote and where its time went, phase by
phase (tessel bench checkpoint prints the same phases against dd)."""
import os

import numpy as np
import pytest

import tessel
from tessel import checkpoint as ckpt

PHASES = ("plan_seconds", "stage_seconds", "header_seconds", "write_seconds", "checksum_seconds",
          "sync_seconds", "manifest_seconds", "rename_seconds")


def test_save_stats_count_the_files_and_bytes_written_and_time_every_phase(tmp_path):
    mesh = tessel.create_mesh([("x", 2)])
    rng = np.random.default_rng(5)
    w = rng.standard_normal((1000, 300)).astype(np.float32)  # 1.2 MB: several 256 KiB chunks
    b = rng.standard_normal((7,)).astype(np.float64)
    stats = ckpt.SaveStats()
    ckpt.save(str(tmp_path / "c"),
              {"w": tessel.copy_to_mesh(w, tessel.Layout(["x", "unsharded"], mesh)),
               "b": tessel.copy_to_mesh(b, tessel.Layout(["unsharded"], mesh)), "step": 3},
              stats=stats)

    files = [f for f in os.listdir(tmp_path / "c") if f.endswith(".safetensors")]
    assert stats.files == len(files) == 2  # each device writes half of w, one of them b
    assert stats.bytes_written == sum(os.path.getsize(tmp_path / "c" / f) for f in files)
    assert stats.bytes_written > w.nbytes + b.nbytes  # the shards and the headers
    assert stats.stage_seconds == 0  # only an asynchronous save stages
    phases = [getattr(stats, p) for p in PHASES]
    assert all(p >= 0 for p in phases)
    assert stats.write_seconds > 0 and stats.checksum_seconds > 0 and stats.sync_seconds > 0
    # The phases are disjoint spans within the save.
    assert sum(phases) <= stats.total_seconds * (1 + 1e-9)
    back = ckpt.restore(str(tmp_path / "c"), {"w": tessel.Layout(["unsharded", "x"], mesh)})
    np.testing.assert_array_equal(tessel.to_host(back["w"]), w)


def test_save_stats_are_left_alone_by_a_save_that_fails(tmp_path):
    (tmp_path / "c").mkdir()
    stats = ckpt.SaveStats()
    mesh = tessel.create_mesh([("x", 2)])
    x = tessel.copy_to_mesh(np.ones(4, np.float32), tessel.Layout(["unsharded"], mesh))
    with pytest.raises(tessel.AlreadyExistsError, match="is never overwritten"):
        ckpt.save(str(tmp_path / "c"), {"x": x}, stats=stats)
    assert stats.files == 0 and stats.bytes_written == 0 and stats.total_seconds == 0
