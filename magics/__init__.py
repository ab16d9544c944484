"""IPython extension: `%load_ext pyipu.magics` registers the `%ipu` / `%%ipu` magic.

Verbs: devices, compile, fuse, run, dump, profile (docs/notebooks.md). IPython, ipywidgets and
matplotlib are imported only by this package, never by the core `pyipu` package.
"""

from __future__ import annotations

from typing import Any


def load_ipython_extension(ipython: Any) -> None:
    from .magic import IpuMagics
    from .summary import register_formatters

    ipython.register_magics(IpuMagics)
    register_formatters(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .summary import unregister_formatters

    unregister_formatters(ipython)
