"""Every PYIPU_* environment variable, read in one place (documented in docs/env_vars.md)."""

from __future__ import annotations

import os


def _int_env(name: str, default: int, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def num_threads() -> int:
    """Compute workers per runner: PYIPU_NUM_THREADS, else the number of usable cores."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return _int_env("PYIPU_NUM_THREADS", cores, minimum=1)


def num_devices() -> int:
    """Virtual IPUs the DeviceManager reports: PYIPU_NUM_DEVICES, default 4 (one IPU-M2000)."""
    return _int_env("PYIPU_NUM_DEVICES", 4, minimum=1)


def ipu_version() -> str:
    """Hardware version the virtual devices claim: PYIPU_IPU_VERSION, "ipu2" or "ipu21"."""
    value = os.environ.get("PYIPU_IPU_VERSION", "ipu2").strip() or "ipu2"
    if value not in ("ipu2", "ipu21"):
        raise ValueError(f"PYIPU_IPU_VERSION must be 'ipu2' or 'ipu21', got {value!r}")
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
