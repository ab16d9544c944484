"""The nine light CNNs with random weights: pyipu (C runtime) against ONNX Runtime.

The suite's Real tests (tests/onnx_backend) check the shipped reference outputs, which are
degenerate (every weight 0.02). Here every ConstantOfShape weight fill becomes a random tensor,
and both the probabilities and the logits before the final Softmax are compared at the
required tolerance, rtol 1e-3 / atol 1e-4.
"""

from __future__ import annotations

import light_models
import numpy as np
import onnxruntime as ort
import pytest

import pyipu.backend


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.slow) if n in light_models.LARGE else n
        for n in light_models.NAMES
    ],
)
def test_light_cnn_random_weights_match_onnxruntime(name: str) -> None:
    model = light_models.with_logits(light_models.with_random_weights(light_models.load(name)))
    feeds = light_models.input_of(model)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    rep = pyipu.backend.prepare(model, num_threads=2)
    got = rep.run(feeds)
    rep.close()
    assert len(got) == len(want) == len(model.graph.output)
    for g, w, vi in zip(got, want, model.graph.output, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, vi.name
        assert np.isfinite(w).all() and w.std() > 0, f"{vi.name}: degenerate reference"
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4, err_msg=f"{name}: {vi.name}")
