"""Build the C core and its unit tests with sanitizers and run them (meson test).

* ASan + UBSan (+ LSan): every C unit test and the C embedding example.
* TSan: the same tests, then the 'stress' suite: >= 10^7 items through the SPSC ring at each of
  capacities 1, 2, 64 and 1024 (tests/c/test_ring.c, meson test `ring_stress`).

Pass = every test passes AND no sanitizer report appears anywhere in the meson test log.
The tests skip only when the compiler cannot build and link a program with the sanitizer (no
runtime library installed); a sanitizer that links but cannot run is a failure.
See docs/reliability.md for the manual commands and timings.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from helpers import subprocess_env, tool

ASAN_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1:halt_on_error=1",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
}
TSAN_ENV = {"TSAN_OPTIONS": "halt_on_error=1:second_deadlock_stack=1"}

# Anything a sanitizer runtime prints when it finds something.
REPORT = re.compile(
    r"ERROR: (?:AddressSanitizer|LeakSanitizer|ThreadSanitizer)"
    r"|WARNING: (?:AddressSanitizer|ThreadSanitizer)"
    r"|SUMMARY: (?:AddressSanitizer|LeakSanitizer|ThreadSanitizer|UndefinedBehaviorSanitizer)"
    r"|runtime error: "
    r"|Sanitizer:DEADLYSIGNAL"
)

PROBE_C = r"""
#include <pthread.h>
#include <stdlib.h>
static int shared;
static void *worker(void *arg) { (void)arg; shared = 1; return NULL; }
int main(void) {
    pthread_t t;
    int *p = malloc(sizeof *p);
    if (!p || pthread_create(&t, NULL, worker, NULL) != 0) return 3;
    pthread_join(t, NULL);
    *p = shared;
    int v = *p;
    free(p);
    return v == 1 ? 0 : 4;
}
"""

STRESS_ITEMS = 10_000_000
STRESS_CAPACITIES = (1, 2, 64, 1024)


def _require_sanitizer(tmp: Path, flags: str, env: dict[str, str]) -> None:
    """Skip if the C compiler meson will use cannot link `flags`; fail if the result cannot run."""
    tmp.mkdir(parents=True, exist_ok=True)
    src = tmp / "probe.c"
    src.write_text(PROBE_C)
    exe = tmp / "probe"
    cc = shlex.split(os.environ.get("CC", "cc"))
    try:
        build = subprocess.run(
            [*cc, "-g", flags, "-pthread", str(src), "-o", str(exe)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    except FileNotFoundError:
        pytest.skip(f"no C compiler ({' '.join(cc)})")
    if build.returncode != 0:
        pytest.skip(f"{' '.join(cc)} cannot build with {flags}: {build.stderr.strip()[-500:]}")
    run = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0 and not REPORT.search(run.stderr), (
        f"a trivial {flags} program does not run cleanly here (rc={run.returncode}); on Linux "
        "TSan in gcc 12 needs vm.mmap_rnd_bits <= 28:\n" + run.stderr[-3000:]
    )


def _setup(repo: Path, build: Path, env: dict[str, str], *options: str) -> None:
    setup = subprocess.run(
        [tool("meson"), "setup", str(build), str(repo), "-Dtests=true", *options],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert setup.returncode == 0, setup.stdout[-6000:] + setup.stderr[-3000:]
    compile_ = subprocess.run(
        [tool("meson"), "compile", "-C", str(build)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
    )
    assert compile_.returncode == 0, compile_.stdout[-8000:] + compile_.stderr[-3000:]


def _list_tests(build: Path, env: dict[str, str], *select: str) -> list[str]:
    listed = subprocess.run(
        [tool("meson"), "test", "-C", str(build), "--list", *select],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr
    # Lines look like "pyipu:test_ring" or "stress - pyipu:ring_stress".
    found = (
        re.fullmatch(r"(?:\S+ - )?[\w.-]+:(\S+)", line.strip())
        for line in listed.stdout.splitlines()
    )
    return [m.group(1) for m in found if m]


def _meson_test(build: Path, env: dict[str, str], logbase: str, *select: str) -> str:
    """Runs the selected tests; asserts all pass and no sanitizer report. Returns the log text."""
    expected = _list_tests(build, env, *select)
    assert expected, f"no tests selected by {select}"
    result = subprocess.run(
        [
            tool("meson"),
            "test",
            "-C",
            str(build),
            "--print-errorlogs",
            "--logbase",
            logbase,
            *select,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1500,
    )
    log_path = build / "meson-logs" / f"{logbase}.txt"
    log = log_path.read_text(errors="replace") if log_path.exists() else ""
    output = result.stdout + result.stderr + log
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-3000:]
    reports = [m.start() for m in REPORT.finditer(output)]
    assert not reports, "sanitizer report(s) in the test log:\n" + "\n---\n".join(
        output[max(0, i - 300) : i + 2500] for i in reports[:3]
    )
    ok = re.search(r"^Ok:\s+(\d+)", result.stdout, re.M)
    assert ok and int(ok.group(1)) == len(expected), result.stdout[-4000:]
    for name in expected:
        assert name in result.stdout
    return log


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = subprocess_env()
    env.update(extra)
    return env


@pytest.mark.slow
def test_asan_ubsan(repo, tmp_path):
    env = _env(ASAN_ENV)
    _require_sanitizer(tmp_path / "probe", "-fsanitize=address,undefined", env)
    build = tmp_path / "asan"
    _setup(
        repo,
        build,
        env,
        "-Db_sanitize=address,undefined",
        "-Dbuildtype=debug",
        # gcc links the sanitizer runtime into shared objects; clang does not, and the Python
        # extension module (also built here) would then fail --no-undefined.
        "-Db_lundef=false",
        # Make every UBSan check fatal at compile time too, and keep frames for the stacks.
        "-Dc_args=-fno-sanitize-recover=all -fno-omit-frame-pointer",
    )
    _meson_test(build, env, "testlog-asan", "--no-suite", "stress")


@pytest.fixture(scope="module")
def tsan_build(repo, tmp_path_factory):
    env = _env(TSAN_ENV)
    _require_sanitizer(tmp_path_factory.mktemp("probe"), "-fsanitize=thread", env)
    build = tmp_path_factory.mktemp("tsan") / "build"
    _setup(
        repo,
        build,
        env,
        "-Db_sanitize=thread",
        "-Dbuildtype=debugoptimized",
        "-Db_lundef=false",
        "-Dc_args=-fno-omit-frame-pointer",
    )
    return build, env


@pytest.mark.slow
def test_tsan_unit_tests(tsan_build):
    build, env = tsan_build
    _meson_test(build, env, "testlog-tsan", "--no-suite", "stress")


@pytest.mark.slow
def test_tsan_ring_stress(tsan_build):
    build, env = tsan_build
    # Alone, so the two ring threads are not competing with other tests for the 2 cores.
    log = _meson_test(build, env, "testlog-tsan-stress", "--suite", "stress")
    runs = re.findall(r"capacity (\d+)\s*: (\d+) items in ([\d.]+) s", log)
    assert sorted(int(c) for c, _, _ in runs) == sorted(STRESS_CAPACITIES), log[-4000:]
    assert all(int(n) >= STRESS_ITEMS for _, n, _ in runs), runs
    assert re.search(r"\b\d+ passed, 0 failed", log), log[-4000:]
