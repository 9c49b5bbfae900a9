#!/usr/bin/env python3
"""Checks `moeprof trace --stacks python` on an unmodified transformers model (device_all.sh `hf`).
usage: hf_stack_check.py TORCH_STDOUT TRACE_REPORT_JSON PLAN_JSON
Prints one line: PASS|FAIL and the figures: traced peak vs torch.cuda.max_memory_allocated(),
the ten largest transient allocations at the peak and whether each names a transformers source
line, weights inferred persistent, the ranked fixes naming source lines."""
import json
import sys

torch = next(json.loads(l[6:]) for l in open(sys.argv[1]) if l.startswith("TORCH "))
rep = json.load(open(sys.argv[2]))
plan = json.load(open(sys.argv[3]))
tr = [t for t in rep["traces"] if t["path"].endswith("hf.mtrace")][0]
so = {d["device"]: d for d in tr["stream_ordered"]["devices"]}
peak = so.get(0, {}).get("peak_bytes", 0)
want = torch["max_memory_allocated"]
top = [e for e in plan["live_at_peak"]["top"] if e["category"] == "activation"][:10]
named = sum(1 for e in top if any("transformers" in f for f in e.get("stack", [])[:1]))
weights = plan["peak_by_category"].get("weights", 0)
fixes = plan.get("what_if", {}).get("fixes", [])
fix_lines = sum(1 for f in fixes if any(t.get("stack") and "transformers" in t["stack"][0] for t in f["tensors"]))
ok = peak == want and named == len(top) and len(top) >= 1 and weights > 0 and fixes and fix_lines == len(fixes)
print(f"{'PASS' if ok else 'FAIL'} peak {peak} vs max_memory_allocated {want}; {named}/{len(top)} of the largest transient "
      f"allocations at the peak name a transformers line (first: {top[0].get('stack', ['-'])[0] if top else '-'}); "
      f"weights (persistent) {weights} B; {fix_lines}/{len(fixes)} fixes name a source line; "
      f"{plan.get('categories_inferred', '')[:120]}")
