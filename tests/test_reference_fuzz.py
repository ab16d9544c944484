"""The NumPy reference interpreter on malformed and semantically edited PopEF files: it raises
a pyipu.Error (the C verifier's, or its own for inputs that do not fit) and never an
IndexError, KeyError or another untyped exception, whether the verifier rejects the file or
accepts it.

The property test edits decoded container seeds as tests/fuzz/fuzz_semantic.c does
(tests/fuzz/entry_points.mutate), writes them with pyipu's writer and runs them; bounded here
(derandomized, PYIPU_FUZZ_EXAMPLES examples, default 300), longer with atheris
(`tests/fuzz/fuzz_python.py reference`, run by .ci/fuzz.sh)."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyipu
from pyipu.compiler.executable import Executable
from pyipu.compiler.ir import Direction
from pyipu.compiler.serialize import decode
from pyipu.errors import BadProgramError, CorruptFileError, DTypeError, InvalidArgumentError

FUZZ = Path(__file__).resolve().parent / "fuzz"
sys.path.insert(0, str(FUZZ))
from entry_points import encode_mutated, mutate, run_reference  # noqa: E402

EXAMPLES = int(os.environ.get("PYIPU_FUZZ_EXAMPLES", "300"))
SEEDS = {f.stem: decode(f.read_bytes()) for f in sorted((FUZZ / "corpus" / "container").iterdir())}


def test_load_program_without_bind_is_a_bad_program() -> None:
    """Reading a weight no BIND bound was a RuntimeError of the reference (and a crash of the
    runtime); now the verifier refuses the file first."""
    exe = Executable.from_bytes(
        (FUZZ / "regressions" / "semantic" / "load_without_bind.bin").read_bytes()
    )
    with pytest.raises(BadProgramError, match="which the Load program does not BIND"):
        exe.run_reference({"x": np.zeros((1, 3, 2, 2), np.float32)})


def test_index_anchor_on_a_weight_is_corrupt() -> None:
    """Storing the subgraph index into a weight wrote read-only memory (a ValueError from NumPy
    here, SIGSEGV in the runtime)."""
    exe = Executable.from_bytes(
        (FUZZ / "regressions" / "semantic" / "index_anchor_is_weight.bin").read_bytes()
    )
    with pytest.raises(CorruptFileError, match="index_anchor 1 is a TENSOR_DATA anchor"):
        exe.run_reference({"x": np.zeros((1, 3, 2, 2), np.float32)})


def test_unverifiable_model_is_refused_before_running() -> None:
    """A ModelIR run directly (no file) is verified too: an operand out of range was an
    IndexError from the tensor table."""
    ir = SEEDS["scale"]
    main = ir.program(ir.main_programs[0])
    ins = dataclasses.replace(main.instrs[0], inputs=(99, *main.instrs[0].inputs[1:]))
    bad = dataclasses.replace(main, instrs=(ins, *main.instrs[1:]))
    ir = dataclasses.replace(ir, programs=tuple(bad if p is main else p for p in ir.programs))
    with pytest.raises(BadProgramError, match="tensor index 99 out of range"):
        Executable.from_program(ir).run_reference({})


def test_inputs_that_do_not_fit_are_typed_errors() -> None:
    exe = Executable.from_program(SEEDS["scale"])
    names = [
        a.name
        for a in exe.program.anchors
        if a.direction == Direction.INPUT and not a.has_tensor_data
    ]
    spec = exe.program.tensors[exe.program.anchor(names[0]).tensor]
    with pytest.raises(InvalidArgumentError, match="missing inputs"):
        exe.run_reference({})
    with pytest.raises(DTypeError, match="has dtype int8"):
        exe.run_reference({n: np.zeros(spec.shape, np.int8) for n in names})
    with pytest.raises(InvalidArgumentError, match="unknown or non-feedable"):
        exe.run_reference({"nope": np.zeros(1)})
    with pytest.raises(InvalidArgumentError, match="subgraph 3 out of range"):
        exe.run_reference({}, subgraph=3)


def test_index_that_is_not_an_integer_is_an_invalid_argument() -> None:
    exe = Executable.from_program(SEEDS["fused"])
    index = exe.program.anchors[exe.program.index_anchor].name
    with pytest.raises(InvalidArgumentError, match="must select one subgraph"):
        exe.run_reference({index: np.array([np.nan])})


MALFORMED = sorted((FUZZ / "malformed").glob("*.bin")) + sorted(
    (FUZZ / "regressions" / "semantic").glob("*.bin")
)


@pytest.mark.parametrize("path", MALFORMED, ids=lambda p: p.name)
def test_reference_on_malformed_and_regression_files(path: Path) -> None:
    run_reference(path.read_bytes())


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_reference_on_edited_models_raises_only_pyipu_errors(data: st.DataObject) -> None:
    seed = SEEDS[data.draw(st.sampled_from(sorted(SEEDS)))]

    def choose(n: int) -> int:
        return data.draw(st.integers(0, n - 1))

    image = encode_mutated(mutate(seed, choose, data.draw(st.integers(1, 3))))
    if image is not None:
        run_reference(image)


def test_property_reaches_both_verdicts() -> None:
    """The edits give files the verifier accepts (and the reference runs) as well as files it
    rejects: a mutator whose every output is rejected would test nothing."""
    import random

    rng = random.Random(0)
    verdicts = set()
    for _ in range(60):
        ir = mutate(SEEDS["scale"], rng.randrange, 1)
        image = encode_mutated(ir)
        if image is None:
            continue
        try:
            Executable.from_bytes(image).native()
            verdicts.add("accepted")
        except pyipu.Error:
            verdicts.add("rejected")
    assert verdicts == {"accepted", "rejected"}
