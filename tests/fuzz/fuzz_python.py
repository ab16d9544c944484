"""atheris fuzzing of the Python entry points: any exception other than a pyipu.Error is a
crash (atheris writes the input and exits non-zero).

    python -P tests/fuzz/fuzz_python.py onnx  CORPUS_DIR [libFuzzer flags]
    python -P tests/fuzz/fuzz_python.py popef CORPUS_DIR [libFuzzer flags]

`onnx` compiles the input as ONNX bytes and loads what the compiler produced; `popef` loads
the input as a PopEF image (C reader and verifier through runtime.Runner, and the pure-Python
decoder). An empty CORPUS_DIR is seeded with small models (tests/models.py) or with
tests/fuzz/corpus/container/. The bounded, derandomized version runs in the test suite:
tests/test_fuzz_python.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # entry_points; tests/ for the model builders

with atheris.instrument_imports(include=["pyipu"]):
    from entry_points import compile_onnx, load_popef


def seed(target: str, corpus: Path) -> None:
    corpus.mkdir(parents=True, exist_ok=True)
    if any(corpus.iterdir()):
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
    fn = {"onnx": compile_onnx, "popef": load_popef}[target]
    atheris.Setup([sys.argv[0], str(corpus), *sys.argv[3:]], fn)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
