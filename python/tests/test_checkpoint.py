"""tessel.checkpoint: save and restore nested states across meshes and layouts, the format read by
an independent NumPy reader (manifest + saved_offsets, and DCP_SHARDING_INFO alone), the
CheckpointManager, and the faults (bit flip, missing file, unwritable directory, kill -9)."""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

import tessel
from tessel import checkpoint as ckpt

NUMPY = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64,
         "U8": np.uint8, "BOOL": np.bool_, "F16": np.float16}


def crc32c(data):
    """CRC-32C (Castagnoli), bit by bit: independent of tessel's table and SSE4.2 versions."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def read_header(path):
    """(header dict, data bytes) of a safetensors file: 8-byte LE length, JSON, raw bytes."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def reassemble_from_manifest(directory):
    """Every tensor of a checkpoint, rebuilt from tessel.json and the files, CRCs checked."""
    with open(os.path.join(directory, "tessel.json")) as f:
        manifest = json.load(f)
    for name, info in manifest["files"].items():
        with open(os.path.join(directory, name), "rb") as f:
            raw = f.read()
        assert len(raw) == info["size"] and crc32c(raw) == info["crc32c"], name
    out = {}
    for name, t in manifest["tensors"].items():
        whole = None
        for shard in t["shards"]:
            header, data = read_header(os.path.join(directory, shard["file"]))
            entry = header[name]
            begin, end = entry["data_offsets"]
            assert crc32c(data[begin:end]) == shard["crc32c"]
            block = np.frombuffer(data[begin:end], NUMPY[entry["dtype"]]).reshape(entry["shape"])
            if whole is None:
                whole = np.zeros(t["shape"], block.dtype)
            index = tuple(slice(o, o + s) for o, s in zip(shard["saved_offsets"], entry["shape"]))
            whole[index] = block
        out[name] = whole
    return out, manifest["values"]


def reassemble_like_dcp(directory):
    """As PyTorch's HuggingFaceStorageReader: every *.safetensors file, DCP_SHARDING_INFO's
    saved_offsets per tensor, the global size the largest offset + shape."""
    chunks = {}
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".safetensors"):
            continue
        header, data = read_header(os.path.join(directory, name))
        offsets = json.loads(header["__metadata__"]["DCP_SHARDING_INFO"])
        for key, entry in header.items():
            if key == "__metadata__":
                continue
            begin, end = entry["data_offsets"]
            block = np.frombuffer(data[begin:end], NUMPY[entry["dtype"]]).reshape(entry["shape"])
            chunks.setdefault(key, []).append((offsets[key]["saved_offsets"], block))
    out = {}
    for key, parts in chunks.items():
        size = np.max([np.add(o, b.shape) for o, b in parts], axis=0).astype(int)
        whole = np.zeros(size, parts[0][1].dtype)
        for o, b in parts:
            whole[tuple(slice(a, a + s) for a, s in zip(o, b.shape))] = b
        out[key] = whole
    return out


@pytest.fixture
def mesh():
    return tessel.create_mesh([("x", 2), ("y", 2)])


def arrays():
    rng = np.random.default_rng(0)
    return {"w": rng.standard_normal((7, 5)).astype(np.float32),
            "b": rng.integers(-9, 9, (65, 3)).astype(np.int64),
            "u": rng.standard_normal((6, 1)),
            "one": np.array([[3]], np.int32),
            "empty": np.zeros((0, 3), np.float32)}


def test_crc32c_matches_the_reference_and_the_standard_check_value():
    assert crc32c(b"123456789") == 0xE3069283
    assert tessel.crc32c(b"123456789") == 0xE3069283
    data = np.random.default_rng(3).integers(0, 256, 1001, np.uint8)
    assert tessel.crc32c(data) == crc32c(data.tobytes())
    a, b = data[:300].tobytes(), data[300:].tobytes()
    assert tessel.crc32c_combine(tessel.crc32c(a), tessel.crc32c(b), len(b)) == crc32c(data.tobytes())


def test_crc32c_of_inputs_long_enough_for_three_streams():
    # Two rounds of three 8 KiB blocks, one of three 256-byte blocks, then 8-byte words and bytes.
    data = np.random.default_rng(4).integers(0, 256, 2 * 3 * 8192 + 3 * 256 + 13, np.uint8)
    raw = data.tobytes()
    assert tessel.crc32c(data) == crc32c(raw)
    for split in (1, 8191, 3 * 8192, len(raw) - 700):
        assert tessel.crc32c_combine(tessel.crc32c(raw[:split]), tessel.crc32c(raw[split:]),
                                     len(raw) - split) == crc32c(raw), split


@pytest.mark.parametrize("specs", [("x", "y"), ("y", "x"), ("x+y", "unsharded"),
                                   ("unsharded", "unsharded")])
def test_an_independent_reader_reassembles_every_tensor(tmp_path, mesh, specs):
    host = arrays()
    layout = tessel.Layout(list(specs), mesh)
    state = {"model": {k: tessel.copy_to_mesh(v, layout) for k, v in host.items()},
             "step": 12, "lr": 0.25, "done": False, "config": {"name": "tiny"}}
    path = str(tmp_path / "c")
    ckpt.save(path, state)
    tensors, values = reassemble_from_manifest(path)
    dcp = reassemble_like_dcp(path)
    for k, v in host.items():
        np.testing.assert_array_equal(tensors["model/" + k], v)
        np.testing.assert_array_equal(dcp["model/" + k], v)
    assert values == {"step": 12, "lr": 0.25, "done": False, "config/name": "tiny"}


def test_restore_onto_other_meshes_and_layouts(tmp_path, mesh):
    host = arrays()
    partial = tessel.Layout(["x", "unsharded"], mesh).with_partial([("y", "sum")])
    state = {"model": {k: tessel.copy_to_mesh(v, partial) for k, v in host.items()}, "step": 3}
    path = str(tmp_path / "c")
    ckpt.save(path, state)
    line = tessel.create_mesh([("z", 4)])
    two = tessel.create_mesh([("x", 2)])
    for target in [tessel.Layout(["z", "unsharded"], line), tessel.Layout(["unsharded", "x"], two),
                   tessel.Layout(["unsharded", "unsharded"], mesh)]:
        back = ckpt.restore(path, {"model": {k: target for k in host}})
        assert back["step"] == 3
        for k, v in host.items():
            assert back["model"][k].layout == target
            np.testing.assert_array_equal(tessel.to_host(back["model"][k]), v)


def test_template_restore_and_metadata(tmp_path, mesh):
    host = arrays()
    layout = tessel.Layout(["x", "unsharded"], mesh)
    state = {k: tessel.copy_to_mesh(v, layout) for k, v in host.items()}
    path = str(tmp_path / "c")
    ckpt.save(path, state)
    back = ckpt.restore(path, state)
    for k, v in host.items():
        np.testing.assert_array_equal(tessel.to_host(back[k]), v)
    info = ckpt.metadata(path)
    assert info.tensors["b"].shape == (65, 3) and info.tensors["b"].dtype == "i64"
    assert info.tensors["b"].layout == layout.to_string()
    ckpt.verify(path)
    wrong = {"w": tessel.copy_to_mesh(np.zeros((7, 4), np.float32), layout)}
    with pytest.raises(ValueError, match="template 'w'"):
        ckpt.restore(path, wrong)
    with pytest.raises(tessel.NotFoundError, match="no tensor 'nope'"):
        ckpt.restore(path, {"nope": layout})
    with pytest.raises(tessel.AlreadyExistsError):
        ckpt.save(path, state)


def test_safetensors_file_reads_a_checkpoint_file(tmp_path, mesh):
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    path = str(tmp_path / "c")
    ckpt.save(path, {"w": tessel.copy_to_mesh(w, tessel.Layout(["x+y", "unsharded"], mesh))})
    f = tessel.SafetensorsFile.read(os.path.join(path, "process-00000-device-00001.safetensors"))
    assert "w" in f
    np.testing.assert_array_equal(f.tensor("w").numpy(), w[1:2])
    assert json.loads(f.metadata("DCP_SHARDING_INFO")) == {"w": {"saved_offsets": [1, 0]}}
    header = tessel.SafetensorsHeader.read(os.path.join(path, "process-00000-device-00001.safetensors"))
    assert "w" in header and header.data_start % 8 == 0
    (entry,) = header.entries
    assert (entry.name, entry.dtype, entry.shape, entry.begin, entry.end) == ("w", "f32", (1, 3), 0, 12)
    assert header.file_size == header.data_start + 12
    assert header.encode()[:8] == struct.pack("<Q", header.data_start - 8)
    assert tessel.safetensors_dtype_name("bf16") == "BF16"
    assert tessel.dtype_from_safetensors_name("I64") == "i64"


def test_corruption_is_reported_by_file_and_tensor(tmp_path, mesh):
    w = np.random.default_rng(1).standard_normal((16, 4)).astype(np.float32)
    layout = tessel.Layout(["x+y", "unsharded"], mesh)
    path = str(tmp_path / "c")
    ckpt.save(path, {"w": tessel.copy_to_mesh(w, layout)})
    name = os.path.join(path, "process-00000-device-00002.safetensors")
    raw = bytearray(open(name, "rb").read())
    raw[-3] ^= 0x01
    open(name, "wb").write(raw)
    with pytest.raises(tessel.DataLossError, match="device-00002.safetensors': tensor 'w'"):
        ckpt.restore(path, {"w": layout})
    with pytest.raises(tessel.DataLossError, match="device-00002"):
        ckpt.verify(path)
    os.remove(name)
    with pytest.raises(tessel.NotFoundError, match="device-00002.safetensors' .holding tensor 'w'"):
        ckpt.restore(path, {"w": layout})


def test_manager_keeps_the_last_k_and_resumes_from_the_newest(tmp_path, mesh):
    layout = tessel.Layout(["x", "y"], mesh)
    manager = ckpt.CheckpointManager(str(tmp_path), max_to_keep=2)
    assert manager.latest_step() is None
    for step in (1, 2, 3):
        manager.save(step, {"w": tessel.copy_to_mesh(np.full((4, 4), step, np.float32), layout),
                            "step": step})
    assert manager.all_steps() == [2, 3] and manager.latest_step() == 3
    assert open(tmp_path / "latest").read().strip() == "step-00000003"
    back = manager.restore(manager.latest_step(), {"w": layout})
    assert back["step"] == 3
    np.testing.assert_array_equal(tessel.to_host(back["w"]), np.full((4, 4), 3))


KILLED_SAVE = textwrap.dedent("""
    import os, signal, sys
    import numpy as np
    import tessel
    from tessel import checkpoint as ckpt
    mesh = tessel.create_mesh([("x", 2)])
    w = tessel.copy_to_mesh(np.ones((8, 2), np.float32), tessel.Layout(["x", "unsharded"], mesh))
    def on_step(step):
        if step == sys.argv[2]:
            os.kill(os.getpid(), signal.SIGKILL)
    ckpt.CheckpointManager(sys.argv[1], on_step=on_step).save(2, {"w": w, "step": 2})
""")


@pytest.mark.parametrize("step", ["prepared", "written", "manifest"])
def test_kill_9_mid_save_leaves_the_previous_checkpoint(tmp_path, mesh, step):
    layout = tessel.Layout(["x", "unsharded"], mesh)
    manager = ckpt.CheckpointManager(str(tmp_path))
    w = np.arange(16, dtype=np.float32).reshape(8, 2)
    manager.save(1, {"w": tessel.copy_to_mesh(w, layout), "step": 1})
    child = subprocess.run([sys.executable, "-c", KILLED_SAVE, str(tmp_path), step],
                           env=os.environ, timeout=120)
    assert child.returncode == -9
    assert manager.all_steps() == [1]
    assert os.path.isdir(tmp_path / ".step-00000002.tmp")
    back = manager.restore(manager.latest_step(), {"w": layout})
    np.testing.assert_array_equal(tessel.to_host(back["w"]), w)
    manager.save(3, back)
    assert not os.path.exists(tmp_path / ".step-00000002.tmp")
    assert manager.all_steps() == [1, 3]


UNPRIVILEGED_SAVE = textwrap.dedent("""
    import os, sys
    import numpy as np
    os.setgid(65534); os.setuid(65534)
    import tessel
    from tessel import checkpoint as ckpt
    mesh = tessel.create_mesh([("x", 2)])
    w = tessel.copy_to_mesh(np.ones((8, 2), np.float32), tessel.Layout(["x", "unsharded"], mesh))
    try:
        ckpt.save(os.path.join(sys.argv[1], "c2"), {"w": w})
    except tessel.UnavailableError as e:
        print("refused:", e)
        sys.exit(3)
""")


def test_save_into_a_read_only_directory_fails_cleanly(mesh):
    layout = tessel.Layout(["x", "unsharded"], mesh)
    w = np.arange(16, dtype=np.float32).reshape(8, 2)
    base = tempfile.mkdtemp(prefix="tessel-ckpt-")  # under /tmp, which everyone may enter
    try:
        ckpt.save(os.path.join(base, "c1"), {"w": tessel.copy_to_mesh(w, layout)})
        os.chmod(base, 0o555)
        if os.geteuid() == 0:  # root ignores permissions: save as nobody
            child = subprocess.run([sys.executable, "-c", UNPRIVILEGED_SAVE, base],
                                   env=os.environ, capture_output=True, text=True, timeout=120)
            assert child.returncode == 3, child.stdout + child.stderr
            assert "Permission denied" in child.stdout and ".c2.tmp" in child.stdout
        else:
            with pytest.raises(tessel.UnavailableError, match=".c2.tmp"):
                ckpt.save(os.path.join(base, "c2"), {"w": tessel.copy_to_mesh(w, layout)})
        os.chmod(base, 0o755)
        assert sorted(os.listdir(base)) == ["c1"]
        back = ckpt.restore(os.path.join(base, "c1"), {"w": layout})
        np.testing.assert_array_equal(tessel.to_host(back["w"]), w)
    finally:
        os.chmod(base, 0o755)
        shutil.rmtree(base)


def test_optimizer_state_survives_a_checkpoint(tmp_path, mesh):
    """Optimizer.slots / restore: Adam's moments and count through a checkpoint and back."""
    rng = np.random.default_rng(5)
    layout = tessel.Layout(["x", "y"], mesh)
    params = [tessel.copy_to_mesh(rng.standard_normal((4, 6)), layout) for _ in range(2)]
    grads = [[tessel.copy_to_mesh(rng.standard_normal((4, 6)), layout) for _ in range(2)]
             for _ in range(2)]
    first = tessel.AdamW(learning_rate=0.01)
    params = first.apply(params, grads[0])
    assert sorted(first.slots()) == ["m", "v"]
    state = {"params": {str(i): p for i, p in enumerate(params)}, "iterations": first.iterations,
             "slots": {k: {str(i): t for i, t in enumerate(v)} for k, v in first.slots().items()}}
    ckpt.save(str(tmp_path / "c"), state)
    back = ckpt.restore(str(tmp_path / "c"), state)
    second = tessel.AdamW(learning_rate=0.01)
    restored = [back["params"][str(i)] for i in range(2)]
    second.restore(back["iterations"], restored,
                   {k: [v[str(i)] for i in range(2)] for k, v in back["slots"].items()})
    assert second.iterations == 1
    want = first.apply(params, grads[1])
    got = second.apply(restored, grads[1])
    for w, g in zip(want, got):
        np.testing.assert_array_equal(tessel.to_host(g), tessel.to_host(w))
    with pytest.raises(ValueError, match=r"slots \[m\], expected \[m, v\]"):
        tessel.AdamW().restore(1, restored, {"m": restored})
