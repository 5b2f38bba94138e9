"""MKL's GEMMs by operand dtype on this CPU, one thread: cblas_sgemm (f32), cblas_gemm_f16f16f32,
cblas_gemm_bf16bf16f32 (16-bit inputs, f32 sums and output) and cblas_hgemm (f16 in, f16 sums
and output), alternating for --repeat repetitions at the GPT's shapes; the median GFLOP/s of
each. This is what decides whether a mixed-precision matmul can pay on a CPU (docs/gpt.md).

    /usr/bin/python3 bench/gemm_dtypes.py [--repeat 5] [--shapes 768x128x512,4096x384x1152]

MKL is the one scripts/install-deps.sh unpacks (scripts/mkl-dir.sh), loaded through ctypes with
its sequential threading layer, as tessel loads it (src/core/mkl_library.cpp).
"""

import argparse
import ctypes
import os
import subprocess
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
ROW_MAJOR, NO_TRANS = 101, 111


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--shapes", default="768x128x512,4096x384x1152,2048x2048x2048",
                    help="MxKxN, comma-separated")
    args = ap.parse_args()
    folder = subprocess.check_output([str(REPO / "scripts" / "mkl-dir.sh")], text=True).strip()
    mkl = ctypes.CDLL(os.path.join(folder, "libmkl_rt.so.3"), mode=ctypes.RTLD_GLOBAL)
    mkl.MKL_Set_Threading_Layer(ctypes.c_int(1))  # sequential
    ptr = ctypes.c_void_p
    one, zero = ctypes.c_float(1), ctypes.c_float(0)
    print(f"{'M':>6} {'K':>6} {'N':>6}  GFLOP/s: sgemm  f16f16f32  bf16bf16f32  hgemm")
    for shape in args.shapes.split(","):
        m, k, n = (int(v) for v in shape.split("x"))
        rng = np.random.default_rng(0)
        a = rng.random((m, k), dtype=np.float32)
        b = rng.random((k, n), dtype=np.float32)
        c = np.zeros((m, n), np.float32)
        a16, b16, c16 = a.astype(np.float16), b.astype(np.float16), np.zeros((m, n), np.float16)
        ab = (a.view(np.uint32) >> 16).astype(np.uint16)  # bf16 by truncation: values only
        bb = (b.view(np.uint32) >> 16).astype(np.uint16)
        p = lambda x: x.ctypes.data_as(ptr)  # noqa: E731
        calls = {
            "sgemm": lambda: mkl.cblas_sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, m, n, k, one, p(a), k,
                                             p(b), n, zero, p(c), n),
            "f16f16f32": lambda: mkl.cblas_gemm_f16f16f32(ROW_MAJOR, NO_TRANS, NO_TRANS, m, n, k,
                                                          one, p(a16), k, p(b16), n, zero, p(c), n),
            "bf16bf16f32": lambda: mkl.cblas_gemm_bf16bf16f32(ROW_MAJOR, NO_TRANS, NO_TRANS, m, n,
                                                              k, one, p(ab), k, p(bb), n, zero,
                                                              p(c), n),
            "hgemm": lambda: mkl.cblas_hgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, m, n, k,
                                             ctypes.c_uint16(0x3C00), p(a16), k, p(b16), n,
                                             ctypes.c_uint16(0), p(c16), n),
        }
        flops = 2 * m * n * k
        calls_per_timing = max(1, int(2e9 // flops))
        seconds = {name: [] for name in calls}
        for _ in range(args.repeat):
            for name, call in calls.items():
                start = time.perf_counter()
                for _ in range(calls_per_timing):
                    call()
                seconds[name].append((time.perf_counter() - start) / calls_per_timing)
        rates = [flops / sorted(v)[len(v) // 2] / 1e9 for v in seconds.values()]
        print(f"{m:>6} {k:>6} {n:>6}  " + "  ".join(f"{r:>9.0f}" for r in rates))
    print(f"# load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
