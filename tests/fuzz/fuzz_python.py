"""atheris fuzzing of the Python entry points: any exception other than a pyipu.Error is a
crash (atheris writes the input and exits non-zero).

    python -P tests/fuzz/fuzz_python.py onnx  CORPUS_DIR [libFuzzer flags]
    python -P tests/fuzz/fuzz_python.py popef CORPUS_DIR [libFuzzer flags]

    python -P tests/fuzz/fuzz_python.py reference CORPUS_DIR [libFuzzer flags]

`onnx` compiles the input as ONNX bytes and loads what the compiler produced; `popef` loads
the input as a PopEF image (C reader and verifier through runtime.Runner, and the pure-Python
decoder); `reference` reads the input as a stream of choices that pick a container seed and
edit its decoded model (entry_points.mutate), writes it with pyipu's writer and runs the NumPy
reference interpreter on it (entry_points.run_reference). An empty CORPUS_DIR is seeded with
small models (tests/models.py), with tests/fuzz/corpus/container/, or with a few choice
streams. The bounded, derandomized version runs in the test suite:
tests/test_fuzz_python.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # entry_points; tests/ for the model builders

with atheris.instrument_imports(include=["pyipu"]):
    from entry_points import compile_onnx, encode_mutated, load_popef, mutate, run_reference

_SEEDS: list = []


def reference(data: bytes) -> None:
    """Edit a decoded container seed as the input's choices say, then run the reference."""
    if not _SEEDS:
        from pyipu.compiler.serialize import decode

        _SEEDS.extend(
            decode(f.read_bytes()) for f in sorted((HERE / "corpus" / "container").iterdir())
        )
    fdp = atheris.FuzzedDataProvider(data)

    def choose(n: int) -> int:
        return fdp.ConsumeIntInRange(0, n - 1)

    image = encode_mutated(mutate(_SEEDS[choose(len(_SEEDS))], choose, 1 + choose(3)))
    if image is not None:
        run_reference(image)


def seed(target: str, corpus: Path) -> None:
    corpus.mkdir(parents=True, exist_ok=True)
    if any(corpus.iterdir()):
        return
    if target == "reference":
        for k in range(8):
            (corpus / f"choices{k}").write_bytes(bytes((k * 37 + 11 * i) & 0xFF for i in range(64)))
        return
    if target == "popef":
        for f in (HERE / "corpus" / "container").iterdir():
            (corpus / f.name).write_bytes(f.read_bytes())
        return
    import models

    for name in ("fusion_model0", "fusion_model1", "scale_model"):
        (corpus / f"{name}.onnx").write_bytes(getattr(models, name)().SerializeToString())


def main() -> None:
    target, corpus = sys.argv[1], Path(sys.argv[2])
    seed(target, corpus)
    fn = {"onnx": compile_onnx, "popef": load_popef, "reference": reference}[target]
    atheris.Setup([sys.argv[0], str(corpus), *sys.argv[3:]], fn)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
