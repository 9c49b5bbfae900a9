#!/usr/bin/env python3
"""Checks of issue 13 on a 2-GPU machine (scripts/device_all.sh, step symm): per-rank peaks of the
thread launch, the process launch and the emulated TP=2 run, to the byte; MoE buffer reuse inside the
symmetric pool; wall time of the modes. Prints one line per check and a table.
  symm_check.py THREADS_DIR PROCESSES_DIR EMULATED_DIR THREADS_LOG PROCESSES_LOG"""
import json
import re
import subprocess
import sys

thr, proc, emu, thr_log, proc_log = sys.argv[1:6]
moeprof = "build-gpu/src/cli/moeprof"


def plan(path):
    r = subprocess.run([moeprof, "plan", path, "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return json.loads(r.stdout)


ok = True
rows = []
for mode in ("baseline", "reuse"):
    t, p, e = plan(f"{thr}/{mode}.mtrace"), plan(f"{proc}/{mode}.mtrace"), plan(f"{emu}/{mode}.mtrace")
    if not (t and p and e):
        print(f"FAIL {mode}: missing trace(s)")
        ok = False
        continue
    tp = [d["peak_activation_bytes"] for d in t["devices"]]
    pp = [d["peak_activation_bytes"] for d in p["devices"]]
    ep = e["peak_activation_bytes"]
    same = tp == pp
    emu_same = all(x == ep for x in tp)
    ok = ok and same and emu_same
    rows.append(f"{mode:<9} threads {tp}  processes {pp}  emulated TP=2 {ep}  threads==processes {same}  ==emulated {emu_same}")
for name, log in (("threads", thr_log), ("processes", proc_log)):
    text = open(log, errors="replace").read()
    m = re.search(r"MoE output buffers \(reuse, rank 0\): (\d+) reused, (\d+) fresh, (\d+) fallback", text)
    ident = "outputs bitwise identical: yes (every rank)" in text
    fw = re.findall(r"^(baseline|reuse)\s+.*?(\d+\.\d+) s\s+(\d+\.\d+) s\s*$", text, re.M)
    rows.append(f"{name}: MoE reuse {m.groups() if m else None}  identical {ident}  forward/total {fw}")
    ok = ok and bool(m) and m.group(1) == "60" and m.group(3) == "0" and ident
for r in rows:
    print(r)
print("PASS" if ok else "FAIL")
