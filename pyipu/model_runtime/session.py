"""Session and QueueManager: Model Runtime's low-level API.

A Session loads an executable and runs its programs on the calling thread:
`run_load_programs()` once, then `run_main_programs()` per step. Data reaches the device through
a QueueManager's per-anchor queues (zero-copy: the queue holds your array until its callback
runs) or through handlers set with `set_user_input_handler`/`set_user_output_handler`.
`pyipu.runtime.Runner` is this machinery plus a device thread and request bookkeeping, in C.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyipu import _config, _core
from pyipu import _options as opt
from pyipu._config import UINT32_MAX, check_int
from pyipu.errors import ClosedError, InvalidArgumentError, InvalidStateError, unknown_name
from pyipu.model_runtime.predicates import AnchorCallbackPolicy, Predicate, pred_streamed
from pyipu.runtime.config import BATCHING_DIM_DISABLED, DeviceWaitConfig, c_settings
from pyipu.runtime.descriptors import DataDesc, check_buffer
from pyipu.runtime.runner import describe_anchors, load_executable
from pyipu.runtime.variables import Variables

_INPUT = 1


@dataclass
class SessionConfig:
    """Model Runtime's SessionConfig, plus pyipu's num_threads, batching_dim and pin_threads
    (docs/runtime.md, "RuntimeConfig", lists them all)."""

    # BEGIN GENERATED fields: tools/gen_config.py from pyipu/_options.py
    check_package_hash: bool = True
    wait_config: DeviceWaitConfig | None = None
    num_threads: int | None = None
    batching_dim: int = BATCHING_DIM_DISABLED
    pin_threads: bool = True
    # END GENERATED fields


@dataclass(frozen=True)
class StepResult:
    iterations: int
    padded_iterations: int


class Session:
    """One executable on a virtual IPU; its programs run on the thread that calls them."""

    def __init__(self, popef: Any, config: SessionConfig | None = None, device: Any = None):
        self.config = config or SessionConfig()
        self.device = device
        _config.apply_isa()  # before loading: weights are packed for the level in use
        self._exe = load_executable(popef)
        self._info = self._exe.get_info()
        self._anchors, self._directions = describe_anchors(self._exe)
        self._variables = Variables(self._exe, self._anchors)
        self._core: _core.Session | None = None
        self._handlers: dict[int, tuple[Callable[[np.ndarray], Any], bool]] = {}
        self._loaded = False
        self._closed = False
        self.queue_manager: QueueManager | None = None

    # --- model information -------------------------------------------------------------------
    @property
    def batches_per_step(self) -> int:
        return int(self._info["batches_per_step"])

    def anchors(self) -> list[DataDesc]:
        return list(self._anchors)

    def get_user_input_anchors(self) -> list[DataDesc]:
        """Inputs the user feeds (PopEF weights excluded)."""
        return [
            d
            for d, k in zip(self._anchors, self._directions, strict=True)
            if k == _INPUT and not d.popef_contains_tensor_data
        ]

    def get_user_output_anchors(self) -> list[DataDesc]:
        return [d for d, k in zip(self._anchors, self._directions, strict=True) if k != _INPUT]

    def _index(self, name: str) -> int:
        for i, d in enumerate(self._anchors):
            if d.name == name:
                return i
        raise InvalidArgumentError(unknown_name("anchor", name, [d.name for d in self._anchors]))

    # --- device state ------------------------------------------------------------------------
    def _session(self, ring_capacity: int = 0, timeout_ns: int = 0) -> _core.Session:
        if self._closed:
            raise ClosedError("the session is closed")
        if self._core is None:
            settings = c_settings(self.config, opt.PY_SESSION, opt.C_SESSION)
            if settings["num_threads"] is None:
                settings["num_threads"] = _config.num_threads()
            settings["ring_capacity"] = check_int(
                "capacity", ring_capacity, *opt.BY_NAME["ring_capacity"].limits
            )
            settings["timeout_ns"] = check_int(
                "timeout_ns", timeout_ns, *opt.BY_NAME["timeout_ns"].limits
            )
            self._core = _core.Session(self._exe, settings)
            for anchor in self._handlers:
                self._bind_handler(self._core, anchor)
        return self._core

    def _bind_handler(self, core: _core.Session, anchor: int) -> None:
        fn, is_input = self._handlers[anchor]
        d = self._anchors[anchor]
        core.bind(anchor, _core.BIND_CALLBACK, fn, d.numpy_data_type(), d.shape, is_input)

    def _check_not_loaded(self, what: str) -> None:
        if self._loaded:
            raise InvalidStateError(f"{what} must come before run_load_programs()")

    def set_user_input_handler(self, name: str, handler: Callable[[np.ndarray], Any]) -> None:
        """`handler(array)` fills one batch of input `name` whenever the device needs it."""
        self._set_handler(name, handler, True)

    def set_user_output_handler(self, name: str, handler: Callable[[np.ndarray], Any]) -> None:
        """`handler(array)` receives one batch of output `name` (read-only, valid during the
        call only)."""
        self._set_handler(name, handler, False)

    def _set_handler(self, name: str, handler: Callable[[np.ndarray], Any], is_input: bool) -> None:
        self._check_not_loaded("setting a handler")
        i = self._index(name)
        if (self._directions[i] == _INPUT) != is_input:
            raise InvalidArgumentError(f"{name!r} is not an {'input' if is_input else 'output'}")
        self._handlers[i] = (handler, is_input)
        if self._core is not None:
            self._bind_handler(self._core, i)

    def create_queue_manager(
        self,
        capacity: int = 0,
        timeout_ns: int = 0,
        input_predicate: Predicate | None = None,
        output_predicate: Predicate | None = None,
    ) -> QueueManager:
        """Queues for the anchors the predicates accept (default: every streamed anchor);
        rejected anchors get empty callbacks, except PopEF weights, which keep their data.
        `capacity` slots per queue (0: 2 × batches per step); a started step is padded after
        `timeout_ns` without input (0: wait forever)."""
        self._check_not_loaded("create_queue_manager()")
        if self._core is not None:
            raise InvalidStateError("a queue manager was already created for this session")
        core = self._session(capacity, timeout_ns)
        accept_in = input_predicate or pred_streamed()
        accept_out = output_predicate or pred_streamed()
        queued: dict[int, DataDesc] = {}
        for i, d in enumerate(self._anchors):
            if i in self._handlers:
                continue
            predicate = accept_in if self._directions[i] == _INPUT else accept_out
            policy = AnchorCallbackPolicy(predicate(d))
            if d.popef_contains_tensor_data and policy != AnchorCallbackPolicy.BIND_USER_CB:
                continue  # weights stay bound to the PopEF's data unless taken over explicitly
            core.bind(i, int(policy))
            if policy == AnchorCallbackPolicy.BIND_USER_CB:
                queued[i] = d
        self.queue_manager = QueueManager(self, queued)
        return self.queue_manager

    def run_load_programs(self) -> None:
        """Run the Load program (weights). Bindings are fixed from here on."""
        self._session().run_load()
        self._loaded = True

    def run_main_programs(self) -> StepResult:
        """Run one step (batches_per_step iterations) on this thread, blocking for input.
        An exception raised by one of your callbacks during the step is re-raised here."""
        if not self._loaded:
            raise InvalidStateError("run_load_programs() must run before run_main_programs()")
        return StepResult(*self._session().run_main())

    def get_variables(self) -> list[DataDesc]:
        """The weights kept as variables (state the Main program updates and keeps between
        steps: trained weights, optimizer state; pyipu.compiler.variables)."""
        return self._variables.descs()

    def read_variables(self, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Current values (all by default), between steps, on the thread running them."""
        return self._variables.read(self._loaded_session("read_variables"), names)

    def write_variables(self, values: Mapping[str, Any]) -> None:
        """New values, read by the next step (run_load_programs restores the initial ones)."""
        self._variables.write([self._loaded_session("write_variables")], values)

    def _loaded_session(self, what: str) -> _core.Session:
        if not self._loaded:
            raise InvalidStateError(f"{what}() needs run_load_programs() first")
        return self._session()

    def stop(self) -> None:
        """Make a blocked run_main_programs() (in another thread) and enqueues return."""
        if self._core is not None:
            self._core.stop()

    def stats(self) -> dict[str, int]:
        return self._session().stats()

    def close(self) -> None:
        """Stop; every queued slot completes (its callback gets a ClosedError). Idempotent."""
        if self._core is not None:
            self._core.stop()
            self._core.disconnect()
        self._closed = True

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class QueueManager:
    """Per-anchor queues of a Session (Model Runtime's QueueManager)."""

    def __init__(self, session: Session, anchors: dict[int, DataDesc]):
        self._session = session
        self.inputs: dict[str, InputQueue] = {}
        self.outputs: dict[str, OutputQueue] = {}
        queued = _QueuedRanges(session.config.batching_dim != BATCHING_DIM_DISABLED)
        for i, d in anchors.items():
            if session._directions[i] == _INPUT:
                self.inputs[d.name] = InputQueue(session, i, d, queued)
            else:
                self.outputs[d.name] = OutputQueue(session, i, d, queued)
        self._queued = queued

    def input_queue(self, name: str) -> InputQueue:
        try:
            return self.inputs[name]
        except KeyError:
            raise InvalidArgumentError(
                f"no input queue {name!r}; queues: {sorted(self.inputs)}"
            ) from None

    def output_queue(self, name: str) -> OutputQueue:
        try:
            return self.outputs[name]
        except KeyError:
            raise InvalidArgumentError(
                f"no output queue {name!r}; queues: {sorted(self.outputs)}"
            ) from None

    def flush_all(self) -> None:
        """Pad the step in progress now, so pending requests return (flushAll)."""
        self._session._session().flush()

    def disconnect_all(self) -> None:
        """Complete every queued slot with a ClosedError (disconnectAll; use at shutdown)."""
        self._session._session().disconnect()
        for q in [*self.inputs.values(), *self.outputs.values()]:
            q._count = 0  # every queue is empty again: the next slots meet in one iteration


class _QueuedRanges:
    """The byte ranges of a queue manager's queued slots, by queue position. An iteration reads
    one slot of every input queue, then writes one of every output queue, so an output slot
    that overlaps an input slot queued at a later position would overwrite it before it is
    read: such a pair is refused (docs/runtime.md, "The low-level API"). With batching_dim
    slots are rows, which iterations split and merge: any overlap is refused."""

    def __init__(self, batching: bool) -> None:
        self._batching = batching
        self._slots: dict[int, tuple[str, bool, int, int, int]] = {}
        self._tokens = itertools.count()
        self._lock = threading.Lock()  # enqueues from any thread, completions on the device's

    def add(self, name: str, is_input: bool, array: np.ndarray, position: int) -> int:
        start = array.__array_interface__["data"][0]
        end = start + array.nbytes
        with self._lock:
            for other, other_input, s, e, pos in self._slots.values():
                if other_input == is_input or not (start < e and s < end):
                    continue
                read, written = (position, pos) if is_input else (pos, position)
                if self._batching or read > written:
                    inp, out = (name, other) if is_input else (other, name)
                    raise InvalidArgumentError(
                        f"input slot of {inp!r} and output slot of {out!r} share memory and the "
                        "output would be written before the input is read"
                        + (" (batching_dim)" if self._batching else "")
                        + ": give the output its own array"
                    )
            token = next(self._tokens)
            self._slots[token] = (name, is_input, start, end, position)
        return token

    def done(self, token: int) -> None:
        with self._lock:
            self._slots.pop(token, None)


class _Queue:
    def __init__(self, session: Session, anchor: int, desc: DataDesc, queued: _QueuedRanges):
        self._session = session
        self._anchor = anchor
        self.name = desc.name
        self.tensor_info = desc
        self._queued = queued
        self._count = 0  # slots queued so far: the position of the next one

    def __len__(self) -> int:
        return int(self._session._session().queue_depth(self._anchor))

    def enqueue(
        self,
        array: np.ndarray,
        callback: Callable[[Exception | None], Any] | None = None,
        rows: int = 0,
        timeout: float | None = None,
    ) -> None:
        """Queue `array` (zero-copy: keep it unchanged until `callback(error)` has run).
        Inputs: called once the data was copied to the device; outputs: once the result was
        written. `rows` > 0: a partial batch along the session's batching_dim."""
        d = self.tensor_info
        check_buffer(d, array, isinstance(self, OutputQueue))
        check_int("rows", rows, 0, UINT32_MAX)
        if not rows and array.nbytes != d.size_in_bytes:
            raise InvalidArgumentError(
                f"{self.name!r}: one batch is {d.size_in_bytes} bytes {d.shape}, "
                f"got {array.nbytes} bytes {list(array.shape)}"
            )
        core = self._session._session()
        queued = self._queued
        token = queued.add(self.name, isinstance(self, InputQueue), array, self._count)

        def done(error: Exception | None) -> None:
            queued.done(token)
            if callback is not None:
                callback(error)

        try:
            core.enqueue(self._anchor, array, rows, done, timeout)
        except BaseException:
            queued.done(token)
            raise
        self._count += 1


class InputQueue(_Queue):
    """Queue of input buffers for one anchor."""


class OutputQueue(_Queue):
    """Queue of output buffers for one anchor."""
