#!/usr/bin/env python3
"""Checks that CTest runs every Catch2 test case exactly once, and nothing else.

catch_discover_tests registers one CTest entry per test case. A case whose name CMake splits
(a ';' in it), or an entry that names no case, would be a test that never runs but is counted.
For every Catch2 test binary of the build this compares:
  - the test cases the binary lists (`BINARY "~[.]" --list-test-names-only`), and
  - the CTest entries that run that binary (`ctest --show-only=json-v1`), by the name each passes.
They must be the same set, each entry must pass `--warn NoTests` (so an entry that matches no
case fails instead of passing), and every binary must have at least one case.

usage: check_test_registration.py BUILD_DIR
Exit 0 when all agree; 1 with one line per disagreement otherwise.
"""
import collections
import json
import os
import subprocess
import sys


def unescape(spec):
    # catch_discover_tests escapes ',', '[' and ']' with a backslash in the test spec.
    out, i = [], 0
    while i < len(spec):
        if spec[i] == "\\" and i + 1 < len(spec) and spec[i + 1] in ",[]\\":
            out.append(spec[i + 1])
            i += 2
        else:
            out.append(spec[i])
            i += 1
    return "".join(out)


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    build = sys.argv[1]
    shown = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"], check=True,
                           capture_output=True, text=True).stdout
    entries = collections.defaultdict(list)  # binary -> [(ctest name, case name, args)]
    for t in json.loads(shown).get("tests", []):
        cmd = t.get("command") or []
        # Catch2 entries are "<binary>:<case>" or "<binary>:gpu:<case>" and run the binary itself.
        if len(cmd) < 2 or ":" not in t["name"]:
            continue
        prefix = t["name"].split(":", 1)[0]
        if os.path.basename(cmd[0]) != prefix:
            continue
        entries[cmd[0]].append((t["name"], unescape(cmd[1]), cmd[2:]))
    problems = []
    total_cases = 0
    for binary, ents in sorted(entries.items()):
        listed = subprocess.run([binary, "~[.]", "--list-test-names-only"], capture_output=True, text=True)
        cases = [l for l in listed.stdout.splitlines() if l.strip()]
        total_cases += len(cases)
        name = os.path.basename(binary)
        if not cases:
            problems.append(f"{name}: lists no test case")
        seen = collections.Counter(e[1] for e in ents)
        for case in cases:
            if seen[case] != 1:
                problems.append(f"{name}: case '{case}' is run by {seen[case]} CTest entries (expected 1)")
        for ctest_name, case, args in ents:
            if case not in cases:
                problems.append(f"{name}: CTest entry '{ctest_name}' names no test case ('{case}')")
            if "NoTests" not in args:
                problems.append(f"{name}: CTest entry '{ctest_name}' lacks --warn NoTests")
    if not entries:
        problems.append(f"no Catch2 test entries in {build} (is the build configured with its tests?)")
    for p in problems:
        print("test registration: " + p)
    n_entries = sum(len(e) for e in entries.values())
    print(f"test registration: {len(entries)} Catch2 binaries, {total_cases} test cases, {n_entries} CTest entries"
          + (": every case runs exactly once" if not problems else f": {len(problems)} problem(s)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
