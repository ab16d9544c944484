"""PopART's `SessionOptions`, and how they map onto pyipu's `CompilerOptions`.

Every PopART option name is accepted with its default; those a CPU has a counterpart for are
applied (replication, virtual graphs, pipelining, I/O tiles, constant weights, engine caching,
engine options, gradient accumulation), the rest only recorded. Setting a name PopART does not
have is an error, as in PopART.
"""

from __future__ import annotations

import enum
from typing import Any

from pyipu.popart.errors import popart_exception


class VirtualGraphMode(enum.IntEnum):
    Off = 0
    Manual = 1
    Auto = 2
    ExecutionPhases = 3


class SyntheticDataMode(enum.IntEnum):
    Off = 0
    Zeros = 1
    RandomNormal = 2
    RandomUniform = 3


_DEFAULTS: dict[str, Any] = {
    "enableReplicatedGraphs": False,
    "replicatedGraphCount": 1,
    "enableGradientAccumulation": False,
    "accumulationFactor": 1,
    "accumulationAndReplicationReductionType": 0,  # ReductionType.Sum
    "virtualGraphMode": VirtualGraphMode.Off,
    "virtualGraphSplitRatios": [],
    "enablePipelining": False,
    "syntheticDataMode": SyntheticDataMode.Off,
    "numIOTiles": 0,
    "enableExplicitMainLoops": False,
    "useHostCopyOps": False,
    "rearrangeAnchorsOnHost": True,
    "rearrangeStreamsOnHost": False,
    "enablePrefetchDatastreams": True,
    "defaultBufferingDepth": 1,
    "enableOutlining": True,
    "outlineThreshold": 1.0,
    "constantWeights": True,
    "enableEngineCaching": False,
    "cachePath": "session_cache",
    "enableStochasticRounding": False,
    "engineOptions": {},
    "reportOptions": {},
    "enableDistributedReplicatedGraphs": False,
    "globalReplicationFactor": 1,
    "globalReplicaOffset": 0,
    "groupHostSync": False,
    "enableLoadAndOffloadRNGState": False,
    "instrumentWithHardwareCycleCounter": False,
    "compileEngine": True,
    "partialsTypeMatMuls": "",
    "enableFloatingPointChecks": False,
    "enableNonStableSoftmax": False,
    "logDir": "",
}


class SessionOptions:
    """PopART's session options with their defaults (`options.replicatedGraphCount = 4`)."""

    def __init__(self) -> None:
        for k, v in _DEFAULTS.items():
            object.__setattr__(self, k, v.copy() if isinstance(v, (dict, list)) else v)

    def __getattr__(self, name: str) -> Any:  # only for names never set: not an option
        raise AttributeError(f"SessionOptions has no option {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in _DEFAULTS:
            raise AttributeError(f"SessionOptions has no option {name!r}")
        object.__setattr__(self, name, value)

    @property
    def replicas(self) -> int:
        return int(self.replicatedGraphCount) if self.enableReplicatedGraphs else 1

    @property
    def accumulation(self) -> int:
        return int(self.accumulationFactor) if self.enableGradientAccumulation else 1

    @property
    def reduction(self) -> int:
        """How replicas' and accumulated micro-batches' gradients combine (ReductionType)."""
        return int(self.accumulationAndReplicationReductionType)

    def compiler_options(self, num_ipus: int) -> Any:
        """The CompilerOptions of a session on `num_ipus` IPUs (batchesPerStep is handled by
        the session, which runs the executable once per micro-batch)."""
        from pyipu.compiler import CompilerOptions

        mode = VirtualGraphMode(self.virtualGraphMode)
        if mode in (VirtualGraphMode.Auto, VirtualGraphMode.ExecutionPhases):
            raise popart_exception(
                f"virtualGraphMode {mode.name} is not supported: use Manual with "
                "builder.virtualGraph(...) (or Off)"
            )
        if self.replicas < 1 or self.accumulation < 1:
            raise popart_exception("replicatedGraphCount and accumulationFactor must be >= 1")
        if num_ipus % self.replicas:
            raise popart_exception(
                f"the device has {num_ipus} IPU(s), not a multiple of replicatedGraphCount "
                f"{self.replicas}"
            )
        return CompilerOptions(
            num_ipus=num_ipus // self.replicas,
            replication_factor=self.replicas,
            virtual_graph_mode="manual" if mode == VirtualGraphMode.Manual else "off",
            enable_pipelining=bool(self.enablePipelining),
            num_io_tiles=int(self.numIOTiles),
            constant_weights=bool(self.constantWeights),
            enable_engine_caching=bool(self.enableEngineCaching),
            cache_path=str(self.cachePath) if self.enableEngineCaching else "",
            engine_options={str(k): str(v) for k, v in dict(self.engineOptions).items()},
            show_compilation_progress_bar=False,
        )

    def __repr__(self) -> str:
        changed = {k: getattr(self, k) for k, v in _DEFAULTS.items() if getattr(self, k) != v}
        return f"SessionOptions({changed})"
