#!/usr/bin/env python3
"""Writes the PyTorch memory-snapshot fixtures of tests/import (plain Python 3, no torch).

    python3 tests/import/make_fixtures.py [--out tests/golden/torch]

Each snapshot is produced by a small simulation of the caching allocator's history recorder: a
script of alloc / free / segment operations runs from the beginning of the program, every
operation appends the entries torch.cuda.memory._record_memory_history() would record
(alloc, free_requested, free_completed, segment_alloc, segment_free, segment_map, segment_unmap,
oom, snapshot, ...), and the ring buffer keeps the last `max_entries` per device. The segments
list is the allocator's state at the end (blocks tiling each segment, with requested sizes and
frames). The dicts have the keys, key order and sharing (frame lists reused, so the pickle memo
repeats them) of torch's _snapshot(), and are pickled with pickle.dump as _dump_snapshot does.

Because the simulation knows the whole history, NAME.expected.json holds the ground truth that
an import of the cut trace must reproduce, for both free policies: the live bytes at every
instant of the kept window (peak, the entry that first reached it, the live set there, the end),
the reserved bytes, how many allocations were live before the window began (the ones the importer
has to synthesize) and the call stacks. None of it is computed by replaying the snapshot.

hostile/ holds malformed and unsupported pickles; hostile/expected.json maps each to the exact
error message (offsets computed here with pickletools).
"""
import argparse
import collections
import datetime
import json
import os
import pickle
import pickletools
import random

T0_US = 1_712_345_678_901_234  # time_us values are microseconds since the epoch
KIB, MIB = 1024, 1024 * 1024


def round512(n):
    return max(512, (n + 511) // 512 * 512)


def frame(name, filename, line):
    return {"name": name, "filename": filename, "line": line}


def is_python(filename):
    return filename.endswith(".py") or filename.startswith("<")


def sanitized(s):
    return s.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def label(frames):
    """The importer's name for an allocation: the innermost Python frame outside torch's package."""
    first = None
    for f in frames:
        if not is_python(f["filename"]):
            continue
        if first is None:
            first = f
        if "/torch/" not in f["filename"] and not f["filename"].startswith("torch/"):
            return lbl(f)
    return lbl(first) if first else ""


def lbl(f):
    return sanitized(f"{f['name']} ({f['filename'].rsplit('/', 1)[-1]}:{f['line']})")


class Alloc:
    def __init__(self, addr, size, frames, stream, index):
        self.addr, self.size, self.frames, self.stream = addr, size, frames, stream
        self.index = index          # index of its alloc entry in the device's full history
        self.requested = False      # free_requested seen
        self.completed = False      # free_completed seen


class Device:
    def __init__(self):
        self.entries = []           # full history
        self.live = {}              # addr -> Alloc (until free_completed)
        self.allocs = []            # every Alloc, in order
        self.segments = {}          # addr -> dict(total, stream, expandable, frames)
        self.truth = []             # after each entry: {policy: live bytes}, reserved, live ids
        self.reserved = 0


class Sim:
    """The allocator's history recorder, with the ground truth kept alongside."""

    def __init__(self, devices, seed=0):
        self.dev = [Device() for _ in range(devices)]
        self.t = T0_US
        self.rng = random.Random(seed)

    def tick(self, us=None):
        self.t += self.rng.choice([0, 1, 3, 17, 250]) if us is None else us

    def _record(self, d, e):
        dev = self.dev[d]
        e.setdefault("time_us", self.t)
        dev.entries.append(e)
        truth = {"requested": 0, "completed": 0, "reserved": dev.reserved}
        for a in dev.live.values():
            truth["completed"] += a.size
            if not a.requested:
                truth["requested"] += a.size
        dev.truth.append(truth)
        self.tick()

    @staticmethod
    def _entry(action, addr, size, stream, frames, meta=None):
        e = {"action": action, "addr": addr, "size": size, "stream": stream}
        e["time_us"] = None  # placeholder keeps torch's key order; _record fills it
        if meta is not None:
            e["user_metadata"] = meta
        if frames is not None:
            e["frames"] = frames
        return e

    def _put(self, d, e):
        e["time_us"] = self.t
        self._record(d, e)

    def segment_alloc(self, d, addr, size, stream=0, frames=None, expandable=False):
        dev = self.dev[d]
        assert addr not in dev.segments
        dev.segments[addr] = {"total": size, "stream": stream, "expandable": expandable, "frames": frames or []}
        dev.reserved += size
        self._put(d, self._entry("segment_map" if expandable else "segment_alloc", addr, size, stream, frames))

    def segment_free(self, d, addr):
        dev = self.dev[d]
        seg = dev.segments.pop(addr)
        assert not any(addr <= a < addr + seg["total"] for a in dev.live), "segment still holds blocks"
        dev.reserved -= seg["total"]
        self._put(d, self._entry("segment_unmap" if seg["expandable"] else "segment_free", addr, seg["total"],
                                 seg["stream"], seg["frames"]))

    def alloc(self, d, addr, size, stream=0, frames=None, meta=None):
        dev = self.dev[d]
        assert addr not in dev.live, hex(addr)
        a = Alloc(addr, size, frames or [], stream, len(dev.entries))
        dev.live[addr] = a
        dev.allocs.append(a)
        self._put(d, self._entry("alloc", addr, size, stream, frames, meta))
        return a

    def free(self, d, addr, pending=False, frames=None):
        """free_requested, then free_completed at once unless another stream still uses the block."""
        a = self.dev[d].live[addr]
        assert not a.requested
        a.requested = True
        self._put(d, self._entry("free_requested", addr, a.size, a.stream, frames if frames is not None else a.frames))
        if not pending:
            self.complete(d, addr, frames)

    def complete(self, d, addr, frames=None):
        dev = self.dev[d]
        a = dev.live.pop(addr)
        assert a.requested
        a.completed = True
        self._put(d, self._entry("free_completed", addr, a.size, a.stream, frames if frames is not None else a.frames))

    def oom(self, d, size, device_free, frames=None):
        e = {"action": "oom", "device_free": device_free, "size": size, "stream": 0, "time_us": None}
        if frames is not None:
            e["frames"] = frames
        self._put(d, e)

    def other(self, d, action, addr=0, size=0, meta=None):
        e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": None}
        if meta is not None:
            e["user_metadata"] = meta
        self._put(d, e)

    # -- the snapshot -------------------------------------------------------------------------
    def segments_list(self):
        out = []
        for d, dev in enumerate(self.dev):
            for saddr in sorted(dev.segments):
                seg = dev.segments[saddr]
                end = saddr + seg["total"]
                inside = sorted((a for a in dev.live.values() if saddr <= a.addr < end), key=lambda a: a.addr)
                blocks, cur = [], saddr
                for a in inside:
                    assert a.addr >= cur, "blocks overlap"
                    if a.addr > cur:
                        blocks.append({"address": cur, "size": a.addr - cur, "requested_size": 0, "state": "inactive", "frames": []})
                    size = round512(a.size)
                    assert a.addr + size <= end, "block past its segment"
                    state = "active_pending_free" if a.requested else "active_allocated"
                    blocks.append({"address": a.addr, "size": size, "requested_size": a.size, "state": state, "frames": a.frames})
                    cur = a.addr + size
                if cur < end:
                    blocks.append({"address": cur, "size": end - cur, "requested_size": 0, "state": "inactive", "frames": []})
                allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
                active = sum(b["size"] for b in blocks if b["state"] != "inactive")
                requested = sum(b["requested_size"] for b in blocks if b["state"] == "active_allocated")
                out.append({"device": d, "address": saddr, "total_size": seg["total"], "allocated_size": allocated,
                            "active_size": active, "requested_size": requested, "stream": seg["stream"],
                            "segment_type": "small" if seg["total"] == 2 * MIB else "large",
                            "segment_pool_id": (0, 0), "is_expandable": seg["expandable"], "frames": seg["frames"],
                            "blocks": blocks})
        return out

    def snapshot(self, keep, settings=None):
        """The snapshot dict when the ring buffer keeps the last `keep` entries of each device."""
        snap = {"segments": self.segments_list(),
                "device_traces": [dev.entries[max(0, len(dev.entries) - keep):] for dev in self.dev]}
        snap["allocator_settings"] = settings if settings is not None else default_settings()
        return snap

    def expected(self, keep):
        """Ground truth for the importer, per policy and device, when the last `keep` entries are kept."""
        out = {}
        for policy in ("completed", "requested"):
            devices = []
            for d, dev in enumerate(self.dev):
                n = len(dev.entries)
                start = max(0, n - keep)
                kept = dev.entries[start:]
                has_segments = bool(dev.segments)
                if not kept and not has_segments:
                    continue
                free_action = "free_" + policy

                def live_before(a, i):  # allocation a is live (under the policy) just before entry i
                    if a.index >= i:
                        return False
                    freed_at = free_index(dev, a, policy)
                    return freed_at is None or freed_at >= i

                before = [a for a in dev.allocs if live_before(a, start)]
                from_frees = [a for a in before if free_index(dev, a, policy) is not None]
                from_segments = [a for a in before if free_index(dev, a, policy) is None]
                series = [(sum(a.size for a in before), 0)]  # (live bytes, entry index in the cut trace)
                for k, e in enumerate(kept):
                    series.append((dev.truth[start + k][policy], k))
                peak = max(p[0] for p in series)
                first = next(i for i, p in enumerate(series) if p[0] == peak)  # the first instant at the peak
                # None: the peak is what was live before the first kept entry (no entry reached it)
                peak_entry = series[first][1] if first > 0 else None
                at = start + peak_entry + 1 if first > 0 else start  # live just before entry `at`
                live_at_peak = [a for a in dev.allocs if live_before(a, at)]
                reserved_before = dev.truth[start - 1]["reserved"] if start > 0 else 0
                reserved = [reserved_before] + [dev.truth[start + k]["reserved"] for k in range(len(kept))]

                def name_of(a):
                    if a.index >= start:
                        return label(a.frames)
                    # synthesized: the importer knows the frames only from the segments' blocks
                    lab = label(a.frames) if a in from_segments else ""
                    return lab or "(allocated before the trace)"

                end_live = sum(a.size for a in dev.live.values() if policy == "completed" or not a.requested)
                devices.append({
                    "device": d,
                    "entries": len(kept),
                    "allocs": sum(e["action"] == "alloc" for e in kept),
                    "frees": sum(e["action"] == free_action for e in kept),
                    "synthesized_from_frees": len(from_frees),
                    "synthesized_from_segments": len(from_segments),
                    "segment_events": sum(e["action"].startswith("segment_") for e in kept),
                    "oom_events": sum(e["action"] == "oom" for e in kept),
                    "skipped_entries": sum(e["action"] not in KNOWN_ACTIONS for e in kept),
                    "has_segments": has_segments,
                    "peak_bytes": peak,
                    "peak_entry": peak_entry,
                    "initial_reserved_bytes": reserved_before,
                    "reserved_peak_bytes": max(reserved),
                    "end_reserved_bytes": sum(s["total"] for s in dev.segments.values()),
                    "end_live_bytes": end_live,
                    "live_at_peak": sorted([[a.addr, a.size, name_of(a)] for a in live_at_peak], key=lambda x: (-x[1], x[0])),
                })
            out[policy] = devices
        return out

    def first_times(self, keep):
        """time_us of the first kept entry of each device that has one."""
        return {str(d): dev.entries[max(0, len(dev.entries) - keep)]["time_us"]
                for d, dev in enumerate(self.dev) if len(dev.entries) > 0 and keep > 0}

    def stacks(self, keep):
        """Per device, the frames of every alloc entry kept in the trace: [name, file, line, kind]."""
        out = {}
        for d, dev in enumerate(self.dev):
            start = max(0, len(dev.entries) - keep)
            per = {}
            for k, e in enumerate(dev.entries[start:]):
                if e["action"] == "alloc":
                    per[str(k)] = [[sanitized(f["name"]), sanitized(f["filename"]), f["line"],
                                    "python" if is_python(f["filename"]) else "native"] for f in e.get("frames", [])]
            out[str(d)] = per
        return out


KNOWN_ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
                 "segment_unmap", "snapshot", "oom"}


def free_index(dev, a, policy):
    """Index of the entry that ends allocation a under the policy, None if it is live at the end."""
    want = "free_" + policy
    for i in range(a.index + 1, len(dev.entries)):
        e = dev.entries[i]
        if e["action"] == want and e["addr"] == a.addr:
            return i
        if e["action"] == "alloc" and e["addr"] == a.addr:
            break
    return None


def default_settings():
    return {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "garbage_collection_threshold": 0.0,
            "expandable_segments": False, "pinned_num_register_threads": 1, "release_lock_on_cudamalloc": False,
            "pinned_use_cuda_host_register": False,
            "roundup_power2_divisions": {str(1 << k): 0 for k in range(16)}}


# ---------------------------------------------------------------------------------------------
# Fixture 1: two devices (and an empty third device trace), hand-scripted.

TORCH = "/usr/lib/python3/dist-packages/torch"
USER = "/home/user/mlp.py"
NATIVE = [frame("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)",
                "/pytorch/c10/cuda/CUDACachingAllocator.cpp", 1187),
          frame("at::native::empty_cuda", "??", 0)]


def stacks_two_devices():
    linear = [frame("forward", f"{TORCH}/nn/modules/linear.py", 125), frame("_call_impl", f"{TORCH}/nn/modules/module.py", 1747),
              frame("forward", USER, 42), frame("<module>", USER, 88)]
    gelu = NATIVE + [frame("gelu", f"{TORCH}/nn/functional.py", 1890), frame("forward", USER, 43), frame("<module>", USER, 88)]
    torch_only = [frame("_conv_forward", f"{TORCH}/nn/modules/conv.py", 549), frame("forward", f"{TORCH}/nn/modules/conv.py", 554)]
    native_only = list(NATIVE)
    fx = [frame("forward", "<eval_with_key>.3", 7), frame("__call__", f"{TORCH}/fx/graph_module.py", 304)]
    odd = [frame("sch\u00e4tzen_bad\udc80name", "/home/user/\u00fcbung.py", 12)]
    return {"linear": linear, "gelu": gelu, "torch_only": torch_only, "native_only": native_only, "fx": fx, "odd": odd}


def build_two_devices():
    s = stacks_two_devices()
    sim = Sim(3, seed=1)
    B0 = 0x7F3A_0000_0000
    STREAM1 = 0x5598_2A3B_4C10  # a side stream's cudaStream_t, as an int
    # -- device 0: the part before the ring buffer's window -------------------------------------
    sim.segment_alloc(0, B0, 20 * MIB, frames=s["linear"])
    sim.alloc(0, B0, 1_000_003, frames=s["linear"], meta="weights")          # live to the end: from segments
    sim.alloc(0, B0 + 1_000_448, 3_000, frames=s["gelu"])                    # freed in the window: from frees
    sim.alloc(0, B0 + 1_003_520, 70_001, stream=STREAM1, frames=s["fx"])     # requested before, completed in window
    sim.free(0, B0 + 1_003_520, pending=True)
    sim.alloc(0, B0 + 1_073_664, 4_096, frames=s["torch_only"])
    sim.free(0, B0 + 1_073_664)                                              # gone before the window
    start0 = len(sim.dev[0].entries)
    # -- device 0: the window ------------------------------------------------------------------
    sim.free(0, B0 + 1_000_448)
    sim.complete(0, B0 + 1_003_520)
    sim.alloc(0, B0 + 2 * MIB, 4 * MIB, frames=s["linear"], meta="layer.0")   # live at the end
    sim.alloc(0, B0 + 6 * MIB, 2_000, stream=STREAM1, frames=s["gelu"])      # pending at the end
    sim.segment_alloc(0, B0 + 20 * MIB, 2 * MIB, frames=s["native_only"])
    sim.alloc(0, B0 + 20 * MIB, 7, frames=s["native_only"])                  # 7 B in the small pool
    sim.segment_alloc(0, B0 + 24 * MIB, 8 * MIB)
    sim.alloc(0, B0 + 24 * MIB, 8_388_607, frames=s["odd"], meta="tmp")      # the big temporary
    sim.alloc(0, B0 + 10 * MIB, 123_457, stream=STREAM1, frames=s["linear"])
    sim.free(0, B0 + 10 * MIB, pending=True)                                 # requested, completed later
    sim.alloc(0, B0 + 11 * MIB, 65_536, frames=s["gelu"])                    # peak under completed only
    sim.complete(0, B0 + 10 * MIB)
    sim.free(0, B0 + 11 * MIB)
    sim.free(0, B0 + 24 * MIB)
    sim.segment_free(0, B0 + 24 * MIB)
    sim.oom(0, 1 << 30, 1_048_576, frames=s["linear"])
    sim.other(0, "snapshot")
    sim.other(0, "annotate", B0 + 2 * MIB, 0, meta="packed by autograd")
    sim.free(0, B0 + 6 * MIB, pending=True)                                  # active_pending_free at the end
    sim.alloc(0, B0 + 12 * MIB, 513, frames=s["fx"])
    # -- device 1: expandable segments, a block live before the (complete) history ----------------
    E = 0x7F50_0000_0000
    sim.segment_alloc(1, E, 2 * MIB, expandable=True)
    sim.alloc(1, E, 1_500_000, frames=s["gelu"])
    start1 = len(sim.dev[1].entries)
    sim.segment_alloc(1, E + 2 * MIB, 2 * MIB, expandable=True)
    sim.segment_alloc(1, E + 4 * MIB, 2 * MIB, expandable=True)
    sim.alloc(1, E + 2 * MIB, 3 * MIB + 5, frames=s["linear"])
    sim.alloc(1, E + 5 * MIB + 512, 77, frames=s["linear"])
    sim.free(1, E + 2 * MIB)
    sim.free(1, E + 5 * MIB + 512)
    sim.segment_free(1, E + 4 * MIB)
    sim.alloc(1, E + 2 * MIB, 1_048_577, frames=s["fx"])
    # The ring buffer keeps the last N entries of each device: pad device 1's window with short
    # lived allocations so that N cuts both devices where their windows begin.
    keep = len(sim.dev[0].entries) - start0
    k = 0
    while len(sim.dev[1].entries) - start1 < keep - 1:
        sim.alloc(1, E + 3 * MIB + 512 * k, 100 + k, frames=s["torch_only"])
        sim.free(1, E + 3 * MIB + 512 * k)
        k += 1
    if len(sim.dev[1].entries) - start1 < keep:
        sim.other(1, "snapshot")
    assert len(sim.dev[1].entries) - start1 == keep
    return sim, keep


# ---------------------------------------------------------------------------------------------
# Fixture 2: a long random history (one device, two streams), cut by a small ring buffer.

def build_random(seed=7, ops=1400):
    sim = Sim(1, seed=seed)
    rng = random.Random(seed)
    pool = [stacks_two_devices()[k] for k in ("linear", "gelu", "torch_only", "native_only", "fx")]
    streams = [0, 0, 0, 0x7F11_2233_4450]
    base = 0x7E00_0000_0000
    free_segs = []   # (addr, size) segments with no live block
    used = {}        # segment addr -> size
    pending = []
    for _ in range(ops):
        r = rng.random()
        live = [a for a in sim.dev[0].live.values() if not a.requested]
        if r < 0.48 or not live:
            size = rng.choice([rng.randint(1, 4096), rng.randint(4097, 1 << 20), rng.randint(1 << 20, 48 << 20)])
            need = max(2 * MIB, (round512(size) + 2 * MIB - 1) // (2 * MIB) * (2 * MIB))
            fit = [s for s in free_segs if s[1] >= need]
            if fit:
                seg = fit[0]
                free_segs.remove(seg)
            else:
                seg = (base, need)
                base += need + 2 * MIB
                sim.segment_alloc(0, seg[0], seg[1])
            used[seg[0]] = seg[1]
            sim.alloc(0, seg[0], size, stream=rng.choice(streams), frames=rng.choice(pool),
                      meta=rng.choice([None, None, "layer.%d" % rng.randint(0, 3)]))
        elif r < 0.90:
            a = rng.choice(live)
            side = a.stream != 0 and rng.random() < 0.6
            sim.free(0, a.addr, pending=side)
            if side:
                pending.append(a.addr)
            else:
                free_segs.append((a.addr, used.pop(a.addr)))
        elif r < 0.97 and pending:
            addr = pending.pop(rng.randrange(len(pending)))
            sim.complete(0, addr)
            free_segs.append((addr, used.pop(addr)))
        elif free_segs and rng.random() < 0.5:
            seg = free_segs.pop(rng.randrange(len(free_segs)))
            sim.segment_free(0, seg[0])
        else:
            sim.other(0, "snapshot")
    return sim, 600


# ---------------------------------------------------------------------------------------------
# Fixture 3: segments only (history recording off: no device_traces), and an empty snapshot.

def build_segments_only():
    sim = Sim(2, seed=3)
    s = stacks_two_devices()
    sim.segment_alloc(0, 0x7F00_0000_0000, 20 * MIB)
    sim.alloc(0, 0x7F00_0000_0000, 9_999_999, frames=s["linear"])
    sim.alloc(0, 0x7F00_0000_0000 + 10 * MIB, 1_111, frames=s["native_only"])
    sim.segment_alloc(1, 0x7F10_0000_0000, 2 * MIB)
    sim.alloc(1, 0x7F10_0000_0000 + 4096, 333, frames=s["gelu"])
    return sim


# Fixture 4: the ring buffer kept only entries after the peak (frees, then a small allocation):
# the peak is what was live before the first kept entry, which no entry reached.

def build_peak_before_history():
    sim = Sim(1, seed=11)
    s = stacks_two_devices()
    base = 0x7F20_0000_0000
    sim.segment_alloc(0, base, 20 * MIB)
    sim.alloc(0, base, 5_000_001, frames=s["linear"])
    sim.alloc(0, base + 8 * MIB, 3_333, frames=s["gelu"])
    sim.free(0, base)
    sim.alloc(0, base + 12 * MIB, 1_001, frames=s["native_only"])
    return sim, 3  # free_requested, free_completed, alloc


def write_pickle(path, obj, protocol):
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=protocol)


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
        f.write("\n")


# ---------------------------------------------------------------------------------------------
# Hostile pickles.

def ops_of(data):
    return list(pickletools.genops(data))


def hostile(out_dir, valid_p2, valid_p4):
    h = {}
    os.makedirs(out_dir, exist_ok=True)

    def put(name, data, message):
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data)
        h[name] = message

    # Cut inside a string's data (protocol 2: no frames).
    op = next((o for o in ops_of(valid_p2) if o[0].name == "BINUNICODE" and len(o[1]) >= 8), None)
    pos = op[2]
    length = len(op[1].encode("utf-8", "surrogatepass"))
    cut = pos + 5 + length // 2
    put("truncated_string.pickle", valid_p2[:cut],
        f"pickle offset {pos}: truncated: BINUNICODE needs {length} bytes of data, only {cut - pos - 5} left")
    # Cut a protocol-4 file: its first FRAME announces more bytes than are left.
    frame_op = ops_of(valid_p4)[1]
    cut = len(valid_p4) // 2
    assert frame_op[0].name == "FRAME" and frame_op[1] > cut - 11
    put("truncated_frame.pickle", valid_p4[:cut],
        f"pickle offset {frame_op[2]}: truncated: FRAME of {frame_op[1]} bytes, only {cut - frame_op[2] - 9} left")
    put("no_stop.pickle", b"\x80\x04}\x94", "pickle offset 4: truncated: the file ends before the STOP opcode")
    put("empty.pickle", b"", "pickle offset 0: empty file")
    put("unknown_opcode.pickle", b"\x80\x04}\xff.", "pickle offset 3: unknown opcode 0xff")
    g = pickle.dumps(datetime.date(2024, 1, 2), protocol=2)
    put("global.pickle", g, "pickle offset 2: unsupported opcode GLOBAL (0x63): the pickle constructs Python objects, "
        "which moeprof does not run")
    sg = pickle.dumps(collections.OrderedDict(), protocol=4)
    sg_at = next(o[2] for o in ops_of(sg) if o[0].name == "STACK_GLOBAL")
    put("stack_global.pickle", sg, f"pickle offset {sg_at}: unsupported opcode STACK_GLOBAL (0x93): the pickle constructs "
        "Python objects, which moeprof does not run")
    put("reduce.pickle", b"\x80\x02))R.", "pickle offset 4: unsupported opcode REDUCE (0x52): the pickle constructs "
        "Python objects, which moeprof does not run")
    put("set.pickle", pickle.dumps({1, 2}, protocol=4), "pickle offset 11: unsupported opcode EMPTY_SET (0x8f)")
    nested = []
    for _ in range(150):
        nested = [nested]
    deep = pickle.dumps(nested, protocol=4)
    lists = [o[2] for o in ops_of(deep) if o[0].name == "EMPTY_LIST"]
    put("deep_nesting.pickle", deep, f"pickle offset {lists[100]}: containers nested deeper than 100 levels")
    put("many_marks.pickle", b"\x80\x04" + b"(" * 1001 + b".", "pickle offset 1002: more than 1000 MARKs open at once")
    put("huge_length.pickle", b"\x80\x04X\xf0\xff\xff\xffabc.",
        "pickle offset 2: truncated: BINUNICODE needs 4294967280 bytes of data, only 4 left")
    put("huge_length8.pickle", b"\x80\x04\x8d" + (1 << 62).to_bytes(8, "little") + b"ab",
        "pickle offset 2: truncated: BINUNICODE8 needs 4611686018427387904 bytes of data, only 2 left")
    put("huge_frame.pickle", b"\x80\x04\x95" + (1 << 40).to_bytes(8, "little") + b"N.",
        "pickle offset 2: truncated: FRAME of 1099511627776 bytes, only 2 left")
    wide = pickle.dumps(1 << 64, protocol=4)
    wide_at = next(o[2] for o in ops_of(wide) if o[0].name == "LONG1")
    put("long_too_wide.pickle", wide, f"pickle offset {wide_at}: LONG1 integer of 9 bytes does not fit in 64 bits")
    loop = []
    loop.append(loop)
    rec = pickle.dumps(loop, protocol=4)
    rec_at = next(o[2] for o in ops_of(rec) if o[0].name == "EMPTY_LIST")
    put("recursive.pickle", rec, f"pickle offset {rec_at}: the list created here contains itself "
        "(recursive structures are not supported)")
    put("bad_memo.pickle", b"\x80\x04h\x07.", "pickle offset 2: BINGET of memo entry 7, which was never stored")
    put("odd_setitems.pickle", b"\x80\x04}(K\x01K\x02K\x03u.", "pickle offset 10: SETITEMS: odd number of items (3) after MARK")
    put("append_to_dict.pickle", b"\x80\x04}K\x01a.", "pickle offset 5: APPEND onto a dict, not a list")
    put("underflow.pickle", b"\x80\x04a.",
        "pickle offset 2: stack underflow: APPEND needs 2 values above the last MARK, the stack has 0")
    put("stop_two_values.pickle", b"\x80\x04NN.", "pickle offset 4: STOP with 2 values on the stack (expected 1)")
    put("protocol6.pickle", b"\x80\x06N.", "pickle offset 0: unsupported pickle protocol 6 (this reader knows 0-5)")
    put("unhashable_key.pickle", b"\x80\x04}]K\x01s.", "pickle offset 6: SETITEM: unhashable dict key of type list")
    # Valid pickles that are not snapshots, or snapshots with fields of the wrong type.
    p = lambda obj: pickle.dumps(obj, protocol=4)  # noqa: E731
    put("not_a_dict.pickle", p([1, 2]), "not a PyTorch memory snapshot: the pickle holds a list, not a dict")
    put("no_keys.pickle", p({"foo": 1, "bar": [2]}),
        "not a PyTorch memory snapshot: the dict has neither 'device_traces' nor 'segments' (keys: 'foo', 'bar')")
    put("traces_not_list.pickle", p({"device_traces": {"a": 1}}), "device_traces: expected list, got dict")
    put("wrong_size_type.pickle", p({"device_traces": [[{"action": "alloc", "addr": 4096, "size": "12", "stream": 0}]]}),
        "device_traces[0][0].size: expected int, got str")
    put("missing_addr.pickle", p({"device_traces": [[], [{"action": "free_completed", "size": 5}]]}),
        "device_traces[1][0]: no 'addr'")
    put("negative_size.pickle", p({"device_traces": [[{"action": "alloc", "addr": 4096, "size": -5, "stream": 0}]]}),
        "device_traces[0][0].size: negative (-5)")
    put("entry_not_dict.pickle", p({"device_traces": [[("alloc", 1, 2)]]}), "device_traces[0][0]: expected dict, got tuple")
    put("bad_frame.pickle", p({"device_traces": [[{"action": "alloc", "addr": 4096, "size": 5, "stream": 0, "time_us": 9,
                                                   "frames": [frame("f", "a.py", 1), {"filename": "a.py", "line": "x", "name": "f"}]}]]}),
        "device_traces[0][0].frames[1].line: expected int, got str")
    put("block_without_state.pickle", p({"segments": [{"device": 0, "address": 4096, "total_size": 2 * MIB, "stream": 0,
                                                       "blocks": [{"size": 512}]}]}),
        "segments[0].blocks[0]: no 'state'")
    put("huge_device.pickle", p({"segments": [{"device": 70000, "address": 4096, "total_size": 2 * MIB, "stream": 0, "blocks": []}]}),
        "segments[0].device: 70000 is out of range")
    write_json(os.path.join(out_dir, "expected.json"), h)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "golden", "torch"))
    args = ap.parse_args()
    out = os.path.normpath(args.out)
    os.makedirs(out, exist_ok=True)

    sim, keep = build_two_devices()
    snap = sim.snapshot(keep)
    exp = {"max_entries": keep, "policies": sim.expected(keep), "stacks": sim.stacks(keep),
           "first_time_us": sim.first_times(keep)}
    write_pickle(os.path.join(out, "two_devices.pickle"), snap, 4)
    write_pickle(os.path.join(out, "two_devices.p2.pickle"), snap, 2)
    write_pickle(os.path.join(out, "two_devices.p5.pickle"), snap, 5)
    write_json(os.path.join(out, "two_devices.expected.json"), exp)
    valid_p2 = pickle.dumps(snap, protocol=2)
    valid_p4 = pickle.dumps(snap, protocol=4)

    sim, keep = build_random()
    snap = sim.snapshot(keep)
    write_pickle(os.path.join(out, "random.pickle"), snap, 4)
    write_json(os.path.join(out, "random.expected.json"),
               {"max_entries": keep, "full_history_entries": len(sim.dev[0].entries), "policies": sim.expected(keep),
                "stacks": sim.stacks(keep)})

    sim = build_segments_only()
    snap = sim.snapshot(0)
    del snap["device_traces"]  # no history recorded: every live block comes from the segments
    write_pickle(os.path.join(out, "segments_only.pickle"), snap, 4)
    write_json(os.path.join(out, "segments_only.expected.json"), {"policies": sim.expected(0)})

    sim, keep = build_peak_before_history()
    write_pickle(os.path.join(out, "peak_before_history.pickle"), sim.snapshot(keep), 4)
    write_json(os.path.join(out, "peak_before_history.expected.json"), {"policies": sim.expected(keep)})

    write_pickle(os.path.join(out, "empty.pickle"), {"segments": [], "device_traces": [[]], "allocator_settings": {}}, 4)
    # Timestamps that go backwards or are missing: the importer keeps the entries' order.
    e = lambda action, addr, size, t=None: dict(action=action, addr=addr, size=size, stream=0,  # noqa: E731
                                                **({} if t is None else {"time_us": t}))
    write_pickle(os.path.join(out, "unordered_time.pickle"),
                 {"device_traces": [[e("alloc", 4096, 10, 1000), e("alloc", 8192, 20, 900), e("free_requested", 4096, 10),
                                     e("free_completed", 4096, 10), e("free_requested", 8192, 20, 2000),
                                     e("free_completed", 8192, 20, 1999)]]}, 4)
    # Odd but well-formed: segments only on device 0 while device 1's entries leave 777 B live (a
    # mismatch: the list covers every device), an oom without device_free, a block state torch
    # does not have.
    write_pickle(os.path.join(out, "odd_states.pickle"), {
        "segments": [{"device": 0, "address": 0x10000, "total_size": 2 * MIB, "stream": 0, "blocks": [
            {"address": 0x10000, "size": 1024, "requested_size": 1000, "state": "active_allocated", "frames": []},
            {"address": 0x10400, "size": 512, "requested_size": 100, "state": "zombie", "frames": []},
            {"address": 0x10600, "size": 2 * MIB - 0x600, "requested_size": 0, "state": "inactive", "frames": []}]}],
        "device_traces": [[e("alloc", 0x10000, 1000, 5), e("oom", 0, 3 * MIB, 6)],
                          [e("alloc", 0x90000, 777, 7)]]}, 4)
    hostile(os.path.join(out, "hostile"), valid_p2, valid_p4)
    print(f"wrote fixtures under {out}")


if __name__ == "__main__":
    main()
