"""Every PYIPU_* environment variable, read in one place (documented in docs/env_vars.md)."""

from __future__ import annotations

import os

from pyipu.errors import InvalidArgumentError

UINT32_MAX = 2**32 - 1


def check_int(what: str, value: object, minimum: int, maximum: int) -> int:
    """`value` if it is an int within [minimum, maximum] (the range of the C field it goes to),
    else InvalidArgumentError naming `what`."""
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise InvalidArgumentError(
            f"{what} must be an int from {minimum} to {maximum}, got {value!r}"
        )
    return value


def _int_env(name: str, default: int, minimum: int, maximum: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    # int() of a long digit string costs quadratic time: anything longer is out of range.
    text = raw.strip()
    value = None
    if len(text) <= 20:
        try:
            value = int(text)
        except ValueError:
            pass
    if value is None:
        raise InvalidArgumentError(
            f"{name} must be an integer from {minimum} to {maximum}, got {raw[:40]!r}"
        )
    return check_int(name, value, minimum, maximum)


def num_threads() -> int:
    """Compute workers per runner: PYIPU_NUM_THREADS, else the number of usable cores."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    from pyipu import _core  # the C library's limit; imported late: _config loads without it

    return _int_env("PYIPU_NUM_THREADS", min(cores, _core.MAX_THREADS), 1, _core.MAX_THREADS)


def num_devices() -> int:
    """Virtual IPUs the DeviceManager reports: PYIPU_NUM_DEVICES, default 4 (one IPU-M2000)."""
    return _int_env("PYIPU_NUM_DEVICES", 4, 1, UINT32_MAX)


def ipu_version() -> str:
    """Hardware version the virtual devices claim: PYIPU_IPU_VERSION, "ipu2" or "ipu21"."""
    value = os.environ.get("PYIPU_IPU_VERSION", "ipu2").strip() or "ipu2"
    if value not in ("ipu2", "ipu21"):
        raise InvalidArgumentError(
            f"PYIPU_IPU_VERSION must be 'ipu2' or 'ipu21', got {value[:40]!r}"
        )
    return value


def cache_dir() -> str | None:
    """Engine-cache directory: PYIPU_CACHE_DIR; set, it turns caching on for every compile."""
    value = os.environ.get("PYIPU_CACHE_DIR", "").strip()
    return value or None


def default_cache_dir() -> str:
    """Engine-cache directory when neither cache_path nor PYIPU_CACHE_DIR names one: the platform
    cache directory, $XDG_CACHE_HOME/pyipu (an absolute XDG_CACHE_HOME only, as the XDG spec
    says), else ~/.cache/pyipu. Raises RuntimeError when the home directory is unknown."""
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    if xdg and os.path.isabs(xdg):
        return os.path.join(xdg, "pyipu")
    home = os.path.expanduser("~")
    if home == "~" or not os.path.isabs(home):
        raise RuntimeError("no home directory to put the engine cache in (set PYIPU_CACHE_DIR)")
    return os.path.join(home, ".cache", "pyipu")


def apply_isa() -> None:
    """PYIPU_ISA forces one instruction-set level (a name of _core.ISA_LEVELS) for every kernel;
    unset or empty leaves the level as it is (the best the CPU runs unless a test forced one)."""
    raw = os.environ.get("PYIPU_ISA", "").strip()
    if not raw:
        return
    from pyipu import _core  # imported late: _config loads without it

    levels = _core.ISA_LEVELS
    if raw not in levels:
        raise InvalidArgumentError(f"PYIPU_ISA must be one of {sorted(levels)}, got {raw[:40]!r}")
    if levels[raw] > _core.isa_best():
        raise InvalidArgumentError(f"PYIPU_ISA={raw}: this CPU does not run that instruction set")
    _core.set_isa(levels[raw])
