"""The runtime options table: every option of a runner or session, defined once.

One row per option: its name, C type, default, the layers that have it, the range a Python
value must lie in, and one line of documentation. tools/gen_config.py writes from it the fields
and defaults of the C structs `ipu_runtime_config` and `ipu_session_config`, the copy of the
shared fields from the first into the second, the Cython declarations and copies, the fields of
`SessionConfig` and the table in docs/runtime.md (`tools/gen_config.py --check` fails when one
of them is stale). `RuntimeConfig` and `SessionConfig` read their defaults and checks from here.
Adding an option: a row here, the code that uses it, a test; then run tools/gen_config.py.

Stdlib only: the generator loads this file without importing pyipu (whose extension may not be
built yet). The order of the rows is the field order of the C structs, part of their ABI: add
new rows at the end.
"""

from __future__ import annotations

from dataclasses import dataclass

# The layers an option can appear in.
C_RUNTIME = "ipu_runtime_config"
C_SESSION = "ipu_session_config"
PY_RUNTIME = "RuntimeConfig"
PY_SESSION = "SessionConfig"
LAYERS = (PY_RUNTIME, PY_SESSION, C_RUNTIME, C_SESSION)

# C types. BOOL is a C int holding 0 or 1 (a Python bool); INT a C int with a signed range.
U32 = "uint32_t"
U64 = "uint64_t"
BOOL = "bool"
INT = "int"
OBJECT = "object"  # a Python-only field that is not a number (checked by its own code)

UINT32_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1
NS_MAX = 2**63 - 1  # std::chrono::nanoseconds::max(): "never"
NO_INDEX = UINT32_MAX  # IPU_NO_INDEX: dynamic batching off
C_LIMITS = {U32: (0, UINT32_MAX), U64: (0, UINT64_MAX), BOOL: (0, 1), INT: (-(2**31), 2**31 - 1)}
# How C spells a default that has a name.
C_NAMES = {NO_INDEX: "IPU_NO_INDEX"}
PY_NAMES = {NO_INDEX: "BATCHING_DIM_DISABLED"}

_DEFAULT = object()  # py_default not given: the same as the C default


@dataclass(frozen=True)
class Option:
    name: str
    ctype: str
    default: object  # the C default (Python's too unless py_default says otherwise)
    layers: tuple[str, ...]
    doc: str  # the docs table's line (Markdown)
    c_doc: str = ""  # the C field comment when it should differ from doc (plain text)
    minimum: int | None = None  # None: the C type's minimum
    maximum: int | None = None  # None: the C type's maximum
    py_default: object = _DEFAULT  # None: decided when the runner starts (doc_default says how)
    doc_default: str = ""  # the docs table's default when the value alone would not say it
    choices: tuple[int, ...] = ()  # the only values pyipu implements (others: UnsupportedError)
    pyipu: bool = False  # a pyipu extension: not in PopRT or Model Runtime
    py_type: str = ""  # the Python annotation of an OBJECT field

    @property
    def python_default(self) -> object:
        if self.py_default is not _DEFAULT:
            return self.py_default
        return bool(self.default) if self.ctype == BOOL else self.default

    @property
    def limits(self) -> tuple[int, int]:
        low, high = C_LIMITS[self.ctype]
        low = low if self.minimum is None else self.minimum
        return low, high if self.maximum is None else self.maximum


OPTIONS: tuple[Option, ...] = (
    Option(
        name="num_threads",
        ctype=U32,
        default=0,
        layers=LAYERS,
        minimum=1,
        py_default=None,
        doc_default="`$PYIPU_NUM_THREADS` or all cores",
        pyipu=True,
        doc="compute workers per runner or session, including the thread running the programs",
        c_doc="compute workers incl. the thread running the programs; 0 = usable CPUs",
    ),
    Option(
        name="ring_buffer_size_multiplier",
        ctype=U32,
        default=2,
        layers=(PY_RUNTIME, C_RUNTIME),
        minimum=1,
        doc="queue capacity = multiplier × batches_per_step slots; a submit blocks while a "
        "queue is full",
        c_doc="ring capacity = multiplier * batches_per_step slots (x rows per batch with "
        "dynamic batching)",
    ),
    Option(
        name="ring_capacity",
        ctype=U32,
        default=0,
        layers=(C_SESSION,),
        pyipu=True,
        doc="slots per anchor queue; 0 = 2 × batches_per_step (Python: the QueueManager's "
        "capacity)",
        c_doc="slots per anchor ring; 0 = 2 * batches_per_step",
    ),
    Option(
        name="timeout_ns",
        ctype=U64,
        default=10_000_000,
        layers=(PY_RUNTIME, C_RUNTIME, C_SESSION),
        doc_default="10 ms",
        doc="wait for the next input of a started step before padding; 0 = forever",
        c_doc="wait for the next input of a started step before padding it; 0 = forever",
    ),
    Option(
        name="batch_timeout_ns",
        ctype=U64,
        default=0,
        layers=(C_RUNTIME, C_SESSION),
        pyipu=True,
        doc="wait to complete a partial batch; 0 = `timeout_ns` (Python: `batch_size_timeout_ns`)",
        c_doc="wait to complete a partial batch; 0 = same as timeout_ns",
    ),
    Option(
        name="batching_dim",
        ctype=U32,
        default=NO_INDEX,
        layers=LAYERS,
        doc_default="0xFFFFFFFF (off)",
        doc="dynamic batching along that dimension (see above); not for fused models",
        c_doc="IPU_NO_INDEX = disabled (slots and requests are whole batches)",
    ),
    Option(
        name="flush_on_waiting_outputs",
        ctype=BOOL,
        default=0,
        layers=(PY_RUNTIME, C_RUNTIME, C_SESSION),
        doc="pad only while a request waits for outputs",
        c_doc="pad only while an output slot is queued",
    ),
    Option(
        name="auto_reset",
        ctype=BOOL,
        default=0,
        layers=(PY_RUNTIME, C_RUNTIME),
        doc="see Failures",
        c_doc="after a failure, reload and keep serving",
    ),
    Option(
        name="check_package_hash",
        ctype=BOOL,
        default=1,
        layers=LAYERS,
        doc="refuse a PopEF from another pyipu version (`PackageHashError`); False loads it anyway",
        c_doc="IPU_ERR_HASH_MISMATCH for a container from another compiler version",
    ),
    Option(
        name="validate_io_params",
        ctype=BOOL,
        default=1,
        layers=(PY_RUNTIME, C_RUNTIME),
        doc="every execute input/output must be given; must be False for fused models (one "
        "subgraph per request)",
        c_doc="require every anchor of the model in each request",
    ),
    Option(
        name="thread_safe",
        ctype=BOOL,
        default=1,
        layers=(PY_RUNTIME, C_RUNTIME),
        doc="PopRT's per-runner submit mutex; **pyipu** always takes it, so False is just as safe",
        c_doc="PopRT's option; submits are always serialised",
    ),
    Option(
        name="overlap_io",
        ctype=INT,
        default=-1,
        layers=(C_RUNTIME, C_SESSION),
        minimum=-1,
        maximum=1,
        pyipu=True,
        doc="overlap I/O: -1 = on when the executable has `num_io_tiles` > 0, 0 off, 1 on",
        c_doc="-1: on when the executable has num_io_tiles > 0; 0 off; 1 on",
    ),
    Option(
        name="pin_threads",
        ctype=BOOL,
        default=1,
        layers=LAYERS,
        pyipu=True,
        doc="the device thread and each compute helper on its own CPU (see Threads and CPUs)",
        c_doc="each compute helper (and a runtime's device thread) on its own CPU, when the "
        "process may use at least num_threads CPUs",
    ),
    # Python only: the runner turns these into the C fields above.
    Option(
        name="is_batch_size_timeout_enabled",
        ctype=BOOL,
        default=0,
        layers=(PY_RUNTIME,),
        doc="bound the wait for the rest of a partial batch by `batch_size_timeout_ns` instead "
        "of `timeout_ns`",
    ),
    Option(
        name="batch_size_timeout_ns",
        ctype=U64,
        default=NS_MAX,
        layers=(PY_RUNTIME,),
        doc_default="max",
        doc="with `is_batch_size_timeout_enabled`: the wait for the rest of a partial batch "
        "(max = never)",
    ),
    Option(
        name="data_parallel_timeout_ns",
        ctype=U64,
        default=NS_MAX,
        layers=(PY_RUNTIME,),
        doc_default="max",
        doc="replicated runners with `is_batch_size_timeout_enabled`: replicas pad a started "
        "step after this long instead of `timeout_ns` (max = never)",
    ),
    Option(
        name="request_tracepoints_buffer_size",
        ctype=U64,
        default=1000,
        layers=(PY_RUNTIME,),
        doc="events kept per replica when `record_tracepoints` is on (see Tracepoints)",
    ),
    Option(
        name="runner_type",
        ctype=U32,
        default=0,
        layers=(PY_RUNTIME,),
        choices=(0, 2),
        doc_default="ModelRunner",
        doc="ModelRunner and ModelFusionRunner (the same runner here)",
    ),
    Option(
        name="record_tracepoints",
        ctype=BOOL,
        default=0,
        layers=(PY_RUNTIME,),
        pyipu=True,
        doc="record the load/compute/store stage of every iteration",
    ),
    Option(
        name="device_wait_config",
        ctype=OBJECT,
        default=None,
        layers=(PY_RUNTIME,),
        doc_default="1 s / 6 s",
        doc="accepted; virtual IPUs are always available",
    ),
    Option(
        name="replica_id_to_device",
        ctype=OBJECT,
        default=None,
        layers=(PY_RUNTIME,),
        doc_default="{}",
        doc="not implemented yet: a non-empty map raises `UnsupportedError`",
    ),
    Option(
        name="flush_by_name",
        ctype=OBJECT,
        default=None,
        layers=(PY_RUNTIME,),
        doc_default="None",
        doc="not implemented yet: a value raises `UnsupportedError`",
    ),
    Option(
        name="wait_config",
        ctype=OBJECT,
        default=None,
        layers=(PY_SESSION,),
        py_type="DeviceWaitConfig | None",
        doc_default="None",
        doc="accepted; virtual IPUs are always available",
    ),
    Option(
        name="no_wait_when_alone",
        ctype=BOOL,
        default=0,
        layers=(PY_RUNTIME, C_RUNTIME),
        pyipu=True,
        doc="with `batching_dim`: a partial batch whose rows are those of the only request "
        "pending runs at once instead of waiting for other requests' rows",
        c_doc="with batching_dim: a partial batch whose rows are those of the only request "
        "pending runs at once, without the batch timeout",
    ),
)

BY_NAME = {o.name: o for o in OPTIONS}
# SessionConfig's first fields, in the order its constructor takes them positionally; the other
# SessionConfig options follow in table order.
PY_SESSION_ORDER = ("check_package_hash", "wait_config", "num_threads", "batching_dim")


def options(layer: str) -> tuple[Option, ...]:
    """The options `layer` has, in table order."""
    return tuple(o for o in OPTIONS if layer in o.layers)
