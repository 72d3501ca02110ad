#!/usr/bin/env python3
"""PyTorch's numbers on bench_kernels' shapes (same names), for the side-by-side in gpu-test.sh:
torch.matmul for the GEMMs, scaled_dot_product_attention (causal) fwd+bwd, and elementwise ops
next to a device-to-device copy. CUDA events, L2 flushed before each repetition, median."""
import json
import sys

import torch

from cuda_timing import median_seconds as timeit

dev = torch.device("cuda")


rows = []
gemms = [("gpt3-1.3b", "qkv", 8192, 6144, 2048), ("gpt3-1.3b", "proj", 8192, 2048, 2048),
         ("gpt3-1.3b", "fc1", 8192, 8192, 2048), ("gpt3-1.3b", "fc2", 8192, 2048, 8192),
         ("gpt3-175b-tp8", "qkv", 2048, 4608, 12288), ("gpt3-175b-tp8", "proj", 2048, 12288, 1536),
         ("gpt3-175b-tp8", "fc1", 2048, 6144, 12288), ("gpt3-175b-tp8", "fc2", 2048, 12288, 6144)]
for model, op, m, n, k in gemms:
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
    t = timeit(lambda: torch.matmul(a, w.t()))
    rows.append({"name": f"gemm {model} {op}", "median_s": t, "rate": 2 * m * n * k / t / 1e12, "unit": "TFLOP/s"})

B, H, T, D = 4, 16, 2048, 128
q, k_, v = (torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
do = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16)


def attn():
    o = torch.nn.functional.scaled_dot_product_attention(q, k_, v, is_causal=True)
    o.backward(do)


t = timeit(attn)
rows.append({"name": "attention fwd+bwd causal", "median_s": t,
             "rate": 3.5 * 4 * B * H * T * T * D / 2 / t / 1e12, "unit": "TFLOP/s"})

# SDPA per backend at the sequence lengths long-context runs give one call (a context-parallel
# ring step at 128k-256k over cp 4-8 is a 16k-32k causal block): whether PyTorch's flash backend
# (FlashAttention-2 vendored, which torchtitan's CP ran) reaches FlashAttention-2's own ~330
# TFLOP/s there (notes/research-pytorch.md). Rows named "sdpa <backend> ...", not compared with
# bench_kernels; a backend this build lacks is skipped.
from torch.nn.attention import SDPBackend, sdpa_kernel

for backend_name, backend in [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]:
    for T_long in (16384, 32768):
        B_l, H_l = 1, 32
        ql, kl, vl = (torch.randn(B_l, H_l, T_long, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
                      for _ in range(3))
        dol = torch.randn(B_l, H_l, T_long, D, device=dev, dtype=torch.bfloat16)

        def attn_long():
            with sdpa_kernel(backend):
                o = torch.nn.functional.scaled_dot_product_attention(ql, kl, vl, is_causal=True)
            o.backward(dol)

        try:
            t = timeit(attn_long, reps=5, warmup=1)
        except RuntimeError as err:  # no kernel of that backend for this shape or build
            print(f"sdpa {backend_name} T{T_long}: skipped ({str(err).splitlines()[0][:80]})")
            continue
        rows.append({"name": f"sdpa {backend_name} fwd+bwd causal B1 H32 T{T_long} D128", "median_s": t,
                     "rate": 3.5 * 4 * B_l * H_l * T_long * T_long * D / 2 / t / 1e12, "unit": "TFLOP/s"})
        del ql, kl, vl, dol

n = 1 << 27
x = torch.randn(n, device=dev, dtype=torch.bfloat16)
y = torch.randn(n, device=dev, dtype=torch.bfloat16)
z = torch.empty_like(x)
for name, nbytes, fn in [("copy d2d", 4 * n, lambda: z.copy_(x)),
                         ("gelu_forward", 4 * n, lambda: torch.nn.functional.gelu(x, approximate="tanh")),
                         ("residual_add", 6 * n, lambda: torch.add(x, y, out=z))]:
    t = timeit(fn)
    rows.append({"name": name, "median_s": t, "rate": nbytes / t / 1e9, "unit": "GB/s"})

json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows},
          open(sys.argv[1] if len(sys.argv) > 1 else "bench_torch.json", "w"), indent=2)
for r in rows:
    print(f"{r['name']:34s} {r['median_s'] * 1e6:10.1f} us {r['rate']:9.1f} {r['unit']}")
