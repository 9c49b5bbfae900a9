"""PyTorch programs whose traced allocations become arena instances (docs/performance.md, "Arena
planner"; bench/arena/torch/trace_all.sh runs them).

  python3 programs.py gpt-train|unet-train|llama-generate

Run under `moeprof trace --torch-async` (every tensor one allocation record); `moeprof plan TRACE
--arena --arena-out-csv F` then writes the activation buffers of the peak device as a MiniMalloc
CSV. Models are built from configs with random weights (no download), seeded, on one GPU."""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def gpt_train(steps=3):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
    model = GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(steps):
        ids = torch.randint(0, cfg.vocab_size, (8, 1024), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


class Block(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout)
        self.c2, self.b2 = nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout)

    def forward(self, x):
        return F.relu(self.b2(self.c2(F.relu(self.b1(self.c1(x))))))


class UNet(nn.Module):
    def __init__(self, base=32, levels=4):
        super().__init__()
        ch = [base << i for i in range(levels)]
        self.down = nn.ModuleList([Block(3 if i == 0 else ch[i - 1], ch[i]) for i in range(levels)])
        self.up = nn.ModuleList([nn.ConvTranspose2d(ch[i + 1], ch[i], 2, stride=2) for i in range(levels - 1)])
        self.dec = nn.ModuleList([Block(2 * ch[i], ch[i]) for i in range(levels - 1)])
        self.head = nn.Conv2d(ch[0], 2, 1)

    def forward(self, x):
        skips = []
        for i, d in enumerate(self.down):
            x = d(x)
            if i + 1 < len(self.down):
                skips.append(x)
                x = F.max_pool2d(x, 2)
        for i in reversed(range(len(self.up))):
            x = self.dec[i](torch.cat([self.up[i](x), skips[i]], dim=1))
        return self.head(x)


def unet_train(steps=3):
    model = UNet().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    for step in range(steps):
        batch = 6 + 2 * step  # batch sizes vary, as they do between microbatches
        x = torch.randn(batch, 3, 256, 256, device="cuda")
        y = torch.randint(0, 2, (batch, 256, 256), device="cuda")
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


def llama_generate():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=16, num_attention_heads=16,
                      num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096)
    model = LlamaForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16).eval()
    ids = torch.randint(0, cfg.vocab_size, (4, 512), device="cuda")
    with torch.no_grad():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=64, min_new_tokens=64, do_sample=False,
                       pad_token_id=0)
    torch.cuda.synchronize()


if __name__ == "__main__":
    torch.manual_seed(2026)
    {"gpt-train": gpt_train, "unet-train": unet_train, "llama-generate": llama_generate}[sys.argv[1]]()
