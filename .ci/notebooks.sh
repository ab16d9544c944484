#!/usr/bin/env bash
# CI for the notebooks (docs/notebooks.md): Debian's chromium for the real-browser test, then
#   - tests/test_notebooks.py: every notebook in notebooks/ run top to bottom by nbclient;
#   - tests/test_notebooks_browser.py: JupyterLab on 127.0.0.1 driven by headless chromium through
#     Playwright (the pip package; no browser download): every notebook runs from the page, its
#     pictures pass pixel checks, Run All + interrupt, the Dark theme's contrast, screenshots in
#     test-artifacts/; tests/test_notebook_pictures.py: the pixel checks reject broken pictures;
#   - the magics' own tests (kernel-less, and through a real kernel) and the runtime's
#     tracepoints they draw.
# Run from anywhere; exits non-zero on any failure. `--deps-only` installs chromium and stops:
# the main `pytest` run (.ci/run) already contains these tests.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x /usr/bin/chromium ]; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium
fi

[ "${1:-}" = --deps-only ] && exit 0

python3 -m pip install ".[test]"
export CI="${CI:-true}"  # a missing tool must fail the tests, not skip them
pytest -rfE tests/test_notebooks.py tests/test_notebooks_browser.py tests/test_notebook_pictures.py \
  tests/test_magics.py \
  tests/test_magics_verbs.py tests/test_magics_kernel.py tests/test_tracepoints.py
