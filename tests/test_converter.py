"""pyipu.Converter (PopRT's converter API), MFConverter against the CLI's fusion YAML, and fp16
conversion of the nine light CNNs against fp32."""

from __future__ import annotations

import subprocess
import time

import light_models
import numpy as np
import onnx
import pytest
from helpers import subprocess_env, tool
from models import fusion_model0, fusion_model1, run_ort
from onnx import TensorProto, helper, numpy_helper
from test_passes import assert_same_function, init, make_model, ops, vi

import pyipu
import pyipu.backend
from pyipu.compiler import CompileError, Compiler, CompilerOptions, ShapeError, UnsupportedError
from pyipu.converter import Converter, MFConverter
from pyipu.converter.check import run_model

rng = np.random.default_rng(0)


def _dynamic_model() -> onnx.ModelProto:
    return make_model(
        [
            helper.make_node("Identity", ["X"], ["a"]),
            helper.make_node("Dropout", ["a"], ["b"]),
            helper.make_node("Gather", ["E", "ids"], ["e"], axis=0),
            helper.make_node("Add", ["b", "e"], ["c"]),
            helper.make_node("Relu", ["c"], ["d"]),
            helper.make_node("Relu", ["d"], ["Y"]),
            helper.make_node("Shape", ["Y"], ["S"]),
        ],
        [vi("X", 1, ["batch", 4]), vi("ids", TensorProto.INT64, ["batch"])],
        [vi("Y", 1, ["batch", 4]), vi("S", TensorProto.INT64, [2])],
        [init("E", rng.standard_normal((6, 4)).astype(np.float32))],
        opset=13,
    )


def _feeds(batch: int) -> dict[str, np.ndarray]:
    return {
        "X": rng.standard_normal((batch, 4)).astype(np.float32),
        "ids": rng.integers(0, 6, batch).astype(np.int64),
    }


def test_default_conversion_is_lazy_import_and_keeps_the_function():
    assert pyipu.Converter is Converter
    m = _dynamic_model()
    conv = Converter(input_shape={"X": [3, 4], "ids": [3]})
    out = conv.convert(m)
    # Identity, Dropout and one Relu go; Shape produces a graph output, so it stays (with the
    # Cast to int32 its int64 result gets)
    assert ops(out) == {"Gather": 1, "Add": 1, "Relu": 1, "Shape": 1, "Cast": 1}
    assert out.opset_import[0].version == 13  # already newer than convert_version=11
    inputs = {v.name: v.type.tensor_type for v in out.graph.input}
    assert inputs["ids"].elem_type == TensorProto.INT32  # int64_to_int32
    assert [d.dim_value for d in inputs["X"].shape.dim] == [3, 4]
    assert_same_function(m, out, _feeds(3))


def test_batch_size_and_axis_and_popRT_string_shapes():
    m = _dynamic_model()
    out = Converter(batch_size=5).convert(m)
    dims = [[d.dim_value for d in v.type.tensor_type.shape.dim] for v in out.graph.input]
    assert dims == [[5, 4], [5]]
    out2 = Converter(input_shape=["X=5,4", "ids=5"]).convert(m)
    assert [v.type for v in out2.graph.input] == [v.type for v in out.graph.input]
    with pytest.raises(ShapeError, match="fixed to 4"):
        Converter(batch_size=2, batch_axis=1).convert(m)
    with pytest.raises(ShapeError, match="NAME=D0"):
        Converter(input_shape=["X:5"])


def test_convert_version_upgrades_and_skip_used_passes():
    m = make_model(
        [helper.make_node("Identity", ["X"], ["a"]), helper.make_node("Relu", ["a"], ["Y"])],
        [vi("X", 1, [2, 3])],
        [vi("Y", 1, [2, 3])],
        opset=9,
    )
    out = Converter(convert_version=13, skip_passes=["eliminate_identity"]).convert(m)
    assert out.opset_import[0].version == 13 and ops(out) == {"Identity": 1, "Relu": 1}
    out = Converter(used_passes=["model_overview"]).convert(m)
    assert out.opset_import[0].version == 11 and ops(out) == {"Relu": 1}
    with pytest.raises(pyipu.passes.UnknownPassError):
        Converter(used_passes=["nope"]).convert(m)


def test_remove_outputs_checkpoints_and_check():
    m = _dynamic_model()
    conv = Converter(
        input_shape={"X": [2, 4], "ids": [2]}, remove_outputs=["S"], checkpoints=["c"], check=True
    )
    out = conv.convert(m)
    assert [o.name for o in out.graph.output] == ["Y", "c"]
    assert conv.check_result.ok and conv.check_result.backend == "onnxruntime"
    assert conv.check_result.max_error < 1e-6
    with pytest.raises(CompileError, match="not graph outputs"):
        Converter(remove_outputs=["nope"]).convert(m)


def test_check_detects_a_pass_that_changes_results():
    @pyipu.passes.register("test_break_relu")
    class BreakRelu(pyipu.Pass):
        def run(self, onnx_model):
            for n in onnx_model.graph.node:
                if n.op_type == "Relu":
                    n.op_type = "Sigmoid"
            return onnx_model

    m = _dynamic_model()
    with pytest.raises(CompileError, match="differs from the original"):
        Converter(batch_size=2, used_passes=["test_break_relu"], check=True).convert(m)


def test_refused_and_unknown_options():
    with pytest.raises(UnsupportedError, match="fp8"):
        Converter(precision="fp8")
    with pytest.raises(UnsupportedError, match="eightbitsio"):
        Converter(eightbitsio=True)
    with pytest.raises(TypeError, match="no_such_option"):
        Converter(no_such_option=1)
    Converter(disable_fast_norm=True, serialize_matmul={"MatMul": 2})  # no effect on results


def test_fp16_skip_op_types():
    m = make_model(
        [
            helper.make_node("MatMul", ["X", "W"], ["a"]),
            helper.make_node("Softmax", ["a"], ["Y"]),
        ],
        [vi("X", 1, [2, 8])],
        [vi("Y", 1, [2, 4])],
        [init("W", rng.standard_normal((8, 4)).astype(np.float32))],
    )
    out = Converter(precision="fp16", fp16_skip_op_types=["Softmax"]).convert(m)
    assert ops(out) == {"MatMul": 1, "Softmax": 1, "Cast": 2}
    assert out.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    x = {"X": rng.standard_normal((2, 8)).astype(np.float32)}
    assert_same_function(m, out, x, rtol=0, atol=5e-3)


# --- fusion: the API path and the YAML path give the same model and executable -----------------


def test_mfconverter_matches_the_cli_fusion_yaml(tmp_path):
    onnx.save(fusion_model0(), str(tmp_path / "model0.onnx"))
    onnx.save(fusion_model1(), str(tmp_path / "model1.onnx"))
    (tmp_path / "config.yaml").write_text(
        "output_dir: out\nexport_popef: True\nmodel_fusion:\n"
        "  - input_model: model0.onnx\n    input_shape: ['X=1,2', 'Y=1,2']\n"
        "  - input_model: model1.onnx\n    input_shape: ['X=1,1']\n    precision: fp16\n"
    )
    result = subprocess.run(
        [tool("pyipu"), "--config_yaml", "config.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=subprocess_env(),
    )
    assert result.returncode == 0, result.stderr
    m0 = Converter(input_shape={"X": [1, 2], "Y": [1, 2]}).convert(fusion_model0())
    m1 = Converter(input_shape={"X": [1, 1]}, precision="fp16").convert(fusion_model1())
    fused = MFConverter().convert([m0, m1])
    from_yaml = onnx.load(str(tmp_path / "out" / "model_fusion.onnx"))
    assert fused.SerializeToString() == from_yaml.SerializeToString()
    exe = Compiler.compile(fused, None, CompilerOptions())
    assert exe.to_bytes() == (tmp_path / "out" / "executable.popef").read_bytes()


# --- fp16 of the light CNNs ----------------------------------------------------------------------

# Tolerances of pyipu's fp16 result against onnxruntime's fp32 one (docs/converter.md lists the
# errors measured): softmax probabilities (absolute) and logits (relative to their largest value).
PROB_ATOL = 1e-2
LOGIT_RTOL = 6e-2
FAST = [n for n in light_models.NAMES if n not in light_models.LARGE]


def with_calibrated_batchnorm(model: onnx.ModelProto, feeds) -> onnx.ModelProto:
    """Set every BatchNormalization's mean/var to the statistics of its input on `feeds`, as
    training would: random statistics let activations grow past fp16's range (6.5e4) in the
    residual nets (resnet50, shufflenet reach 7e6 in fp32), which no trained network does."""
    probe = Converter(convert_version=15, skip_passes=["fuse_bn_into_conv"]).convert(model)
    stats = {}
    for node in probe.graph.node:
        if node.op_type == "BatchNormalization":
            names = (node.output[0] + "/mean", node.output[0] + "/var")
            node.output.extend(names)
            node.attribute.extend(
                [helper.make_attribute("training_mode", 1), helper.make_attribute("momentum", 0.0)]
            )
            probe.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
            stats[node.input[3]], stats[node.input[4]] = names
    if not stats:
        return model
    values, _ = run_model(probe, feeds)
    by_name = dict(zip([o.name for o in probe.graph.output], values, strict=True))
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for t in out.graph.initializer:
        if t.name in stats:
            t.CopyFrom(numpy_helper.from_array(by_name[stats[t.name]].astype(np.float32), t.name))
    return out


def _fp16_errors(name: str) -> tuple[float, float, bool]:
    model = light_models.with_random_weights(light_models.load(name))
    feeds = light_models.input_of(model)
    model = light_models.with_logits(with_calibrated_batchnorm(model, feeds))
    want = list(run_ort(model, feeds).values())
    half = Converter(precision="fp16").convert(model)
    assert half.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    rep = pyipu.backend.prepare(half, num_threads=2)
    got = rep.run({k: v.astype(np.float16) for k, v in feeds.items()})
    rep.close()
    probs, probs16 = want[0].astype(np.float64), got[0].astype(np.float64)
    logits, logits16 = want[-1].astype(np.float64), got[-1].astype(np.float64)
    prob_err = float(np.abs(probs16 - probs).max())
    logit_err = float(np.abs(logits16 - logits).max() / np.abs(logits).max())
    top1 = probs16.argmax(-1) == probs.argmax(-1)
    # a different top-1 only counts when fp32 separates the two classes by more than the error
    margin = (
        np.take_along_axis(probs, probs.argmax(-1)[:, None], -1)[:, 0]
        - np.take_along_axis(probs, probs16.argmax(-1)[:, None], -1)[:, 0]
    )
    return prob_err, logit_err, bool(np.all(top1 | (margin <= 2 * prob_err)))


def _check_fp16(name: str) -> None:
    start = time.perf_counter()
    prob_err, logit_err, top1 = _fp16_errors(name)
    took = time.perf_counter() - start
    print(f"{name}: probs {prob_err:.2e}, logits {logit_err:.2e} ({took:.1f} s)")
    assert prob_err <= PROB_ATOL and logit_err <= LOGIT_RTOL and top1, (name, prob_err, logit_err)


@pytest.mark.parametrize("name", FAST)
def test_fp16_light_cnn_within_tolerance_of_fp32(name: str) -> None:
    _check_fp16(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", light_models.LARGE)
def test_fp16_large_light_cnn_within_tolerance_of_fp32(name: str) -> None:
    _check_fp16(name)


# --- the default passes over ONNX's node test suite ----------------------------------------------

# Cases whose converted model legitimately differs: int64 data that does not fit int32, bit
# reinterpretation of int64, onnxruntime lacking an int32 kernel, and a model whose Range reads
# 1-element tensors that onnxruntime only rejects once an If condition is constant.
NODE_SUITE_EXPECTED = {
    "test_bitcast_float64_to_int64",
    "test_bitcast_int64_to_float64",
    "test_unique_length_1",
    "test_affine_grid_2d_expanded",
    "test_affine_grid_2d_align_corners_expanded",
}


def _same(want, got) -> bool:
    for w, g in zip(want, got, strict=True):
        w, g = np.asarray(w), np.asarray(g)
        if w.shape != g.shape:
            return False
        if w.dtype.kind in "fc":
            if not np.allclose(g.astype(w.dtype), w, rtol=1e-4, atol=1e-5, equal_nan=True):
                return False
        elif not np.array_equal(g.astype(w.dtype), w):
            return False
    return True


@pytest.mark.slow  # loading onnx's node cases alone takes ~12 s
def test_default_passes_keep_the_onnx_node_suite_results():
    """Every 4th case of onnx's node suite that onnxruntime runs: the default Converter's model
    passes onnx's checker and gives onnxruntime's results for the original (int64 → int32)."""
    from onnx.backend.test.loader import load_model_tests

    cases = [tc for tc in load_model_tests(kind="node") if getattr(tc, "model", None)]
    checked, bad = 0, []
    for tc in cases[::4]:
        if tc.name in NODE_SUITE_EXPECTED or not tc.data_sets:
            continue
        m = tc.model
        inits = {i.name for i in m.graph.initializer}
        names = [i.name for i in m.graph.input if i.name not in inits]
        arrays = list(tc.data_sets[0][0])
        if len(arrays) != len(names) or any(
            not isinstance(a, np.ndarray) or a.dtype == object for a in arrays
        ):
            continue
        feeds = dict(zip(names, arrays, strict=True))
        try:
            want, _ = run_model(m, feeds)
        except Exception:  # onnxruntime cannot run the original either
            continue
        if any(not isinstance(w, np.ndarray) for w in want):
            continue  # sequences and optionals
        converted = Converter(convert_version=1).convert(m)
        onnx.checker.check_model(converted)
        dtypes = {v.name: v.type.tensor_type.elem_type for v in converted.graph.input}
        fed = {
            n: a.astype(helper.tensor_dtype_to_np_dtype(dtypes[n])) if dtypes.get(n) else a
            for n, a in feeds.items()
        }
        got, _ = run_model(converted, fed)
        checked += 1
        if not _same(want, got):
            bad.append(tc.name)
    assert checked > 250 and not bad, (checked, bad)
