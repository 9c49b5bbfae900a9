#!/usr/bin/env python3
"""docs/cli.md holds the --help text of every moeprof subcommand verbatim, each between
<!-- help: moeprof SUB --> and <!-- /help --> markers. This script checks that they match the
binary (CTest cli_docs_match_help), or with --write updates them.

  scripts/cli_docs.py BUILD/src/cli/moeprof docs/cli.md [--write]

A subcommand the binary lacks (trace, in a build without CUDA) is left as it is and reported."""
import re
import subprocess
import sys


def help_text(binary, sub):
    args = [binary] + ([sub] if sub else []) + ["--help"]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return r.stdout.rstrip("\n")


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    binary, doc_path, write = sys.argv[1], sys.argv[2], "--write" in sys.argv[3:]
    doc = open(doc_path, encoding="utf-8").read()
    pattern = re.compile(r"<!-- help: moeprof( [a-z-]+)? -->\n```text\n(.*?)\n```\n<!-- /help -->", re.S)
    subs_in_binary = re.findall(r"^  ([a-z-]+) ", help_text(binary, "").split("Subcommands:")[1], re.M)
    documented = set()
    problems = []

    def replace(m):
        sub = (m.group(1) or "").strip()
        documented.add(sub)
        if sub and sub not in subs_in_binary:
            print(f"cli_docs: moeprof {sub}: not in this build, left as it is")
            return m.group(0)
        text = help_text(binary, sub)
        documented_text = m.group(2)
        missing = [x for x in ("trace",) if x not in subs_in_binary]
        if not sub and missing:
            # A build without CUDA lists no trace subcommand: compare the rest, keep the page's line.
            documented_text = "\n".join(l for l in documented_text.split("\n") if not any(l.startswith("  " + x + " ") for x in missing))
            if text == documented_text:
                return m.group(0)
        if text != documented_text:
            problems.append(sub or "(top level)")
        return f"<!-- help: moeprof{' ' + sub if sub else ''} -->\n```text\n{text}\n```\n<!-- /help -->"

    new = pattern.sub(replace, doc)
    for sub in [""] + subs_in_binary:
        if sub not in documented:
            problems.append(f"{sub or '(top level)'} has no help block")
    if write:
        open(doc_path, "w", encoding="utf-8").write(new)
        print(f"cli_docs: {doc_path} updated")
        return 0
    if problems:
        print("cli_docs: docs/cli.md does not match --help for: " + ", ".join(problems))
        print("cli_docs: run scripts/cli_docs.py BUILD/src/cli/moeprof docs/cli.md --write, then review the diff")
        return 1
    print(f"cli_docs: docs/cli.md matches --help ({len(documented)} blocks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
