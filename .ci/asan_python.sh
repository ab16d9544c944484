#!/usr/bin/env bash
# The Python test suite's C paths under ASan + UBSan (docs/reliability.md): the extension is
# built with -Db_sanitize=address,undefined into a scratch virtualenv, then the runtime, Model
# Runtime, malformed-input, kernel, pre-packing, sharding and tracepoint tests run with the
# sanitizer runtime preloaded into Python. Any sanitizer report aborts the run (non-zero exit).
# LeakSanitizer is off here: CPython itself does not free everything at exit (the C unit tests
# run with LSan on, tests/test_c_sanitizers.py). Run from anywhere; about 4 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install -q --no-deps . -Cbuild-dir="$work/build" \
  -Csetup-args=-Db_sanitize=address,undefined -Csetup-args=-Db_lundef=false
LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)" \
  ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=1 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  "$work/venv/bin/python" -P -m pytest -q -p no:cacheprovider \
  tests/test_runtime.py tests/test_runtime_semantics.py tests/test_model_runtime.py \
  tests/test_runtime_malformed_inputs.py tests/test_malformed_containers.py \
  tests/test_fast_path.py tests/test_compiler_conv.py tests/test_matmul_paths.py \
  tests/test_prepack.py tests/test_affine_fusion.py tests/test_expand_fusion.py \
  tests/test_sharding.py tests/test_ops_gather.py tests/test_ops_reduce.py tests/test_ops_data.py \
  tests/test_tracepoints.py tests/test_runtime_failure_races.py tests/test_runtime_overlap.py \
  tests/test_runtime_lifecycle.py
