#!/usr/bin/env python3
"""Writes the hand-made seeds of the fuzz corpora (tests/fuzz/corpus/<harness>/seed-*): the
hostile inputs of issue 14 and the valid files they were derived from. The other corpus files are
copies of repository fixtures (see corpus/README.md) or inputs libFuzzer found and kept. Rerun after
changing a seed; the files are committed.

    python3 tests/fuzz/make_seeds.py
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def frame(kind: bytes, payload: bytes, count: int, length=None, crc=None) -> bytes:
    n = len(payload) if length is None else length
    c = crc32c(payload) if crc is None else crc
    return struct.pack("<4sIII", kind, n, c, count) + payload


def header(version=2) -> bytes:
    return b"MOEPTRC\0" + struct.pack("<IIIIQ", version, 32, 64, 0, 0)


def strings(items, first_id=1) -> bytes:
    p = b""
    for i, s in enumerate(items):
        b = s if isinstance(s, bytes) else s.encode()
        p += struct.pack("<II", first_id + i, len(b)) + b
    return frame(b"STRG", p, len(items))


def record(ts, addr, nbytes, kind, name=0, scope=0, shape=0, device=0, category=3, seq=0, stack=0, flags=0):
    return struct.pack("<QQQQIIIIIIHBBBBH", ts, addr, nbytes, seq, name, scope, shape, 0, stack, 0, device, kind,
                       category, 0, 0, flags)


_records_since_end = [0]


def records(recs) -> bytes:
    _records_since_end[0] += len(recs)
    return frame(b"RECS", b"".join(recs), len(recs))


def meta(**kw) -> bytes:
    m = {"name": "seed", "model": "tiny", "mode": "baseline", "backend": "cpu", "tokens": 100, "layers": 4,
         "tp_rank": 0, "tp_size": 1, "extra": {}}
    m.update(kw)
    return frame(b"META", json.dumps(m).encode(), 0)


def stat(dropped=0, n=0) -> bytes:
    return frame(b"STAT", json.dumps({"dropped_records": dropped, "records": n}).encode(), 0)


def end() -> bytes:
    """The END frame counts the records written since the last one (the reader checks it)."""
    n, _records_since_end[0] = _records_since_end[0], 0
    return frame(b"END ", b"", n & 0xFFFFFFFF)
ALLOC, FREE, USE = 1, 2, 3


def write(harness, name, data):
    d = os.path.join(HERE, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def traces():
    body = [ALLOC, FREE]
    ok = (header() + meta() + strings(["act", "layer.0/mlp", "16x16"]) +
          records([record(10, 0x1000, 512, ALLOC, 1, 2, 3, seq=1), record(20, 0x2000, 256, ALLOC, 1, 2, 3, seq=2),
                   record(30, 0x1000, 0, FREE, 1, 2, 3, seq=3), record(40, 0x2000, 0, FREE, seq=4)]) + stat(0, 4) + end())
    write("trace", "valid.mtrace", ok)
    write("trace", "no-end.mtrace", ok[:-16])                       # killed: no END frame
    write("trace", "joined.mtrace", ok + ok)                        # two files joined: bytes after END
    write("trace", "cut-mid-frame.mtrace", ok[:len(ok) - 40])      # cut inside STAT
    write("trace", "empty-records.mtrace", header() + meta() + records([]) + end())
    big = 1 << 63
    write("trace", "alloc-2p63.mtrace", header() + meta() + strings(["x"]) +
          records([record(1, 0x1000, big, ALLOC, 1, seq=1)]) + end())
    write("trace", "two-allocs-2p62.mtrace", header() + meta() + strings(["x"]) +
          records([record(1, 0x1000, (1 << 62) + 1, ALLOC, 1, seq=1), record(2, 0x2000, 1 << 62, ALLOC, 1, seq=2)]) + end())
    write("trace", "max-bytes.mtrace", header() + meta() + strings(["x"]) +
          records([record(1, 0x1000, (1 << 63) - 1, ALLOC, 1, seq=1), record(2, 0x1000, 0, FREE, seq=2)]) + end())
    write("trace", "out-of-order.mtrace", header() + meta() + records(
        [record(1 << 63, 0x10, 8, ALLOC, seq=1), record(5, 0x20, 8, ALLOC, seq=2), record(0, 0x10, 0, FREE, seq=3),
         record(2**64 - 1, 0x30, 8, ALLOC, seq=4)]) + end())
    rec = record(1, 0x1000, 64, ALLOC, seq=1)
    bad_len = header() + meta() + struct.pack("<4sIII", b"RECS", 0x3FFFFFC0, crc32c(rec), 1) + rec
    write("trace", "corrupt-length.mtrace", bad_len)
    write("trace", "not-utf8-names.mtrace", header() + meta(name="seed") + strings([b"\xff", b"\xfe", "\ufffd", b"a\xc0b"]) +
          records([record(1, 0x10, 8, ALLOC, 1, 2, seq=1), record(2, 0x20, 8, ALLOC, 3, 4, seq=2)]) + end())
    write("trace", "repeated-string.mtrace", header() + meta() + strings(["a", "a"]) + end())
    write("trace", "empty-string.mtrace", header() + meta() + strings([""]) + end())
    write("trace", "failed-run.mtrace", header() + meta(extra={"error": "layer 1 moe: out of memory"}) + strings(["x"]) +
          records([record(1, 0x1000, 100, ALLOC, 1, seq=1)]) + end())
    deep = "/".join("c%d" % i for i in range(3000))
    write("trace", "deep-scope.mtrace", header() + meta() + strings(["t", deep]) +
          records([record(1, 0x10, 8, ALLOC, 1, 2, seq=1), record(2, 0x10, 0, FREE, seq=2)]) + end())
    write("trace", "many-devices.mtrace", header() + meta() + records(
        [record(i, 0x10, 8 + i, ALLOC, device=i * 257 % 65536, seq=i) for i in range(1, 200)]) + end())
    write("trace", "unnamed.mtrace", header() + meta(name="") + records([record(1, 0x10, 8, ALLOC, seq=1)]) + end())
    write("trace", "dropped.mtrace", header() + meta() + records([record(1, 0x10, 8, ALLOC, seq=1)]) + stat(7, 1) + end())
    write("trace", "bad-meta.mtrace", header() + frame(b"META", b'{"tokens": 1e400, "tp_size": 0}', 0) + end())


def configs():
    tiny = json.load(open(os.path.join(ROOT, "examples", "configs", "tiny.json")))
    def cfg(name, **kw):
        c = dict(tiny)
        c.update(kw)
        write("config", name + ".json", json.dumps(c))
    cfg("tiny")
    cfg("vocab-2p62", vocab_size=2**62)
    cfg("shared-2p62", n_shared_experts=2**62)
    cfg("vocab-1e300", vocab_size=1e300)
    cfg("eps-negative", rms_norm_eps=-1)
    cfg("theta-zero", rope_theta=0)
    cfg("experts-2p40", n_routed_experts=2**40, num_experts_per_tok=8)
    cfg("hidden-fraction", hidden_size=256.5)
    cfg("uint64-max", num_hidden_layers=2**64 - 1)
    cfg("yarn", rope_scaling={"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                               "beta_fast": 32, "beta_slow": 1, "mscale": 1, "mscale_all_dim": 1})
    write("config", "kimi-nested.json", json.dumps({"text_config": tiny}))


def reports_():
    run = {"name": "baseline", "mode": "baseline", "model": "tiny", "tokens": 100, "layers": 4, "tp_size": 1, "tp_rank": 0,
           "backend": "cpu", "device_name": "CPU reference", "peak_activation_bytes": 2296, "peak_total_bytes": 9000,
           "churn_bytes": 15753, "allocations": 40, "peak_by_category": {}, "live_at_peak": {}, "scopes": [],
           "anomalies": {}, "dropped_records": 0, "truncated": False, "truncation_note": "", "extra": {}}
    def rep(name, runs, text=None):
        write("report", name + ".json", text if text is not None else json.dumps(
            {"schema_version": 1, "generator": "moeprof test", "comparison": None, "runs": runs}))
    rep("valid", [run, dict(run, name="reuse", mode="reuse", peak_activation_bytes=1957)])
    rep("single", [run])
    rep("failed-run", [dict(run, extra={"error": "out of memory"})])
    rep("truncated", [dict(run, truncated=True, truncation_note="no end frame")])
    rep("max-bytes", [dict(run, peak_activation_bytes=2**63 - 1)])
    rep("over-limit", [dict(run, churn_bytes=2**64 - 1)])
    t = json.dumps({"schema_version": 1, "generator": "moeprof test", "comparison": None, "runs": [run]})
    rep("number-1e400", None, t.replace('"peak_activation_bytes": 2296', '"peak_activation_bytes": 1e400'))
    rep("deep-nesting", None, "[" * 20000)
    rep("bad-utf8", None, t.replace('"baseline"', '"\xff"', 1).encode("latin-1").decode("latin-1"))


def rules():
    write("rules", "all-kinds.rules", "\n".join([
        "# every kind", "free-at-last-use category=activation scope=layer.*/mlp",
        "hand-off name=act from name=gate_up size=500..", "free name=gate_up after op=silu*",
        "free name=act after scope=layer.0", "drop name=embed.weight device=1 stack=forward", ""]))
    write("rules", "bad-size.rules", "drop size=18446744073709551616\n")
    write("rules", "empty-glob.rules", "free-at-last-use name=\n")
    write("category_rules", "all.categories", "weights name=*.weight\ncommunication stack=nccl\nworkspace scope=*/mlp size=..4096\n")
    write("category_rules", "unknown.categories", "persistent name=x\n")


def csvs():
    write("arena_csv", "header.csv", "id,lower,upper,size\n0,0,10,100\n1,5,15,200\n2,12,20,50\n")
    write("arena_csv", "aligned.csv", "id,lower,upper,size,alignment\na,0,3,33,64\nb,1,4,1,4096\n")
    write("arena_csv", "u64-max.csv", "0,0,1,18446744073709551615\n1,0,1,18446744073709551615\n")
    write("arena_csv", "align-wrap.csv", "id,lower,upper,size,alignment\n0,0,2,9223372036854775807,9223372036854775807\n")
    write("arena_csv", "quoted-crlf.csv", "\"id\",\"lower\",\"upper\",\"size\",gaps\r\n\"x\",1,2,3,\r\n")


if __name__ == "__main__":
    traces()
    configs()
    reports_()
    rules()
    csvs()
