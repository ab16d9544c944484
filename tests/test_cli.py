"""The `pyipu` command (PopRT's flags) and `popef_dump`."""

from __future__ import annotations

import subprocess

import numpy as np
import onnx
import pytest
from helpers import subprocess_env, tool
from onnx import TensorProto, helper

from pyipu import runtime


def _dynamic_add_model(path) -> None:
    g = helper.make_graph(
        [helper.make_node("Add", ["X", "Y"], ["Z"]), helper.make_node("Relu", ["Z"], ["R"])],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ("batch", 3)) for n in "XY"],
        [helper.make_tensor_value_info("R", TensorProto.FLOAT, ("batch", 3))],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def _run(args, cwd):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=subprocess_env())


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_convert_and_export(tmp_path, precision):
    _dynamic_add_model(tmp_path / "add.onnx")
    result = _run(
        [
            tool("pyipu"),
            "--input_model",
            "add.onnx",
            "--input_shape",
            "X=2,3",
            "Y=2,3",
            "--precision",
            precision,
            "--batches_per_step",
            "2",
            "--output_dir",
            "out",
            "--export_popef",
        ],
        tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    converted = onnx.load(str(tmp_path / "out" / f"add.{precision}.onnx"))
    dims = [d.dim_value for d in converted.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [2, 3]
    dtype = np.float16 if precision == "fp16" else np.float32
    with runtime.Runner(str(tmp_path / "out" / "executable.popef")) as r:
        assert r.batches_per_step == 2
        x = np.array([[1, -2, 3], [4, 5, -6]], dtype)
        out = np.zeros((2, 3), dtype)
        r.execute({"X": x, "Y": x}, {"R": out})
        np.testing.assert_array_equal(out, np.maximum(2 * x, 0))

    dump = _run([tool("popef_dump"), "-i", "out/executable.popef"], tmp_path)
    assert dump.returncode == 0, dump.stderr
    assert "input  X" in dump.stdout and "output R" in dump.stdout
    assert "batches_per_step 2" in dump.stdout and "add" in dump.stdout
    assert "1472 compute + 0 I/O tiles" in dump.stdout


def test_dynamic_shape_without_input_shape_is_a_clear_error(tmp_path):
    _dynamic_add_model(tmp_path / "add.onnx")
    result = _run([tool("pyipu"), "--input_model", "add.onnx", "--export_popef"], tmp_path)
    assert result.returncode == 1
    assert "input_shape" in result.stderr


def test_bad_flags(tmp_path):
    _dynamic_add_model(tmp_path / "add.onnx")
    result = _run([tool("pyipu"), "--input_model", "add.onnx", "--input_shape", "X:2"], tmp_path)
    assert result.returncode != 0 and "NAME=D0,D1" in result.stderr
    result = _run([tool("pyipu")], tmp_path)
    assert result.returncode != 0 and "--input_model" in result.stderr


def test_popef_dump_rejects_corrupt_file(tmp_path):
    (tmp_path / "bad.popef").write_bytes(b"PYIPUEF\0" + b"\0" * 100)
    result = _run([tool("popef_dump"), "bad.popef"], tmp_path)
    assert result.returncode == 1 and "bad.popef" in result.stderr


# --- converter flags -----------------------------------------------------------------------------


def _pass_model(path) -> None:
    """X → Identity → Relu → Add(ConstantOfShape 64x64 summed) → Y, with a dynamic batch."""
    g = helper.make_graph(
        [
            helper.make_node("Identity", ["X"], ["a"]),
            helper.make_node("Relu", ["a"], ["b"]),
            helper.make_node(
                "ConstantOfShape",
                ["big_shape"],
                ["big"],
                value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5]),
            ),
            helper.make_node("ReduceSum", ["big"], ["s"], keepdims=0),
            helper.make_node("Add", ["b", "s"], ["Y"]),
        ],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ("batch", 3))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ("batch", 3))],
        [helper.make_tensor("big_shape", TensorProto.INT64, [2], [64, 64])],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))


CUSTOM_PASS = '''
import pyipu


@pyipu.passes.register("relu_to_sigmoid")
class ReluToSigmoid(pyipu.Pass):
    """Replace Relu by Sigmoid (changes results: --check must notice)."""

    def run(self, onnx_model):
        for node in onnx_model.graph.node:
            if node.op_type == "Relu":
                node.op_type = "Sigmoid"
        return onnx_model
'''


def _ops(path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in onnx.load(str(path)).graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return counts


def test_list_all_passes_with_a_custom_pass_config(tmp_path):
    (tmp_path / "custom.py").write_text(CUSTOM_PASS)
    result = _run([tool("pyipu"), "--list_all_passes"], tmp_path)
    assert result.returncode == 0, result.stderr
    for name in ("int64_to_int32", "float_to_half", "constant_folding", "model_overview"):
        assert name in result.stdout
    assert "relu_to_sigmoid" not in result.stdout
    result = _run(
        [tool("pyipu"), "--custom_pass_config", "custom.py", "--list_all_passes"], tmp_path
    )
    assert "relu_to_sigmoid" in result.stdout and "Replace Relu by Sigmoid" in result.stdout


def test_passes_skip_passes_batch_size_max_tensor_size_show(tmp_path):
    _pass_model(tmp_path / "m.onnx")
    base = [tool("pyipu"), "--input_model", "m.onnx", "--batch_size", "2", "--show"]
    result = _run([*base, "--output_model", "a.onnx", "--passes", "model_overview"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert _ops(tmp_path / "a.onnx") == {"Relu": 1, "Add": 1}
    assert "Relu" in result.stdout and "params:" in result.stdout  # model_overview
    assert "Input  X: float [2, 3]" in result.stdout and "Output Y: float [2, 3]" in result.stdout
    result = _run(
        [
            *base,
            "--output_model",
            "b.onnx",
            "--skip_passes",
            "eliminate_identity",
            "--max_tensor_size",
            "1024",
            "--convert_version",
            "14",
        ],
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert _ops(tmp_path / "b.onnx") == {
        "Identity": 1,
        "Relu": 1,
        "ConstantOfShape": 1,  # 16 KiB > --max_tensor_size: not folded
        "ReduceSum": 1,
        "Add": 1,
    }
    assert onnx.load(str(tmp_path / "b.onnx")).opset_import[0].version == 14


def test_fp16_skip_op_types_flag(tmp_path):
    _pass_model(tmp_path / "m.onnx")
    result = _run(
        [
            tool("pyipu"),
            "--input_model",
            "m.onnx",
            "--input_shape",
            "X=2,3",
            "--precision",
            "fp16",
            "--fp16_skip_op_types",
            "Relu",
            "--check",
        ],
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert _ops(tmp_path / "m.fp16.onnx") == {"Cast": 2, "Relu": 1, "Add": 1}
    assert "[check] OK" in result.stdout


def test_check_reports_the_error_and_fails_on_mismatch(tmp_path):
    _pass_model(tmp_path / "m.onnx")
    (tmp_path / "custom.py").write_text(CUSTOM_PASS)
    base = [tool("pyipu"), "--input_model", "m.onnx", "--input_shape", "X=4,3", "--check"]
    ok = _run(base, tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "[check] Y: max error 0 (onnxruntime)" in ok.stdout and "[check] OK" in ok.stdout
    bad = _run(
        [*base, "--custom_pass_config", "custom.py", "--passes", "relu_to_sigmoid"], tmp_path
    )
    assert bad.returncode == 1 and "[check] MISMATCH" in bad.stdout


def test_run_prints_batch_latency_and_throughput(tmp_path):
    _pass_model(tmp_path / "m.onnx")
    (tmp_path / "c.yaml").write_text("input_model: m.onnx\nbatch_size: 4\nrun: true\n")
    result = _run([tool("pyipu"), "--config_yaml", "c.yaml"], tmp_path)
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if "Bs:" in x)
    assert line.startswith("[Success] Bs: 4, Latency: ") and "Tput: " in line


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--passes", "no_such_pass"], 1, "unknown pass 'no_such_pass'; registered passes:"),
        (["--precision", "fp8"], 1, "precision 'fp8' is not supported"),
        (["--custom_pass_config", "missing.py"], 2, "not a readable Python file"),
        (["--custom_pass_config", "broken.py"], 2, "NameError"),
        (["--remove_outputs", "Q"], 1, "not graph outputs"),
        (["--input_model", "bad.onnx"], 2, "bad.onnx is not an ONNX model"),
        (["--batch_size", "2", "--batch_axis", "1"], 1, "fixed to 3"),
        (["--custom_pass_config", "buggy.py", "--passes", "buggy"], 1, "KeyError: 'oops'"),
    ],
)
def test_converter_flag_errors_are_one_line(tmp_path, args, code, message):
    _pass_model(tmp_path / "m.onnx")
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    (tmp_path / "broken.py").write_text("undefined_name\n")
    (tmp_path / "buggy.py").write_text(
        "import pyipu\n\n\n@pyipu.passes.register('buggy')\nclass Buggy(pyipu.Pass):\n"
        "    def run(self, onnx_model):\n        return {}['oops']\n"
    )
    result = _run([tool("pyipu"), "--input_model", "m.onnx", *args], tmp_path)
    assert result.returncode == code, result.stdout + result.stderr
    assert result.stderr.startswith("pyipu: error: ") and message in result.stderr
    assert "Traceback" not in result.stderr
