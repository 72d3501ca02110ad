#!/usr/bin/env python3
"""One Llama 2 7B block as IBM's fms-fsdp ran it in 2024 (ibm-fms @ f29e546d: LLaMABlock,
MultiHeadAttention, RotaryEmbedding.adjusted_qk, LayerNormParameterized, GatedLinearUnit), timed
op by op and whole, eager and under torch.compile, next to the execution model's op table for the
same shapes (issue 22: the eager fms-fsdp 7B rows are predicted ~10% fast while the compiled ones
fit; notes/status.md, session 49).

    bench_eager_block.py OUT.json [--no-compile]
    compare_eager_block.py OUT.json --foresight BIN      (the model's op table beside it)

Prints a JSON line per row as it goes: the measured median (CUDA events, warm-up first, L2
flushed before each repetition) and, for the elementwise ops, the bytes their eager kernels move
by the hand count in the comments and the bandwidth that implies.

The block is rewritten here from ibm-fms's source (not imported: the GPU machines have no package
registry): bf16 weights and activations as FSDP1's MixedPrecision(param_dtype=bf16) computes them,
separate q/k/v projections, RoPE as a 2 x 2 rotation in fp32 summed over the last dimension, causal
SDPA on the transposed views, the output made contiguous, SiLU-gated MLP, no dropout (p 0), RMSNorm
in fp32 (use_high_precision_pow) cast back before the weight scale. Shapes: batch 2, sequence 4096,
hidden 4096, 32 heads, FFN 11008 (fms-fsdp's llama2_7b, batch_size 2, seq_length 4096)."""
import argparse
import json
import sys

import torch
import torch.nn.functional as F
from torch import nn

from cuda_timing import median_seconds

B, L, E, H, FF = 2, 4096, 4096, 32, 11008
D = E // H
dev = torch.device("cuda")
dt = torch.bfloat16


def timeit(fn, reps=20, warmup=3):
    return median_seconds(fn, reps, warmup)


class FmsRMSNorm(nn.Module):
    """LayerNormParameterized(elementwise_scale=True, elementwise_shift=False, use_mean=False,
    use_high_precision_pow=True): x.float(), pow, mean, rsqrt, multiply, cast back, scale."""

    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.type_as(x)


def fms_rope_table(seq, dim, ratio=10000.0):
    freqs = 1.0 / (ratio ** (torch.arange(0, dim, 2, device=dev)[: dim // 2].float() / dim))
    t = torch.arange(seq, device=dev, dtype=freqs.dtype)
    freqs = torch.outer(t, freqs).float()
    return torch.stack([torch.cos(freqs), -torch.sin(freqs), torch.sin(freqs), torch.cos(freqs)],
                       dim=2).view(*freqs.size(), 2, 2)


def fms_rope(q, k, table, position_ids):
    """adjusted_qk: the broadcast product (B, L, H, D/2, 2, 2) in fp32, summed over the last dim."""
    q_ = q.float().view(*q.size()[:-1], -1, 2)
    k_ = k.float().view(*k.size()[:-1], -1, 2)
    freqs = table[position_ids].float()
    q_out = freqs[:, -q.size(1):, None, :, :, :].mul(q_.unsqueeze(-2)).sum(5).flatten(3).type_as(q)
    k_out = freqs[:, -k.size(1):, None, :, :, :].mul(k_.unsqueeze(-2)).sum(5).flatten(3).type_as(k)
    return q_out.view_as(q), k_out.view_as(k)


def complex_rope(q, k, freqs_cis):
    """torchtitan's 2024 apply_rotary_emb: complex multiply in fp32 (for comparison)."""
    q_ = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
    k_ = torch.view_as_complex(k.float().reshape(*k.shape[:-1], -1, 2))
    f = freqs_cis.view(1, q.shape[1], 1, q_.shape[-1])
    return (torch.view_as_real(q_ * f).flatten(3).type_as(q),
            torch.view_as_real(k_ * f).flatten(3).type_as(k))


class FmsBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln, self.ff_ln = FmsRMSNorm(E), FmsRMSNorm(E)
        self.query, self.key, self.value = (nn.Linear(E, E, bias=False) for _ in range(3))
        self.dense = nn.Linear(E, E, bias=False)
        self.w1, self.wg = nn.Linear(E, FF, bias=False), nn.Linear(E, FF, bias=False)
        self.w2 = nn.Linear(FF, E, bias=False)
        # ibm-fms keeps the table in a dict, not a buffer: it stays fp32 when the module is cast.
        self.table = fms_rope_table(L, D)

    def attn(self, x, position_ids):
        q = self.query(x).view(B, L, H, D)
        k = self.key(x).view(B, L, H, D)
        v = self.value(x).view(B, L, H, D)
        q, k = fms_rope(q, k, self.table, position_ids)
        o = F.scaled_dot_product_attention(q.transpose(2, 1), k.transpose(2, 1), v.transpose(2, 1),
                                           is_causal=True)
        return self.dense(o.transpose(2, 1).contiguous().view(B, L, E))

    def forward(self, x, position_ids):
        x = self.attn(self.ln(x), position_ids) + x
        h = self.ff_ln(x)
        return self.w2(F.silu(self.wg(h)) * self.w1(h)) + x


def fwd_bwd(fn, inputs, grad):
    """Forward, then the gradients of `inputs` through torch.autograd.grad: no AccumulateGrad
    clone into a leaf's .grad, which a block's inner tensors never pay (a weight's first gradient
    is stolen, not copied)."""
    def run():
        out = fn()
        outs = out if isinstance(out, tuple) else (out,)
        grads = grad if isinstance(grad, tuple) else (grad,)
        torch.autograd.grad(outs, inputs, grads)
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile block")
    a = ap.parse_args()
    torch.manual_seed(0)
    rows = []

    def add(name, t, bytes_moved=None, cls=None, note=""):
        r = {"name": name, "median_ms": t * 1e3, "class": cls, "note": note}
        if bytes_moved:
            r["bytes"] = bytes_moved
            r["GBps"] = bytes_moved / t / 1e9
        rows.append(r)
        print(json.dumps(r), flush=True)
        save()  # after every row: a phase cut short by its time limit keeps what it measured

    def save():
        with open(a.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "shapes":
                       {"batch": B, "seq": L, "hidden": E, "heads": H, "ffn": FF}, "rows": rows}, f, indent=1)

    n_act = B * L * E  # one (tokens, hidden) activation
    src = torch.randn(n_act * 4 // 2, device=dev, dtype=dt)
    add("copy bf16 (reference)", timeit(lambda: src.clone()), 2 * 2 * src.numel(), None,
        "device-to-device rate: read and write")

    x = torch.randn(B, L, E, device=dev, dtype=dt, requires_grad=True)
    gx = torch.randn_like(x)
    norm = FmsRMSNorm(E).to(dev, dt)
    # Forward: cast 2+4, pow 4+4, mean 4, multiply 4+4 (+ the row scalars), cast back 4+2,
    # weight scale 2+2 = 36 bytes per element; the backward of that chain, pass by pass, 2-3x.
    add("fms RMSNorm fwd", timeit(lambda: norm(x)), 36 * n_act, None)
    add("fms RMSNorm fwd+bwd (one norm)", timeit(fwd_bwd(lambda: norm(x), [x, norm.weight], gx)),
        None, "norms_x1")

    q = torch.randn(B, L, H, D, device=dev, dtype=dt, requires_grad=True)
    k = torch.randn(B, L, H, D, device=dev, dtype=dt, requires_grad=True)
    gq, gk = torch.randn_like(q), torch.randn_like(k)
    table = fms_rope_table(L, D)
    pos = torch.arange(L, device=dev).repeat(B, 1)
    # Per q or k element: cast 2+4, broadcast multiply 4+8, sum over 2 4 B.. 8+4, cast back 4+2 = 36.
    add("fms RoPE fwd (q and k)", timeit(lambda: fms_rope(q, k, table, pos)), 36 * 2 * n_act, None)
    add("fms RoPE fwd+bwd (q and k)", timeit(fwd_bwd(lambda: fms_rope(q, k, table, pos), [q, k], (gq, gk))),
        72 * 2 * n_act, "rope")
    prod = torch.randn(B, L, H, D // 2, 2, 2, device=dev, dtype=torch.float32)
    add("fms RoPE's sum(5) alone (fp32, inner size 2)", timeit(lambda: prod.sum(5)), 12 * n_act, None,
        "the reduction over a size-2 innermost dim")
    freqs_cis = torch.polar(torch.ones(L, D // 2, device=dev), torch.outer(
        torch.arange(L, device=dev).float(), 1.0 / (10000.0 ** (torch.arange(0, D, 2, device=dev).float() / D))))
    add("complex RoPE fwd+bwd (torchtitan 2024, q and k)",
        timeit(fwd_bwd(lambda: complex_rope(q, k, freqs_cis), [q, k], (gq, gk))), 40 * 2 * n_act, None,
        "cast 2+4, complex multiply 4+4, cast back 4+2: 20 bytes per element each way")

    a_out = torch.randn(B, H, L, D, device=dev, dtype=dt, requires_grad=True)
    add("attention output transpose+contiguous fwd+bwd",
        timeit(fwd_bwd(lambda: a_out.transpose(2, 1).contiguous(), [a_out], gx.view(B, L, H, D))),
        8 * n_act, "layout")
    r1 = torch.randn(B, L, E, device=dev, dtype=dt, requires_grad=True)
    r2 = torch.randn(B, L, E, device=dev, dtype=dt, requires_grad=True)
    add("residual add fwd+bwd", timeit(fwd_bwd(lambda: r1 + r2, [r1, r2], gx)), 6 * n_act, "residual_x1",
        "backward hands the gradient to both inputs (no kernel); the block's residual fork sums two"
        " gradients, which only the block rows see")

    g = torch.randn(B, L, FF, device=dev, dtype=dt, requires_grad=True)
    u = torch.randn(B, L, FF, device=dev, dtype=dt, requires_grad=True)
    gg = torch.randn_like(g)
    add("SiLU(g) * u fwd+bwd", timeit(fwd_bwd(lambda: F.silu(g) * u, [g, u], gg)), None, "activation")

    qt = torch.randn(B, L, H, D, device=dev, dtype=dt, requires_grad=True)
    kt = torch.randn(B, L, H, D, device=dev, dtype=dt, requires_grad=True)
    vt = torch.randn(B, L, H, D, device=dev, dtype=dt, requires_grad=True)
    add("causal SDPA fwd+bwd (transposed views)", timeit(fwd_bwd(
        lambda: F.scaled_dot_product_attention(qt.transpose(2, 1), kt.transpose(2, 1), vt.transpose(2, 1),
                                               is_causal=True), [qt, kt, vt], gx.view(B, L, H, D).transpose(2, 1))),
        None, "attention_core")

    # As ibm-fms runs them: separate query, key and value projections, and w1 and wg, on one input.
    for name, ns, kdim, cls in (("q, k, v", (E, E, E), E, "qkv"), ("dense", (E,), E, "projection"),
                                ("w1, wg", (FF, FF), E, "fc1"), ("w2", (E,), FF, "fc2")):
        lins = [nn.Linear(kdim, n, bias=False).to(dev, dt) for n in ns]
        xi = torch.randn(B * L, kdim, device=dev, dtype=dt, requires_grad=True)
        gos = tuple(torch.randn(B * L, n, device=dev, dtype=dt) for n in ns)
        t = timeit(fwd_bwd(lambda: tuple(lin(xi) for lin in lins), [xi] + [lin.weight for lin in lins], gos))
        flops = 3 * 2 * B * L * sum(ns) * kdim
        add(f"GEMM {name} fwd+bwd", t, None, cls, f"{flops / t / 1e12:.0f} TFLOP/s")

    block = FmsBlock().to(dev, dt)
    xb = torch.randn(B, L, E, device=dev, dtype=dt, requires_grad=True)
    params = [xb] + list(block.parameters())
    add("block eager fwd+bwd", timeit(fwd_bwd(lambda: block(xb, pos), params, gx)), None, "block_eager")
    add("block eager fwd", timeit(lambda: block(xb, pos)), None, None)
    if not a.no_compile:
        compiled = torch.compile(block)
        try:
            t = timeit(fwd_bwd(lambda: compiled(xb, pos), params, gx), warmup=3)
            add("block compiled fwd+bwd", t, None, "block_compiled")
        except Exception as err:  # a missing compiler toolchain on the lent machine: say so, keep the rest
            print(f"torch.compile failed: {err}", file=sys.stderr)


if __name__ == "__main__":
    main()
