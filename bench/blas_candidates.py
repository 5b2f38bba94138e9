#!/usr/bin/env python3
"""sgemm of the BLAS libraries this machine could give tessel, side by side (issue 32).

Each candidate runs in a child process of its own (so that two OpenMP runtimes or two OpenBLAS
copies never share a process), loaded with ctypes from its shared library, on float32 row-major
C = A @ B for n^3 from 512 to 4096 (or the --sizes given), on 1 and on 2 threads. The figure is the best of `--repeat`
timed calls after one warm-up call, in GFLOP/s (2 n^3 / seconds).

Candidates (each skipped, with the reason printed, when its library is absent):
  openblas            Debian's OpenBLAS as it loads (its own core choice)
  openblas-skylakex   the same library after tessel's core choice (gotoblas_dynamic_init with
                      the core the CPU's features allow), i.e. what tessel runs
  blis                Debian's BLIS (libblis4-openmp)
  onednn              Debian's oneDNN (dnnl_sgemm)
  scipy-openblas      PyPI's scipy-openblas32 wheel (a newer OpenBLAS), given by --scipy-openblas
  mkl                 PyPI's mkl wheel's libmkl_rt, given by --mkl (threads via GNU OpenMP)

Sizes are n (an n^3 product) or MxNxK (C [M, N] = A [M, K] @ B [K, N]: a model's GEMMs, e.g.
the tiny GPT's 768x128x128 projections and 768x512x128 MLP).

Usage: blas_candidates.py [--sizes 512,1024,2048,4096] [--threads 1,2] [--repeat 3]
                          [--scipy-openblas PATH.so] [--mkl PATH/libmkl_rt.so.2] [--json OUT]
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

import numpy as np

LIB = "/usr/lib/x86_64-linux-gnu"
CBLAS_ROW_MAJOR, CBLAS_NO_TRANS = 101, 111


def openblas_library():
    return f"{LIB}/libopenblas.so.0"


def load(candidate, args):
    """(sgemm(a, b, c), set_threads(n), describe()) of one candidate."""
    if candidate.startswith("openblas") or candidate == "scipy-openblas":
        path = args.scipy_openblas if candidate == "scipy-openblas" else openblas_library()
        lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        prefix = "scipy_" if candidate == "scipy-openblas" else ""
        if candidate == "openblas-skylakex":
            lib.gotoblas_dynamic_quit()
            os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
            lib.gotoblas_dynamic_init()
        sgemm = getattr(lib, prefix + "cblas_sgemm")
        set_threads = getattr(lib, prefix + "openblas_set_num_threads")
        corename = getattr(lib, prefix + "openblas_get_corename")
        corename.restype = ctypes.c_char_p
        config = getattr(lib, prefix + "openblas_get_config")
        config.restype = ctypes.c_char_p
        describe = lambda: f"{config().decode()} core={corename().decode()}"
        return cblas(sgemm), lambda n: set_threads(n), describe
    if candidate == "blis":
        lib = ctypes.CDLL(f"{LIB}/blis-openmp/libblis.so.4", mode=ctypes.RTLD_LOCAL)
        arch = lib.bli_arch_query_id()
        name = lib.bli_arch_string
        name.restype = ctypes.c_char_p
        return (cblas(lib.cblas_sgemm), lambda n: lib.bli_thread_set_num_threads(ctypes.c_long(n)),
                lambda: f"BLIS 0.9.0 arch={name(arch).decode()}")
    if candidate == "onednn":
        lib = ctypes.CDLL(f"{LIB}/libdnnl.so.2", mode=ctypes.RTLD_LOCAL)
        gomp = ctypes.CDLL("libgomp.so.1")
        version = lib.dnnl_version
        class Version(ctypes.Structure):
            _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                        ("hash", ctypes.c_char_p), ("cpu_runtime", ctypes.c_uint),
                        ("gpu_runtime", ctypes.c_uint)]
        version.restype = ctypes.POINTER(Version)
        v = version().contents
        isa = lib.dnnl_get_effective_cpu_isa()

        def sgemm(a, b, c):
            n = ctypes.c_int64
            m_, k_ = a.shape
            n_ = b.shape[1]
            status = lib.dnnl_sgemm(ctypes.c_char(b"N"), ctypes.c_char(b"N"), n(m_), n(n_), n(k_),
                                    ctypes.c_float(1.0), ptr(a), n(k_), ptr(b), n(n_),
                                    ctypes.c_float(0.0), ptr(c), n(n_))
            assert status == 0, f"dnnl_sgemm status {status}"
        return sgemm, lambda t: gomp.omp_set_num_threads(t), \
            lambda: f"oneDNN {v.major}.{v.minor}.{v.patch} isa=0x{isa:x}"
    if candidate == "mkl":
        os.environ.setdefault("MKL_THREADING_LAYER", "GNU")
        ctypes.CDLL("libgomp.so.1", mode=ctypes.RTLD_GLOBAL)
        lib = ctypes.CDLL(args.mkl, mode=ctypes.RTLD_LOCAL)
        buf = ctypes.create_string_buffer(256)
        lib.mkl_get_version_string(buf, 256)
        return (cblas(lib.cblas_sgemm), lambda n: lib.mkl_set_num_threads(ctypes.byref(ctypes.c_int(n))),
                lambda: buf.value.decode().strip())
    raise SystemExit(f"blas_candidates: unknown candidate '{candidate}'")


def ptr(array):
    return array.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


def cblas(fn):
    def sgemm(a, b, c):
        m, k = a.shape
        n = b.shape[1]
        fn(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_NO_TRANS, m, n, k, ctypes.c_float(1.0), ptr(a), k,
           ptr(b), n, ctypes.c_float(0.0), ptr(c), n)
    return sgemm


def measure(candidate, args):
    """Runs in the child: one JSON line of {candidate, about, results: [[threads, n, gflops]]}."""
    sgemm, set_threads, describe = load(candidate, args)
    results = []
    rng = np.random.default_rng(0)
    for threads in args.threads:
        set_threads(threads)
        for size in args.sizes:
            m, n, k = size
            a = rng.standard_normal((m, k), dtype=np.float32)
            b = rng.standard_normal((k, n), dtype=np.float32)
            c = np.zeros((m, n), dtype=np.float32)
            sgemm(a, b, c)
            err = np.abs(c - a @ b).max() / np.abs(a @ b).max()
            assert err < 1e-4, f"{candidate}: wrong result (relative error {err})"
            best = float("inf")
            for _ in range(args.repeat):
                start = time.perf_counter()
                sgemm(a, b, c)
                best = min(best, time.perf_counter() - start)
            results.append([threads, "x".join(map(str, size)), 2.0 * m * n * k / best / 1e9])
    print(json.dumps({"candidate": candidate, "about": describe(), "results": results}))


def parse_size(text):
    """'2048' (a square product) or 'MxNxK' (C [M, N] = A [M, K] @ B [K, N]) as (m, n, k)."""
    parts = [int(p) for p in text.split("x")]
    if len(parts) == 1:
        return parts * 3
    if len(parts) != 3:
        raise SystemExit(f"blas_candidates: size '{text}' is neither N nor MxNxK")
    return parts


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", default="512,1024,2048,4096")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--candidates", default="openblas,openblas-skylakex,blis,onednn,scipy-openblas,mkl")
    p.add_argument("--scipy-openblas", default="")
    p.add_argument("--mkl", default="")
    p.add_argument("--json", default="")
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.sizes = [parse_size(s) for s in args.sizes.split(",")]
    args.threads = [int(t) for t in args.threads.split(",")]
    if args.child:
        measure(args.child, args)
        return
    rows = []
    for candidate in args.candidates.split(","):
        if candidate == "scipy-openblas" and not args.scipy_openblas or \
           candidate == "mkl" and not args.mkl:
            print(f"{candidate:18s} skipped: no --{candidate} library given", file=sys.stderr)
            continue
        # The child must not inherit a thread setting that would pin the candidate's pool.
        env = {k: v for k, v in os.environ.items()
               if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_CORETYPE")}
        out = subprocess.run([sys.executable, __file__, "--child", candidate] + sys.argv[1:],
                             capture_output=True, text=True, env=env)
        if out.returncode != 0:
            print(f"{candidate:18s} failed: {out.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            continue
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{candidate:18s} {row['about']}")
        for threads, n, gflops in row["results"]:
            print(f"  threads={threads} {n:>15s} {gflops:8.1f} GFLOP/s")
        sys.stdout.flush()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
