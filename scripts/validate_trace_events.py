#!/usr/bin/env python3
"""Validates Chrome JSON trace files against the Trace Event Format (the format Perfetto UI and
chrome://tracing read), plus moeprof's own naming rules.

  validate_trace_events.py FILE.json...
  validate_trace_events.py --moeprof BIN --out DIR TRACE.mtrace...   # export each trace, and all of
                                                                     # them in one report, then validate

Format rules checked: a JSON object with a traceEvents array (displayTimeUnit "ms" or "ns");
every event an object with a known phase, a string name, integer pid and tid; a non-negative ts
on every event but metadata; complete events (X) with a non-negative dur and, per thread, nested
without partial overlap; counters (C) with a non-empty args object of numbers; instants (i/I) with
scope g, p or t; async events (b/n/e) with cat and id (a plain id is global: never in two processes), each e closing an open b of the same pid,
cat and id at or after its start, none left open; duration events (B/E) balanced per thread;
metadata (M) of a known kind with its argument.
moeprof's rules: a counter's name does not repeat its argument's name (Perfetto names the track
"<name> <arg>"), so no "... bytes bytes" tracks; thread and process names are not empty.
Exit 0 when every file passes, 1 otherwise (each problem on one line)."""
import json
import os
import subprocess
import sys

PHASES = set("BEXiICbneMsftPONDR()c") | {"(", ")"}
METADATA = {"process_name": "name", "process_labels": "labels", "process_sort_index": "sort_index",
            "thread_name": "name", "thread_sort_index": "sort_index"}


def validate(doc, where):
    problems = []

    def bad(i, e, msg):
        problems.append(f"{where}: traceEvents[{i}] ({e.get('ph')!r} {e.get('name')!r}): {msg}")

    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return [f"{where}: not a JSON object with a traceEvents array"]
    if "displayTimeUnit" in doc and doc["displayTimeUnit"] not in ("ms", "ns"):
        problems.append(f"{where}: displayTimeUnit {doc['displayTimeUnit']!r} is neither ms nor ns")
    open_async, stacks, complete, id_owner = {}, {}, {}, {}
    for i, e in enumerate(doc["traceEvents"]):
        if not isinstance(e, dict):
            problems.append(f"{where}: traceEvents[{i}] is not an object")
            continue
        ph = e.get("ph")
        if ph not in PHASES:
            bad(i, e, "unknown phase")
            continue
        if not isinstance(e.get("name"), str) and ph != "E":
            bad(i, e, "no string name")
        for k in ("pid", "tid"):
            if not isinstance(e.get(k), int) or isinstance(e.get(k), bool):
                bad(i, e, f"{k} is not an integer")
        if ph != "M":
            ts = e.get("ts")
            if not isinstance(ts, (int, float)) or isinstance(ts, bool) or ts < 0:
                bad(i, e, "ts is not a non-negative number")
                continue
        if ph == "X":
            dur = e.get("dur")
            if not isinstance(dur, (int, float)) or dur < 0:
                bad(i, e, "complete event without a non-negative dur")
            else:
                complete.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + dur, i))
        elif ph == "C":
            args = e.get("args")
            if not isinstance(args, dict) or not args:
                bad(i, e, "counter without args")
            else:
                for k, v in args.items():
                    if not isinstance(v, (int, float)) or isinstance(v, bool):
                        bad(i, e, f"counter arg {k!r} is not a number")
                    if isinstance(e.get("name"), str) and e["name"].endswith(" " + k):
                        bad(i, e, f"counter name repeats its arg: Perfetto would show {e['name'] + ' ' + k!r}")
        elif ph in ("i", "I"):
            if "s" in e and e["s"] not in ("g", "p", "t"):
                bad(i, e, "instant scope is not g, p or t")
        elif ph in ("b", "n", "e"):
            if not isinstance(e.get("cat"), str) or "id" not in e:
                bad(i, e, "async event without cat and id")
                continue
            key = (e["pid"], e["cat"], str(e["id"]))
            # A plain id is global (only id2.local is process-scoped): one id in two processes
            # would join their async slices on one track.
            owner = id_owner.setdefault((e["cat"], str(e["id"])), e["pid"])
            if owner != e["pid"]:
                bad(i, e, f"async id {e['id']!r} used by processes {owner} and {e['pid']}: a plain id is global")
            if ph == "b":
                open_async.setdefault(key, []).append((e["ts"], i))
            elif ph == "e":
                if not open_async.get(key):
                    bad(i, e, "async end without an open begin")
                else:
                    t0, _ = open_async[key].pop()
                    if e["ts"] < t0:
                        bad(i, e, "async end before its begin")
        elif ph in ("B", "E"):
            st = stacks.setdefault((e["pid"], e["tid"]), [])
            if ph == "B":
                st.append(e["ts"])
            elif not st:
                bad(i, e, "duration end without a begin")
            elif e["ts"] < st.pop():
                bad(i, e, "duration end before its begin")
        elif ph == "M":
            arg = METADATA.get(e.get("name"))
            if arg is None:
                bad(i, e, "unknown metadata event")
            elif not isinstance(e.get("args"), dict) or arg not in e["args"]:
                bad(i, e, f"metadata without args.{arg}")
            elif arg == "name" and not str(e["args"]["name"]).strip():
                bad(i, e, "empty name")
    for key, left in open_async.items():
        for _, i in left:
            problems.append(f"{where}: traceEvents[{i}]: async begin {key} never ends")
    for key, st in stacks.items():
        if st:
            problems.append(f"{where}: thread {key}: {len(st)} duration begin(s) never end")
    eps = 1e-6
    for key, spans in complete.items():
        spans.sort(key=lambda s: (s[0], -(s[1] - s[0])))
        stack = []
        for b, en, i in spans:
            while stack and stack[-1][1] <= b + eps:
                stack.pop()
            if stack and en > stack[-1][1] + eps:
                problems.append(f"{where}: traceEvents[{i}]: complete event overlaps traceEvents[{stack[-1][2]}] on thread {key} without nesting")
            stack.append((b, en, i))
    return problems


def main(argv):
    files = []
    if argv[:1] == ["--moeprof"]:
        binary, out, traces = argv[1], argv[3], argv[4:]
        os.makedirs(out, exist_ok=True)
        for t in traces:
            f = os.path.join(out, f"{len(files) + 1}-{os.path.basename(t)}.perfetto.json")
            subprocess.run([binary, "export", t, "--out-perfetto", f, "--max-slices", "500"], check=True, capture_output=True)
            files.append(f)
        f = os.path.join(out, "report.perfetto.json")
        subprocess.run([binary, "report", *traces, "--out-perfetto", f], check=True, capture_output=True)
        files.append(f)
    else:
        files = argv
    if not files:
        print(__doc__)
        return 2
    problems = []
    events = 0
    for f in files:
        with open(f, encoding="utf-8") as fh:
            doc = json.load(fh)
        events += len(doc.get("traceEvents", [])) if isinstance(doc, dict) else 0
        problems += validate(doc, f)
    for p in problems[:50]:
        print(p)
    if problems:
        print(f"validate_trace_events: {len(problems)} problem(s) in {len(files)} file(s)")
        return 1
    print(f"validate_trace_events: {len(files)} file(s), {events} events: valid Trace Event Format")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
