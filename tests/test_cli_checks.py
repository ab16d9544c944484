"""`pyipu --check/--run` judge pyipu's own outputs (NaN/inf included), and config files are
read in bounded time and memory and write only where they may."""

from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pyipu import _yaml
from pyipu.cli.main import main
from pyipu.compiler import Compiler
from pyipu.compiler.sharding import load_sharding_config
from pyipu.converter.check import CheckResult, output_error
from pyipu.errors import ConfigError


def _save(path, nodes, inits=(), out_dtype=TensorProto.FLOAT) -> None:
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, (2, 3))],
        [helper.make_tensor_value_info("Y", out_dtype, (2, 3))],
        list(inits),
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def _overflow_model(path) -> None:
    """Y = X*C - X*C with C = 1e5: 0 in fp32, NaN in fp16 (C and X*C overflow to inf)."""
    c = numpy_helper.from_array(np.full((2, 3), 1e5, np.float32), "C")
    _save(
        path,
        [
            helper.make_node("Mul", ["X", "C"], ["a"]),
            helper.make_node("Mul", ["X", "C"], ["b"]),
            helper.make_node("Sub", ["a", "b"], ["Y"]),
        ],
        [c],
    )


def _relu_model(path) -> None:
    _save(path, [helper.make_node("Relu", ["X"], ["Y"])])


def _pyipu(args, tmp_path, monkeypatch, capsys) -> tuple[int, str]:
    monkeypatch.chdir(tmp_path)
    code = main(args)
    out = capsys.readouterr()
    return code, out.out + out.err


def test_output_error_never_hides_a_nan():
    assert output_error(np.array([np.nan, 1.0]), np.array([0.0, 1.0])) == np.inf
    assert output_error(np.array([np.inf]), np.array([-np.inf])) == np.inf
    assert output_error(np.array([np.nan, 2.0]), np.array([np.nan, 2.0])) == 0.0
    assert output_error(np.array([1.0, 2.0]), np.array([1.0])) == np.inf
    assert output_error(np.array([3.0, 1.0]), np.array([4.0, 1.0])) == 0.25
    for order in ({"a": np.inf, "b": 0.0}, {"b": 0.0, "a": np.inf}):
        assert not CheckResult(order, 1e-4, "x").ok


def test_check_and_run_on_fp16_overflow_fail_without_success(tmp_path, monkeypatch, capsys):
    _overflow_model(tmp_path / "m.onnx")
    args = ["-i", "m.onnx", "--precision", "fp16", "--check", "--run"]
    code, out = _pyipu(args, tmp_path, monkeypatch, capsys)
    assert code == 1, out
    assert "[check] pyipu MISMATCH: max error inf" in out
    assert "[Success]" not in out


def test_run_fails_on_nan_outputs_the_original_does_not_have(tmp_path, monkeypatch, capsys):
    _overflow_model(tmp_path / "m.onnx")
    code, out = _pyipu(
        ["-i", "m.onnx", "--precision", "fp16", "--run"], tmp_path, monkeypatch, capsys
    )
    assert code == 1, out
    assert "[Failed] Bs: 2: non-finite values (NaN/inf) in Y where" in out
    assert "[Success]" not in out
    code, out = _pyipu(["-i", "m.onnx", "--run"], tmp_path, monkeypatch, capsys)  # fp32: fine
    assert code == 0 and "[Success] Bs: 2" in out, out


def test_run_accepts_nan_the_original_model_computes_too(tmp_path, monkeypatch, capsys):
    _save(tmp_path / "log.onnx", [helper.make_node("Log", ["X"], ["Y"])])  # NaN for X < 0
    code, out = _pyipu(["-i", "log.onnx", "--run", "--check"], tmp_path, monkeypatch, capsys)
    assert code == 0, out
    assert "[check] pyipu OK" in out and "[Success] Bs: 2" in out


def test_check_compares_pyipus_own_run(tmp_path, monkeypatch, capsys):
    _relu_model(tmp_path / "m.onnx")
    code, out = _pyipu(["-i", "m.onnx", "--check"], tmp_path, monkeypatch, capsys)
    assert code == 0 and "[check] pyipu Y: max error 0 (vs onnxruntime)" in out, out

    real = Compiler.compile

    def miscompile(model, outputs=None, options=None):  # Relu compiled as Sigmoid
        wrong = onnx.ModelProto()
        wrong.CopyFrom(model)
        for node in wrong.graph.node:
            node.op_type = "Sigmoid" if node.op_type == "Relu" else node.op_type
        return real(wrong, outputs, options)

    monkeypatch.setattr(Compiler, "compile", staticmethod(miscompile))
    code, out = _pyipu(["-i", "m.onnx", "--check", "--run"], tmp_path, monkeypatch, capsys)
    assert code == 1, out
    assert "[check] OK" in out, "the converted model itself is right"
    assert "[check] pyipu MISMATCH" in out and "[Success]" not in out


def test_check_runs_each_model_of_a_fusion(tmp_path, monkeypatch, capsys):
    _relu_model(tmp_path / "a.onnx")
    _save(tmp_path / "b.onnx", [helper.make_node("Log", ["X"], ["Y"])])
    (tmp_path / "c.yaml").write_text(
        "check: true\nrun: true\nmodel_fusion:\n  - input_model: a.onnx\n  - input_model: b.onnx\n"
    )
    code, out = _pyipu(["--config_yaml", "c.yaml"], tmp_path, monkeypatch, capsys)
    assert "[check] pyipu graph0/OK" in out and "[check] pyipu graph1/OK" in out, out
    # the Log model's NaN for X < 0 is what the original computes too
    assert code == 0 and "[subgraph 0] [Success]" in out and "[subgraph 1] [Success]" in out


# --- config files --------------------------------------------------------------------------------

BOMB = """input_model: m.onnx
skip_passes:
  - &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]
  - &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
  - &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
  - &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
  - &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
  - &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
  - &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
  - [*g, *g, *g, *g, *g, *g, *g, *g, *g]
"""


def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path, monkeypatch, capsys):
    _relu_model(tmp_path / "m.onnx")
    (tmp_path / "c.yaml").write_text(BOMB)
    start = time.perf_counter()
    code, out = _pyipu(["--config_yaml", "c.yaml"], tmp_path, monkeypatch, capsys)
    assert time.perf_counter() - start < 2.0
    assert code == 2 and "c.yaml: line 4: YAML aliases are not accepted" in out, out
    (tmp_path / "shard.yaml").write_text("- &n {node: a, device: 0}\n- *n\n")
    with pytest.raises(ConfigError, match="aliases"):
        load_sharding_config(tmp_path / "shard.yaml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 100_000, "nested deeper than 64 levels"),
        ("k: " + "x" * (_yaml.MAX_BYTES + 1), "larger than"),
        (b"k: \xff\xfe", "not UTF-8"),
    ],
    ids=["deep", "large", "binary"],
)
def test_config_files_are_bounded(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        _yaml.load(path, "c.yaml")


def test_plain_yaml_and_anchors_without_aliases_still_load(tmp_path):
    (tmp_path / "c.yaml").write_text("a: &x 1\nb: [1, {c: d}]\n")
    assert _yaml.load(tmp_path / "c.yaml", "c.yaml") == {"a": 1, "b": [1, {"c": "d"}]}


@pytest.mark.parametrize(
    "key", ["output_dir: ../escape", "output_model: ../escape.onnx", "output_dir: /tmp/x/../.."]
)
def test_config_outputs_may_not_leave_the_working_directory(tmp_path, monkeypatch, capsys, key):
    work = tmp_path / "work"
    work.mkdir()
    _relu_model(work / "m.onnx")
    (work / "c.yaml").write_text(f"input_model: m.onnx\n{key}\n")
    code, out = _pyipu(["--config_yaml", "c.yaml"], work, monkeypatch, capsys)
    assert code == 2 and "from the config file is outside the working directory" in out, out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]


def test_the_command_line_and_the_configs_own_directory_may(tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    (work / "configs").mkdir(parents=True)
    _relu_model(work / "configs" / "m.onnx")
    (work / "configs" / "c.yaml").write_text("input_model: m.onnx\n")
    args = ["--config_yaml", "configs/c.yaml", "--output_dir", "../../elsewhere"]
    code, out = _pyipu(args, work, monkeypatch, capsys)
    assert code == 0, out
    assert (tmp_path / "elsewhere" / "m.fp32.onnx").is_file()
    (work / "configs" / "c.yaml").write_text("input_model: m.onnx\noutput_dir: out\n")
    code, out = _pyipu(["--config_yaml", "configs/c.yaml"], work, monkeypatch, capsys)
    assert code == 0, out
    assert (work / "configs" / "out" / "m.fp32.onnx").is_file()
