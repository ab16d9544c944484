"""RuntimeConfig: PopRT 1.5's runtime options, with its names and defaults.

Fields pyipu does not implement yet raise UnsupportedError when set to a non-default value,
rather than being silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyipu._config import UINT32_MAX
from pyipu.errors import InvalidArgumentError, UnsupportedError

BATCHING_DIM_DISABLED = 0xFFFFFFFF
NS_MAX = 9223372036854775807  # std::chrono::nanoseconds::max(): "never"
UINT64_MAX = 2**64 - 1
# Largest value of the int fields the C runtime takes as uint32 (the rest are uint64).
_UINT32_FIELDS = ("batching_dim", "ring_buffer_size_multiplier", "runner_type")


@dataclass
class DeviceWaitConfig:
    """How long to wait for a device (PopRT defaults: timeout 1 s, sleep 6 s between tries).

    Virtual IPUs are always available, so pyipu never waits; the values are kept for scripts."""

    timeout_sec: int = 1
    sleep_time_sec: int = 6


class RunnerType:
    ModelRunner = 0
    PackRunner = 1
    ModelFusionRunner = 2


# name -> (default, implemented)
_FIELDS: dict[str, tuple[Any, bool]] = {
    "timeout_ns": (10_000_000, True),
    "validate_io_params": (True, True),
    "thread_safe": (True, True),
    "check_package_hash": (True, True),
    "ring_buffer_size_multiplier": (2, True),
    "batching_dim": (BATCHING_DIM_DISABLED, True),
    "auto_reset": (False, True),
    "flush_on_waiting_outputs": (False, True),
    "batch_size_timeout_ns": (NS_MAX, True),
    "is_batch_size_timeout_enabled": (False, True),
    "data_parallel_timeout_ns": (NS_MAX, True),
    "request_tracepoints_buffer_size": (1000, True),
    "runner_type": (RunnerType.ModelRunner, True),
}


class RuntimeConfig:
    """Options of a Runner (`poprt.runtime.RuntimeConfig`).

    pyipu extensions: `num_threads` (compute workers; None = $PYIPU_NUM_THREADS or all cores);
    `record_tracepoints` (False: when True the Runner records the load/compute/store stage of
    every iteration, keeping the last `request_tracepoints_buffer_size` events; read them with
    `Runner.tracepoints()`); `pin_threads` (True: the runner's device thread and compute
    helpers each run on their own CPU when the process may use at least `num_threads` CPUs;
    docs/runtime.md, "Threads and CPUs").
    """

    def __init__(self, **kwargs: Any) -> None:
        object.__setattr__(self, "_values", {k: d for k, (d, _) in _FIELDS.items()})
        object.__setattr__(
            self,
            "_extra",
            {"num_threads": None, "record_tracepoints": False, "pin_threads": True},
        )
        self.device_wait_config = DeviceWaitConfig()
        self.replica_id_to_device: dict[int, Any] = {}
        self.flush_by_name = None
        for key, value in kwargs.items():
            setattr(self, key, value)

    def __getattr__(self, name: str) -> Any:
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        extra = object.__getattribute__(self, "_extra")
        if name in extra:
            return extra[name]
        raise AttributeError(f"RuntimeConfig has no field {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("device_wait_config", "replica_id_to_device", "flush_by_name"):
            if name == "replica_id_to_device" and value:
                raise UnsupportedError("RuntimeConfig.replica_id_to_device is not supported yet")
            if name == "flush_by_name" and value is not None:
                raise UnsupportedError("RuntimeConfig.flush_by_name is not supported yet")
            object.__setattr__(self, name, value)
            return
        if name == "num_threads":
            if value is not None:
                check_int("RuntimeConfig.num_threads", value, 1, UINT32_MAX)
            self._extra["num_threads"] = value
            return
        if name in ("record_tracepoints", "pin_threads"):
            if not isinstance(value, (bool, int)):
                raise InvalidArgumentError(f"{name} must be a bool, got {value!r}")
            self._extra[name] = bool(value)
            return
        if name not in _FIELDS:
            raise AttributeError(f"RuntimeConfig has no field {name!r}")
        default, implemented = _FIELDS[name]
        value = _validate(name, value)
        if not implemented and value != default:
            raise UnsupportedError(
                f"RuntimeConfig.{name}={value!r} is not supported by this pyipu version "
                f"(only the default {default!r} is)"
            )
        self._values[name] = value

    def to_dict(self) -> dict[str, Any]:
        return {**self._values, **self._extra}

    def c_settings(self, replicas: int = 1) -> dict[str, Any]:
        """The settings the C runtime takes (ipu_runtime_config). Replicas waiting "in
        parallel" pad their steps after data_parallel_timeout_ns when the batch-size timeouts
        are enabled (max = never), instead of timeout_ns."""
        v = self._values
        timeout = v["timeout_ns"]
        if replicas > 1 and v["is_batch_size_timeout_enabled"]:
            ns = v["data_parallel_timeout_ns"]
            timeout = 0 if ns >= NS_MAX else ns
        batch_timeout = 0  # 0: partial batches wait timeout_ns, like every other input
        if v["is_batch_size_timeout_enabled"]:
            ns = v["batch_size_timeout_ns"]
            batch_timeout = UINT64_MAX if ns >= NS_MAX else ns
        return {
            "timeout_ns": timeout,
            "batch_timeout_ns": batch_timeout,
            "batching_dim": v["batching_dim"],
            "flush_on_waiting_outputs": v["flush_on_waiting_outputs"],
            "auto_reset": v["auto_reset"],
            "check_package_hash": v["check_package_hash"],
            "validate_io_params": v["validate_io_params"],
            "thread_safe": v["thread_safe"],
            "ring_buffer_size_multiplier": v["ring_buffer_size_multiplier"],
            "num_threads": self._extra["num_threads"],
            "pin_threads": int(self._extra["pin_threads"]),
        }

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items())
        return f"RuntimeConfig({fields})"


def check_int(what: str, value: Any, minimum: int, maximum: int) -> int:
    """`value` if it is an int within [minimum, maximum] (the range of the C field it goes to),
    else InvalidArgumentError naming `what`."""
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise InvalidArgumentError(
            f"{what} must be an int from {minimum} to {maximum}, got {value!r}"
        )
    return value


def _validate(name: str, value: Any) -> Any:
    default = _FIELDS[name][0]
    if isinstance(default, bool):
        if not isinstance(value, (bool, int)):
            raise InvalidArgumentError(f"RuntimeConfig.{name} must be a bool, got {value!r}")
        return bool(value)
    maximum = UINT32_MAX if name in _UINT32_FIELDS else UINT64_MAX
    check_int(f"RuntimeConfig.{name}", value, 0, maximum)
    if name == "ring_buffer_size_multiplier" and value < 1:
        raise InvalidArgumentError("RuntimeConfig.ring_buffer_size_multiplier must be >= 1")
    runners = (RunnerType.ModelRunner, RunnerType.ModelFusionRunner)
    if name == "runner_type" and value not in runners:
        raise UnsupportedError(
            f"RuntimeConfig.runner_type={value!r}: only ModelRunner and ModelFusionRunner exist"
        )
    return value
