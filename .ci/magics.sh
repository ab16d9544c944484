#!/usr/bin/env bash
# CI for the notebook magics (%load_ext pyipu.magics) and the runtime's tracepoints, runnable on
# its own: installs pyipu with its test extra (IPython, ipykernel, ipywidgets, matplotlib), then
# runs their tests with CI=true, so a missing library fails instead of skipping. `.ci/run`'s
# whole-suite `pytest` runs the same tests; this script is for checking this part alone.
set -euo pipefail
cd "$(dirname "$0")/.."
export CI=true PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
python3 -m pip install ".[test]"
# -P: the source tree stays off sys.path, so the installed, compiled package is tested
python3 -P -m pytest -rfE tests/test_magics.py tests/test_magics_verbs.py tests/test_magics_kernel.py \
    tests/test_tracepoints.py
