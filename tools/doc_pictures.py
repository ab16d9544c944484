"""Draw the pictures docs/notebooks.md shows, into docs/pictures/.

    python tools/doc_pictures.py

SqueezeNet (onnx's light model, random weights, built here: nothing is downloaded) compiled
with overlap I/O, run for 64 requests with tracepoints recorded; then the `%ipu profile`
pictures, the `%ipu graph` drawing and a zoomed `%ipu timeline` window, each written as the
notebook shows it (PNG, or the SVG of the HTML output).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "docs" / "pictures"
sys.path[:0] = [str(REPO / "tests")]


def main() -> None:
    from light_models import load, with_random_weights
    from magics_shell import magic, shell
    from pyipu.magics.graph import GraphResult

    ip = shell()
    ip.user_ns["model"] = with_random_weights(load("squeezenet"))
    exe = magic(ip, "compile model -q --batches-per-step 4 --num-io-tiles auto")
    ip.user_ns["exe"] = exe
    ip.user_ns["res"] = magic(ip, "run exe --requests 64 --threads 2 --record --no-widgets")
    prof = magic(ip, "profile exe --run res")
    OUT.mkdir(exist_ok=True)
    for name, png in prof.figures.items():
        (OUT / f"profile_{name}.png").write_bytes(png)
    g: GraphResult = magic(ip, "graph exe")
    (OUT / "graph.svg").write_text(_standalone(g.svg))
    view = magic(ip, "timeline res")
    view.zoom(6)
    (OUT / "timeline_zoomed.svg").write_text(_standalone(view.svg()))
    for p in sorted(OUT.iterdir()):
        print(f"{p.relative_to(REPO)}: {p.stat().st_size} bytes")


def _standalone(svg: str) -> str:
    """An SVG file that renders on a white page (the notebook draws it on one)."""
    head, _, rest = svg.partition(">")
    return f'{head}><rect width="100%" height="100%" fill="#fff"/>{rest}\n'


if __name__ == "__main__":
    main()
