"""PopTorch's helper ops: each lowered model against the same model run eagerly by torch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pyipu import errors, poptorch  # noqa: E402


class Dynamic(torch.nn.Module):
    def forward(self, x: torch.Tensor, start: torch.Tensor):  # type: ignore[no-untyped-def]
        y = poptorch.dynamic_slice(x, 1, start, 2, 2)
        z = poptorch.dynamic_update(x, torch.ones(3, 2) * 7, 1, start, 2)
        return y, z


@pytest.mark.parametrize("start", [0, 1, 3, 9, -4])
def test_dynamic_slice_and_update_follow_the_fed_start(start: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 6)
    model = poptorch.inferenceModel(Dynamic())
    model(x, torch.tensor(0))  # compiled once; the start changes from call to call
    got = model(x, torch.tensor(start))
    want = Dynamic()(x, torch.tensor(start))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    s = min(max(start, 0), 6 - 3)  # clamped: slices of 2 every 2 end at index 4 at most
    torch.testing.assert_close(got[0], x[:, s : s + 3 : 2])
    expected = x.clone()
    first = min(max(start, 0), 4)
    expected[:, first : first + 2] = 7
    torch.testing.assert_close(got[1], expected)


def test_dynamic_slice_that_cannot_fit_is_refused() -> None:
    with pytest.raises(poptorch.Error, match="does not fit"):
        poptorch.dynamic_slice(torch.zeros(2, 3), 1, torch.tensor(0), 2, 3)
    with pytest.raises(poptorch.Error, match="src has 1"):
        poptorch.dynamic_update(torch.zeros(2, 3), torch.zeros(2, 1), 1, 0, 2)


class Printing(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor):  # type: ignore[no-untyped-def]
        x = x + 1
        x = poptorch.ipu_print_tensor(x, "x plus one", digits=3)
        return x + self.bias


def test_ipu_print_tensor_prints_every_batch_a_call_runs(capsys: pytest.CaptureFixture) -> None:
    x = torch.arange(8, dtype=torch.float32).reshape(4, 2)
    opts = poptorch.Options().deviceIterations(2)
    model = poptorch.inferenceModel(Printing(), opts)
    torch.testing.assert_close(model(x), x + 1)
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["x plus one: [[1. 2.]", " [3. 4.]]", "x plus one: [[5. 6.]", " [7. 8.]]"]
    Printing()(x[:1])  # run eagerly it prints at once
    assert capsys.readouterr().out == "x plus one: [[1. 2.]]\n"


def test_ipu_print_tensor_in_a_training_model(capsys: pytest.CaptureFixture) -> None:
    class Loss(Printing):
        def forward(self, x: torch.Tensor):  # type: ignore[no-untyped-def]
            return poptorch.identity_loss(super().forward(x), "sum")

    model = Loss()
    training = poptorch.trainingModel(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    x = torch.zeros(1, 3)
    training(x)
    training(x)  # the printed value is taken before the bias, which learns -3 × lr a step
    assert capsys.readouterr().out.splitlines() == ["x plus one: [[1. 1. 1.]]"] * 2
    assert float(model.bias.detach()) == pytest.approx(-0.6)


def test_ipu_print_tensor_formatting() -> None:
    fmt = poptorch.ops.PrintFormat("t", separator=",", open_bracket="(", close_bracket=")")
    import numpy as np

    assert fmt.render(np.array([1.5, 2.0], np.float32)) == "t: (1.5,2. )"
    with pytest.raises(poptorch.Error, match="float_format"):
        poptorch.ipu_print_tensor(torch.zeros(1), float_format="hex")


def test_serialized_matmul_nop_and_available_memory_compute_the_plain_values() -> None:
    class Model(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor):  # type: ignore[no-untyped-def]
            mode = poptorch.MatMulSerializationMode.OutputChannels
            y = poptorch.serializedMatMul(a, b, mode, 4)
            y = poptorch.set_available_memory(y, 0.3)
            return poptorch.nop(y)

    torch.manual_seed(0)
    a, b = torch.randn(5, 6), torch.randn(6, 8)
    torch.testing.assert_close(poptorch.inferenceModel(Model())(a, b), a @ b)
    with pytest.raises(poptorch.Error, match="must divide"):
        poptorch.serializedMatMul(a, b, poptorch.MatMulSerializationMode.ReducingDim, 4)
    with pytest.raises(poptorch.Error, match=r"\(0, 1\]"):
        poptorch.set_available_memory(a, 0.0)


def test_multiconv_context_computes_the_same_convolutions() -> None:
    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Conv2d(3, 4, 3), torch.nn.Conv2d(3, 4, 1)

        def forward(self, x: torch.Tensor):  # type: ignore[no-untyped-def]
            with (
                poptorch.MultiConv()
                .planType(poptorch.MultiConvPlanType.Serial)
                .availableMemoryProportions([0.2, 0.4])
            ):
                return self.a(x), self.b(x)  # fmt: skip

    torch.manual_seed(0)
    model, x = Model().eval(), torch.randn(1, 3, 8, 8)
    for got, want in zip(poptorch.inferenceModel(model)(x), model(x), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(poptorch.Error, match="MultiConvPlanType"):
        poptorch.MultiConv().planType("serial")  # type: ignore[arg-type]


def test_custom_op_with_an_op_pyipu_knows_runs() -> None:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor):  # type: ignore[no-untyped-def]
            (y,) = poptorch.custom_op([x], "LeakyRelu", "ai.onnx", 6, [x], {"alpha": 0.25})
            values, indices = poptorch.custom_op(
                [y, torch.tensor([2])], "TopK", "ai.onnx", 11, [y[:, :2], y[:, :2].long()],
                attributes={"axis": 1},
            )  # fmt: skip
            return values, indices

    torch.manual_seed(0)
    x = torch.randn(3, 5)
    values, indices = poptorch.inferenceModel(Model())(x)
    want = torch.topk(torch.nn.functional.leaky_relu(x, 0.25), 2)
    torch.testing.assert_close(values, want.values)
    torch.testing.assert_close(indices, want.indices)


def test_custom_op_pyipu_does_not_know_is_refused_naming_it() -> None:
    class Cube(torch.nn.Module):
        def forward(self, x: torch.Tensor, bias: torch.Tensor):  # type: ignore[no-untyped-def]
            attributes = {"float_one": 1.0, "ints": [1, 2], "a_string": "s", "strs": ["a", "b"]}
            return poptorch.custom_op([x, bias], "Cube", "com.acme", 1, [x, x], attributes)

    x = torch.randn(2, 3)
    with pytest.raises(errors.Error, match=r"com\.acme"):
        poptorch.inferenceModel(Cube())(x, x)
    with pytest.raises(poptorch.UnsupportedFeatureError, match="lowered for pyipu"):
        Cube()(x, x)  # no host implementation exists


def test_custom_op_attribute_types_are_checked() -> None:
    class Bad(torch.nn.Module):
        def forward(self, x: torch.Tensor):  # type: ignore[no-untyped-def]
            return poptorch.custom_op([x], "Relu", "ai.onnx", 6, [x], {"g": {"nested": 1}})[0]

    with pytest.raises(poptorch.Error, match="attribute 'g'"):
        poptorch.inferenceModel(Bad())(torch.zeros(2))
