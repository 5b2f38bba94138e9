"""tessel's CPU reduce_sum beside NumPy's sum in the same run: float32 inputs of the GPT's sizes
(a gradient's squared norm, the rows and columns of [16384, 384] activations), median of N
calls each, and the relative error of each against the float64 sum of the same values.

    PYTHONPATH=build/python python3 bench/reduce_vs_numpy.py [--iters N]

One CPU device (a 1-device mesh); tessel's time includes the call's dispatch and the copy of
the result to the host (`tessel.to_host`), which NumPy does not pay.
"""

import argparse
import time

import numpy as np

import tessel

CASES = [((16384, 384), 0), ((16384, 384), 1), ((589824,), None), ((1 << 22,), None)]


def median_seconds(fn, iters):
    fn()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    mesh = tessel.create_mesh([("x", 1)])
    print(f"{'shape':>14} {'axis':>5} {'tessel ms':>10} {'numpy ms':>9} {'numpy/tessel':>12} "
          f"{'tessel err':>10} {'numpy err':>9}")
    for shape, axis in CASES:
        a = np.random.default_rng(0).uniform(0, 1, shape).astype(np.float32)
        d = tessel.copy_to_mesh(a, tessel.Layout(["unsharded"] * a.ndim, mesh))
        exact = a.astype(np.float64).sum(axis=axis)
        ours = np.asarray(tessel.to_host(tessel.reduce_sum(d, axis=axis)))
        t = median_seconds(lambda: tessel.to_host(tessel.reduce_sum(d, axis=axis)), args.iters)
        n = median_seconds(lambda: a.sum(axis=axis), args.iters)

        def err(x):
            return float(np.max(np.abs(x - exact)) / np.max(np.abs(exact)))

        print(f"{str(shape):>14} {str(axis):>5} {t * 1e3:10.3f} {n * 1e3:9.3f} {n / t:12.2f} "
              f"{err(ours):10.1e} {err(a.sum(axis=axis)):9.1e}")


if __name__ == "__main__":
    main()
