#!/usr/bin/env python3
"""Makes real PyTorch memory snapshots, with torch's own figures beside them, for moeprof's import test.

Run on a machine with a CUDA GPU and PyTorch (no other package needed):

    python3 scripts/torch_snapshot_fixture.py [--out tests/golden/torch/real]

It writes, for each variant, NAME.pickle (torch.cuda.memory._dump_snapshot) and NAME.json:
  mlp          a small MLP inference (Linear / GELU / residual adds, odd-sized scratch tensors)
               recorded with a ring buffer large enough to keep every entry (trace_complete)
  mlp_wrapped  the same program with max_entries=200 and C++ frames too: the buffer wraps, so the
               importer must synthesize what was live before its window

NAME.json holds torch's own view, which tests/import/torch_snapshot_test.cpp compares with
`moeprof import` ("real snapshots match torch's own figures"):
  torch:        torch.cuda.max_memory_allocated(), memory_allocated(), max_memory_reserved(),
                memory_reserved() and memory_stats()'s requested_bytes / active_bytes peaks and
                current values, read right before the dump (peaks reset when recording began)
  viz_replay:   the peak and end of the snapshot's trace replayed the way torch's memory_viz
                "Active Memory Timeline" does (alloc adds its size; free_completed removes it;
                allocations the trace never saw, from frees without allocs and from live blocks
                of the segments, count from the start), plus the sizes live at that peak
  torch_live_at_peak: the requested sizes of the blocks torch's own _snapshot() showed live at the
                first module hook where requested_bytes.current equalled the run's final peak
                (null when no hook saw the peak)
Every module of the model gets a forward hook; the MLP's largest moment is inside the block
(input, expanded activation and GELU output live at once), right after GELU returns.
"""
import argparse
import json
import os
import pickle
import platform
import subprocess
import sys

VARIANTS = {
    "mlp": {"max_entries": 100_000, "stacks": "python"},
    "mlp_wrapped": {"max_entries": 200, "stacks": "all"},
}


def viz_replay(snap, dev):
    """The memory_viz rule, written out here (not taken from torch) so the test has a second opinion."""
    entries = snap["device_traces"][dev] if dev < len(snap.get("device_traces", [])) else []
    trace_live = {}
    initially = {}  # address -> size, live before the trace began
    for e in entries:
        if e["action"] == "alloc":
            trace_live[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            if e["addr"] in trace_live:
                del trace_live[e["addr"]]
            else:
                initially[e["addr"]] = e["size"]
    for seg in snap.get("segments", []):
        if seg["device"] != dev:
            continue
        addr = seg["address"]
        for b in seg["blocks"]:
            baddr = b.get("address", addr)
            if b["state"] == "active_allocated" and baddr not in trace_live:
                initially[baddr] = b.get("requested_size", b["size"])
            addr = baddr + b["size"]
    live = dict(initially)
    cur = sum(live.values())
    peak, peak_live = cur, sorted(live.values(), reverse=True)
    for e in entries:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
            cur += e["size"]
            if cur > peak:
                peak, peak_live = cur, sorted(live.values(), reverse=True)
        elif e["action"] == "free_completed" and e["addr"] in live:
            cur -= live.pop(e["addr"])
    return {"peak_bytes": peak, "end_bytes": cur, "live_at_peak_sizes": peak_live[:10]}


def run_variant(name, out_dir):
    import torch

    cfg = VARIANTS[name]
    dev = 0
    torch.cuda.set_device(dev)
    torch.manual_seed(0)
    hidden, tokens, layers = 1024, 2048, 4

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.Linear(hidden, 4 * hidden)
            self.act = torch.nn.GELU()
            self.down = torch.nn.Linear(4 * hidden, hidden)

        def forward(self, x):
            return x + self.down(self.act(self.up(x)))

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))
            self.head = torch.nn.Linear(hidden, 1000)

        def forward(self, x):
            for i, b in enumerate(self.blocks):
                scratch = torch.empty(1_000_003 + 4096 * i, dtype=torch.uint8, device="cuda")  # odd sizes
                x = b(x)
                del scratch
            return self.head(x)

    model = MLP().to(device="cuda", dtype=torch.float16)  # the weights: live before recording
    x0 = torch.randn(tokens, hidden, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        model(x0)  # warm-up: cuBLAS workspace and other lazy allocations happen before recording
    torch.cuda.synchronize()

    best = {"value": -1, "sizes": None, "where": None}

    def checkpoint(where):
        stats = torch.cuda.memory_stats(dev)
        cur, pk = stats["requested_bytes.all.current"], stats["requested_bytes.all.peak"]
        if cur == pk and cur > best["value"]:
            snap = torch.cuda.memory._snapshot()
            sizes = [b.get("requested_size", b["size"]) for seg in snap["segments"] if seg["device"] == dev
                     for b in seg["blocks"] if b["state"] in ("active_allocated", "active_pending_free")]
            best.update(value=cur, sizes=sorted(sizes, reverse=True), where=where)

    for mod_name, mod in model.named_modules():
        mod.register_forward_hook(lambda m, i, o, n=mod_name: checkpoint("after " + (n or "model")))

    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks=cfg["stacks"],
                                              max_entries=cfg["max_entries"])
    torch.cuda.reset_peak_memory_stats(dev)
    with torch.no_grad():
        y = model(x0)
        keep = torch.empty(777_777, dtype=torch.uint8, device="cuda")  # live at the end
        y2 = model(x0 * 0.5)
        del y
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats(dev)
    figures = {
        "max_memory_allocated": torch.cuda.max_memory_allocated(dev),
        "memory_allocated": torch.cuda.memory_allocated(dev),
        "max_memory_reserved": torch.cuda.max_memory_reserved(dev),
        "memory_reserved": torch.cuda.memory_reserved(dev),
        "requested_bytes_peak": stats["requested_bytes.all.peak"],
        "requested_bytes_current": stats["requested_bytes.all.current"],
        "active_bytes_peak": stats["active_bytes.all.peak"],
        "active_bytes_current": stats["active_bytes.all.current"],
    }
    path = os.path.join(out_dir, name + ".pickle")
    torch.cuda.memory._dump_snapshot(path)
    torch.cuda.memory._record_memory_history(enabled=None)
    del keep, y2

    with open(path, "rb") as f:
        snap = pickle.load(f)
    entries = len(snap["device_traces"][dev])
    doc = {
        "generator": "scripts/torch_snapshot_fixture.py",
        "variant": name,
        "torch_version": torch.__version__,
        "cuda_device_name": torch.cuda.get_device_name(dev),
        "python_version": platform.python_version(),
        "pickle_protocol": pickle.DEFAULT_PROTOCOL,
        "device": dev,
        "max_entries": cfg["max_entries"],
        "stacks": cfg["stacks"],
        "entries": entries,
        # the stats cover the whole recording only when the ring buffer kept every entry
        "trace_complete": entries < cfg["max_entries"],
        "torch": figures,
        "viz_replay": viz_replay(snap, dev),
        "torch_live_at_peak": None,
    }
    if best["value"] == figures["requested_bytes_peak"]:
        doc["torch_live_at_peak"] = {"total_requested": best["value"], "requested_sizes": best["sizes"],
                                     "where": best["where"]}
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    v = doc["viz_replay"]
    print(f"{name}: {entries} entries, torch requested peak {figures['requested_bytes_peak']}, "
          f"max_memory_allocated {figures['max_memory_allocated']}, memory_viz replay peak {v['peak_bytes']}, "
          f"live set at the peak {'seen at ' + best['where'] if doc['torch_live_at_peak'] else 'not seen by a hook'}")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "golden", "torch", "real"))
    ap.add_argument("--variant", choices=sorted(VARIANTS), help="run one variant in this process")
    args = ap.parse_args()
    out = os.path.normpath(args.out)
    os.makedirs(out, exist_ok=True)
    if args.variant:
        run_variant(args.variant, out)
        return
    for name in VARIANTS:  # one process each: a fresh allocator and history
        subprocess.run([sys.executable, os.path.abspath(__file__), "--variant", name, "--out", out], check=True)
    print(f"wrote {', '.join(n + '.pickle/.json' for n in VARIANTS)} under {out}")


if __name__ == "__main__":
    main()
