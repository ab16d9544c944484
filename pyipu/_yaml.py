"""YAML configuration files (`--config_yaml`, shard.yaml), read in bounded time and memory.

`yaml.safe_load` expands aliases: a few hundred bytes of nested `*a` references (a "billion
laughs") become gigabytes. Configuration files never need them, so an alias is refused; without
aliases the loaded value is linear in the file's size, which is capped, as is the nesting depth
(PyYAML's composer recurses once per level).
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from pyipu.errors import ConfigError

MAX_BYTES = 4 << 20  # configs are a few KB; a shard.yaml of thousands of nodes is well below
MAX_DEPTH = 64


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses aliases and deep nesting while composing, before any expansion."""

    def __init__(self, stream: str, what: str) -> None:
        super().__init__(stream)
        self._what = what
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise ConfigError(f"{self._what}: line {mark.line + 1}: YAML aliases are not accepted")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise ConfigError(
                    f"{self._what}: line {mark.line + 1}: nested deeper than {MAX_DEPTH} levels"
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load(path: str | os.PathLike, what: str) -> Any:
    """The document of a YAML file. ConfigError for aliases, more than MAX_BYTES or MAX_DEPTH;
    yaml.YAMLError for invalid YAML; OSError when it cannot be read."""
    with open(path, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ConfigError(f"{what}: larger than {MAX_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{what}: not UTF-8 text ({e.reason})") from None
    loader = _Loader(text, what)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
