#!/usr/bin/env python3
"""Fails when a file of one layer includes a header of a higher layer.

The layers, bottom first (docs/architecture.md): core, mesh, runtime, comm, alloc, distribute,
dtensor, replicate, system, checkpoint, embedding. A file under src/<layer>/ or include/tessel/<layer>/ may
include public headers "tessel/<L>/..." and internal headers "<L>/..." of its own layer and of the
layers below it only. Generated headers (tessel/config.h, tessel/proto/...) sit below every
layer. The clients above the library (python/, tools/, tests/, bench/) may include anything.

Usage: check_layers.py [repository root]   (exit 1 listing every violation)
"""
import os
import re
import sys

LAYERS = ["core", "mesh", "runtime", "comm", "alloc", "distribute", "dtensor", "replicate",
          "system", "checkpoint", "embedding"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of_include(path):
    """The layer of an included header, or None for generated and third-party ones."""
    parts = path.split("/")
    if parts[0] == "tessel" and len(parts) >= 3 and parts[1] in LAYERS:
        return parts[1]
    if parts[0] in LAYERS and len(parts) >= 2:
        return parts[0]
    return None


def files_of_layers(root):
    """(path, layer) of every source and header under src/<layer>/ and include/tessel/<layer>/."""
    for base in ("src", os.path.join("include", "tessel")):
        for layer in LAYERS:
            folder = os.path.join(root, base, layer)
            for dirpath, _, names in os.walk(folder):
                for name in sorted(names):
                    if name.endswith((".h", ".cpp", ".cu")):
                        yield os.path.join(dirpath, name), layer


def violations(root):
    found = []
    for path, layer in files_of_layers(root):
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = layer_of_include(m.group(1))
                if target and LAYERS.index(target) > LAYERS.index(layer):
                    rel = os.path.relpath(path, root)
                    found.append(f"{rel}:{number}: layer '{layer}' includes \"{m.group(1)}\" "
                                 f"of the higher layer '{target}'")
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    for layer in LAYERS:
        if not os.path.isdir(os.path.join(root, "src", layer)):
            print(f"check_layers: no src/{layer}/ under {root}", file=sys.stderr)
            return 2
    found = violations(root)
    for v in found:
        print(v)
    if found:
        print(f"check_layers: {len(found)} include(s) point up the layers {' < '.join(LAYERS)}")
        return 1
    print(f"check_layers: every include points down ({' < '.join(LAYERS)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
