"""The BLAS under the matmuls (blas.h) and the intra-op threads (parallel.h): what blas_info()
reports, the kernel it runs on this CPU, and matmuls against numpy with ops split over 1 to 3
threads."""

import os
import subprocess
import sys

import numpy as np
import pytest
from numpy.testing import assert_allclose

import tessel
from conftest import host, put, rand


def test_blas_info_names_the_library_and_its_kernel():
    info = tessel.blas_info()
    assert isinstance(info, tessel.BlasInfo)
    mkl = info.library.startswith("MKL ")
    assert mkl or "OpenBLAS" in info.library
    assert bool(info.path) == mkl and bool(info.not_mkl) == (not mkl)
    assert info.core and info.library_core and info.cpu_isa in ("sse", "avx", "avx2", "avx512")
    assert info.core in repr(info)
    if info.chosen_by_tessel:
        assert info.core != info.library_core


def test_an_avx512_cpu_never_runs_a_generic_kernel():
    info = tessel.blas_info()
    if info.library.startswith("MKL "):
        if info.cpu_isa == "avx512":
            assert info.core == "AVX-512", repr(info)
        return
    if info.user_forced:
        pytest.skip("OPENBLAS_CORETYPE is set")
    if info.cpu_isa == "avx512":
        assert info.core in ("SkylakeX", "Cooperlake", "SapphireRapids"), repr(info)


@pytest.fixture
def threads():
    yield
    tessel.set_intra_op_threads(0)


@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_matmul_split_over_threads_matches_numpy(mesh, threads, n_threads):
    tessel.set_intra_op_threads(n_threads)
    assert tessel.intra_op_threads() == n_threads
    a = rand((300, 70), 1, dtype=np.float32)
    b = rand((70, 260), 2, dtype=np.float32)
    out = tessel.matmul(put(a, ["x", "unsharded"], mesh), put(b, ["unsharded", "y"], mesh))
    assert_allclose(host(out), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    q = rand((2, 3, 40, 16), 3, dtype=np.float32)
    k = rand((2, 3, 40, 16), 4, dtype=np.float32)
    scores = tessel.einsum("bhqd,bhkd->bhqk", put(q, ["x"] + ["unsharded"] * 3, mesh),
                           put(k, ["x"] + ["unsharded"] * 3, mesh))
    assert_allclose(host(scores), np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k),
                    rtol=1e-4, atol=1e-4)


def test_the_cores_and_a_bad_thread_count(threads):
    assert tessel.machine_cores() >= 1
    assert tessel.intra_op_threads() >= 1
    with pytest.raises(ValueError, match="-1"):
        tessel.set_intra_op_threads(-1)


@pytest.mark.parametrize("value, fixed", [("3", 3), ("0", None), ("", None)])
def test_tessel_intra_op_threads_fixes_the_count(value, fixed):
    # Read once per process: a fresh interpreter for each value. 0 and empty: the automatic share.
    code = "import tessel; print(tessel.intra_op_threads(), tessel.machine_cores())"
    out = subprocess.run([sys.executable, "-c", code],
                         env={**os.environ, "TESSEL_INTRA_OP_THREADS": value},
                         capture_output=True, text=True, timeout=120, check=True)
    threads, cores = map(int, out.stdout.split())
    if fixed is not None:
        assert threads == fixed
    else:
        assert 1 <= threads <= cores


@pytest.mark.parametrize("bad", ["lots", "-1", "4097", "2 "])
def test_a_bad_tessel_intra_op_threads_names_the_variable_and_the_value(bad):
    code = ("import tessel\n"
            "try:\n"
            "    tessel.intra_op_threads()\n"
            "except ValueError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code],
                         env={**os.environ, "TESSEL_INTRA_OP_THREADS": bad},
                         capture_output=True, text=True, timeout=120, check=True)
    assert (f"parallel_for: TESSEL_INTRA_OP_THREADS='{bad}' is not a thread count from 0 to 4096"
            in out.stdout), out.stdout + out.stderr
