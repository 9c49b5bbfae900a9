"""An unmodified Hugging Face transformers MoE model (DeepseekV3ForCausalLM, small random config)
doing one prefill, for scripts/device_all.sh's `hf` step: traced with
`moeprof trace --torch-async --uses --stacks python`, its trace should show who holds the memory.
With `llama`, a dense model of the same width instead (LlamaForCausalLM), whose allocations do not
depend on a routing (the `sizelaw` step's second program).
Prints "TORCH {json}" with torch.cuda.max_memory_allocated() (the whole run: weights and prefill).
usage: python3 hf_moe_prefill.py [TOKENS] [llama]"""
import json
import sys
import time

import torch
import transformers
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, LlamaConfig, LlamaForCausalLM


def main():
    tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 3001
    cfg = DeepseekV3Config(
        vocab_size=4096, hidden_size=1024, intermediate_size=2816, moe_intermediate_size=512,
        num_hidden_layers=4, first_k_dense_replace=1, n_routed_experts=16, num_experts_per_tok=4,
        n_shared_experts=1, num_attention_heads=8, num_key_value_heads=8, q_lora_rank=384,
        kv_lora_rank=256, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64, n_group=1,
        topk_group=1, max_position_embeddings=4096, rope_scaling=None)
    llama = len(sys.argv) > 2 and sys.argv[2] == "llama"
    if llama:
        cfg = LlamaConfig(vocab_size=4096, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                          num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=8192)
    torch.manual_seed(0)
    dev = torch.device("cuda:0")
    model = (LlamaForCausalLM if llama else DeepseekV3ForCausalLM)(cfg).to(device=dev, dtype=torch.bfloat16).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, tokens), device=dev)
    # The prefill, timed (the tracer's overhead is measured on it): one warm-up, then the best of three.
    times = []
    for _ in range(4):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model(input_ids=ids, use_cache=False)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    print("TORCH " + json.dumps({
        "max_memory_allocated": torch.cuda.max_memory_allocated(dev),
        "memory_allocated_end": torch.cuda.memory_allocated(dev),
        "logits_shape": list(out.logits.shape),
        "prefill_seconds": min(times[1:]),
        "backend": torch.cuda.get_allocator_backend(),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "python": sys.version.split()[0],
    }), flush=True)


if __name__ == "__main__":
    main()
