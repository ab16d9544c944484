#!/usr/bin/env bash
# CI for the C embedding API (docs/c-api.md): the tools it needs, then its tests.
#   - pkg-config (and a C compiler) for tests/test_c_install.py: meson install into a temporary
#     prefix, every header compiled alone, exports == the IPU_API declarations, both examples
#     built with `pkg-config --cflags --libs ipu` and run against the installed library;
#   - the OOM-injection and example meson tests (test_oom, test_oom_popef, example_callbacks)
#     in a plain build and under ASan+UBSan+LSan.
# Run from anywhere, after `pip install ".[test]"`; exits non-zero on any failure.
# `--deps-only` installs the tools and stops: the main `pytest` run already contains these tests
# (test_c_install.py; test_oom in test_c_core.py and, under ASan and TSan, test_c_sanitizers.py).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v cc >/dev/null || need+=(gcc)
if ((${#need[@]})); then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi

[ "${1:-}" = --deps-only ] && exit 0

export CI="${CI:-true}"  # a missing tool must fail the tests, not skip them
pytest -rfE -q tests/test_c_install.py

build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT
meson setup "$build/asan" -Dtests=true -Db_sanitize=address,undefined -Dbuildtype=debug \
  -Db_lundef=false "-Dc_args=-fno-sanitize-recover=all -fno-omit-frame-pointer" >/dev/null
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:halt_on_error=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  meson test -C "$build/asan" --print-errorlogs test_oom test_oom_popef example_callbacks example_embed
if grep -qE "ERROR: (Address|Leak)Sanitizer|runtime error: |SUMMARY: " "$build/asan/meson-logs/testlog.txt"; then
  echo "sanitizer report in $build/asan/meson-logs/testlog.txt" >&2
  exit 1
fi
