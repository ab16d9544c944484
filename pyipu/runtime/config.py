"""RuntimeConfig: PopRT 1.5's runtime options, with its names and defaults.

Fields pyipu does not implement yet raise UnsupportedError when set to a non-default value,
rather than being silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyipu import _options as opt
from pyipu._config import check_int
from pyipu.errors import InvalidArgumentError, UnsupportedError

BATCHING_DIM_DISABLED = opt.NO_INDEX
NS_MAX = opt.NS_MAX
UINT64_MAX = opt.UINT64_MAX


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


# The numeric fields (defaults and ranges in pyipu/_options.py); the OBJECT ones are set below.
_FIELDS = {o.name: o for o in opt.options(opt.PY_RUNTIME) if o.ctype != opt.OBJECT}


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
        values = {name: o.python_default for name, o in _FIELDS.items()}
        object.__setattr__(self, "_values", values)
        self.device_wait_config = DeviceWaitConfig()
        self.replica_id_to_device: dict[int, Any] = {}
        self.flush_by_name = None
        for key, value in kwargs.items():
            setattr(self, key, value)

    def __getattr__(self, name: str) -> Any:
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        raise AttributeError(f"RuntimeConfig has no field {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("device_wait_config", "replica_id_to_device", "flush_by_name"):
            if name == "replica_id_to_device" and value:
                raise UnsupportedError("RuntimeConfig.replica_id_to_device is not supported yet")
            if name == "flush_by_name" and value is not None:
                raise UnsupportedError("RuntimeConfig.flush_by_name is not supported yet")
            object.__setattr__(self, name, value)
            return
        if name not in _FIELDS:
            raise AttributeError(f"RuntimeConfig has no field {name!r}")
        self._values[name] = check_option("RuntimeConfig", name, value)

    def to_dict(self) -> dict[str, Any]:
        return dict(self._values)

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
            **c_settings(self, opt.PY_RUNTIME, opt.C_RUNTIME),
            "timeout_ns": timeout,
            "batch_timeout_ns": batch_timeout,
        }

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items())
        return f"RuntimeConfig({fields})"


def check_option(owner: str, name: str, value: Any) -> Any:
    """`value` for option `name` of `owner` (a layer of pyipu/_options.py) if it is of the
    option's type and within its range (a bool for a flag), else InvalidArgumentError; a value
    pyipu does not implement raises UnsupportedError."""
    o = opt.BY_NAME[name]
    what = f"{owner}.{name}"
    if value is None and o.python_default is None:
        return None
    if o.ctype == opt.BOOL:
        if not isinstance(value, (bool, int)):
            raise InvalidArgumentError(f"{what} must be a bool, got {value!r}")
        return bool(value)
    check_int(what, value, *o.limits)
    if o.choices and value not in o.choices:
        raise UnsupportedError(
            f"{what}={value!r} is not supported by this pyipu version (only {list(o.choices)})"
        )
    return value


def c_settings(config: Any, layer: str, c_layer: str) -> dict[str, Any]:
    """The fields of `config` (a `layer` object) that go unchanged to the C struct `c_layer`,
    checked; flags as C ints."""
    out = {}
    for o in opt.options(layer):
        if c_layer in o.layers:
            value = check_option(layer, o.name, getattr(config, o.name))
            out[o.name] = int(value) if o.ctype == opt.BOOL else value
    return out
