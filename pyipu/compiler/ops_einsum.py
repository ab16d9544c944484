"""Einsum lowered to TRANSPOSE, REDUCE_SUM and batched MATMUL (see ops.py).

Operands are combined left to right. For a pair, each letter is a batch letter (in both operands
and still needed), a contracted letter (in both, not needed any more) or kept by one side; letters
only one side has and nobody needs are summed away first. The pair then becomes one
[batch, M, K] x [batch, K, N] MATMUL between transposed views. Repeated letters within one operand
(diagonals) are not supported.
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence

from pyipu.compiler.ir import NUMERIC_DTYPES
from pyipu.compiler.lower import Node
from pyipu.compiler.ops import register
from pyipu.enums import Op


class _Term:
    """An intermediate: tensor index, its letters and their sizes."""

    def __init__(self, t: int, letters: str, sizes: dict[str, int]) -> None:
        self.t, self.letters, self.sizes = t, letters, sizes

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.sizes[c] for c in self.letters)


def _parse(n: Node, ranks: Sequence[int]) -> tuple[list[str], str]:
    eq = str(n.attr("equation", "")).replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        n.fail(f"equation {eq!r} has {len(terms)} operands, the node {len(ranks)}")
    used = set(eq) - set(".,->")
    spare = [c for c in string.ascii_letters if c not in used]
    ell_rank = max(
        (r - len(t.replace("...", "")) for t, r in zip(terms, ranks, strict=True) if "..." in t),
        default=0,
    )
    ell = "".join(spare[:ell_rank])
    out_terms = []
    for t, r in zip(terms, ranks, strict=True):
        if "..." in t:
            k = r - len(t.replace("...", ""))
            t = t.replace("...", ell[ell_rank - k :] if k else "")
        if len(t) != r or (t and not t.isalpha()):
            n.shape_error(f"term {t!r} of {eq!r} does not match an operand of rank {r}")
        if len(set(t)) != len(t):
            n.fail(f"repeated index in {t!r} (diagonals) is not supported")
        out_terms.append(t)
    if arrow:
        out = rhs.replace("...", ell)
    else:  # implicit output: ellipsis dims, then letters seen once, alphabetically
        counts = {c: sum(t.count(c) for t in out_terms) for c in set("".join(out_terms))}
        out = ell + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell))
    if len(set(out)) != len(out) or any(c not in "".join(out_terms) for c in out):
        n.shape_error(f"output {out!r} of {eq!r} is not valid")
    return out_terms, out


def _arrange(n: Node, term: _Term, letters: str, tag: str) -> _Term:
    """`term` transposed to the letter order `letters` (no copy when already in order)."""
    if letters == term.letters:
        return term
    perm = [term.letters.index(c) for c in letters]
    shape = [term.sizes[c] for c in letters]
    dt = n.low.b.tensors[term.t].dtype
    moved = [p for p in perm if term.shape[p] != 1]
    if moved == sorted(moved):
        t = n.low.b.view(term.t, shape, f"{n.outputs[0]}:{tag}")
    else:
        t = n.emit_temp(Op.TRANSPOSE, [term.t], shape, dt, perm, f":{tag}")
    return _Term(t, letters, term.sizes)


def _sum_out(n: Node, term: _Term, drop: set[str], tag: str) -> _Term:
    """Sum `term` over the letters in `drop`."""
    if not drop:
        return term
    keep = "".join(c for c in term.letters if c not in drop)
    gone = "".join(c for c in term.letters if c in drop)
    term = _arrange(n, term, keep + gone, tag + "t")
    outer, red = math.prod(term.sizes[c] for c in keep), math.prod(term.sizes[c] for c in gone)
    dt = n.low.b.tensors[term.t].dtype
    shape = [term.sizes[c] for c in keep]
    t = n.emit_temp(Op.REDUCE_SUM, [term.t], shape, dt, [outer, red, 1], f":{tag}")
    return _Term(t, keep, term.sizes)


def _contract(n: Node, a: _Term, b: _Term, needed: set[str], tag: str) -> _Term:
    batch = "".join(c for c in a.letters if c in b.letters and c in needed)
    inner = "".join(c for c in a.letters if c in b.letters and c not in needed)
    a = _sum_out(n, a, {c for c in a.letters if c not in b.letters and c not in needed}, tag + "sa")
    b = _sum_out(n, b, {c for c in b.letters if c not in a.letters and c not in needed}, tag + "sb")
    m = "".join(c for c in a.letters if c not in b.letters)
    k = "".join(c for c in b.letters if c not in a.letters)
    sizes = {**a.sizes, **b.sizes}
    bt, mm, kk, nn = (math.prod(sizes[c] for c in s) for s in (batch, m, inner, k))
    a = _arrange(n, a, batch + m + inner, tag + "a")
    b = _arrange(n, b, batch + inner + k, tag + "b")
    view = n.low.b.view
    av = view(a.t, (bt, mm, kk), f"{n.outputs[0]}:{tag}a3")
    bv = view(b.t, (bt, kk, nn), f"{n.outputs[0]}:{tag}b3")
    dt = n.low.b.tensors[a.t].dtype
    y = n.emit_temp(Op.MATMUL, [av, bv], (bt, mm, nn), dt, suffix=f":{tag}mm")
    letters = batch + m + k
    return _Term(view(y, [sizes[c] for c in letters], f"{n.outputs[0]}:{tag}y"), letters, sizes)


@register("Einsum", 12)
def Einsum(n: Node) -> None:  # noqa: N802
    count = len(n.inputs)
    n.check_dtype(NUMERIC_DTYPES, *range(count))
    terms, out = _parse(n, [len(n.shape(i)) for i in range(count)])
    sizes: dict[str, int] = {}
    for i, t in enumerate(terms):
        for c, d in zip(t, n.shape(i), strict=True):
            if sizes.setdefault(c, d) != d:
                n.shape_error(
                    f"index {c!r} has sizes {sizes[c]} and {d} (broadcasting is not supported)"
                )
    acc = _Term(n.input(0), terms[0], sizes)
    for i in range(1, count):
        needed = set(out) | set("".join(terms[i + 1 :]))
        acc = _contract(n, acc, _Term(n.input(i), terms[i], sizes), needed, f"e{i}")
    acc = _sum_out(n, acc, {c for c in acc.letters if c not in out}, "sum")
    acc = _arrange(n, acc, out, "out")
    n.set_view(acc.t, acc.shape)
