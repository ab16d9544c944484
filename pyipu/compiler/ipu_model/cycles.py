"""Cycle estimate of one instruction: compute on its tiles + exchange + sync (docs/ipu-model.md).

An instruction's work is split over the tiles holding its (first) output; the busiest tile (the
most output elements) sets the time, and every instruction is one compute set (one BSP sync).
MatMul, Gemm and Conv keep their output blocks on the output's tiles and split the reduction
dimension K over otherwise idle tiles; every tile brings in the activation slices it needs (its
temporary memory; weights are laid out where they are used, as PopLibs' planner does) and the
output tiles receive and add the partial sums. When a tile's
temporaries exceed `available_memory_proportion` × tile memory, the instruction runs in serial
passes (like PopLibs' planner): each pass holds 1/passes of the bytes and costs one more sync."""

from __future__ import annotations

from dataclasses import dataclass

from pyipu.compiler.ipu_model.mapping import WEIGHTS, Mapping, Step, TileMap
from pyipu.compiler.ir import ModelIR, TensorSpec, np_dtype
from pyipu.enums import DType, Op
from pyipu.ipu_targets import IPUTarget

AMP_OPS = frozenset({Op.MATMUL, Op.GEMM, Op.CONV2D})
MOVE_OPS = frozenset(
    {
        Op.COPY,
        Op.CONCAT,
        Op.TRANSPOSE,
        Op.EXPAND,
        Op.REINDEX,
        Op.GATHER,
        Op.GATHER_ELEMENTS,
        Op.GATHER_ND,
        Op.SCATTER_ELEMENTS,
        Op.SCATTER_ND,
    }
)
# Transcendental-heavy ops cost this many vector operations per element.
HEAVY_OPS = frozenset({Op.UNARY, Op.SOFTMAX, Op.LOG_SOFTMAX, Op.INTERP})
HEAVY_COST = 4
K_GRAIN = 64  # at least this much of a MatMul/Conv reduction dimension per tile
PARTIAL_BYTES = 4  # partial sums are float32


@dataclass(frozen=True)
class InstructionCost:
    """Estimated cycles of one instruction (per batch)."""

    program: int
    index: int
    opcode: str
    tiles: int  # tiles doing its work
    passes: int
    compute_cycles: int
    exchange_cycles: int
    sync_cycles: int
    temp_bytes: int  # temporary bytes on its busiest tile (per pass)
    output: str = ""  # the value it writes (its first output's name: the ONNX value, mostly)
    node: str = ""  # the ONNX node it was lowered from ("" when unknown: compiler/sources.py)
    op_type: str = ""  # that node's op type

    @property
    def cycles(self) -> int:
        return self.compute_cycles + self.exchange_cycles + self.sync_cycles


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def amp_shape(
    op: Op, ins: tuple[TensorSpec, ...], out: TensorSpec, attrs: tuple[int, ...]
) -> tuple[int, int, int]:
    """(K, row, K_b) of a MatMul/Gemm/Conv: an output element sums K products; `row` output
    elements share one "a" slice of K values; each of them needs its own "b" slice of K_b.

    MatMul/Gemm y[.., M, N]: row = N, a = a row of A, b = a column of B (K_b = K).
    Conv y[N, M, OH, OW]: row = OH·OW, a = the weights of one output channel (K = C/group·KH·KW),
    b = the input pixel at one output position (K_b = C/group: each pixel is reused by the
    KH·KW taps on the tile, halos ignored).
    """
    if op == Op.CONV2D:
        w = ins[1]
        k = w.numel // w.shape[0]
        return k, out.shape[2] * out.shape[3], w.shape[1]
    a = ins[0]
    if op == Op.GEMM:
        k = a.shape[0] if attrs and attrs[0] else a.shape[-1]
    else:
        k = a.shape[-1]
    return k, out.shape[-1], k


def amp_operand_elements(e: int, row: int, k_a: int, k_b: int) -> int:
    """Input elements a tile computing `e` consecutive output elements needs:
    ceil(e/row) "a" slices of k_a and min(e, row) "b" slices of k_b."""
    return _cdiv(e, row) * k_a + min(e, row) * k_b


def _flops_per_cycle(dtype: DType, t: IPUTarget) -> int:
    if dtype == DType.FLOAT16:
        return t.fp16_flops_per_cycle
    if dtype == DType.FLOAT32:
        return t.fp32_flops_per_cycle
    return 2 * max(1, t.vector_bytes // np_dtype(dtype).itemsize)  # no AMP: vector MACs


def _cost(
    step: Step,
    op: Op,
    tiles: int,
    *,
    passes: int = 1,
    compute: int = 0,
    exchange: int = 0,
    sync: int = 0,
    temp: int = 0,
) -> InstructionCost:
    return InstructionCost(
        step.program, step.index, op.name, tiles, passes, compute, exchange, sync, temp
    )


def _runs(om: TileMap, tpi: int) -> list[tuple[int, int]]:
    return [(a, b) for a, b, _ in om.rects(tpi)]


def instruction_cost(
    ir: ModelIR,
    m: Mapping,
    step: Step,
    t: IPUTarget,
    temp_budget: int,
) -> tuple[InstructionCost, list[tuple[int, int]], list[tuple[int, int, int]]]:
    """The cost, the global tile runs doing the work, and the temporary bytes as
    (first tile, end tile, bytes per tile) runs."""
    ins = step.instr
    op = Op(ins.op)
    tpi = t.tiles_per_ipu
    if not ins.outputs:
        return _cost(step, op, 0), [], []
    out = ir.tensors[ins.outputs[0]]
    om = m.slots[m.tensor_slot[ins.outputs[0]]].tile_map
    e = om.max_elements
    specs = tuple(ir.tensors[i] for i in ins.inputs)
    maps = tuple(m.slots[m.tensor_slot[i]].tile_map for i in ins.inputs)
    if step.inter_ipu:
        link = max(1, int(t.ipu_link_bytes_per_second / t.tile_clock_frequency))
        cost = _cost(
            step, op, om.ntiles, exchange=_cdiv(out.nbytes, link), sync=t.inter_ipu_sync_cycles
        )
        return cost, _runs(om, tpi), []
    if op in AMP_OPS:
        weights = tuple(m.slots[m.tensor_slot[i]].category == WEIGHTS for i in ins.inputs[:2])
        return _amp_cost(step, op, specs, weights, out, om, m.compute_tiles, t, temp_budget)
    itemsize = max([np_dtype(out.dtype).itemsize] + [s.nbytes // s.numel for s in specs])
    work = e
    exchange_bytes = 0
    for s, sm in zip(specs, maps, strict=True):
        if s.numel <= out.numel:
            needed = min(s.numel, e)
        else:
            needed = _cdiv(s.numel * e, out.numel)
            work = max(work, needed)
        if not sm.same_tiles(om):
            exchange_bytes += needed * (s.nbytes // s.numel)
    if op in MOVE_OPS:
        compute = _cdiv(e * np_dtype(out.dtype).itemsize, t.memcpy_bytes_per_cycle)
    else:
        if op == Op.POOL2D:
            work = e * ins.attrs[1] * ins.attrs[2]
        cost_per = HEAVY_COST if op in HEAVY_OPS else 1
        compute = _cdiv(work * cost_per, max(1, t.vector_bytes // itemsize))
    exchange = _cdiv(exchange_bytes, t.exchange_bytes_per_cycle)
    cost = _cost(step, op, om.ntiles, compute=compute, exchange=exchange, sync=t.sync_cycles)
    return cost, _runs(om, tpi), []


def _amp_cost(
    step: Step,
    op: Op,
    specs: tuple[TensorSpec, ...],
    weights: tuple[bool, ...],
    out: TensorSpec,
    om: TileMap,
    compute_tiles: int,
    t: IPUTarget,
    temp_budget: int,
) -> tuple[InstructionCost, list[tuple[int, int]], list[tuple[int, int, int]]]:
    """MatMul/Gemm/Conv: output blocks on the output's tiles, the reduction dimension K split
    `split` ways over otherwise idle tiles (partial sums reduced on the output tiles)."""
    k, row, k_b = amp_shape(op, specs, out, step.instr.attrs)
    e = om.max_elements
    isz = specs[0].nbytes // max(1, specs[0].numel)
    split = max(1, min(compute_tiles // om.ntiles, k // K_GRAIN))
    k_part = _cdiv(k, split)
    # The planner lays weights out where they are used: only activations are exchanged.
    a_is_weight, b_is_weight = weights[1], weights[0]
    if op != Op.CONV2D:
        a_is_weight, b_is_weight = weights[0], weights[1]
    k_a = 0 if a_is_weight else k_part
    k_b = 0 if b_is_weight else _cdiv(k_b, split)
    partial_bytes = e * (split - 1) * PARTIAL_BYTES  # received by each output tile
    need = amp_operand_elements(e, row, k_a, k_b) * isz + partial_bytes
    passes = max(1, _cdiv(need, max(1, temp_budget)))
    temp = _cdiv(need, passes)
    compute = _cdiv(2 * e * k_part, _flops_per_cycle(DType(specs[0].dtype), t))
    if split > 1:  # add the partial sums
        compute += _cdiv(e * (split - 1), max(1, t.vector_bytes // PARTIAL_BYTES))
    tiles = om.ntiles * split
    cost = _cost(
        step,
        op,
        tiles,
        passes=passes,
        compute=compute,
        exchange=_cdiv(need, t.exchange_bytes_per_cycle),
        sync=t.sync_cycles * (passes + (1 if split > 1 else 0)),
        temp=temp,
    )
    base = om.ipu * t.tiles_per_ipu + om.pool_base
    runs = []
    a, b = om.start, om.start + tiles
    if b <= om.pool_size:
        runs.append((base + a, base + b))
    else:
        runs += [(base + a, base + om.pool_size), (base, base + b - om.pool_size)]
    return cost, runs, [(a, b, temp) for a, b in runs]
