#!/usr/bin/env bash
# CI: formatting, lint, types and file length, with pinned tools in a throwaway venv (a new
# formatter release must not fail CI on unchanged code):
#   - ruff check . and ruff format --check .   (settings: pyproject.toml [tool.ruff])
#   - clang-format --dry-run --Werror over the C sources   (settings: .clang-format)
#   - mypy over pyipu/   (settings: pyproject.toml [tool.mypy]; pyipu/_core.pyi types the extension)
#   - tools/check_file_length.py   (800 lines; exceptions in tools/file_length_allow.txt)
# Every check runs, then the failed ones are listed. Run from anywhere; exits non-zero on any
# failure. `--fix` rewrites instead: ruff check --fix, ruff format and clang-format -i.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

RUFF_VERSION=0.17.6
MYPY_VERSION=2.4.1
CLANG_FORMAT_VERSION=14.0.6  # Debian 12's clang-format; the PyPI wheel of the same release

venv="$(mktemp -d)"
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
# mypy reads the types of the package's dependencies (pyproject.toml [project] dependencies)
mapfile -t deps < <(python3 -c 'import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')
"$venv/bin/pip" install -q "ruff==$RUFF_VERSION" "mypy==$MYPY_VERSION" "${deps[@]}"

clang_format="$venv/bin/clang-format"
if ! "$venv/bin/pip" install -q "clang-format==$CLANG_FORMAT_VERSION"; then
  # no wheel for this platform: the distribution's package, if it is the same release
  if ! command -v clang-format >/dev/null; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang-format
  fi
  clang_format="$(command -v clang-format)"
fi
if ! "$clang_format" --version | grep -q "version $CLANG_FORMAT_VERSION"; then
  echo "lint: need clang-format $CLANG_FORMAT_VERSION, found: $("$clang_format" --version)" >&2
  exit 1
fi

mapfile -t c_files < <(git ls-files '*.c' '*.h')
if ! ((${#c_files[@]})); then
  echo "lint: git lists no C sources (run it in a git checkout)" >&2
  exit 1
fi

if [ "${1:-}" = --fix ]; then
  "$venv/bin/ruff" check --fix --exit-zero .  # what it cannot fix, the check run reports
  "$venv/bin/ruff" format .
  "$clang_format" -i "${c_files[@]}"
  exit 0
fi

failed=()
run() {  # run NAME COMMAND...: the command's output as is, its failure remembered
  echo "--- $1"
  "${@:2}" || failed+=("$1")
}
run "ruff check" "$venv/bin/ruff" check .
run "ruff format" "$venv/bin/ruff" format --check .
run "clang-format" "$clang_format" --dry-run --Werror "${c_files[@]}"
run "mypy" "$venv/bin/mypy"
run "file length" "$venv/bin/python" tools/check_file_length.py

if ((${#failed[@]})); then
  printf 'lint: failed: %s\n' "${failed[@]}" >&2
  echo "lint: \`bash .ci/lint.sh --fix\` applies the formatters and ruff's fixes" >&2
  exit 1
fi
echo "lint: all checks passed"
