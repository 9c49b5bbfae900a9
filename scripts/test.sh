#!/usr/bin/env bash
# Set up, build and run moeprof's tests. GPU tests (CTest label `gpu`) run only where a GPU is
# usable (nvidia-smi lists one); elsewhere they are skipped and only the CPU tests run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "moeprof test: GPU found: running all tests (CPU and gpu label)"
  ctest --preset test-all
else
  echo "moeprof test: no GPU: running the CPU tests (gpu-labelled tests skipped)"
  ctest --preset test
fi
