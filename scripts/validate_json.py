#!/usr/bin/env python3
"""Validates JSON documents against a JSON Schema (draft 2020-12): the schema itself, then each file.
usage: scripts/validate_json.py SCHEMA FILE...   exit 0 valid, 1 invalid (one line per error), 2 bad use
"""
import json
import sys

import jsonschema


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    schema = json.load(open(sys.argv[1], encoding='utf-8'))
    jsonschema.Draft202012Validator.check_schema(schema)
    v = jsonschema.Draft202012Validator(schema)
    bad = 0
    for path in sys.argv[2:]:
        doc = json.load(open(path, encoding='utf-8'))
        for e in v.iter_errors(doc):
            bad += 1
            where = '/'.join(str(p) for p in e.absolute_path)
            print(f'{path}: /{where}: {e.message[:300]}')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
