"""PopRT's pass registry: `Pass`, `register`, `get_registered_passes`, `PassManager`.

A pass is a class with `run(onnx_model) -> onnx_model`, registered under a name:

    >>> import pyipu
    >>> @pyipu.passes.register("rename_graph")
    ... class RenameGraph(pyipu.Pass):
    ...     def __init__(self, name: str = "renamed") -> None:
    ...         super().__init__()
    ...         self.new_name = name
    ...     def run(self, onnx_model):
    ...         onnx_model.graph.name = self.new_name
    ...         return onnx_model
    >>> pyipu.PassManager(["rename_graph"]).run(model).graph.name  # doctest: +SKIP
    'renamed'

Constraints between passes (static helpers, as decorators under `register`):
`Pass.constraint_passes("before", [...])` (run this pass before those when both are used),
`"depend"` (those must run first; missing ones are added), `"against"` (never together).
`PassManager.sort_passes` orders a request accordingly, keeping the given order otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, TypeVar

import onnx

from pyipu.passes.errors import PassConstraintError, PassRegistrationError, UnknownPassError

_REGISTRY: dict[str, type[Pass]] = {}
_CONSTRAINT_KINDS = ("before", "depend", "against")

P = TypeVar("P", bound="type[Pass]")
Transform = Callable[[onnx.GraphProto, bool], onnx.GraphProto]


class Pass:
    """Base class of every pass: override `run(onnx_model) -> onnx_model`."""

    name: ClassVar[str] = ""
    properties: ClassVar[dict[str, Any]] = {}
    constraints: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:
            raise TypeError(f"pass {type(self).__name__} takes no arguments")

    def run(self, onnx_model: onnx.ModelProto) -> onnx.ModelProto:
        raise NotImplementedError(f"{type(self).__name__}.run is not implemented")

    def __call__(self, onnx_model: onnx.ModelProto) -> onnx.ModelProto:
        return self.run(onnx_model)

    @staticmethod
    def traverse_graph(
        graph: onnx.GraphProto, transform: Transform, is_main_graph: bool = True
    ) -> onnx.GraphProto:
        """Apply `transform(graph, is_main_graph)` to every nested body, then to `graph`."""
        for node in graph.node:
            for attr in node.attribute:
                bodies = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs
                for body in bodies:
                    new = Pass.traverse_graph(body, transform, False)
                    if new is not body:
                        body.CopyFrom(new)
        return transform(graph, is_main_graph)

    @staticmethod
    def register_pass(name: str) -> Callable[[P], P]:
        """Class decorator: register under `name` (an error if the name is taken)."""
        return _registrar(name, override=False)

    @staticmethod
    def override_register_pass(name: str) -> Callable[[P], P]:
        """Class decorator: register under `name`, replacing a pass already registered there."""
        return _registrar(name, override=True)

    @staticmethod
    def property_register(key: str, value: Any) -> Callable[[P], P]:
        """Class decorator: attach a property (read back from `cls.properties`)."""

        def deco(cls: P) -> P:
            cls.properties = {**cls.properties, key: value}
            return cls

        return deco

    @staticmethod
    def constraint_passes(kind: str, names: Sequence[str]) -> Callable[[P], P]:
        """Class decorator: kind 'before', 'depend' or 'against' the named passes."""
        if kind not in _CONSTRAINT_KINDS:
            raise PassRegistrationError(
                f"constraint kind must be one of {list(_CONSTRAINT_KINDS)}, got {kind!r}"
            )
        if isinstance(names, str):
            names = [names]

        def deco(cls: P) -> P:
            old = cls.constraints.get(kind, ())
            cls.constraints = {**cls.constraints, kind: (*old, *names)}
            return cls

        return deco

    @staticmethod
    def against_passes(names: Sequence[str]) -> Callable[[P], P]:
        return Pass.constraint_passes("against", names)

    @staticmethod
    def get_pass(name: str, *args: Any, **kwargs: Any) -> Pass:
        """An instance of the pass registered as `name`, built with `args`/`kwargs`."""
        return _lookup(name)(*args, **kwargs)


def _registrar(name: str, override: bool) -> Callable[[P], P]:
    if not isinstance(name, str) or not name:
        raise PassRegistrationError(f"a pass name must be a non-empty string, got {name!r}")

    def deco(cls: P) -> P:
        if not (isinstance(cls, type) and issubclass(cls, Pass)):
            raise PassRegistrationError(f"@register({name!r}) needs a subclass of pyipu.Pass")
        if not override and name in _REGISTRY and _REGISTRY[name] is not cls:
            raise PassRegistrationError(
                f"a pass named {name!r} is already registered ({_REGISTRY[name].__qualname__}); "
                f"use Pass.override_register_pass({name!r}) to replace it"
            )
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


register = Pass.register_pass


def _lookup(name: str) -> type[Pass]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownPassError(
            f"unknown pass {name!r}; registered passes: {', '.join(sorted(_REGISTRY))}"
        ) from None


def get_registered_passes() -> dict[str, type[Pass]]:
    """Every registered pass, name → class (a copy)."""
    return dict(_REGISTRY)


def get_typed_registered_passes(pass_type: type) -> dict[str, type[Pass]]:
    """The registered passes that are subclasses of `pass_type`."""
    return {n: c for n, c in _REGISTRY.items() if issubclass(c, pass_type)}


PassLike = str | Pass


class PassManager:
    """Runs passes (names or instances) in order, after `sort_passes` resolves constraints."""

    def __init__(self, used_passes: Iterable[PassLike] = (), gather_ir_passes: bool = False):
        self.gather_ir_passes = gather_ir_passes
        self._passes: list[Pass] = []
        self.add_passes(used_passes)

    def add_passes(self, passes: Iterable[PassLike]) -> None:
        if isinstance(passes, (str, Pass)):
            passes = [passes]
        for p in passes:
            if isinstance(p, Pass):
                self._passes.append(p)
            elif isinstance(p, str):
                self._passes.append(_lookup(p)())
            else:
                raise TypeError(f"a pass must be a name or a pyipu.Pass, got {type(p).__name__}")

    def get_passes(self) -> list[Pass]:
        return list(self._passes)

    @staticmethod
    def get_all_pass_names() -> list[str]:
        return sorted(_REGISTRY)

    def sort_passes(self) -> list[Pass]:
        """The passes with missing 'depend's added, 'against' checked, 'before' honoured."""
        passes = list(self._passes)
        have = {_name(p) for p in passes}
        i = 0
        while i < len(passes):  # add dependencies (transitively), ahead of their dependant
            for dep in type(passes[i]).constraints.get("depend", ()):
                if dep not in have:
                    passes.insert(i, _lookup(dep)())
                    have.add(dep)
                    i -= 1
                    break
            i += 1
        for p in passes:
            clash = set(type(p).constraints.get("against", ())) & (have - {_name(p)})
            if clash:
                raise PassConstraintError(
                    f"pass {_name(p)!r} cannot be used together with {sorted(clash)}"
                )
        return _stable_topo(passes)

    def run(self, onnx_model: onnx.ModelProto) -> onnx.ModelProto:
        """Apply the (sorted) passes to a copy of `onnx_model`; returns the result."""
        model = onnx.ModelProto()
        model.CopyFrom(onnx_model)
        return self.run_in_place(model)

    def run_in_place(self, model: onnx.ModelProto) -> onnx.ModelProto:
        """`run` without the copy: passes may change `model` itself."""
        for p in self.sort_passes():
            out = p.run(model)
            if not isinstance(out, onnx.ModelProto):
                raise TypeError(f"pass {_name(p)!r} returned {type(out).__name__}, not a model")
            model = out
        return model


def _name(p: Pass) -> str:
    return p.name or type(p).__name__


def _stable_topo(passes: list[Pass]) -> list[Pass]:
    """Order so every 'before'/'depend' edge holds, otherwise keeping the given order."""
    n = len(passes)
    idx: dict[str, list[int]] = {}
    for i, p in enumerate(passes):
        idx.setdefault(_name(p), []).append(i)
    after: list[set[int]] = [set() for _ in range(n)]  # after[j]: indices that must precede j
    for i, p in enumerate(passes):
        for later in type(p).constraints.get("before", ()):
            for j in idx.get(later, []):
                after[j].add(i)
        for dep in type(p).constraints.get("depend", ()):
            after[i].update(idx.get(dep, []))
    order: list[int] = []
    done: set[int] = set()
    while len(order) < n:
        ready = [i for i in range(n) if i not in done and after[i] <= done]
        if not ready:
            stuck = [_name(passes[i]) for i in range(n) if i not in done]
            raise PassConstraintError(f"pass constraints form a cycle among {stuck}")
        order.append(ready[0])
        done.add(ready[0])
    return [passes[i] for i in order]
