#!/usr/bin/env python3
"""The layering check (scripts/check_layers.py) itself: a downward include passes, an upward
one in src/ or include/tessel/ is reported with file, line and both layers."""
import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts",
                      "check_layers.py")
LAYERS = ["core", "mesh", "runtime", "comm", "alloc", "distribute", "dtensor", "replicate",
          "system", "checkpoint", "embedding"]


def run(files):
    with tempfile.TemporaryDirectory() as root:
        for layer in LAYERS:
            os.makedirs(os.path.join(root, "src", layer))
            os.makedirs(os.path.join(root, "include", "tessel", layer))
        for path, text in files.items():
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        p = subprocess.run([sys.executable, SCRIPT, root], capture_output=True, text=True)
        return p.returncode, p.stdout


def main():
    rc, out = run({"src/dtensor/a.cpp": '#include "tessel/comm/communicator.h"\n'
                                        '#include "core/errors.h"\n#include "tessel/config.h"\n'})
    assert rc == 0, out
    rc, out = run({"src/mesh/b.cpp": '#include <vector>\n#include "tessel/runtime/runtime.h"\n'})
    assert rc == 1 and "src/mesh/b.cpp:2: layer 'mesh'" in out and "'runtime'" in out, out
    rc, out = run({"include/tessel/comm/c.h": '#include "dtensor/framework/op_util.h"\n'})
    assert rc == 1 and "include/tessel/comm/c.h:1" in out and "'dtensor'" in out, out
    print("layering_test: ok")


if __name__ == "__main__":
    main()
