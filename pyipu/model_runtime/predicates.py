"""Anchor callback predicates: which anchors a QueueManager serves (Model Runtime's
`predicate_factory`). A predicate maps an anchor descriptor to an AnchorCallbackPolicy."""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum

from pyipu import _core
from pyipu.runtime.descriptors import DataDesc


class AnchorCallbackPolicy(IntEnum):
    """How an anchor is served: BIND_USER_CB by the QueueManager's queues, BIND_EMPTY_CB by a
    no-op (inputs read zeros, outputs are dropped), BIND_TENSOR_DATA by the PopEF's own bytes."""

    BIND_USER_CB = _core.BIND_QUEUE
    BIND_EMPTY_CB = _core.BIND_EMPTY
    BIND_TENSOR_DATA = _core.BIND_TENSOR_DATA


Predicate = Callable[[DataDesc], AnchorCallbackPolicy]


def pred_streamed(
    accept: AnchorCallbackPolicy = AnchorCallbackPolicy.BIND_USER_CB,
    reject: AnchorCallbackPolicy = AnchorCallbackPolicy.BIND_EMPTY_CB,
) -> Predicate:
    """Accept anchors the Main program streams (everything but PopEF weights); Graphcore's
    `predProgramFlowMain`: weights are loaded once by the Load program instead."""

    def predicate(anchor: DataDesc) -> AnchorCallbackPolicy:
        return reject if anchor.popef_contains_tensor_data else accept

    return predicate


def pred_names(
    names: set[str] | list[str],
    accept: AnchorCallbackPolicy = AnchorCallbackPolicy.BIND_USER_CB,
    reject: AnchorCallbackPolicy = AnchorCallbackPolicy.BIND_EMPTY_CB,
) -> Predicate:
    """Accept exactly the named anchors."""
    wanted = set(names)

    def predicate(anchor: DataDesc) -> AnchorCallbackPolicy:
        return accept if anchor.name in wanted else reject

    return predicate


def or_bind(
    accept: AnchorCallbackPolicy,
    reject: AnchorCallbackPolicy,
    *predicates: Predicate,
) -> Predicate:
    """Accept when any predicate accepts (returns `accept`), else `reject` (Graphcore's orBind)."""

    def predicate(anchor: DataDesc) -> AnchorCallbackPolicy:
        return accept if any(p(anchor) == accept for p in predicates) else reject

    return predicate


pred_program_flow_main = pred_streamed  # Model Runtime's name
