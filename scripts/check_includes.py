#!/usr/bin/env python3
"""Checks moeprof's include edges against the rules in docs/architecture.md.

Every quoted #include in the source folders must name a folder that the including folder may
depend on, as listed between the include-rules markers of docs/architecture.md; no include may
climb out of its folder with "../". Angle-bracket includes (system and third-party headers) are
not checked. Exit 0 when clean, 1 with one line per violation, 2 when the rules cannot be read.
usage: scripts/check_includes.py [REPO_ROOT]
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_EXT = ('.h', '.hpp', '.cpp', '.cc', '.cu', '.cuh', '.in')


def read_rules(root):
    path = os.path.join(root, 'docs', 'architecture.md')
    try:
        text = open(path, encoding='utf-8').read()
    except OSError as e:
        sys.exit(f'check_includes: cannot read {path}: {e.strerror}')
    m = re.search(r'<!-- include-rules:begin -->(.*?)<!-- include-rules:end -->', text, re.S)
    if not m:
        print(f'check_includes: {path}: no include-rules block', file=sys.stderr)
        sys.exit(2)
    modules = []  # (name, folder, [allowed include prefixes])
    for line in m.group(1).splitlines():
        line = line.strip()
        if not line or line.startswith('```') or line.startswith('#'):
            continue
        mm = re.match(r'^(\S+)\s+(\S+)\s*->\s*(.*)$', line)
        if not mm:
            print(f'check_includes: {path}: unreadable rule: {line}', file=sys.stderr)
            sys.exit(2)
        deps = [d.strip() for d in mm.group(3).split(',') if d.strip()]
        modules.append((mm.group(1), mm.group(2).rstrip('/'), deps))
    return modules


def module_of(rel, modules):
    # The longest folder that contains the file.
    best = None
    for name, folder, deps in modules:
        if rel == folder or rel.startswith(folder + '/'):
            if best is None or len(folder) > len(best[1]):
                best = (name, folder, deps)
    return best


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..'))
    modules = read_rules(root)
    prefixes = {name: name for name, _, _ in modules}
    violations = []
    checked = 0
    for name, folder, deps in modules:
        top = os.path.join(root, folder)
        for dirpath, dirnames, files in os.walk(top):
            dirnames[:] = [d for d in dirnames if not d.startswith('build') and d != 'node_modules']
            for f in files:
                if not f.endswith(SOURCE_EXT):
                    continue
                full = os.path.join(dirpath, f)
                rel = os.path.relpath(full, root)
                mod = module_of(rel, modules)
                if mod is None or mod[0] != name:
                    continue  # belongs to a nested module, checked there
                text = open(full, encoding='utf-8', errors='replace').read()
                checked += 1
                for m in INCLUDE.finditer(text):
                    inc = m.group(1)
                    line = text.count('\n', 0, m.start()) + 1
                    if inc.startswith('../') or '/../' in inc:
                        violations.append(f'{rel}:{line}: relative include leaves its folder: "{inc}"')
                        continue
                    if '/' not in inc:
                        # Same-folder include ("hostdev.h"): must exist beside the file.
                        if not os.path.exists(os.path.join(dirpath, inc)):
                            violations.append(f'{rel}:{line}: "{inc}" is not in this folder; include it by its module path')
                        continue
                    allowed = [name] + deps
                    if not any(inc == p or inc.startswith(p + '/') for p in allowed):
                        violations.append(f'{rel}:{line}: {name} may not include "{inc}" (allowed: {", ".join(allowed)})')
    for v in violations:
        print(v)
    print(f'check_includes: {checked} files, {len(violations)} violation(s)', file=sys.stderr)
    return 1 if violations else 0


if __name__ == '__main__':
    sys.exit(main())
