"""The `%ipu` command line: one IPython MagicArgumentParser with a sub-parser per verb.

IPython's `magic_arguments` has no sub-commands, so the verbs are argparse sub-parsers of its
`MagicArgumentParser` (whose `error` raises UsageError instead of exiting). `-h` prints the
verb's help and the magic returns None rather than exiting the kernel.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import MagicArgumentParser
from IPython.utils.text import dedent

VERBS = (
    "devices",
    "compile",
    "fuse",
    "run",
    "compare",
    "dump",
    "profile",
    "graph",
    "timeline",
    "train",
)


class HelpShown(Exception):
    """`-h` was given: the help was printed, there is nothing to run."""


class _Parser(MagicArgumentParser):
    def exit(self, status: int = 0, message: str | None = None) -> Any:
        if status:
            raise UsageError(message or "invalid arguments")
        raise HelpShown

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        try:
            return super().parse_args(args, namespace)
        except UsageError as e:
            raise UsageError(f"{e}\n(%ipu -h or %ipu? shows the help)") from None


def _checked(convert: Callable[[str], Any], ok: Callable[[Any], bool], expected: str) -> Any:
    """An argparse `type`: convert the text, then check the value (messages name both)."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


_positive = _checked(int, lambda v: v >= 1, "a positive integer")
_non_negative = _checked(int, lambda v: v >= 0, "an integer >= 0")
_positive_float = _checked(float, lambda v: 0 < v < float("inf"), "a positive number")
_identifier = _checked(str, str.isidentifier, "a Python variable name")
_proportion = _checked(float, lambda v: 0 < v <= 1, "a number in (0, 1]")
_io_tiles = _checked(
    lambda t: t if t == "auto" else int(t), lambda v: v == "auto" or v >= 0, "N >= 0 or 'auto'"
)


def _csv(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def _add_compile_options(p: argparse.ArgumentParser) -> None:
    """Options shared by `compile` and `fuse` (CompilerOptions fields)."""
    p.add_argument("-o", "--output", metavar="FILE", help="also write the PopEF file here")
    p.add_argument("--batches-per-step", type=_positive, default=1, metavar="N", help="default 1")
    p.add_argument(
        "--num-io-tiles",
        type=_io_tiles,
        default=0,
        metavar="N|auto",
        help="I/O tiles for overlap I/O (0: off; auto: sized from the I/O bytes)",
    )
    p.add_argument("--ipu-version", choices=("ipu2", "ipu21"), default="ipu2")
    p.add_argument(
        "--available-memory-proportion",
        type=_proportion,
        default=0.6,
        metavar="F",
        help="share of a tile's memory MatMul/Conv temporaries may use (default 0.6)",
    )
    p.add_argument(
        "--allow-out-of-memory",
        action="store_true",
        help="compile a model that does not fit on the IPU, for CPU use",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no summary")


def _window(text: str) -> tuple[float, float]:
    """--window START,END in ms: two numbers, START < END."""
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        lo = hi = math.nan
    if not 0 <= lo < hi:
        raise argparse.ArgumentTypeError(f"expected START,END in ms with START < END, got {text!r}")
    return lo, hi


def _build() -> _Parser:
    top = _Parser(
        prog="ipu",
        description=(
            "Compile, fuse, run, dump and profile IPU models from a notebook. "
            "Verbs: " + ", ".join(VERBS) + ". `%ipu VERB -h` shows a verb's options."
        ),
        add_help=True,
    )
    verbs = top.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    verbs.required = True

    verbs.add_parser(
        "devices", add_help=True, help="the virtual IPUs and their constants, as a table"
    )

    p = verbs.add_parser(
        "compile", add_help=True, help="compile an ONNX model (progress bar, summary)"
    )
    p.add_argument("model", metavar="MODEL", help="a path, a ModelProto or a variable's name")
    p.add_argument(
        "--outputs", type=_csv, metavar="A,B", help="output names (default: every graph output)"
    )
    p.add_argument("--precision", choices=("fp32", "fp16"), default="fp32")
    p.add_argument(
        "--input-shape",
        nargs="+",
        metavar="NAME=D0,D1",
        help="static shapes for inputs with dynamic dimensions",
    )
    p.add_argument(
        "--batch-size", type=_positive, metavar="N", help="set the batch dim of every input"
    )
    _add_compile_options(p)

    p = verbs.add_parser(
        "fuse", add_help=True, help="%%%%ipu fuse: the cell is a PopRT model-fusion YAML"
    )
    _add_compile_options(p)

    p = verbs.add_parser(
        "run", add_help=True, help="run an executable with live widgets (statistics)"
    )
    p.add_argument("exe", metavar="EXE", help="an Executable, a PopEF path or a variable's name")
    p.add_argument(
        "--threads", type=_positive, metavar="N", help="compute threads (default: all cores)"
    )
    amount = p.add_mutually_exclusive_group()
    amount.add_argument(
        "--requests", type=_positive, metavar="N", help="requests to run (default 200)"
    )
    amount.add_argument(
        "--seconds", type=_positive_float, metavar="S", help="run for S seconds instead"
    )
    p.add_argument(
        "--batch", type=_positive, default=1, metavar="N", help="batches per request (default 1)"
    )
    p.add_argument(
        "--in-flight",
        type=_positive,
        metavar="N",
        help="requests queued at once (default 2 x batches_per_step x batch, at least 4)",
    )
    p.add_argument(
        "--inputs", metavar="VAR", help="a variable holding the inputs dict (default: random)"
    )
    p.add_argument(
        "--timeout-ns",
        type=_non_negative,
        metavar="NS",
        help="RuntimeConfig.timeout_ns: wait before padding a started step (default 10 ms; "
        "0 = forever, only with batches_per_step 1)",
    )
    p.add_argument(
        "--record",
        type=_positive,
        nargs="?",
        const=4096,
        metavar="EVENTS",
        help="record load/compute/store tracepoints (default 4096 events) for %%ipu profile",
    )
    p.add_argument("--seed", type=int, default=0, help="random inputs' seed (default 0)")
    p.add_argument(
        "--no-widgets", action="store_true", help="no live widgets; just return the result"
    )
    p.add_argument(
        "--background",
        action="store_true",
        help="return a RunHandle at once and run in a thread (the kernel stays free; the "
        "dashboard gets a Stop button)",
    )
    p.add_argument(
        "-o",
        "--output-var",
        type=_identifier,
        metavar="VAR",
        help="also keep the RunResult (RunHandle with --background) in the variable VAR, as "
        "%%timeit -o keeps its result (the way to keep a %%%%ipu run cell's result)",
    )

    p = verbs.add_parser(
        "compare",
        add_help=True,
        help="several runs or executables side by side (a pandas DataFrame when pandas is "
        "installed)",
    )
    p.add_argument(
        "items",
        nargs="+",
        metavar="RESULT|EXE",
        help="RunResults of `%%ipu run`, or executables (the IPU Model's estimates)",
    )

    p = verbs.add_parser("dump", add_help=True, help="a PopEF file's contents as HTML tables")
    p.add_argument("file", metavar="FILE", help="a PopEF path, an Executable or a variable")
    p.add_argument("-i", "--instructions", action="store_true", help="list every instruction")

    p = verbs.add_parser(
        "profile",
        add_help=True,
        help="pictures: tile memory heat map, cycles per instruction, run timeline",
    )
    p.add_argument("exe", metavar="EXE", help="an Executable, a PopEF path or a variable")
    p.add_argument(
        "--run",
        metavar="RESULT",
        help="a RunResult of `%%ipu run EXE --record` for the timeline (default: record a short "
        "run now)",
    )
    p.add_argument(
        "--requests",
        type=_positive,
        default=16,
        metavar="N",
        help="requests of the recorded run made without --run (default 16)",
    )
    p.add_argument("--no-timeline", action="store_true", help="only the IPU Model's pictures")
    p.add_argument("--top", type=_positive, default=30, metavar="N", help="instructions shown")
    p.add_argument("--ipu", type=int, default=0, metavar="I", help="which IPU's tiles (default 0)")

    p = verbs.add_parser(
        "graph",
        add_help=True,
        help="the compiled model's ONNX nodes as a graph: what each became (instructions, "
        "fused, view), output shapes, estimated cycles and bytes per node",
    )
    p.add_argument("exe", metavar="EXE", help="an Executable, a PopEF path or a variable")

    p = verbs.add_parser(
        "timeline",
        add_help=True,
        help="a recorded run's load / compute / store lanes, with zoom and pan",
    )
    p.add_argument("run", metavar="RESULT", help="a RunResult of `%%ipu run EXE --record`")
    p.add_argument(
        "--window",
        type=_window,
        metavar="START,END",
        help="the part shown first, in ms since the first event (default: the whole run)",
    )
    p = verbs.add_parser(
        "train",
        add_help=True,
        help="run a pyipu.popart.TrainingSession or a pyipu.poptorch trainingModel with a live "
        "loss curve (Ctrl-C stops after the run in flight)",
    )
    p.add_argument("session", metavar="SESSION", help="a TrainingSession or trainingModel variable")
    p.add_argument(
        "feeds",
        metavar="FEEDS",
        help="the runs' inputs: a dict (the same every run), a function of the run number "
        "returning one, or an iterable of them (a trainingModel's: argument tuples, e.g. a "
        "poptorch.DataLoader)",
    )
    p.add_argument("--runs", type=_positive, metavar="N", help="how many runs (calls)")
    p.add_argument("--anchor", metavar="ID", help="the anchor plotted (default: the loss)")
    p.add_argument(
        "-o",
        "--output-var",
        type=_identifier,
        metavar="VAR",
        help="also keep the TrainResult (losses, runs, samples/s) in the variable VAR "
        "(it is always in _ipu_last_train)",
    )
    return top


PARSER = _build()


def full_help() -> str:
    """The top-level help followed by every verb's: what `%ipu?` shows."""
    parts = [PARSER.format_help()]
    for action in PARSER._subparsers._group_actions:  # type: ignore[union-attr]
        for name, sub in action.choices.items():
            parts.append(f"--- %ipu {name} ---\n{sub.format_help()}")
    # IPython's parsers open each usage with a reST "::" line, noise in `%ipu?`
    lines = "\n".join(parts).splitlines()
    return dedent("\n".join(line for line in lines if line.strip() != "::"))


def parse(line: str) -> argparse.Namespace:
    """The parsed `%ipu` line; UsageError on bad arguments, HelpShown after `-h`."""
    return PARSER.parse_argstring(line)
