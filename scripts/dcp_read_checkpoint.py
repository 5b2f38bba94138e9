#!/usr/bin/env python3
"""Loads a tessel checkpoint with PyTorch's distributed checkpoint (DCP) and compares every tensor
with a NumPy copy: the check that the format is readable by PyTorch as docs/checkpoints.md says.

    <torch venv>/bin/python scripts/dcp_read_checkpoint.py CHECKPOINT_DIR EXPECTED.npz

Runs in a virtual environment with torch (CPU is enough) and safetensors, never in the
interpreter tessel's module is built for (that one keeps Debian's numpy 1.x); the two exchange
data through files only. For each array of EXPECTED.npz (saved with '/' in names written as
'__'), a torch tensor of its shape and dtype goes into the state dict, and
torch.distributed.checkpoint.load(state_dict, storage_reader=HuggingFaceStorageReader(dir))
fills it from the safetensors files' DCP_SHARDING_INFO alone (tessel.json is not read). Prints
one line per tensor and "dcp_read_checkpoint: PASS" when every one is equal; exit status 0 then,
1 on a difference, 2 when torch lacks the reader.
"""

import sys

import numpy as np
import torch
import torch.distributed.checkpoint as dcp


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    directory, expected_path = sys.argv[1], sys.argv[2]
    try:
        from torch.distributed.checkpoint import HuggingFaceStorageReader
    except ImportError:
        print(f"dcp_read_checkpoint: torch {torch.__version__} has no HuggingFaceStorageReader")
        return 2
    expected = {k.replace("__", "/"): v for k, v in np.load(expected_path).items()}
    state = {name: torch.zeros(a.shape, dtype=torch.from_numpy(a[:0].copy()).dtype)
             for name, a in expected.items()}
    dcp.load(state, storage_reader=HuggingFaceStorageReader(directory))
    ok = True
    for name, want in sorted(expected.items()):
        got = state[name].numpy()
        same = got.shape == want.shape and got.dtype == want.dtype and np.array_equal(got, want)
        ok &= same
        print(f"{name}: {want.dtype} {list(want.shape)} {'equal' if same else 'DIFFERENT'}")
    print(f"dcp_read_checkpoint: torch {torch.__version__}, {len(expected)} tensors, "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
