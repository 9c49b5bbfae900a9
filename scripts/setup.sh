#!/usr/bin/env bash
# moeprof set-up: installs the Debian packages moeprof needs (when missing), then configures and
# builds with CMake. Idempotent; run as root on a fresh Debian 12 machine (or with sudo).
# The CUDA toolkit is taken from /usr/local/cuda when present; without it, moeprof builds its
# CPU-only parts (CPU reference backend, planner, reports, gate).
# Builds only what the main job needs (the moeprof command and, with CUDA, its injection library);
# scripts/test.sh builds the rest.
# With --browser it also sets up the browser tests (scripts/test.sh asks for it): Debian's chromium
# and, with `npm ci`, playwright-core in tests/browser/node_modules (no browser is downloaded).
# With --sanitizers it also installs clang 14 with its sanitizer and libFuzzer runtimes, for the
# `asan` preset and the fuzz harnesses (scripts/sanitize.sh asks for it; docs/robustness.md).
#   usage: scripts/setup.sh [--no-build] [--browser] [--sanitizers]
set -euo pipefail
cd "$(dirname "$0")/.."
build=1
browser=0
sanitizers=0
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    --browser) browser=1 ;;
    --sanitizers) sanitizers=1 ;;
    *) echo "moeprof setup: unknown option $a (usage: scripts/setup.sh [--no-build] [--browser] [--sanitizers])" >&2; exit 2 ;;
  esac
done

PACKAGES=(cmake ninja-build g++ libfmt-dev libcli11-dev nlohmann-json3-dev catch2 python3-jsonschema)
# python3 runs the include-rule check and the fixture generators; any python3 on PATH will do.
command -v python3 >/dev/null 2>&1 || PACKAGES+=(python3)
if [ "$browser" = 1 ]; then
  PACKAGES+=(chromium)
  command -v npm >/dev/null 2>&1 || PACKAGES+=(nodejs npm)
fi
# Debian 12's clang 14; its ASan/UBSan and libFuzzer runtimes are in libclang-rt-14-dev.
[ "$sanitizers" = 1 ] && PACKAGES+=(clang-14 libclang-rt-14-dev)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "moeprof setup: installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "moeprof setup: Debian packages present (${PACKAGES[*]})"
fi

if [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "moeprof setup: CUDA toolkit $(/usr/local/cuda/bin/nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') at /usr/local/cuda: building the CUDA backend for sm_90"
else
  echo "moeprof setup: no CUDA toolkit at /usr/local/cuda: building the CPU-only parts"
fi

if [ "$browser" = 1 ]; then
  # playwright-core only: the tests drive /usr/bin/chromium; nothing else is fetched.
  (cd tests/browser && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  echo "moeprof setup: browser tests: $(/usr/bin/chromium --version 2>/dev/null | head -1), playwright-core $(node -p 'require("./tests/browser/node_modules/playwright-core/package.json").version')"
fi

[ "$build" = 0 ] && exit 0
cmake --preset release >/dev/null
targets=(moeprof)
grep -q '^MOEPROF_ENABLE_CUDA:BOOL=ON' build/CMakeCache.txt && targets+=(moeprof_inject)
cmake --build --preset release -j "${MOEPROF_JOBS:-$(nproc)}" --target "${targets[@]}"
echo "moeprof setup: built build/src/cli/moeprof"
