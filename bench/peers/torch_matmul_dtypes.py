"""PyTorch's CPU matmul in f32 and bf16 (oneDNN), one thread, alternating, at the GPT's shapes:
the peer's view of whether bf16 pays on this CPU (docs/gpt.md). Run in the peers' venv:

    .venv-peers/bin/python bench/peers/torch_matmul_dtypes.py [--repeat 5]
"""

import argparse
import time

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, cpu capability {torch.backends.cpu.get_cpu_capability()}")
    for m, k, n in [(16384, 384, 1152), (16384, 1536, 384), (2048, 2048, 2048)]:
        a, b = torch.randn(m, k), torch.randn(k, n)
        a16, b16 = a.bfloat16(), b.bfloat16()
        f32, bf16 = [], []
        for _ in range(args.repeat):
            start = time.perf_counter()
            a @ b
            f32.append(time.perf_counter() - start)
            start = time.perf_counter()
            a16 @ b16
            bf16.append(time.perf_counter() - start)
        t32, t16 = sorted(f32)[len(f32) // 2], sorted(bf16)[len(bf16) // 2]
        flops = 2 * m * n * k
        print(f"{m}x{k}x{n}: f32 {flops / t32 / 1e9:.0f} GFLOP/s, bf16 {flops / t16 / 1e9:.0f} "
              f"GFLOP/s, bf16 speed / f32 {t32 / t16:.2f}")


if __name__ == "__main__":
    main()
