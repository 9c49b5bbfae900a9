"""PyTorch workload for scripts/gpu_trace_check.sh: allocates and frees tensors under NVTX ranges
and prints torch.cuda.max_memory_allocated() as one line "TORCH {json}". Traced with
`moeprof trace --torch-async` (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync), the replayed peak
of the trace's stream-ordered allocations should equal max_memory_allocated."""
import json

import torch


def main():
    dev = torch.device("cuda:0")
    torch.cuda.init()
    torch.cuda.reset_peak_memory_stats(dev)
    with torch.cuda.nvtx.range("weights"):
        w = [torch.randn(1024, 1024 + 128 * i, device=dev) for i in range(4)]
    with torch.cuda.nvtx.range("forward"):
        x = torch.randn(512, 1024, device=dev)
        for i in range(3):
            with torch.cuda.nvtx.range(f"layer.{i}"):
                y = x @ w[i % 4]  # cuBLAS GEMM (workspace from the PyTorch allocator)
                z = torch.relu(y)
                s = z.sum(dim=1)
                x = z[:, :1024].contiguous()
                del y, z, s
        big = torch.empty(64 << 20, dtype=torch.uint8, device=dev)  # 64 MiB, freed below
        del big
    torch.cuda.synchronize()
    out = {
        "max_memory_allocated": torch.cuda.max_memory_allocated(dev),
        "memory_allocated_end": torch.cuda.memory_allocated(dev),
        "backend": torch.cuda.get_allocator_backend(),
        "torch": torch.__version__,
    }
    print("TORCH " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
