#!/usr/bin/env bash
# Build the four libFuzzer targets with clang, ASan + UBSan (no recovery: any report is a
# crash). Usage: tests/fuzz/build_fuzzers.sh OUTDIR  ->  OUTDIR/fuzz_{container,metadata,bytecode,semantic}
# The core is compiled once (-fsanitize=fuzzer-no-link) and linked into each target.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: build_fuzzers.sh OUTDIR}
cc=${CC:-clang}
mkdir -p "$out/obj"
flags=(-std=c11 -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined
  -fno-sanitize-recover=all -D_GNU_SOURCE -Wall -Wextra -Werror
  -I"$root/runtime_c/include" -I"$root/runtime_c/include/ipu" -I"$root/runtime_c/src")
export cc out root
export flags_str="${flags[*]}"
grep -v '^\s*#' "$root/runtime_c/sources.txt" | grep -v '^\s*$' |
  xargs -P "$(nproc)" -I{} sh -c \
    'o="$out/obj/$(echo {} | tr / _).o"; $cc $flags_str -fsanitize=fuzzer-no-link -c "$root/runtime_c/{}" -o "$o"'
for t in container metadata bytecode semantic; do
  "$cc" "${flags[@]}" -fsanitize=fuzzer "$root/tests/fuzz/fuzz_$t.c" "$out"/obj/*.o \
    -lm -lpthread -o "$out/fuzz_$t" &
done
wait
for t in container metadata bytecode semantic; do test -x "$out/fuzz_$t"; done
echo "built $out/fuzz_{container,metadata,bytecode,semantic} with $("$cc" --version | head -1)"
