"""Asynchronous checkpoints (tessel.checkpoint.AsyncCheckpointer, CheckpointManager.save(...,
async_=True)) and saves that hit a full disk: the previous checkpoint stays restorable."""
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import tessel
from tessel import checkpoint as ckpt


@pytest.fixture
def mesh():
    return tessel.create_mesh([("x", 2), ("y", 2)])


def test_async_save_round_trips_and_reuses_its_staging_area(tmp_path, mesh):
    layout = tessel.Layout(["x", "y"], mesh)
    w = np.random.default_rng(0).standard_normal((9, 6)).astype(np.float32)
    saver = ckpt.AsyncCheckpointer(staging_bytes=w.nbytes)
    saver.save(str(tmp_path / "a"), {"w": tessel.copy_to_mesh(w, layout), "step": 1})
    saver.save(str(tmp_path / "b"), {"w": tessel.copy_to_mesh(w + 1, layout), "step": 2})
    assert saver.saving
    saver.wait_until_finished(timeout=60)
    assert not saver.saving and saver.staging_bytes_allocated == w.nbytes
    for name, want, step in (("a", w, 1), ("b", w + 1, 2)):
        back = ckpt.restore(str(tmp_path / name), {"w": layout})
        np.testing.assert_array_equal(tessel.to_host(back["w"]), want)
        assert back["step"] == step
    saver.close()
    assert saver.staging_bytes_allocated == 0


def test_a_state_over_the_staging_budget_is_refused(tmp_path, mesh):
    w = tessel.copy_to_mesh(np.ones((8, 8), np.float32), tessel.Layout(["x", "y"], mesh))
    saver = ckpt.AsyncCheckpointer(staging_bytes=100)
    with pytest.raises(MemoryError, match="staging budget"):
        saver.save(str(tmp_path / "c"), {"w": w})
    assert os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match="-1"):
        ckpt.AsyncCheckpointer(staging_bytes=-1)


def test_wait_has_a_deadline_and_the_manager_commits_in_the_background(tmp_path, mesh):
    layout = tessel.Layout(["x", "y"], mesh)
    release = threading.Event()

    def on_step(step):
        if step == "written":
            release.wait(60)

    manager = ckpt.CheckpointManager(str(tmp_path), max_to_keep=1, on_step=on_step)
    manager.save(7, {"w": tessel.copy_to_mesh(np.full((4, 4), 7.0, np.float32), layout)},
                 async_=True)
    with pytest.raises(tessel.DeadlineExceededError, match="step 7"):
        manager.wait_until_finished(timeout=0.05)
    assert manager.all_steps() == []
    release.set()
    manager.wait_until_finished(timeout=60)
    assert manager.all_steps() == [7] and manager.latest_step() == 7
    back = manager.restore(7, {"w": layout})
    np.testing.assert_array_equal(tessel.to_host(back["w"]), np.full((4, 4), 7.0))
    manager.close()


# A save whose files exceed RLIMIT_FSIZE (the kernel's "file too large", EFBIG, as a full disk's
# ENOSPC reaches the writer): synchronous and asynchronous, the error names the file and nothing
# is left that restore would take for a checkpoint.
FULL_DISK_SAVE = textwrap.dedent("""
    import resource, signal, sys
    import numpy as np
    import tessel
    from tessel import checkpoint as ckpt
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() fails with EFBIG instead
    mesh = tessel.create_mesh([("x", 2)])
    layout = tessel.Layout(["x", "unsharded"], mesh)
    big = tessel.copy_to_mesh(np.ones((256, 1024), np.float32), layout)  # 512 KiB per file
    manager = ckpt.CheckpointManager(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
    try:
        manager.save(2, {"w": big}, async_=sys.argv[2] == "async")
        manager.wait_until_finished(timeout=60)
    except tessel.UnavailableError as e:
        print("refused:", e)
        sys.exit(3)
""")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_save_that_fills_the_disk_fails_naming_the_file(tmp_path, mode):
    mesh = tessel.create_mesh([("x", 2)])
    layout = tessel.Layout(["x", "unsharded"], mesh)
    w = np.arange(16, dtype=np.float32).reshape(8, 2)
    manager = ckpt.CheckpointManager(str(tmp_path))
    manager.save(1, {"w": tessel.copy_to_mesh(w, layout)})
    child = subprocess.run([sys.executable, "-c", FULL_DISK_SAVE, str(tmp_path), mode],
                           env=os.environ, capture_output=True, text=True, timeout=120)
    assert child.returncode == 3, child.stdout + child.stderr
    assert "File too large" in child.stdout and ".safetensors" in child.stdout, child.stdout
    if mode == "async":
        assert "step 2" in child.stdout
    assert sorted(os.listdir(tmp_path)) == ["latest", "step-00000001"]
    assert manager.all_steps() == [1]
    back = manager.restore(manager.latest_step(), {"w": layout})
    np.testing.assert_array_equal(tessel.to_host(back["w"]), w)
