"""YAML configuration (`--config_yaml`, shard.yaml, `%%ipu fuse`), read in bounded time and memory.

`yaml.safe_load` expands aliases: a few hundred bytes of nested `*a` references (a "billion
laughs") become gigabytes. Configuration files never need them, so an alias is refused; without
aliases the loaded value is linear in the file's size, which is capped, as is the nesting depth
(PyYAML's composer and constructor recurse once per level).
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from pyipu.errors import ConfigError

MAX_BYTES = 1 << 20  # configs are a few KB; a shard.yaml of 20,000 nodes fits
MAX_DEPTH = 64
# libyaml's parser when PyYAML was built with it: parses 1 MiB in well under a second, the pure
# Python one takes tens of seconds
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _refuse_aliases_and_depth(text: str, what: str) -> None:
    """One pass over the parser's events, which expands nothing, before anything is built."""
    depth = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.AliasEvent):
            line = event.start_mark.line + 1
            raise ConfigError(f"{what}: line {line}: YAML aliases are not accepted")
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1
                raise ConfigError(f"{what}: line {line}: nested deeper than {MAX_DEPTH} levels")
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1


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
    return loads(text, what)


def loads(text: str, what: str) -> Any:
    """The document of YAML text (a notebook cell), with the limits of `load`."""
    if len(text) > MAX_BYTES:  # characters: at least as many bytes
        raise ConfigError(f"{what}: larger than {MAX_BYTES} bytes")
    _refuse_aliases_and_depth(text, what)
    return yaml.load(text, Loader=_LOADER)  # a safe loader: plain data only
