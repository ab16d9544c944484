"""Runner: the PopRT-compatible high-level runtime (`poprt.runtime.Runner`)."""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pyipu import _config, _core
from pyipu._config import UINT32_MAX
from pyipu.enums import DType
from pyipu.errors import (
    ClosedError,
    CorruptFileError,
    InvalidArgumentError,
    InvalidStateError,
    NotFoundError,
    ShapeError,
    UnsupportedError,
    unknown_name,
)
from pyipu.runtime.config import BATCHING_DIM_DISABLED, RuntimeConfig
from pyipu.runtime.descriptors import DataDesc, check_buffer
from pyipu.runtime.tracepoints import Tracepoints, merge
from pyipu.runtime.variables import Variables

_INPUT, _OUTPUT = 1, 2
_live_runners: weakref.WeakSet[Runner] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    # Native threads must be joined before the interpreter finalises.
    for runner in list(_live_runners):
        runner.close()


def load_executable(popef: Any) -> _core.Executable:
    """A verified executable from a path, PopEF bytes or a compiler Executable (whose own one
    is shared: it was verified and its weights packed once)."""
    try:
        return _load_executable(popef)
    except CorruptFileError as e:
        if not _is_onnx(popef):
            raise
        what = f"{os.fspath(popef)!r}" if isinstance(popef, (str, os.PathLike)) else "the bytes"
        raise CorruptFileError(
            f"{what} is an ONNX model, not a PopEF executable: compile it first "
            "(pyipu.compiler.Compiler.compile_and_export, or the pyipu command)",
            type=e.type,
        ) from e


def _is_onnx(source: Any) -> bool:
    """Whether a file or bytes that are not a PopEF parse as an ONNX model with a graph."""
    import onnx

    try:
        if isinstance(source, (str, os.PathLike)):
            with open(source, "rb") as f:
                data = f.read(_ONNX_SNIFF_BYTES + 1)
        else:
            data = bytes(source)
        if not data.startswith(b"\x08") or len(data) > _ONNX_SNIFF_BYTES:
            return data.startswith(b"\x08") and str(source).endswith(".onnx")
        return onnx.ModelProto.FromString(data).HasField("graph")
    except Exception:  # unreadable or not protobuf: not an ONNX model
        return False


_ONNX_SNIFF_BYTES = 1 << 28  # larger files are judged by their first byte and name


def _load_executable(popef: Any) -> _core.Executable:
    if isinstance(popef, (str, os.PathLike)):
        return _core.Executable(_core.Container.open(popef))
    if hasattr(popef, "native"):
        return popef.native()
    if hasattr(popef, "to_bytes"):
        return _core.Executable(_core.Container.from_bytes(popef.to_bytes()))
    if isinstance(popef, (bytes, bytearray, memoryview)):
        return _core.Executable(_core.Container.from_bytes(popef))
    raise InvalidArgumentError(
        f"expected a PopEF path or a pyipu.compiler.Executable, got {type(popef).__name__}"
    )


class Future:
    """Completion of an execute_async request; `wait()` raises the request's error."""

    def __init__(self, request: _core.Request) -> None:
        self._request = request

    def wait(self, timeout: float | None = None) -> bool:
        """True once completed, False if still pending after `timeout` seconds (None or inf:
        forever; longer than UINT64_MAX ns clamps to forever; NaN: InvalidArgumentError)."""
        return self._request.wait(timeout)

    def done(self) -> bool:
        return self._request.done()

    def cancel(self) -> bool:
        """Ask the runtime to stop the request; returns at once (False: it had completed).
        `wait()` then raises CancelledError unless the request completed first; its outputs
        are unspecified and the arrays are free once `wait()` returns."""
        return self._request.cancel()


class Runner:
    """Loads a PopEF file or Executable onto a virtual IPU and runs requests from any thread.

    `execute(inputs, outputs)` writes into the caller's output arrays; a request may carry N
    batches stacked along dim 0 of every array.
    """

    def __init__(self, popef: Any, config: RuntimeConfig | None = None) -> None:
        self._runtimes: list[_core.Runtime] = []
        self.config = config if config is not None else RuntimeConfig()
        if not isinstance(self.config, RuntimeConfig):
            raise InvalidArgumentError(
                f"config must be a RuntimeConfig, got {type(self.config).__name__}"
            )
        _config.apply_isa()  # before loading: weights are packed for the level in use
        executable = load_executable(popef)
        self._info = executable.get_info()
        replicas = int(self._info["replication_factor"])
        settings = self.config.c_settings(replicas)
        if settings["num_threads"] is None:
            settings["num_threads"] = _config.num_threads()
        self._anchors, self._directions = describe_anchors(executable)
        self._variables = Variables(executable, self._anchors)
        self._batching_dim = _batching_dim(self.config.batching_dim, self._anchors, self._info)
        available = _config.num_devices()
        if replicas > available:
            raise NotFoundError(
                f"the PopEF is replicated {replicas} times but only {available} virtual IPUs "
                "exist (PYIPU_NUM_DEVICES)"
            )
        # One replica per virtual IPU, each with its own device thread and share of the cores.
        settings["num_threads"] = max(1, settings["num_threads"] // replicas)
        self._runtimes = [_core.Runtime(executable, settings) for _ in range(replicas)]
        if self.config.record_tracepoints:
            size = self.config.request_tracepoints_buffer_size
            if size == 0:
                self.close()
                raise UnsupportedError(
                    "record_tracepoints with request_tracepoints_buffer_size=0 (unbounded) is "
                    "not supported: give the number of events to keep"
                )
            for rt in self._runtimes:
                rt.set_trace(_core.Trace(size))
        self._next_replica = itertools.count()
        self._index_of = {d.name: i for i, d in enumerate(self._anchors)}
        self._handled: set[str] = set()
        index = self._info["index_anchor"]
        self._index_name = None if index is None else self._anchors[index].name
        self._fast = self._make_fast_path()
        _live_runners.add(self)

    # --- descriptors -------------------------------------------------------------------------
    def _of_direction(self, direction: int) -> list[DataDesc]:
        return [d for d, k in zip(self._anchors, self._directions, strict=True) if k == direction]

    def get_model_inputs(self) -> list[DataDesc]:
        """All input anchors, including weights stored in the PopEF (popef_contains_tensor_data)."""
        return self._of_direction(_INPUT)

    def get_model_outputs(self) -> list[DataDesc]:
        return self._of_direction(_OUTPUT)

    def get_execute_inputs(self) -> list[DataDesc]:
        """Inputs a request must (or, for fused models, may) provide."""
        return [
            d
            for d in self.get_model_inputs()
            if not d.popef_contains_tensor_data
            and d.name != self._index_name
            and d.name not in self._handled
        ]

    def get_execute_outputs(self) -> list[DataDesc]:
        return [d for d in self.get_model_outputs() if d.name not in self._handled]

    @property
    def batches_per_step(self) -> int:
        return int(self._info["batches_per_step"])

    @property
    def num_subgraphs(self) -> int:
        return int(self._info["num_subgraphs"])

    def set_user_input_handler(self, name: str, handler: Any) -> None:
        """pyipu extension: serve input `name` with `handler(array)`, which fills one batch on
        the device thread, instead of per-request arrays. Call before the first execute. An
        exception in the handler fails the iteration's requests with a CallbackError raised
        `from` it."""
        self._set_handler(name, handler, _INPUT)

    def set_user_output_handler(self, name: str, handler: Any) -> None:
        """pyipu extension: `handler(array)` receives every batch of output `name` (read-only,
        meant for the call only: later iterations overwrite it; an array kept longer keeps
        the runner's memory allocated) instead of per-request arrays."""
        self._set_handler(name, handler, _OUTPUT)

    def _set_handler(self, name: str, handler: Any, direction: int) -> None:
        self._check_open()
        i = self._lookup(name, direction)
        d = self._anchors[i]
        for rt in self._runtimes:
            rt.set_stream_callback(i, handler, d.numpy_data_type(), d.shape, direction == _INPUT)
        self._handled.add(name)
        self._fast = self._make_fast_path()

    def _make_fast_path(self) -> _core.FastPath | None:
        """The C-level execute for plain one-batch requests (see docs/runtime.md), where the
        general path's rules reduce to "every execute anchor once, exact shape"."""
        if len(self._runtimes) != 1 or self.num_subgraphs > 1 or self._batching_dim is not None:
            return None
        feedable = {d.name for d in self.get_execute_inputs() + self.get_execute_outputs()}
        table = [
            (d.name, k if d.name in feedable else 0, d.numpy_data_type(), d.shape)
            for d, k in zip(self._anchors, self._directions, strict=True)
        ]
        return _core.FastPath(self._runtimes[0], table)

    # --- execution ---------------------------------------------------------------------------
    def execute(self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]) -> None:
        """Run one request synchronously; results are written into `outputs`' arrays.

        One-batch requests of a small model may run on the calling thread (docs/runtime.md,
        "Small requests"); the GIL is released while the request runs or waits."""
        fast = self._fast
        if fast is not None and fast.execute(inputs, outputs):
            return
        self._submit(inputs, outputs).finish()

    def run(
        self, output_names: Sequence[str] | None, input_feed: Mapping[str, np.ndarray]
    ) -> list[np.ndarray]:
        """ONNX Runtime's `InferenceSession.run`: one request, its outputs in new arrays.

        Returns the outputs named by `output_names` in that order (None: every output, in the
        model's order). The inputs may carry N batches as `execute`'s do; the outputs then
        carry N too. `execute` with preallocated outputs avoids the allocation."""
        outputs = self.get_execute_outputs()
        names = [d.name for d in outputs] if output_names is None else list(output_names)
        by_name = {d.name: d for d in outputs}
        for name in names:
            if name not in by_name:
                raise InvalidArgumentError(unknown_name("output", name, list(by_name)))
        if not isinstance(input_feed, Mapping):
            raise InvalidArgumentError("input_feed must be a dict of name -> numpy array")
        n = self.check_request(input_feed, {})  # the batches the outputs must carry
        arrays = {d.name: np.empty(self.shape_for(d, n), d.numpy_data_type()) for d in outputs}
        self.execute(input_feed, arrays)
        return [arrays[name] for name in names]

    def shape_for(self, desc: DataDesc, n: int) -> tuple[int, ...]:
        """The shape of an array of `desc` that carries n batches (or rows, with batching_dim)."""
        shape = list(desc.shape)
        if self._batching_dim is not None:
            shape[self._batching_dim] = n
        elif n > 1:
            shape[0] *= n
        return tuple(shape)

    def execute_async(
        self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]
    ) -> Future:
        """Queue a request; keep the arrays alive and untouched until `wait()` returns."""
        return Future(self._submit(inputs, outputs))

    def check_request(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
        """Validate a request as `execute` would, without running it: the typed error it would
        raise, or the number of batches (rows, with batching_dim) it carries."""
        return self._request(inputs, outputs)[2]

    def _request(
        self, inputs: Mapping[str, Any], outputs: Mapping[str, Any]
    ) -> tuple[list[Any], list[Any], int]:
        """The per-anchor input and output lists of a request, and its batches (or rows)."""
        self._check_open()
        if self.num_subgraphs > 1 and self.config.validate_io_params:
            raise InvalidArgumentError(
                f"this PopEF fuses {self.num_subgraphs} models and a request runs one of them: "
                "set RuntimeConfig.validate_io_params = False to pass one subgraph's anchors"
            )
        if not isinstance(inputs, Mapping) or not isinstance(outputs, Mapping):
            raise InvalidArgumentError("inputs and outputs must be dicts of name -> numpy array")
        n_anchors = len(self._anchors)
        in_list: list[Any] = [None] * n_anchors
        out_list: list[Any] = [None] * n_anchors
        batches = None
        for mapping, direction, slots in ((inputs, _INPUT, in_list), (outputs, _OUTPUT, out_list)):
            for name, array in mapping.items():
                i = self._lookup(name, direction)
                n = self._check_array(self._anchors[i], array, direction, self._batching_dim)
                slots[i] = array
                if name == self._index_name:
                    continue  # one subgraph selector per request, whatever N is
                if batches is not None and n != batches[0]:
                    unit = "batches" if self._batching_dim is None else "rows"
                    raise ShapeError(
                        f"anchor {name!r} carries {n} {unit} but {batches[1]!r} carries "
                        f"{batches[0]}; every array of a request must hold the same number"
                    )
                batches = batches or (n, name)
        if batches is None:
            raise InvalidArgumentError("a request needs at least one input or output")
        if self._batching_dim is None and batches[0] > UINT32_MAX:
            # the C request's num_batches is a uint32
            raise ShapeError(
                f"a request carries at most {UINT32_MAX} batches, {batches[1]!r} carries "
                f"{batches[0]}"
            )
        return in_list, out_list, batches[0]

    def _submit(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> _core.Request:
        in_list, out_list, n = self._request(inputs, outputs)
        # Requests are spread over the replicas round-robin.
        runtime = self._runtimes[next(self._next_replica) % len(self._runtimes)]
        if self._batching_dim is None:
            return runtime.submit(in_list, out_list, n)
        return runtime.submit(in_list, out_list, 1, None, n)

    def _lookup(self, name: str, direction: int) -> int:
        i = self._index_of.get(name)
        kind = "input" if direction == _INPUT else "output"
        if i is None or self._directions[i] != direction:
            # the anchors a request may carry: not the weights stored in the PopEF
            known = [
                d.name
                for d in self._of_direction(direction)
                if not d.popef_contains_tensor_data and d.name not in self._handled
            ]
            raise InvalidArgumentError(unknown_name(kind, name, known))
        if self._anchors[i].popef_contains_tensor_data:
            raise InvalidArgumentError(
                f"input {name!r} is a weight stored in the PopEF; it cannot be fed per request"
            )
        return i

    @staticmethod
    def _check_array(desc: DataDesc, array: Any, direction: int, batching_dim: int | None) -> int:
        """Batches (or rows along batching_dim) the array carries, after validating it."""
        kind = "input" if direction == _INPUT else "output"
        array = check_buffer(desc, array, direction == _OUTPUT)
        shape = tuple(desc.shape)
        given = array.shape
        if batching_dim is not None:
            d = batching_dim
            if (
                len(given) == len(shape)
                and given[:d] == shape[:d]
                and given[d + 1 :] == shape[d + 1 :]
                and given[d] > 0
            ):
                return given[d]
            expected = [*shape[:d], "any", *shape[d + 1 :]]
            raise ShapeError(
                f"{kind} {desc.name!r}: expected shape {expected} (batching_dim={d}), "
                f"got {list(given)}"
            )
        if given == shape:
            return 1
        if (
            len(shape) >= 1
            and len(given) == len(shape)
            and given[1:] == shape[1:]
            and shape[0] > 0
            and given[0] % shape[0] == 0
            and given[0] > 0
        ):
            return given[0] // shape[0]
        raise ShapeError(
            f"{kind} {desc.name!r}: expected shape {list(shape)} or N batches stacked on dim 0 "
            f"([N*{shape[0] if shape else 1}, ...]), got {list(given)}"
        )

    # --- lifecycle ---------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Counters, latency percentiles (ns), throughput (requests/s over ~2 s) and the depth
        of every anchor's queue; cheap enough to poll while the runner is busy."""
        if not self._runtimes:
            raise ClosedError("the runner is closed")
        per_replica = [rt.stats() for rt in self._runtimes]
        stats: dict[str, Any] = {
            k: sum(r[k] for r in per_replica) for k in per_replica[0] if "latency" not in k
        }
        # Percentiles do not add up: report the slowest replica's.
        for k in ("latency_p50_ns", "latency_p99_ns"):
            stats[k] = max(r[k] for r in per_replica)
        stats["replicas"] = len(self._runtimes)
        stats["queue_depth"] = {
            d.name: sum(rt.queue_depth(i) for rt in self._runtimes)
            for i, d in enumerate(self._anchors)
            if not d.popef_contains_tensor_data
        }
        return stats

    def tracepoints(self) -> Tracepoints:
        """The recorded load/compute/store events (RuntimeConfig.record_tracepoints), oldest
        first; readable while the runner is busy."""
        if not self.config.record_tracepoints:
            raise InvalidArgumentError(
                "tracepoints are recorded only with RuntimeConfig(record_tracepoints=True)"
            )
        # record_tracepoints gave every runtime a trace
        return merge([rt.trace.read() for rt in self._runtimes if rt.trace is not None])

    # --- variables -----------------------------------------------------------------------------
    def get_variables(self) -> list[DataDesc]:
        """The weights kept as variables: state each request updates on the device (trained
        weights, optimizer state; pyipu.compiler.variables)."""
        return self._variables.descs()

    def read_variables(self, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Current values (all variables by default), read between two requests: every
        request submitted before this call has run, none submitted after it. With replication
        each replica has its own; these are the first replica's."""
        self._check_open()
        return self._variables.read(self._runtimes[0], names)

    def write_variables(self, values: Mapping[str, Any]) -> None:
        """New values (of every replica), read by the requests submitted after this call."""
        self._check_open()
        self._variables.write(self._runtimes, values)

    def reset(self) -> None:
        """Reload the device after a failure, when auto_reset is off (see ResetRequiredError)."""
        self._check_open()
        for rt in self._runtimes:
            rt.reset()

    def close(self) -> None:
        """Stop the device; pending requests fail with ClosedError. Idempotent: every call,
        also concurrent ones, returns once every accepted request has completed. From a
        handler (the device thread) it raises InvalidStateError and the runner stays open."""
        for rt in self._runtimes:
            rt.close()

    def _check_open(self) -> None:
        if not self._runtimes or self._runtimes[0].closed:
            raise ClosedError("the runner is closed")

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # Collected on a device thread (inside a handler) close() is refused: the C runtime
        # then stays allocated, which is safe (docs/c-api.md).
        with contextlib.suppress(InvalidStateError):
            self.close()


def describe_anchors(executable: _core.Executable) -> tuple[list[DataDesc], list[int]]:
    """Descriptors and directions of an executable's anchors, by anchor index."""
    anchors = executable.anchors()
    return [_make_desc(a) for a in anchors], [a[1] for a in anchors]


def _batching_dim(value: int, anchors: list[DataDesc], info: dict[str, Any]) -> int | None:
    if value == BATCHING_DIM_DISABLED:
        return None
    if info["num_subgraphs"] > 1:
        raise InvalidArgumentError("batching_dim cannot be used with a fused (multi-model) PopEF")
    for d in anchors:
        if not d.popef_contains_tensor_data and value >= len(d.shape):
            raise InvalidArgumentError(
                f"batching_dim={value} is out of range for anchor {d.name!r} of shape {d.shape}"
            )
    return value


def _make_desc(anchor: tuple) -> DataDesc:
    name, _direction, dtype, shape, nbytes, subgraph, has_data, _tensor = anchor
    return DataDesc(
        name=name,
        shape=list(shape),
        data_type=DType(dtype),
        size_in_bytes=int(nbytes),
        popef_contains_tensor_data=has_data,
        subgraph=subgraph,
    )
