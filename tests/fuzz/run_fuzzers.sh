#!/usr/bin/env bash
# Run the libFuzzer targets built by build_fuzzers.sh, each from a scratch copy of its seed
# corpus and regression files, and fail on any crash, leak, timeout or out-of-memory.
#   tests/fuzz/run_fuzzers.sh BINDIR SECONDS [RUNS]
# Each target stops after SECONDS or RUNS executions, whichever comes first. FUZZ_JOBS targets
# run at a time (default: the number of CPUs). FUZZ_SEED fixes libFuzzer's seed (with RUNS: the
# same inputs every time); unset, each run picks its own. A crashing input is left in
# BINDIR/artifacts/<target>/: add it to tests/fuzz/regressions/<target>/ with the fix.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:?usage: run_fuzzers.sh BINDIR SECONDS [RUNS]}
secs=${2:?usage: run_fuzzers.sh BINDIR SECONDS [RUNS]}
runs=${3:--1}
seed=${FUZZ_SEED:-0}
jobs=${FUZZ_JOBS:-$(nproc)}
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

run_one() {
  local t=$1 work="$bin/work/$1" art="$bin/artifacts/$1"
  rm -rf "$work" && mkdir -p "$work" "$art"
  local seeds=$t
  [ "$t" = semantic ] && seeds=container # it mutates whole containers
  cp "$root/tests/fuzz/corpus/$seeds"/* "$work/"
  find "$root/tests/fuzz/regressions/$t" -type f ! -name '.*' -exec cp {} "$work/" \;
  local rc=0
  "$bin/fuzz_$t" "$work" -seed="$seed" -max_total_time="$secs" -runs="$runs" -timeout=10 \
    -rss_limit_mb=4096 -malloc_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$art/" >"$bin/fuzz_$t.log" 2>&1 || rc=$?
  local execs secs_used
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$bin/fuzz_$t.log")
  secs_used=$(sed -n 's/.*Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$bin/fuzz_$t.log")
  if [ "$rc" -ne 0 ] || [ -n "$(ls -A "$art")" ]; then
    echo "FAIL fuzz_$t (rc=$rc): $(grep -m1 -E 'ERROR|runtime error|SUMMARY' "$bin/fuzz_$t.log")"
    ls "$art"
    return 1
  fi
  echo "ok   fuzz_$t: ${execs:-?} executions in ${secs_used:-?} s, 0 crashes, 0 leaks"
}
export -f run_one
export bin secs runs seed root
printf '%s\n' container metadata bytecode semantic |
  xargs -P "$jobs" -I{} bash -c 'run_one {}'
