"""`poptorch.Options`: how a PopTorch model compiles and runs, mapped onto PopART's
`SessionOptions` and `DataFlow` (pyipu.popart).

Applied: deviceIterations, replicationFactor, Training.gradientAccumulation and its reduction,
outputMode, setExecutionStrategy (pipelined / sharded), autoRoundNumIPUs, TensorLocations
.numIOTiles, enableExecutableCaching (also POPTORCH_CACHE_DIR), randomSeed, useIpuModel (also
POPTORCH_IPU_MODEL), useOfflineIpuTarget, _Popart.set. Recorded only (a CPU has no counterpart):
the Precision, TensorLocations placement, Jit, logging and connection settings. Refused with
OptionError: what would change results pyipu cannot reproduce (automatic loss scaling,
more than one process, input replica grouping).
"""

from __future__ import annotations

import ast
import copy
import os
from typing import Any

from pyipu.poptorch import blocks, enums
from pyipu.poptorch.errors import OptionError


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise OptionError(f"{name} must be an int >= 1, got {value!r}")
    return value


class _Group:
    """A sub-namespace of options (`opts.Training`, `opts.Precision`, ...)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def _set(self, name: str, value: Any) -> Any:
        self.values[name] = value
        return self


class _TrainingOptions(_Group):
    def __init__(self) -> None:
        super().__init__()
        self.values.update(
            gradient_accumulation=1,
            accumulation_and_replication_reduction_type=enums.ReductionType.Mean,
            auto_loss_scaling=False,
        )

    def gradientAccumulation(self, n: int) -> _TrainingOptions:  # noqa: N802
        return self._set("gradient_accumulation", _positive("gradientAccumulation", n))

    def accumulationAndReplicationReductionType(  # noqa: N802
        self, kind: enums.ReductionType
    ) -> _TrainingOptions:
        kind = enums.ReductionType(kind)
        if kind == enums.ReductionType.NoReduction:
            raise OptionError("accumulationAndReplicationReductionType: use Sum or Mean")
        return self._set("accumulation_and_replication_reduction_type", kind)

    def setMeanAccumulationAndReplicationReductionStrategy(  # noqa: N802
        self, strategy: enums.MeanReductionStrategy
    ) -> _TrainingOptions:
        return self._set("mean_reduction_strategy", enums.MeanReductionStrategy(strategy))

    def setAutomaticLossScaling(self, enabled: bool) -> _TrainingOptions:  # noqa: N802
        if enabled:
            raise OptionError(
                "setAutomaticLossScaling: not supported (pyipu trains with float32 gradient "
                "arithmetic; set loss_scaling on the optimizer instead)"
            )
        return self._set("auto_loss_scaling", False)

    def setConvolutionDithering(self, enabled: bool) -> _TrainingOptions:  # noqa: N802
        return self._set("convolution_dithering", bool(enabled))


class _PrecisionOptions(_Group):
    """Recorded: pyipu computes float16 ops with float32 partials and no stochastic rounding."""

    def setPartialsType(self, dtype: Any) -> _PrecisionOptions:  # noqa: N802
        return self._set("partials_type", str(dtype))

    def halfFloatCasting(self, mode: Any) -> _PrecisionOptions:  # noqa: N802
        return self._set("half_float_casting", mode)

    def runningStatisticsAlwaysFloat(self, value: bool) -> _PrecisionOptions:  # noqa: N802
        return self._set("running_statistics_always_float", bool(value))

    def enableStochasticRounding(self, value: bool) -> _PrecisionOptions:  # noqa: N802
        return self._set("stochastic_rounding", bool(value))

    def enableFloatingPointExceptions(self, value: bool) -> _PrecisionOptions:  # noqa: N802
        return self._set("fp_exceptions", bool(value))


class TensorLocationSettings:
    """Where a kind of tensor lives (on chip, streaming memory, RTS): recorded."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def setter(*args: Any) -> TensorLocationSettings:
            self.values[name] = args
            return self

        return setter


class _TensorLocationOptions(_Group):
    def numIOTiles(self, n: int) -> _TensorLocationOptions:  # noqa: N802
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise OptionError(f"numIOTiles must be an int >= 0, got {n!r}")
        return self._set("num_io_tiles", n)

    def setActivationLocation(self, s: TensorLocationSettings) -> _TensorLocationOptions:  # noqa: N802
        return self._set("activation", s)

    def setWeightLocation(self, s: TensorLocationSettings) -> _TensorLocationOptions:  # noqa: N802
        return self._set("weight", s)

    def setOptimizerLocation(self, s: TensorLocationSettings) -> _TensorLocationOptions:  # noqa: N802
        return self._set("optimizer", s)

    def setAccumulatorLocation(self, s: TensorLocationSettings) -> _TensorLocationOptions:  # noqa: N802
        return self._set("accumulator", s)


class _JitOptions(_Group):
    def traceModel(self, trace: bool) -> _JitOptions:  # noqa: N802
        """Either value is accepted: pyipu always lowers through torch.onnx's tracer."""
        return self._set("trace_model", bool(trace))


class _DistributedOptions(_Group):
    def configureProcessId(self, process_id: int, num_processes: int) -> _DistributedOptions:  # noqa: N802
        if num_processes != 1 or process_id != 0:
            raise OptionError(
                "Distributed.configureProcessId: pyipu runs in one process (num_processes 1); "
                "use replicationFactor for data parallelism"
            )
        return self._set("process", (0, 1))

    def disable(self) -> _DistributedOptions:
        return self._set("disabled", True)

    @property
    def processId(self) -> int:  # noqa: N802
        return 0

    @property
    def numProcesses(self) -> int:  # noqa: N802
        return 1


class _PopartOptions(_Group):
    """`opts._Popart.set(name, value)`: a PopART SessionOptions value, checked by it."""

    def set(self, name: str, value: Any) -> _PopartOptions:
        from pyipu.popart import SessionOptions

        if not hasattr(SessionOptions(), name):
            raise OptionError(f"_Popart.set: PopART has no session option {name!r}")
        return self._set(name, value)


class Options:
    """PopTorch's options; every setter returns the Options, so calls chain."""

    def __init__(self) -> None:
        self.Training = _TrainingOptions()
        self.Precision = _PrecisionOptions()
        self.TensorLocations = _TensorLocationOptions()
        self.Jit = _JitOptions()
        self.Distributed = _DistributedOptions()
        self._Popart = _PopartOptions()
        self._values: dict[str, Any] = dict(
            device_iterations=1,
            replication_factor=1,
            input_group_size=1,
            output_mode=enums.OutputMode.Default,
            output_return_period=1,
            auto_round_num_ipus=False,
            broadcast_buffers=True,
            random_seed=None,
            use_ipu_model=os.environ.get("POPTORCH_IPU_MODEL", "") == "1",
            ipu_id=None,
            offline_ipu_version=None,
            connection_type=enums.ConnectionType.Always,
            sync_pattern=enums.SyncPattern.Full,
            cache_path=None,
            execution_strategy=blocks.PipelinedExecution(),
            log_dir=".",
        )
        if os.environ.get("POPTORCH_CACHE_DIR"):
            self.enableExecutableCaching(os.environ["POPTORCH_CACHE_DIR"])

    # --- batching ---------------------------------------------------------------------------
    def deviceIterations(self, n: int) -> Options:  # noqa: N802
        self._values["device_iterations"] = _positive("deviceIterations", n)
        return self

    def replicationFactor(self, n: int) -> Options:  # noqa: N802
        self._values["replication_factor"] = _positive("replicationFactor", n)
        return self

    def inputReplicaGrouping(self, size: int, kind: enums.CommGroupType) -> Options:  # noqa: N802
        if size != 1:
            raise OptionError(
                "inputReplicaGrouping: every replica reads its own input in pyipu "
                "(input_group_size 1)"
            )
        self._values["input_group_size"] = 1
        return self

    def outputMode(
        self, mode: enums.OutputMode, output_return_period: int | None = None
    ) -> Options:  # noqa: N802
        mode = enums.OutputMode(mode)
        if mode == enums.OutputMode.EveryN:
            self._values["output_return_period"] = _positive(
                "output_return_period", output_return_period
            )
        elif output_return_period is not None:
            raise OptionError("output_return_period is only for OutputMode.EveryN")
        self._values["output_mode"] = mode
        return self

    def anchorMode(self, mode: enums.OutputMode, period: int | None = None) -> Options:  # noqa: N802
        return self.outputMode(mode, period)

    # --- devices ----------------------------------------------------------------------------
    def useIpuModel(self, use: bool) -> Options:  # noqa: N802
        self._values["use_ipu_model"] = bool(use)
        return self

    def useIpuId(self, ipu_id: int) -> Options:  # noqa: N802
        self._values["ipu_id"] = int(ipu_id)
        return self

    def useOfflineIpuTarget(self, ipu_version: int = 2) -> Options:  # noqa: N802
        if ipu_version not in (1, 2, 21):
            raise OptionError(f"useOfflineIpuTarget: ipu_version 1, 2 or 21, got {ipu_version!r}")
        self._values["offline_ipu_version"] = ipu_version
        self._values["connection_type"] = enums.ConnectionType.Never
        return self

    def connectionType(self, kind: enums.ConnectionType) -> Options:  # noqa: N802
        self._values["connection_type"] = enums.ConnectionType(kind)
        return self

    def syncPattern(self, pattern: enums.SyncPattern) -> Options:  # noqa: N802
        self._values["sync_pattern"] = enums.SyncPattern(pattern)
        return self

    def autoRoundNumIPUs(self, enabled: bool) -> Options:  # noqa: N802
        self._values["auto_round_num_ipus"] = bool(enabled)
        return self

    def setExecutionStrategy(self, strategy: Any) -> Options:  # noqa: N802
        if not isinstance(strategy, blocks._Strategy):
            raise OptionError(
                "setExecutionStrategy: a PipelinedExecution, ShardedExecution, "
                f"SerialPhasedExecution or ParallelPhasedExecution, got {strategy!r}"
            )
        self._values["execution_strategy"] = strategy
        return self

    # --- the rest ---------------------------------------------------------------------------
    def enableExecutableCaching(self, path: str | None) -> Options:  # noqa: N802
        self._values["cache_path"] = None if path is None else os.fspath(path)
        return self

    def randomSeed(self, seed: int) -> Options:  # noqa: N802
        self._values["random_seed"] = int(seed)
        return self

    def broadcastBuffers(self, enabled: bool) -> Options:  # noqa: N802
        self._values["broadcast_buffers"] = bool(enabled)
        return self

    def logDir(self, path: str) -> Options:  # noqa: N802
        self._values["log_dir"] = str(path)
        return self

    def _record(self, name: str, value: Any) -> Options:
        self._values[name] = value
        return self

    def enableSyntheticData(self, enabled: bool) -> Options:  # noqa: N802
        return self._record("synthetic_data", bool(enabled))

    def logCycleCount(self, enabled: bool) -> Options:  # noqa: N802
        return self._record("log_cycle_count", bool(enabled))

    def enableProfiling(self, profile_dir: str | None = None) -> Options:  # noqa: N802
        return self._record("profile_dir", profile_dir)

    def setAvailableMemoryProportion(self, proportions: dict[str, float]) -> Options:  # noqa: N802
        return self._record("available_memory_proportion", dict(proportions))

    def maxRepeatLogs(self, n: int) -> Options:  # noqa: N802
        return self._record("max_repeat_logs", n)

    def enableStableNorm(self, enabled: bool) -> Options:  # noqa: N802
        return self._record("stable_norm", bool(enabled))

    def relaxOptimizerAttributesChecks(self, relax: bool = True) -> Options:  # noqa: N802
        return self._record("relax_optimizer_checks", bool(relax))

    def showCompilationProgressBar(self, show: bool = True) -> Options:  # noqa: N802
        return self._record("progress_bar", bool(show))

    # --- derived values ---------------------------------------------------------------------
    @property
    def device_iterations(self) -> int:
        return int(self._values["device_iterations"])

    @property
    def replication_factor(self) -> int:
        return int(self._values["replication_factor"])

    @property
    def gradient_accumulation(self) -> int:
        return int(self.Training.values["gradient_accumulation"])

    @property
    def output_mode(self) -> enums.OutputMode:
        return enums.OutputMode(self._values["output_mode"])

    @property
    def output_return_period(self) -> int:
        return int(self._values["output_return_period"])

    @property
    def execution_strategy(self) -> Any:
        return self._values["execution_strategy"]

    @property
    def auto_round_num_ipus(self) -> bool:
        return bool(self._values["auto_round_num_ipus"])

    @property
    def random_seed(self) -> int | None:
        return self._values["random_seed"]

    def batch_factor(self, training: bool) -> int:
        """How many micro-batches one call takes: deviceIterations × replicas (× gradient
        accumulation when training)."""
        acc = self.gradient_accumulation if training else 1
        return self.device_iterations * self.replication_factor * acc

    def toDict(self) -> dict[str, Any]:  # noqa: N802
        out = dict(self._values)
        for name in ("Training", "Precision", "TensorLocations", "Jit", "Distributed", "_Popart"):
            out.update({f"{name}.{k}": v for k, v in getattr(self, name).values.items()})
        return out

    def clone(self) -> Options:
        return copy.deepcopy(self)

    def __repr__(self) -> str:
        return f"Options({self.toDict()})"

    # --- config files -----------------------------------------------------------------------
    def loadFromFile(self, filepath: str | os.PathLike) -> Options:  # noqa: N802
        """Apply a config file: one option call per line, written as in Python without the
        `options.` prefix (`deviceIterations(4)`, `Training.gradientAccumulation(2)`,
        `setExecutionStrategy(poptorch.ShardedExecution())`); blank lines and `#` comments
        are skipped. Lines are parsed, never executed: arguments are literals or PopTorch's
        own classes and enum values."""
        path = os.fspath(filepath)
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError as e:
            raise OptionError(f"loadFromFile {path!r}: {e.strerror}") from None
        for number, raw in enumerate(lines, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            where = f"{path}:{number}"
            try:
                call = ast.parse(line, mode="eval").body
            except SyntaxError:
                raise OptionError(f"{where}: not an option call: {line!r}") from None
            if not isinstance(call, ast.Call):
                raise OptionError(f"{where}: not an option call: {line!r}")
            method = _option_method(self, call.func, where)
            args = [_literal(a, where) for a in call.args]
            kwargs = {k.arg: _literal(k.value, where) for k in call.keywords if k.arg}
            if len(kwargs) != len(call.keywords):
                raise OptionError(f"{where}: **kwargs are not allowed")
            try:
                method(*args, **kwargs)
            except TypeError as e:
                raise OptionError(f"{where}: {e}") from None
        return self


def _option_method(opts: Options, node: ast.expr, where: str) -> Any:
    """The bound setter a config line names: `name` or `Group.name`."""
    path: list[str] = []
    while isinstance(node, ast.Attribute):
        path.insert(0, node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        raise OptionError(f"{where}: not an option name")
    path.insert(0, node.id)
    if path[0] == "options":  # tolerate the prefix the format leaves out
        path = path[1:]
    target: Any = opts
    for part in path:
        if part.startswith("__") or not hasattr(target, part):
            raise OptionError(f"{where}: Options has no option {'.'.join(path)!r}")
        target = getattr(target, part)
    if not callable(target):
        raise OptionError(f"{where}: {'.'.join(path)!r} is not an option setter")
    return target


def _safe_names() -> dict[str, Any]:
    """What a config file's arguments may name: PopTorch's strategies, stages and enums."""
    names: dict[str, Any] = {
        c.__name__: c
        for c in (
            blocks.PipelinedExecution,
            blocks.ShardedExecution,
            blocks.SerialPhasedExecution,
            blocks.ParallelPhasedExecution,
            blocks.Stage,
            blocks.Phase,
            TensorLocationSettings,
        )
    }
    for e in (
        enums.OutputMode,
        enums.ReductionType,
        enums.MeanReductionStrategy,
        enums.ConnectionType,
        enums.SyncPattern,
        enums.AutoStage,
        enums.CommGroupType,
        enums.Liveness,
    ):
        names[e.__name__] = e
    return names


def _literal(node: ast.expr, where: str) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        pass
    names = _safe_names()
    if isinstance(node, ast.Call):
        fn = _named(node.func, names, where)
        if not isinstance(fn, type):
            raise OptionError(f"{where}: only PopTorch classes may be called in a config file")
        args = [_literal(a, where) for a in node.args]
        kwargs = {k.arg: _literal(k.value, where) for k in node.keywords if k.arg}
        try:
            return fn(*args, **kwargs)
        except TypeError as e:
            raise OptionError(f"{where}: {e}") from None
    if isinstance(node, (ast.Attribute, ast.Name)):
        return _named(node, names, where)
    raise OptionError(f"{where}: arguments must be literals or PopTorch values")


def _named(node: ast.expr, names: dict[str, Any], where: str) -> Any:
    path: list[str] = []
    while isinstance(node, ast.Attribute):
        path.insert(0, node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        raise OptionError(f"{where}: arguments must be literals or PopTorch values")
    path.insert(0, node.id)
    if path[0] == "poptorch":
        path = path[1:]
    if path and path[0] == "enums":
        path = path[1:]
    if not path or path[0] not in names:
        raise OptionError(f"{where}: unknown name {'.'.join(path)!r}")
    value = names[path[0]]
    for part in path[1:]:
        if part.startswith("_") or not hasattr(value, part):
            raise OptionError(f"{where}: unknown name {'.'.join(path)!r}")
        value = getattr(value, part)
    return value
