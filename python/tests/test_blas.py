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


def bf16(a):
    """float32 values rounded to bfloat16 (to nearest, ties to even), as float32."""
    bits = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32)


def test_the_bf16_gemm_is_named():
    info = tessel.blas_info()
    if info.path:
        assert info.bf16_gemm == "cblas_gemm_bf16bf16f32 (MKL)"
    else:
        assert info.bf16_gemm in ("cblas_sbgemm (OpenBLAS)",
                                  f"sgemm on inputs widened to f32 ({info.library} has no bf16 GEMM)")


@pytest.mark.parametrize("specs_a, specs_b", [
    (["x", "unsharded"], ["unsharded", "y"]),   # rows and columns: no sum across devices
    (["x", "y"], ["y", "unsharded"]),           # contracted over y: a Partial sum
    (["unsharded", "unsharded"], ["unsharded", "unsharded"])])
def test_bf16_matmul_matches_numpy_on_the_rounded_inputs(mesh, specs_a, specs_b):
    a = rand((37, 64), 5, dtype=np.float32)
    b = rand((64, 29), 6, dtype=np.float32)
    da = tessel.cast(put(a, specs_a, mesh), "bf16")
    db = tessel.cast(put(b, specs_b, mesh), "bf16")
    out = tessel.matmul(da, db)
    assert out.dtype == "bf16"
    want = bf16(a).astype(np.float64) @ bf16(b).astype(np.float64)
    scale = np.abs(bf16(a)).astype(np.float64) @ np.abs(bf16(b))
    # One bf16 rounding of the f32 sums (2^-8 relative); a Partial output rounds its per-device
    # sums too (twice more, at most, of terms bounded by the sum of |a b|).
    partial = bool(out.layout.partial)
    tolerance = 2.0**-8 * np.abs(want) + (2 * 2.0**-8 if partial else 1e-6) * scale
    got = host(out)
    assert np.all(np.abs(got - want) <= tolerance), np.max(np.abs(got - want) - tolerance)
    assert np.array_equal(got, bf16(got))  # the output is bf16 values


def test_the_f16_gemm_is_named():
    info = tessel.blas_info()
    if info.path:
        assert info.f16_gemm == "cblas_hgemm (MKL)"
    else:
        assert info.f16_gemm == f"sgemm on inputs widened to f32 ({info.library} has no f16 GEMM)"


@pytest.mark.parametrize("specs_a, specs_b", [
    (["x", "unsharded"], ["unsharded", "y"]),
    (["x", "y"], ["y", "unsharded"]),
    (["unsharded", "unsharded"], ["unsharded", "unsharded"])])
def test_f16_matmul_matches_numpy_on_the_rounded_inputs(mesh, specs_a, specs_b):
    a = rand((37, 64), 7, dtype=np.float32)
    b = rand((64, 29), 8, dtype=np.float32)
    out = tessel.matmul(tessel.cast(put(a, specs_a, mesh), "float16"),
                        tessel.cast(put(b, specs_b, mesh), "float16"))
    assert out.dtype == "f16"
    a16, b16 = a.astype(np.float16).astype(np.float64), b.astype(np.float16).astype(np.float64)
    want = a16 @ b16
    scale = np.abs(a16) @ np.abs(b16)
    # MKL's hgemm sums in f16: the k-term bound (k + 1) u sum|a b| with u = 2^-11, plus the
    # output's rounding; a Partial output's per-device sums are rounded as well.
    u = 2.0**-11
    tolerance = (65 + (4 if out.layout.partial else 0)) * u * scale + u * np.abs(want) + 1e-7
    got = host(out)
    assert np.all(np.abs(got - want) <= tolerance), np.max(np.abs(got - want) - tolerance)
    assert np.array_equal(got, got.astype(np.float16).astype(got.dtype))  # f16 values


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


def value_error_in_fresh_interpreter(call, variable, value):
    """The ValueError's message of tessel.<call>() in a new interpreter with variable=value (the
    environment is read once per process), or its stdout and stderr if there was none."""
    code = ("import tessel\n"
            "try:\n"
            f"    tessel.{call}()\n"
            "except ValueError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, variable: value},
                         capture_output=True, text=True, timeout=120, check=True)
    return out.stdout + out.stderr


@pytest.mark.parametrize("bad", ["lots", "-1", "4097", "2 "])
def test_a_bad_tessel_intra_op_threads_names_the_variable_and_the_value(bad):
    message = value_error_in_fresh_interpreter("intra_op_threads", "TESSEL_INTRA_OP_THREADS", bad)
    assert (f"parallel_for: TESSEL_INTRA_OP_THREADS='{bad}' is not a thread count from 0 to 4096"
            in message), message


@pytest.fixture
def restored_matmul_precision():
    saved = tessel.matmul_precision()
    yield
    tessel.set_matmul_precision(saved)


def test_matmul_precision_under_its_names_and_tfs(restored_matmul_precision):
    tessel.set_matmul_precision(tessel.MatmulPrecision.HIGHEST)
    assert tessel.matmul_precision() == tessel.MatmulPrecision.HIGHEST
    assert not tessel.tensor_float_32_execution_enabled()
    tessel.enable_tensor_float_32_execution(True)
    assert tessel.matmul_precision() == tessel.MatmulPrecision.HIGH
    assert tessel.matmul_precision_name(tessel.MatmulPrecision.HIGH) == "high"
    assert tessel.matmul_precision_from_name("highest") == tessel.MatmulPrecision.HIGHEST
    with pytest.raises(ValueError, match="unknown float32 matmul precision 'medium'"):
        tessel.matmul_precision_from_name("medium")


def test_cpu_matmuls_are_float32_under_either_precision(restored_matmul_precision, mesh):
    # No BLAS of the CPU has TF32: the same bits, and numpy's float64 product within f32's error.
    rng = np.random.default_rng(3)
    a = rng.uniform(0.5, 1.5, (33, 70)).astype(np.float32)
    b = rng.uniform(0.5, 1.5, (70, 21)).astype(np.float32)
    layout = tessel.Layout.replicated(mesh, 2)
    products = []
    for precision in (tessel.MatmulPrecision.HIGH, tessel.MatmulPrecision.HIGHEST):
        tessel.set_matmul_precision(precision)
        products.append(tessel.to_host(tessel.matmul(tessel.copy_to_mesh(a, layout),
                                                     tessel.copy_to_mesh(b, layout))))
    np.testing.assert_array_equal(products[0], products[1])
    np.testing.assert_allclose(products[0], a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5)


@pytest.mark.parametrize("value, want", [("highest", "HIGHEST"), ("high", "HIGH"), ("", "HIGH")])
def test_tessel_matmul_precision_sets_the_start_value(value, want):
    code = "import tessel; print(tessel.matmul_precision().name)"
    out = subprocess.run([sys.executable, "-c", code],
                         env={**os.environ, "TESSEL_MATMUL_PRECISION": value},
                         capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == want


def test_a_bad_tessel_matmul_precision_names_the_value():
    message = value_error_in_fresh_interpreter("matmul_precision", "TESSEL_MATMUL_PRECISION",
                                               "tf32")
    assert ("matmul_precision: TESSEL_MATMUL_PRECISION='tf32' is not highest or high"
            in message), message
