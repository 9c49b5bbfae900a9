#!/usr/bin/env python3
"""PyTorch reference figures beside bench_attention / bench_moe_gemm, on the device machine.

1. Causal attention at the MLA prefill shapes (T=16384, 16 heads, qk 192, v 128, bf16): PyTorch's
   scaled_dot_product_attention with one backend forced at a time (cuDNN, then FlashAttention; a
   backend that refuses the shapes is reported as such). Same FLOP count as bench_attention (the
   causal half): heads * T^2 * (qk + v).
2. Optional: torch._grouped_mm (bf16, one grouped GEMM over all experts) at the MoE shapes of
   bench_moe_gemm (384 experts, 131072 routed rows, each expert's rows padded to a multiple of 64):
   gemm1 K=7168 N=1024, gemm2 K=512 N=7168. FLOPs over the 131072 real rows only. Skipped with a
   message where the API is missing.

CUDA events, median of repeats after warm-up. Prints `RESULT <name> ms=<ms> tflops=<TFLOP/s>`.
Usage: python3 torch_reference.py [T] [heads]
"""
import statistics
import sys

import torch


def time_ms(fn, warmup=3, reps=10):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def result(name, ms, flops):
    print(f"RESULT {name} ms={ms:.3f} tflops={flops / (ms * 1e-3) / 1e12:.1f}", flush=True)


def attention(T, H):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    qk, vd = 192, 128
    g = torch.Generator(device="cuda").manual_seed(0)
    # Token-major storage as the projections produce it ([T, H, D]), viewed as [1, H, T, D].
    q = (torch.rand(T, H, qk, device="cuda", generator=g, dtype=torch.float32) * 2 - 1).bfloat16()
    k = (torch.rand(T, H, qk, device="cuda", generator=g, dtype=torch.float32) * 2 - 1).bfloat16()
    v = (torch.rand(T, H, vd, device="cuda", generator=g, dtype=torch.float32) * 2 - 1).bfloat16()
    q, k, v = (x.unsqueeze(0).transpose(1, 2) for x in (q, k, v))
    scale = 1.0 / qk ** 0.5
    flops = float(H) * T * T * (qk + vd)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; attention T={T} heads={H} qk={qk} v={vd} "
          f"causal bf16", flush=True)
    outs = {}
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                          ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                run = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
                outs[name] = run()
                ms = time_ms(run)
            result(f"torch_sdpa_{name}_causal", ms, flops)
        except Exception as e:  # noqa: BLE001 - report any refusal
            msg = str(e).strip().splitlines()
            print(f"SKIP torch_sdpa_{name}_causal: backend refused qk={qk} v={vd}: "
                  f"{type(e).__name__}: {msg[0] if msg else ''}", flush=True)
        torch.cuda.empty_cache()
    if "cudnn" in outs:
        for name, o in outs.items():
            if name != "cudnn":
                d = (o.float() - outs["cudnn"].float())
                print(f"NOTE {name} vs cudnn: normwise rel {d.norm().item() / outs['cudnn'].float().norm().item():.3e}")


def grouped_gemm():
    if not hasattr(torch, "_grouped_mm"):
        print("SKIP torch_grouped_mm: torch._grouped_mm is missing in this PyTorch", flush=True)
        return
    E, rows, tile = 384, 131072, 64
    g = torch.Generator(device="cpu").manual_seed(7)
    ids = torch.randint(0, E, (rows,), generator=g)
    counts = torch.bincount(ids, minlength=E)
    padded = (counts + tile - 1) // tile * tile
    offs = torch.cumsum(padded, 0).to(torch.int32).cuda()
    P = int(padded.sum())
    print(f"grouped_mm: E={E} rows={rows} padded to {tile}: P={P}", flush=True)
    for name, K, N in (("gemm1", 7168, 1024), ("gemm2", 512, 7168)):
        try:
            a = torch.randn(P, K, device="cuda", dtype=torch.bfloat16)
            # Weights stored [E, N, K] (K contiguous), passed as [E, K, N].
            w = torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)
            run = lambda: torch._grouped_mm(a, w, offs=offs, out_dtype=torch.bfloat16)
            out = run()
            # spot check one expert against a plain matmul
            e = 5
            lo = int(offs[e - 1]) if e > 0 else 0
            hi = int(offs[e])
            ref = a[lo:hi].float() @ w[e].float()
            err = (out[lo:hi].float() - ref).norm().item() / ref.norm().item()
            ms = time_ms(run)
            result(f"torch_grouped_mm_{name}", ms, 2.0 * rows * N * K)
            print(f"NOTE torch_grouped_mm_{name}: K={K} N={N} P={P}; expert {e} vs matmul normwise rel {err:.2e}; "
                  f"TFLOP/s over the {rows} real rows ({2.0 * P * N * K / (ms * 1e-3) / 1e12:.1f} over all P rows)",
                  flush=True)
            del a, w, out
        except Exception as ex:  # noqa: BLE001
            msg = str(ex).strip().splitlines()
            print(f"SKIP torch_grouped_mm_{name}: {type(ex).__name__}: {msg[0] if msg else ''}", flush=True)
        torch.cuda.empty_cache()


def main():
    T = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
    H = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    attention(T, H)
    grouped_gemm()


if __name__ == "__main__":
    main()
