"""Engine cache (CompilerOptions.enable_engine_caching / cache_path, $PYIPU_CACHE_DIR)."""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from models import fusion_model0, run_c, seed_overlap_io_model
from onnx import TensorProto, helper, numpy_helper

from pyipu.compiler import Compiler, CompilerOptions
from pyipu.compiler.cache import CacheWarning, entry_path


def _options(cache: Path, **kw: object) -> CompilerOptions:
    return CompilerOptions.from_dict(
        {"enable_engine_caching": True, "cache_path": str(cache), **kw}
    )


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("pyipu-*.popef"))


def test_second_compile_is_served_from_disk(tmp_path, count_compiles, caplog):
    model = fusion_model0()
    opts = _options(tmp_path / "cache")
    first = Compiler.compile(model, None, opts)
    assert len(count_compiles) == 1 and len(_entries(tmp_path / "cache")) == 1
    with caplog.at_level(logging.INFO, logger="pyipu.compiler"):
        second = Compiler.compile(model, None, opts)
    assert len(count_compiles) == 1, "the second compile must not recompile"
    assert "engine cache hit" in caplog.text
    assert second.to_bytes() == first.to_bytes()
    x, y = np.array([[1, 2]], np.float32), np.array([[10, 20]], np.float32)
    np.testing.assert_array_equal(run_c(second, {"X": x, "Y": y})["O"], [11, 22])


def test_path_bytes_and_proto_share_nothing_but_each_hits(tmp_path, count_compiles):
    model = fusion_model0()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    opts = _options(tmp_path / "cache")
    for form in (str(path), path.read_bytes(), model):
        Compiler.compile(form, None, opts)
        Compiler.compile(form, None, opts)
    # a file and its bytes are the same content; the proto is keyed by its serialization
    assert len(count_compiles) == len(_entries(tmp_path / "cache"))
    assert len(count_compiles) <= 3


@pytest.mark.parametrize(
    "change",
    [
        {"batches_per_step": 4},
        {"num_io_tiles": 8},
        {"ipu_version": "ipu21"},
        {"available_memory_proportion": 0.3},
        {"opaque_blobs": {"note": "x"}},
    ],
    ids=lambda c: next(iter(c)),
)
def test_options_that_change_the_executable_change_the_key(tmp_path, change):
    model = fusion_model0()
    base = entry_path(tmp_path, model, None, _options(tmp_path))
    assert entry_path(tmp_path, model, None, _options(tmp_path, **change)) != base


def test_key_ignores_where_and_how_progress_is_reported(tmp_path):
    model = fusion_model0()
    base = entry_path(tmp_path, model, None, _options(tmp_path))
    quiet = _options(tmp_path / "elsewhere", show_compilation_progress_bar=False)
    quiet.compilation_progress_logger = lambda done, total: None
    assert entry_path(tmp_path, model, None, quiet) == base


def test_model_contents_and_outputs_change_the_key(tmp_path):
    model = fusion_model0()
    other = fusion_model0()
    other.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.array([1, 2], np.int64), "C"))
    opts = _options(tmp_path)
    assert entry_path(tmp_path, model, None, opts) != entry_path(tmp_path, other, None, opts)
    assert entry_path(tmp_path, model, None, opts) != entry_path(tmp_path, model, ["O"], opts)


def test_external_data_is_part_of_the_key(tmp_path):
    w = numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(8, 8), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])],
        "mm",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, (1, 8))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, (1, 8))],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="w.bin", size_threshold=0)
    opts = _options(tmp_path / "cache")
    before = entry_path(tmp_path, str(path), None, opts)
    data = bytearray((tmp_path / "w.bin").read_bytes())
    data[100] ^= 0xFF
    (tmp_path / "w.bin").write_bytes(bytes(data))
    assert entry_path(tmp_path, str(path), None, opts) != before


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_corrupt_entry_is_detected_and_rebuilt(tmp_path, count_compiles, damage):
    model = seed_overlap_io_model()
    opts = _options(tmp_path / "cache")
    good = Compiler.compile(model, None, opts).to_bytes()
    (entry,) = _entries(tmp_path / "cache")
    data = bytearray(entry.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data[len(data) // 2] ^= 0x40
    elif damage == "garbage":
        data = bytearray(b"not a popef file" * 8)
    else:
        data = bytearray()
    entry.write_bytes(bytes(data))
    with pytest.warns(CacheWarning, match="unusable"):
        rebuilt = Compiler.compile(model, None, opts)
    assert len(count_compiles) == 2
    assert rebuilt.to_bytes() == good
    assert entry.read_bytes() == good, "the entry is rewritten"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Compiler.compile(model, None, opts)  # and served cleanly afterwards
    assert len(count_compiles) == 2


def test_env_var_turns_caching_on(tmp_path, monkeypatch, count_compiles):
    monkeypatch.setenv("PYIPU_CACHE_DIR", str(tmp_path / "env-cache"))
    Compiler.compile(fusion_model0())
    Compiler.compile(fusion_model0())
    assert len(count_compiles) == 1
    assert len(_entries(tmp_path / "env-cache")) == 1


def test_cache_path_wins_over_env_var(tmp_path, monkeypatch):
    monkeypatch.setenv("PYIPU_CACHE_DIR", str(tmp_path / "env-cache"))
    Compiler.compile(fusion_model0(), None, _options(tmp_path / "mine"))
    assert len(_entries(tmp_path / "mine")) == 1
    assert not (tmp_path / "env-cache").exists()


def test_unwritable_cache_warns_and_still_compiles(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache directory should be")
    with pytest.warns(CacheWarning, match="not written"):
        exe = Compiler.compile(fusion_model0(), None, _options(blocker / "cache"))
    assert exe.output_names == ["O"]


def test_compile_and_export_uses_the_cache(tmp_path, count_compiles):
    opts = _options(tmp_path / "cache")
    for name in ("a.popef", "b.popef"):
        Compiler.compile_and_export(fusion_model0(), None, str(tmp_path / name), opts)
    assert len(count_compiles) == 1
    assert (tmp_path / "a.popef").read_bytes() == (tmp_path / "b.popef").read_bytes()


def test_serialize_ir_on_a_cache_hit(tmp_path):
    opts = _options(tmp_path / "cache", serialize_ir=True, serialized_ir_dest=str(tmp_path / "ir"))
    Compiler.compile(fusion_model0(), None, opts)
    first = (tmp_path / "ir").read_text()
    (tmp_path / "ir").unlink()
    Compiler.compile(fusion_model0(), None, opts)

    def without_tensor_names(text: str) -> list[str]:  # a container stores no tensor names
        return [ln for ln in text.splitlines() if not re.match(r"  t\d+ [^=]", ln)]

    assert without_tensor_names((tmp_path / "ir").read_text()) == without_tensor_names(first)
