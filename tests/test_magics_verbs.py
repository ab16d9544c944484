"""`%%ipu fuse`, `%ipu dump` and `%ipu profile` through a real IPython InteractiveShell."""

from __future__ import annotations

import base64
import io
import re
import sys
from typing import Any

import numpy as np
import onnx
import pytest
from magics_shell import magic, require_notebook_libraries, shell, small_model
from models import fusion_model0, fusion_model1

from pyipu.compiler import Executable

require_notebook_libraries()

from IPython.core.error import UsageError  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def ip() -> Any:
    ip = shell()
    ip.user_ns["small"] = small_model()
    ip.user_ns["m1"] = fusion_model1()
    return ip


@pytest.fixture(scope="module")
def exe(ip: Any) -> Executable:
    exe = magic(ip, "compile small -q --batches-per-step 2 --num-io-tiles 64")
    ip.user_ns["exe"] = exe
    return exe


def _png_size(png: bytes) -> tuple[int, int]:
    assert png.startswith(PNG_MAGIC)
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def test_fuse_cell_compiles_and_shows_subgraphs(ip: Any, tmp_path: Any) -> None:
    onnx.save(fusion_model0(), str(tmp_path / "m0.onnx"))
    out = tmp_path / "fused.popef"
    cell = f"model_fusion:\n  - input_model: {tmp_path / 'm0.onnx'}\n  - input_model: m1\n"
    res = magic(ip, f"fuse -o {out}", cell)
    assert out.stat().st_size > 0
    assert [s["inputs"] for s in res.subgraphs] == [["graph0/X", "graph0/Y"], ["graph1/X"]]
    assert [s["outputs"] for s in res.subgraphs] == [["graph0/O"], ["graph1/O"]]
    assert res.subgraphs[1]["model"] == "m1"
    html = res._repr_html_()
    assert "graph0/X, graph0/Y" in html and "ipu-subgraphs" in html
    # conditional execution: each request runs the subgraph its anchors belong to
    ip.user_ns["fused"] = res
    run = magic(ip, "run fused --requests 10 --no-widgets")
    assert run.completed == 10 and run.failed == 0
    x0 = {"graph0/X": np.ones((1, 2), np.float32), "graph0/Y": np.ones((1, 2), np.float32)}
    x1 = {"graph1/X": np.full((1, 1), 3, np.float16)}
    ip.user_ns["feeds"] = [x0, x1]
    run = magic(ip, "run fused.executable --requests 2 --inputs feeds --no-widgets")
    assert run.completed == 2


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        (None, "needs a cell"),  # the line magic %ipu fuse
        ("a: [", "not valid YAML"),
        ("- 1\n- 2\n", "mapping"),
        ("model_fusion: []\n", "non-empty list"),
        ("bogus_key: 1\nmodel_fusion:\n  - input_model: m1\n", "unknown keys"),
        ("model_fusion:\n  - precision: fp16\n", "needs input_model"),
        ("model_fusion:\n  - input_model: no_such_model\n", "neither a variable"),
        ("a: &a [x, x]\nmodel_fusion: [*a, *a]\n", "line 2: YAML aliases are not accepted"),
    ],
)
def test_fuse_rejects_bad_yaml(ip: Any, cell: str | None, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        magic(ip, "fuse -q", cell)


def test_dump_tables(ip: Any, exe: Executable, tmp_path: Any) -> None:
    path = tmp_path / "small.popef"
    exe.save(path)
    res = magic(ip, f"dump {path} -i")
    html = res._repr_html_()
    for text in (
        "ipu-dump",
        "Anchors (3)",
        "float32",
        "[4, 64]",
        "Programs",
        "matmul",
        "Blobs",
        "num_io_tiles",
        "64 (overlap I/O)",
    ):
        assert text in html, text
    assert res.description.info["batches_per_step"] == 2
    res = magic(ip, "dump exe")  # a variable: written to a temporary file first
    assert "Anchors (3)" in res._repr_html_() and "matmul" not in res._repr_html_()
    with pytest.raises(UsageError):
        magic(ip, "dump small")  # a ModelProto


def test_files_that_are_not_models_are_usage_errors(ip: Any, tmp_path: Any) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"garbage")
    for line, message in (
        (f"compile {bad}", "not an ONNX model file"),
        (f"dump {bad}", "not a valid PopEF file"),
        (f"run {bad}", "not a valid PopEF file"),
        (f"profile {bad}", "not a valid PopEF file"),
    ):
        with pytest.raises(UsageError, match=message):
            magic(ip, line)


def test_profile_pictures_and_recorded_timeline(ip: Any, exe: Executable) -> None:
    run = magic(ip, "run exe --requests 12 --record 256 --no-widgets")
    ip.user_ns["recorded"] = run
    assert run.trace is not None and len(run.trace) == 3 * run.stats["iterations"]
    res = magic(ip, "profile exe --run recorded --top 5")
    assert set(res.figures) == {"memory", "categories", "liveness", "cycles", "timeline"}
    for png in res.figures.values():
        width, height = _png_size(png)
        assert width > 300 and height > 100
    assert 0.0 <= res.overlap <= 1.0
    html = res._repr_html_()
    assert html.count("data:image/png;base64,") == 5
    for key in ("memory", "categories", "liveness", "cycles", "timeline"):
        assert f"ipu-figure-{key}" in html
    encoded = re.search(r'src="data:image/png;base64,([^"]+)"', html).group(1)
    assert base64.b64decode(encoded).startswith(PNG_MAGIC)
    assert res._repr_png_() == res.figures["memory"]


def test_heatmap_draws_the_report(ip: Any, exe: Executable) -> None:
    from matplotlib.image import imread
    from pyipu.magics import pictures

    grid = pictures.tile_grid(exe.report().memory[0])
    assert grid.shape == (32, 46) and np.array_equal(grid.reshape(-1), exe.report().memory[0])
    png = pictures.memory_heatmap(exe.report())
    pixels = imread(io.BytesIO(png))
    assert pixels.ndim == 3 and pixels.std() > 0  # not a blank picture


def test_heatmap_colours_scale_to_tile_capacity(exe: Executable) -> None:
    """Every tile at 2 % of its capacity is drawn dark, not in the top colour of the scale."""
    import dataclasses

    from matplotlib.image import imread
    from pyipu.magics import pictures

    report = exe.report()
    low = np.full_like(report.memory, report.target.memory_bytes_per_tile // 50)
    pixels = imread(io.BytesIO(pictures.memory_heatmap(dataclasses.replace(report, memory=low))))
    r, g, b = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    yellow = (r > 0.8) & (g > 0.8) & (b < 0.4)  # viridis' top end
    dark = (r < 0.35) & (g < 0.15) & (b > 0.3)  # viridis near 0
    assert yellow.mean() < 0.02 and dark.mean() > 0.3, (yellow.mean(), dark.mean())


def test_profile_records_a_run_itself(ip: Any, exe: Executable) -> None:
    res = magic(ip, "profile exe --requests 4")
    assert "timeline" in res.figures and "recorded by %ipu profile" in res.notes[0]
    res = magic(ip, "profile exe --no-timeline")
    assert (
        set(res.figures) == {"memory", "categories", "liveness", "cycles"} and res.overlap is None
    )
    with pytest.raises(UsageError, match="--ipu 3"):
        magic(ip, "profile exe --ipu 3 --no-timeline")
    ip.user_ns["not_recorded"] = magic(ip, "run exe --requests 2 --no-widgets")
    with pytest.raises(UsageError, match="--record"):
        magic(ip, "profile exe --run not_recorded")


def test_overlap_share_of_intervals() -> None:
    from pyipu.magics.pictures import overlap_share

    from pyipu.runtime.tracepoints import EVENT_DTYPE, KINDS

    kind = {v: k for k, v in KINDS.items()}
    ev = np.zeros(3, EVENT_DTYPE)
    ev["kind"] = [kind["compute"], kind["load"], kind["store"]]
    ev["start_ns"] = [100, 50, 190]
    ev["end_ns"] = [200, 150, 230]  # load 50 of 100 ns inside compute, store 10 of 40
    assert overlap_share(ev, KINDS) == pytest.approx(60 / 140)


def test_compare_runs_side_by_side(ip: Any, exe: Executable, monkeypatch: Any) -> None:
    ip.user_ns["r1"] = magic(ip, "run exe --requests 20 --no-widgets")
    ip.user_ns["r2"] = magic(ip, "run exe --requests 30 --threads 1 --no-widgets")
    table = magic(ip, "compare r1 r2")
    pandas = pytest.importorskip("pandas")
    assert isinstance(table, pandas.DataFrame)
    assert list(table.index) == ["r1", "r2"] and list(table["completed"]) == [20, 30]
    assert table.loc["r1", "vs first"] == 1.0 and table.loc["r2", "threads"] == 1
    monkeypatch.setitem(sys.modules, "pandas", None)  # without pandas: a table with HTML
    plain = magic(ip, "compare r1 r2")
    assert [row[0] for row in plain.rows] == ["r1", "r2"] and plain.columns[0] == "run"
    html = plain._repr_html_()
    assert html.count("<tr>") == 3 and "requests/s" in html
    with pytest.raises(UsageError, match="not a RunResult"):
        magic(ip, "compare r1 exe")
    ip.user_ns["exe4"] = magic(ip, "compile small -q --batches-per-step 4")
    execs = magic(ip, "compare exe exe4")
    assert execs.columns[0] == "executable" and [r[0] for r in execs.rows] == ["exe", "exe4"]
    assert all(row[1] is True for row in execs.rows)  # both fit
    monkeypatch.delitem(sys.modules, "pandas")
    frame = magic(ip, "compare exe exe4")
    assert list(frame.index) == ["exe", "exe4"] and frame.loc["exe", "vs first"] == 1.0


def test_cycle_bars_name_the_onnx_nodes(exe: Executable) -> None:
    from pyipu.magics import pictures

    labels = [pictures._instruction_label(c) for c in exe.report().instructions]
    assert "MatMul_0 MatMul (matmul)" in labels  # small_model: h = x @ W, an unnamed node


def test_memory_categories_picture(exe: Executable) -> None:
    from matplotlib.image import imread
    from pyipu.magics import pictures

    png = pictures.memory_categories(exe.report())
    width, height = _png_size(png)
    assert width > 300 and height > 100 and imread(io.BytesIO(png)).std() > 0


def test_iterations_pair_each_compute_with_its_load_and_store() -> None:
    from pyipu.magics.pictures import iterations

    from pyipu.runtime.tracepoints import EVENT_DTYPE, KINDS

    kind = {v: k for k, v in KINDS.items()}
    rows = [  # overlap I/O: the load of iteration 1 runs during compute 0
        ("load", 0, 40),
        ("compute", 50, 150),
        ("load", 60, 70),
        ("store", 155, 160),
        ("compute", 150, 250),
        ("store", 255, 260),
    ]
    ev = np.zeros(len(rows), EVENT_DTYPE)
    ev["kind"] = [kind[k] for k, _, _ in rows]
    ev["start_ns"] = [s for _, s, _ in rows]
    ev["end_ns"] = [e for _, _, e in rows]
    its = iterations(ev, KINDS)
    assert [int(i["compute"]["start_ns"][0]) for i in its] == [50, 150]
    assert [int(i["load"]["start_ns"][0]) for i in its] == [0, 60]
    assert [int(i["store"]["start_ns"][0]) for i in its] == [155, 255]
