#!/usr/bin/env python3
"""The cost of `--stacks python` per allocation, on the CPU (docs/performance.md, "Call stacks").

A chain of DEPTH distinct Python functions (each its own code object, as a model's modules are)
is entered afresh ROUNDS times, as each layer of a forward pass enters its modules again; at the
bottom the chain makes CALLS foreign calls through ctypes, which releases the GIL as PyTorch does
around its allocations. Each foreign call is either the profiler's stack capture
(StackCollector::capture, what the CUPTI tracer runs at each allocation) or a call that does
nothing; the two alternate round by round, and the difference of the medians is the capture's
cost. With several libraries (LIB=a.so,b.so: two builds of the profiler, say before and after a
change), each one's capture runs in turn within every repeat, so they are compared under the
same load. usage: bench_pystack.py LIB[,LIB...] [DEPTH=20] [ROUNDS=400] [CALLS=8] [REPEATS=9]"""
import ctypes
import statistics
import sys
import time

LIBS = sys.argv[1].split(",")
DEPTH = int(sys.argv[2]) if len(sys.argv) > 2 else 20
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 400
CALLS = int(sys.argv[4]) if len(sys.argv) > 4 else 8
REPEATS = int(sys.argv[5]) if len(sys.argv) > 5 else 9

dlls = [ctypes.CDLL(lib) for lib in LIBS]
for dll in dlls:
    for f in ("moeprof_bench_capture", "moeprof_bench_noop"):
        getattr(dll, f).restype = ctypes.c_uint32
    dll.moeprof_bench_depth.restype = ctypes.c_int
    dll.moeprof_bench_depth.argtypes = [ctypes.c_uint32]

# DEPTH functions f0 .. f{DEPTH-1}, each calling the next; the last one calls the leaf.
ns = {}
src = []
for i in range(DEPTH - 1):
    src.append(f"def f{i}(leaf, calls):\n    return f{i + 1}(leaf, calls)\n")
src.append(f"def f{DEPTH - 1}(leaf, calls):\n    r = 0\n    for _ in range(calls):\n        r = leaf()\n    return r\n")
exec(compile("".join(src), "<model>", "exec"), ns)
top = ns["f0"]


def timed(leaf):
    t = time.perf_counter_ns()
    for _ in range(ROUNDS):
        top(leaf, CALLS)
    return (time.perf_counter_ns() - t) / (ROUNDS * CALLS)


frames = []
for dll in dlls:
    top(dll.moeprof_bench_capture, CALLS)  # warm-up: code objects interned once
    frames.append(dll.moeprof_bench_depth(top(dll.moeprof_bench_capture, 1)))
noop, cap = [], [[] for _ in dlls]
for _ in range(REPEATS):
    noop.append(timed(dlls[0].moeprof_bench_noop))
    for d, dll in enumerate(dlls):
        cap[d].append(timed(dll.moeprof_bench_capture))
n = statistics.median(noop)
print(f"python {sys.version.split()[0]}, depth {DEPTH} functions, {ROUNDS} rounds x {CALLS} calls, {REPEATS} repeats")
print(f"ctypes call alone: {n:.0f} ns (min {min(noop):.0f}, max {max(noop):.0f})")
for d, lib in enumerate(LIBS):
    c = statistics.median(cap[d])
    print(f"{lib}: {frames[d]} frames, call with the capture {c:.0f} ns (min {min(cap[d]):.0f}, max {max(cap[d]):.0f}): "
          f"capture {c - n:.0f} ns per allocation, {(c - n) / max(frames[d], 1):.1f} ns per frame")
