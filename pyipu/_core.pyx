# cython: language_level=3, boundscheck=False, wraparound=False
"""Thin handles over the C core (runtime_c/include/ipu): containers, executables, runtimes.

pyipu._session (Session) and pyipu._fast_path (FastPath) are modules of their own built on this
one's types (_core.pxd); all three link the one libipu.so of the package.

Every C call goes through _check(), which raises the pyipu.errors class mapped from the status
name with the C library's detailed message. Blocking calls release the GIL.
"""
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.exc cimport PyErr_CheckSignals
from cpython.ref cimport Py_DECREF
from libc.stdint cimport uint32_t, uint64_t
from libc.stdlib cimport free, malloc

cimport cython
cimport numpy as cnp

from pyipu._cipu cimport *

import numbers
import os
import weakref

import numpy as np

from pyipu import errors as _errors

cnp.import_array()

_MAX_ENUM = 256
NO_INDEX = IPU_NO_INDEX
MAX_THREADS = IPU_MAX_THREADS  # compute workers a runtime or session takes at most
BIND_QUEUE = IPU_BIND_QUEUE
BIND_EMPTY = IPU_BIND_EMPTY
BIND_CALLBACK = IPU_BIND_CALLBACK
BIND_TENSOR_DATA = IPU_BIND_TENSOR_DATA
PACKED_BLOB_NAME = IPU_PACKED_BLOB_NAME.decode()
TENSOR_STORED_PACKED = IPU_TENSOR_STORED_PACKED  # tensor flag: bytes only in the packed blob
# Tracepoint kinds (ipu_trace.h), by value.
TRACE_KINDS = {IPU_TRACE_LOAD: "load", IPU_TRACE_COMPUTE: "compute", IPU_TRACE_STORE: "store"}
# ipu_trace_event, field for field.
TRACE_EVENT_DTYPE = np.dtype([("start_ns", np.uint64), ("end_ns", np.uint64),
                              ("kind", np.uint32), ("subgraph", np.uint32), ("seq", np.uint64)])


def op_arity():
    """{opcode value: (min inputs, max inputs, outputs)} from ipu_ops.def."""
    cdef uint32_t lo, hi, outs
    out = {}
    for value, _ in [(v, n) for n, v in enum_table("op")]:
        if ipu_opcode_arity(<ipu_opcode>value, &lo, &hi, &outs) == IPU_OK:
            out[value] = (lo, hi, outs)
    return out


def enum_table(str kind):
    """(name, value) pairs of a C enum table: 'status', 'dtype', 'op', 'unary', 'binary',
    'reduce' or 'act'."""
    cdef int v
    cdef const char *s
    out = []
    for v in range(_MAX_ENUM):
        if kind == "status":
            if v >= IPU_STATUS_COUNT_:
                break
            s = ipu_status_name(v)
        elif kind == "dtype":
            s = ipu_dtype_name(v)
        elif kind == "op":
            s = ipu_opcode_name(v)
        elif kind == "unary":
            s = ipu_unary_fn_name(v)
        elif kind == "binary":
            s = ipu_binary_fn_name(v)
        elif kind == "reduce":
            s = ipu_reduce_fn_name(v)
        elif kind == "act":
            s = ipu_act_fn_name(v)
        else:
            raise ValueError(f"unknown enum table {kind!r}")
        if s != NULL:
            out.append((s.decode(), v))
    return out


def dtype_size(int dtype):
    return ipu_dtype_size(dtype)


def status_message(int status):
    return ipu_status_str(status).decode()


def compiler_hash():
    """Hash of this build's version string, stored by the compiler in every container."""
    return ipu_compiler_hash()


cdef int _check(ipu_status s) except -1:
    if s == IPU_OK:
        return 0
    detail = ipu_last_error_message().decode("utf-8", "replace")
    raise _errors.from_status(ipu_status_name(s).decode(), s, detail or ipu_status_str(s).decode())


cdef void *_contiguous(cnp.ndarray a, bint writable) except NULL:
    if not a.flags.c_contiguous or (writable and not a.flags.writeable):
        raise _errors.InvalidArgumentError(
            "the array must be C-contiguous" + (" and writable" if writable else ""))
    return cnp.PyArray_DATA(a) if a.nbytes else <void *>1


cdef dict _isa_levels():
    levels = {}
    cdef int i = 1
    while ipu__isa_name(i) != NULL:
        levels[ipu__isa_name(i).decode()] = i
        i += 1
    return levels


# Instruction-set level names and numbers ({"portable": 1, ...}), from kernels/isa.h.
ISA_LEVELS = _isa_levels()


def packed_unpack(payload, uint32_t tensor, size_t nbytes):
    """The original bytes of `tensor` (nbytes) from a PACKED_BLOB_NAME payload whose entry holds
    it stored packed: the C unpacking of its layout (docs/popef.md, "Pre-packed operands")."""
    cdef const unsigned char[::1] src = bytes(payload) if not isinstance(payload, bytes) else payload
    cdef bytes out = PyBytes_FromStringAndSize(NULL, nbytes)
    cdef char *dst = <char *>out
    cdef const void *p = &src[0] if src.shape[0] else NULL
    cdef size_t n = src.shape[0]
    cdef ipu_status s
    with nogil:
        s = ipu_packed_unpack(p, n, tensor, dst, nbytes)
    _check(s)
    return out


def set_isa(int level):
    """Force one instruction-set level (ISA_LEVELS) for every kernel family, process-wide; 0, or
    a level this CPU does not run, means automatic (the best it runs). Returns the level now in
    use. Set it between runs: for tests, benchmarks and PYIPU_ISA. An executable whose weights
    are stored packed for the micro-kernel in use at load refuses to run after a change
    (InvalidStateError): load it again."""
    return ipu__isa_force(level)


def isa_best():
    """The best instruction-set level (ISA_LEVELS) this CPU runs."""
    return ipu__isa_best()


def sgemm_isa():
    """The sgemm micro-kernel's level under the level in use (AVX2 on AMD Zen 4 when automatic);
    packed weight layouts are tagged with it."""
    return ipu__sgemm_isa()


def f16_to_f32(const uint16_t[::1] src not None):
    """float32 values of IEEE half bit patterns, through the kernels' bulk conversion."""
    out = np.empty(src.shape[0], np.float32)
    cdef float[::1] dst = out
    if src.shape[0]:
        with nogil:
            ipu__cvt_f16_to_f32(&src[0], &dst[0], <size_t>src.shape[0])
    return out


def f32_to_f16(const float[::1] src not None):
    """IEEE half bit patterns (uint16) of float32 values, through the kernels' bulk conversion."""
    out = np.empty(src.shape[0], np.uint16)
    cdef uint16_t[::1] dst = out
    if src.shape[0]:
        with nogil:
            ipu__cvt_f32_to_f16(&src[0], &dst[0], <size_t>src.shape[0])
    return out


def write_container(blobs, compiler_hash=None):
    """Serialise [(type, id, name or None, bytes)] into a container image (bytes)."""
    cdef ipu_container_writer *w = NULL
    cdef size_t size = 0
    cdef const unsigned char[::1] view
    cdef const char *cname
    views = []  # the writer borrows the payloads: keep them alive and pinned until it is done
    _check(ipu_container_writer_create(&w))
    try:
        if compiler_hash is not None:
            ipu_container_writer_set_compiler_hash(w, <uint64_t>compiler_hash)
        for btype, bid, name, payload in blobs:
            view = memoryview(payload).cast("B")
            views.append(view)
            bname = name.encode() if name is not None else b""
            cname = NULL
            if name is not None:
                cname = bname
            _check(ipu_container_writer_add_blob_ref(
                w, btype, bid, cname, &view[0] if view.shape[0] else NULL, view.shape[0]))
        _check(ipu_container_writer_finish_into(w, NULL, 0, &size))
        image = PyBytes_FromStringAndSize(NULL, size)  # written in place: one copy of the blobs
        _check(ipu_container_writer_finish_into(w, <char *>image, size, &size))
        return image
    finally:
        ipu_container_writer_destroy(w)


cdef class Container:
    """A validated container (memory-mapped file or in-memory copy)."""

    def __cinit__(self):
        self.c = NULL

    def __init__(self):
        raise TypeError("use Container.open(path) or Container.from_bytes(data)")

    def __dealloc__(self):
        ipu_container_destroy(self.c)

    @staticmethod
    def open(path):
        cdef Container self = Container.__new__(Container)
        cdef bytes bpath = os.fsencode(path)
        cdef const char *p = bpath
        cdef ipu_status s
        with nogil:
            s = ipu_container_open(p, &self.c)
        _check(s)
        self.source = os.fspath(path)
        return self

    @staticmethod
    def from_bytes(data):
        cdef Container self = Container.__new__(Container)
        cdef const unsigned char[::1] view = memoryview(data).cast("B")
        _check(ipu_container_open_memory(&view[0] if view.shape[0] else NULL, view.shape[0],
                                         &self.c))
        self.source = "<memory>"
        return self

    @property
    def format_version(self):
        return ipu_container_format_version(self.c)

    @property
    def compiler_hash(self):
        return ipu_container_compiler_hash(self.c)

    @property
    def file_size(self):
        return ipu_container_file_size(self.c)

    def blobs(self):
        """[(type, id, name or None, size)] in container order."""
        cdef ipu_blob_info info
        out = []
        for i in range(ipu_container_blob_count(self.c)):
            _check(ipu_container_blob(self.c, i, &info))
            out.append((info.type, info.id,
                        info.name.decode() if info.name != NULL else None, info.size))
        return out

    def blob_bytes(self, uint32_t index):
        cdef ipu_blob_info info
        _check(ipu_container_blob(self.c, index, &info))
        return PyBytes_FromStringAndSize(<const char *>info.data, info.size)


cdef tuple _desc_tuple(const ipu_tensor_desc *d):
    return (d.dtype, tuple(d.dims[i] for i in range(d.ndim)), d.nbytes)


cdef class Executable:
    """A parsed and verified executable; keeps its container alive."""

    def __cinit__(self):
        self.e = NULL

    def __init__(self, Container container not None):
        self.container = container
        _check(ipu_executable_create(container.c, &self.e))
        ipu_executable_get_info(self.e, &self.info)

    def __dealloc__(self):
        ipu_executable_destroy(self.e)

    def get_info(self):
        return dict(ipu_version=self.info.ipu_version, num_ipus=self.info.num_ipus,
                    replication_factor=self.info.replication_factor,
                    batches_per_step=self.info.batches_per_step,
                    num_io_tiles=self.info.num_io_tiles, num_tensors=self.info.num_tensors,
                    num_anchors=self.info.num_anchors, num_subgraphs=self.info.num_subgraphs,
                    num_programs=self.info.num_programs,
                    index_anchor=None if self.info.index_anchor == IPU_NO_INDEX
                    else self.info.index_anchor,
                    arena_size=self.info.arena_size, num_stages=self.info.num_stages,
                    pipelined=bool(self.info.pipelined),
                    step_end_program=(None if self.info.step_end_program == IPU_NO_INDEX
                                      else self.info.step_end_program))

    def anchors(self):
        """[(name, direction, dtype, shape, nbytes, subgraph or None, has_tensor_data, tensor)]."""
        cdef ipu_anchor_info a
        out = []
        for i in range(self.info.num_anchors):
            _check(ipu_executable_anchor(self.e, i, &a))
            dtype, shape, nbytes = _desc_tuple(&a.desc)
            out.append((a.name.decode(), a.direction, dtype, shape, nbytes,
                        None if a.subgraph == IPU_NO_INDEX else a.subgraph,
                        bool(a.has_tensor_data), a.tensor))
        return out

    def variables(self):
        """{name: (anchor index, tensor index)} of the weights kept as variables: state the
        programs update and that persists between steps (ipu_executable_variable)."""
        cdef ipu_anchor_info a
        cdef uint32_t t
        out = {}
        for i in range(self.info.num_anchors):
            _check(ipu_executable_anchor(self.e, i, &a))
            if a.has_tensor_data and ipu_executable_variable(self.e, i, &t) == IPU_OK:
                out[a.name.decode()] = (i, t)
        return out

    def tensors(self):
        cdef ipu_tensor_desc d
        out = []
        for i in range(self.info.num_tensors):
            _check(ipu_executable_tensor(self.e, i, &d))
            out.append(_desc_tuple(&d))
        return out

    def programs(self):
        """[(id, [(opcode, inputs, outputs, attrs)])] in container order."""
        cdef ipu_program_info p
        cdef ipu_instruction_info ins
        out = []
        for i in range(self.info.num_programs):
            _check(ipu_executable_program(self.e, i, &p))
            instrs = []
            for k in range(p.num_instructions):
                _check(ipu_executable_instruction(self.e, i, k, &ins))
                instrs.append((ins.opcode,
                               tuple(ins.inputs[j] for j in range(ins.num_inputs)),
                               tuple(ins.outputs[j] for j in range(ins.num_outputs)),
                               tuple(ins.attrs[j] for j in range(ins.num_attrs))))
            out.append((p.id, instrs))
        return out

    def packed_counts(self):
        """(mapped, packed): packed operands used in place from the container's packed blob,
        and packed at load (docs/popef.md, "Pre-packed operands")."""
        cdef uint32_t mapped = 0, packed = 0
        ipu_executable_packed_counts(self.e, &mapped, &packed)
        return mapped, packed

    def packed_blob(self):
        """The payload of a PACKED_BLOB_NAME blob with all packed operands, or None."""
        cdef size_t size = 0
        cdef ipu_status s = ipu_executable_packed_blob(self.e, NULL, 0, &size)
        if s == IPU_ERR_NOT_FOUND:
            return None
        _check(s)
        out = PyBytes_FromStringAndSize(NULL, size)  # written in place: no second copy
        _check(ipu_executable_packed_blob(self.e, <char *>out, size, &size))
        return out

    def packed_only(self):
        """Indices of the tensors a writer may store only packed (TENSOR_STORED_PACKED)."""
        cdef int yes = 0
        out = []
        for t in range(self.info.num_tensors):
            _check(ipu_executable_packed_only(self.e, t, &yes))
            if yes:
                out.append(t)
        return out

    def program_flow(self):
        """(load program id, [main program id per subgraph])."""
        cdef uint32_t pid
        mains = []
        for sg in range(self.info.num_subgraphs):
            _check(ipu_executable_main_program(self.e, sg, &pid))
            mains.append(pid)
        return ipu_executable_load_program(self.e), mains

    def stages(self):
        """[(program id, ipu, copy program id or None)] of a sharded executable."""
        cdef ipu_stage_info st
        out = []
        for k in range(self.info.num_stages):
            _check(ipu_executable_stage(self.e, k, &st))
            out.append((st.program, st.ipu,
                        None if st.copy_program == IPU_NO_INDEX else st.copy_program))
        return out


cdef class _ErrorBox:
    """First exception raised by a Python callback of a session, re-raised to its caller."""


cdef tuple _handler(owner, _ErrorBox box, fn, dtype, shape, bint is_input):
    """The user_data of _stream_trampoline. The owner (Runtime or Session) is held weakly:
    the handler table it keeps the tuple in would otherwise make a reference cycle."""
    return (weakref.ref(owner), box, fn, np.dtype(dtype), tuple(int(d) for d in shape), is_input)


cdef ipu_status _stream_trampoline(void *buf, size_t nbytes, const ipu_anchor_info *anchor,
                                   void *user_data) noexcept with gil:
    owner_ref, box, fn, dtype, shape, is_input = <tuple>user_data
    cdef cnp.npy_intp dims[32]
    cdef cnp.ndarray view
    cdef int nd = len(shape), i
    try:
        owner = owner_ref()
        if owner is None:  # being deallocated: its close() fails the iteration's requests
            return 8  # IPU_ERR_CLOSED
        if nd > 32:
            raise _errors.InternalError(f"stream callback: {nd} dimensions (at most 32)")
        for i in range(nd):
            dims[i] = shape[i]
        view = cnp.PyArray_SimpleNewFromData(nd, dims, dtype.num, buf)
        if <size_t>view.nbytes != nbytes:
            raise _errors.InternalError(f"stream callback: {nbytes} bytes, array of {view.nbytes}")
        # The view keeps its owner, and so the device memory it shows, alive: a handler that
        # keeps it past the call (or past its runner) never reaches freed memory.
        cnp.set_array_base(view, owner)
        if not is_input:
            view.flags.writeable = False
        fn(view)
        return IPU_OK
    except BaseException as e:
        box.exc = e  # the latest failure is the one the failing requests report
        return 15  # IPU_ERR_CALLBACK


cdef void _slot_trampoline(ipu_status status, void *user_data) noexcept with gil:
    holder = <tuple>user_data
    Py_DECREF(holder)  # the reference taken by enqueue; `holder` keeps it alive until return
    box, _array, fn = holder
    if fn is None:
        return
    try:
        fn(None if status == IPU_OK else
           _errors.from_status(ipu_status_name(status).decode(), status,
                               ipu_status_str(status).decode()))
    except BaseException as e:
        if box.exc is None:
            box.exc = e


cdef class Request:
    """One submitted request. Keeps its buffers alive until the request has completed."""

    def __cinit__(self):
        self.r = NULL

    def __init__(self):
        raise TypeError("requests come from Runtime.submit()")

    def __dealloc__(self):
        # The runtime may still write into our output arrays: never let them go before the
        # request completes (every request completes; close() fails pending ones).
        if self.r != NULL:
            with nogil:
                ipu_request_wait(self.r, <uint64_t>-1)
                ipu_request_release(self.r)

    def done(self):
        return bool(ipu_request_is_done(self.r))

    def wait(self, timeout=None):
        """Block until completion (or `timeout` seconds, see timeout_ns); raise the request's
        error if it failed.

        Returns True when completed successfully, False if the timeout expired first."""
        return _wait_request(self.r, timeout_ns(timeout), self.box)

    def cancel(self):
        """Ask the runtime to stop the request (ipu_request_cancel); returns at once. False if
        it had already completed. It then completes with CancelledError unless it completes
        first with another status."""
        if ipu_request_is_done(self.r):
            return False
        ipu_request_cancel(self.r)
        return True

    def finish(self):
        """Wait for the request to complete, as execute() does: an exception while waiting
        (KeyboardInterrupt from Ctrl-C) cancels it and is raised once it has completed, so the
        arrays are free again."""
        try:
            return _wait_request(self.r, <uint64_t>-1, self.box)
        except BaseException:
            _cancel_and_wait(self.r)
            raise


cdef void _cancel_and_wait(ipu_request *r) noexcept:
    """Cancel a request and wait for it: bounded by one instruction (or one chunk of work
    items) of the program running it."""
    if not ipu_request_is_done(r):
        ipu_request_cancel(r)
        with nogil:
            ipu_request_wait(r, <uint64_t>-1)


# Ctrl-C during a request run inline (ipu_runtime_execute on the caller's thread, the GIL
# released): the runtime calls _poll_signals between instructions every 20 ms
# (IPU_POLL_INTERVAL_NS); a signal handler that raises there (KeyboardInterrupt) cancels the
# request, and the exception is raised by the caller once execute returns IPU_ERR_CANCELLED.
# Handlers run on the main thread only, so one slot suffices.
cdef object _interrupt = None


cdef int _poll_signals(void *user_data) noexcept nogil:
    with gil:
        return _check_signals()


cdef int _check_signals() noexcept:
    global _interrupt
    try:
        PyErr_CheckSignals()
    except BaseException as e:
        _interrupt = e
        return 1
    return 0


cdef int _raise_interrupt() except -1:
    """Raise what a signal handler raised during the inline request, if anything."""
    global _interrupt
    e = _interrupt
    _interrupt = None
    if e is not None:
        raise e
    return 0


cpdef uint64_t timeout_ns(timeout) except? 0:
    """A timeout in seconds as the C calls take it: None or +inf is UINT64_MAX (forever), as
    is anything beyond it (2e10 s is 634 years); zero or negative is 0 (do not wait). NaN or a
    non-number raises InvalidArgumentError."""
    if timeout is None:
        return <uint64_t>-1
    if not isinstance(timeout, numbers.Real):
        raise _errors.InvalidArgumentError(
            f"timeout must be a number of seconds or None, got {type(timeout).__name__}")
    cdef double t = float(timeout)
    if t != t:
        raise _errors.InvalidArgumentError("timeout is NaN: give seconds, or None to wait forever")
    if t <= 0:
        return 0
    if t * 1e9 >= 18446744073709551615.0:
        return <uint64_t>-1
    return <uint64_t>(t * 1e9)


cdef bint _wait_request(ipu_request *r, uint64_t left, _ErrorBox box) except -1:
    """Request.wait for a raw request, `left` ns at most (UINT64_MAX: forever); the GIL is
    released while waiting."""
    cdef ipu_status s
    cdef uint64_t slice_ns = IPU_POLL_INTERVAL_NS  # wake to honour Ctrl-C, as inline
    cdef uint64_t step
    while True:
        step = slice_ns if left > slice_ns else left
        with nogil:
            s = ipu_request_wait(r, step)
        if ipu_request_is_done(r):
            break
        if left != <uint64_t>-1:
            left -= step
            if left == 0:
                return False
        PyErr_CheckSignals()
    s = ipu_request_status(r)
    if s == IPU_OK:
        return True
    _raise_request_error(s, box)


cdef int _raise_request_error(ipu_status s, _ErrorBox box) except -1:
    err = _errors.from_status(ipu_status_name(s).decode(), s, _request_error_message(s))
    cause = box.exc if box is not None else None
    if s == 15 and cause is not None:  # IPU_ERR_CALLBACK: carry the user's exception
        err.message = f"a stream callback raised {type(cause).__name__}: {cause}"
        err.args = (err.message,)
        raise err from cause
    raise err


cdef str _request_error_message(ipu_status s):
    if s == 8:  # ERR_CLOSED
        return "the runner was closed before this request completed"
    # The C runtime leaves the request's own message as this thread's last error.
    detail = ipu_last_error_message().decode("utf-8", "replace")
    return detail or "request failed: " + ipu_status_str(s).decode()


cdef class Trace:
    """A bounded buffer of load/compute/store events (ipu_trace.h), attached to runtimes with
    Runtime.set_trace; keeps the most recent `capacity` events."""

    def __cinit__(self, size_t capacity):
        self.t = NULL
        _check(ipu_trace_create(capacity, &self.t))

    def __dealloc__(self):
        ipu_trace_destroy(self.t)

    @property
    def capacity(self):
        return ipu_trace_capacity(self.t)

    def read(self):
        """(events, dropped): the retained events oldest first as a TRACE_EVENT_DTYPE array,
        and how many older ones were overwritten."""
        cdef size_t cap = ipu_trace_capacity(self.t), n = 0
        cdef uint64_t dropped = 0
        cdef cnp.ndarray out = np.empty(cap, TRACE_EVENT_DTYPE)
        cdef ipu_trace_event *buf = <ipu_trace_event *>cnp.PyArray_DATA(out)
        cdef ipu_status s
        assert TRACE_EVENT_DTYPE.itemsize == sizeof(ipu_trace_event)
        with nogil:
            s = ipu_trace_read(self.t, buf, cap, &n, &dropped)
        _check(s)
        return out[:n].copy(), dropped

    def clear(self):
        ipu_trace_clear(self.t)


@cython.no_gc_clear  # __dealloc__ destroys the C runtime before the traces it records into
cdef class Runtime:
    """A loaded executable serving requests on its own device thread."""

    def __cinit__(self):
        self.rt = NULL
        self.closed = False

    def __init__(self, Executable executable not None, dict config):
        # Keys left out keep the C defaults (ipu_runtime_config_default): one source of truth.
        cdef ipu_runtime_config cfg = ipu_runtime_config_default()
        cdef ipu_status s
        # BEGIN GENERATED copy: tools/gen_config.py from pyipu/_options.py
        cfg.num_threads = config.get("num_threads", cfg.num_threads)
        cfg.ring_buffer_size_multiplier = config.get("ring_buffer_size_multiplier",
                                                     cfg.ring_buffer_size_multiplier)
        cfg.timeout_ns = config.get("timeout_ns", cfg.timeout_ns)
        cfg.batch_timeout_ns = config.get("batch_timeout_ns", cfg.batch_timeout_ns)
        cfg.batching_dim = config.get("batching_dim", cfg.batching_dim)
        cfg.flush_on_waiting_outputs = config.get("flush_on_waiting_outputs",
                                                  cfg.flush_on_waiting_outputs)
        cfg.auto_reset = config.get("auto_reset", cfg.auto_reset)
        cfg.check_package_hash = config.get("check_package_hash", cfg.check_package_hash)
        cfg.validate_io_params = config.get("validate_io_params", cfg.validate_io_params)
        cfg.thread_safe = config.get("thread_safe", cfg.thread_safe)
        cfg.overlap_io = config.get("overlap_io", cfg.overlap_io)
        cfg.pin_threads = config.get("pin_threads", cfg.pin_threads)
        cfg.no_wait_when_alone = config.get("no_wait_when_alone", cfg.no_wait_when_alone)
        # END GENERATED copy
        self.executable = executable
        self.n_anchors = executable.info.num_anchors
        self.box = _ErrorBox()
        self.handlers = {}
        with nogil:
            s = ipu_runtime_create(executable.e, &cfg, &self.rt)
        _check(s)
        _check(ipu_runtime_set_poll(self.rt, _poll_signals, NULL))

    def set_stream_callback(self, uint32_t anchor, fn, dtype, shape, bint is_input):
        """Serve an anchor with fn(array) on the device thread (before the first submit)."""
        handler = _handler(self, self.box, fn, dtype, shape, is_input)
        _check(ipu_runtime_set_stream_callback(self.rt, anchor, _stream_trampoline,
                                               <void *>handler))
        self.handlers[anchor] = handler  # kept alive for the runtime's lifetime

    def set_trace(self, Trace trace):
        """Record this runtime's stages into `trace` (None: stop); before the first submit."""
        _check(ipu_runtime_set_trace(self.rt, trace.t if trace is not None else NULL))
        self.trace = trace  # kept alive while the runtime may record into it

    def __dealloc__(self):
        if self.rt != NULL:
            with nogil:
                ipu_runtime_destroy(self.rt)

    def close(self):
        """Stop the device; returns once every accepted request has completed, whichever
        thread closed first (the C call waits for a close in progress). Raises
        InvalidStateError, leaving the runtime open, when called from a stream callback."""
        cdef ipu_status s
        if self.rt == NULL:
            return
        with nogil:
            s = ipu_runtime_close(self.rt)
        _check(s)
        self.closed = True

    def reset(self):
        """Reload the device after a failure (auto_reset off); requests are accepted again."""
        cdef ipu_status s
        with nogil:
            s = ipu_runtime_reset(self.rt)
        _check(s)

    def read_variable(self, uint32_t anchor, cnp.ndarray out not None):
        """Copy variable `anchor` into `out` (C-contiguous, its size) between two steps."""
        cdef void *dst = _contiguous(out, True)
        cdef size_t n = out.nbytes
        cdef ipu_status s
        with nogil:
            s = ipu_runtime_read_variable(self.rt, anchor, dst, n)
        _check(s)

    def write_variable(self, uint32_t anchor, cnp.ndarray value not None):
        """Copy `value` (C-contiguous, the variable's size) into variable `anchor`."""
        cdef const void *src = _contiguous(value, False)
        cdef size_t n = value.nbytes
        cdef ipu_status s
        with nogil:
            s = ipu_runtime_write_variable(self.rt, anchor, src, n)
        _check(s)

    def queue_depth(self, uint32_t anchor):
        return ipu_runtime_queue_depth(self.rt, anchor)

    def submit(self, list inputs, list outputs, uint32_t num_batches, subgraph=None,
               uint64_t num_rows=0):
        """Queue a request. `inputs`/`outputs` are lists indexed by anchor (ndarray or None);
        num_rows > 0 with dynamic batching (rows along batching_dim), else num_batches."""
        cdef Request req = Request.__new__(Request)
        cdef ipu_request_desc desc
        cdef const void **ins = NULL
        cdef void **outs = NULL
        cdef ipu_status s
        cdef uint32_t i
        if len(inputs) != self.n_anchors or len(outputs) != self.n_anchors:
            raise ValueError("inputs and outputs must have one entry per anchor")
        ins = <const void **>malloc(self.n_anchors * sizeof(void *))
        outs = <void **>malloc(self.n_anchors * sizeof(void *))
        if ins == NULL or outs == NULL:
            free(ins)
            free(outs)
            raise MemoryError()
        try:
            for i in range(self.n_anchors):
                x = inputs[i]
                ins[i] = NULL if x is None else cnp.PyArray_DATA(<cnp.ndarray>x)
                y = outputs[i]
                outs[i] = NULL if y is None else cnp.PyArray_DATA(<cnp.ndarray>y)
            desc.num_batches = num_batches
            desc.num_rows = num_rows
            desc.inputs = ins
            desc.outputs = outs
            desc.subgraph = IPU_NO_INDEX if subgraph is None else <uint32_t>subgraph
            desc.done = NULL
            desc.user_data = NULL
            req.buffers = (inputs, outputs)
            req.box = self.box
            with nogil:
                s = ipu_runtime_submit(self.rt, &desc, &req.r)
            _check(s)
        finally:
            free(ins)
            free(outs)
        return req

    def stats(self):
        cdef ipu_runtime_stats st
        ipu_runtime_get_stats(self.rt, &st)
        return dict(requests_submitted=st.requests_submitted,
                    requests_completed=st.requests_completed,
                    requests_failed=st.requests_failed, steps=st.steps,
                    iterations=st.iterations, padded_iterations=st.padded_iterations,
                    padded_rows=st.padded_rows, latency_p50_ns=st.latency_p50_ns,
                    latency_p99_ns=st.latency_p99_ns, throughput_rps=st.throughput_rps,
                    num_threads=st.num_threads, pipeline_ticks=st.pipeline_ticks,
                    concurrent_ticks=st.concurrent_ticks,
                    concurrent_iterations=st.concurrent_iterations,
                    in_place_buffers=st.in_place_buffers)


# The classes built on the ones above, compiled as modules of their own that cimport this one
# (_core.pxd), re-exported here: pyipu._core is the one namespace the Python layer uses. Their
# imports come last, when every type and C function they take from this module exists.
from pyipu._fast_path import FastPath  # one-batch Runner.execute
from pyipu._session import Session  # the low-level Session API
