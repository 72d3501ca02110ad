"""The timing the calibrate/ PyTorch benches share: a callable's median time over CUDA events, after
warm-up runs, with the L2 cache flushed (a 256 MiB buffer zeroed) before each repetition so no
repetition reads what the previous one left in cache."""
import statistics

import torch

_flush = None


def median_seconds(fn, reps=30, warmup=5):
    global _flush
    if _flush is None:
        _flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        _flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) * 1e-3)
    return statistics.median(times)
