# cython: language_level=3, boundscheck=False, wraparound=False
"""Thin handles over the C core (runtime_c/include/ipu). The only Cython in pyipu.

Every C call goes through _check(), which raises the pyipu.errors class mapped from the status
name with the C library's detailed message. Blocking calls release the GIL.
"""
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.exc cimport PyErr_CheckSignals
from libc.stdint cimport uint32_t, uint64_t
from libc.stdlib cimport free, malloc

cimport numpy as cnp

from pyipu._cipu cimport *

import os

from pyipu import errors as _errors

cnp.import_array()

_MAX_ENUM = 256


def enum_table(str kind):
    """(name, value) pairs of a C enum table: 'status', 'dtype' or 'op'."""
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


def write_container(blobs, compiler_hash=None):
    """Serialise [(type, id, name or None, bytes)] into a container image (bytes)."""
    cdef ipu_container_writer *w = NULL
    cdef void *data = NULL
    cdef size_t size = 0
    cdef const unsigned char[::1] view
    cdef const char *cname
    _check(ipu_container_writer_create(&w))
    try:
        if compiler_hash is not None:
            ipu_container_writer_set_compiler_hash(w, <uint64_t>compiler_hash)
        for btype, bid, name, payload in blobs:
            view = memoryview(payload).cast("B")
            bname = name.encode() if name is not None else b""
            cname = NULL
            if name is not None:
                cname = bname
            _check(ipu_container_writer_add_blob(
                w, btype, bid, cname, &view[0] if view.shape[0] else NULL, view.shape[0]))
        _check(ipu_container_writer_finish(w, &data, &size))
        return PyBytes_FromStringAndSize(<char *>data, size)
    finally:
        free(data)
        ipu_container_writer_destroy(w)


cdef class Container:
    """A validated container (memory-mapped file or in-memory copy)."""
    cdef ipu_container *c
    cdef readonly str source

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
    cdef ipu_executable *e
    cdef readonly Container container
    cdef ipu_executable_info info

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
                    arena_size=self.info.arena_size)

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

    def program_flow(self):
        """(load program id, [main program id per subgraph])."""
        cdef uint32_t pid
        mains = []
        for sg in range(self.info.num_subgraphs):
            _check(ipu_executable_main_program(self.e, sg, &pid))
            mains.append(pid)
        return ipu_executable_load_program(self.e), mains


cdef class Request:
    """One submitted request. Keeps its buffers alive until the request has completed."""
    cdef ipu_request *r
    cdef object buffers

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
        """Block until completion (or `timeout` seconds); raise the request's error if it failed.

        Returns True when completed successfully, False if the timeout expired first."""
        cdef ipu_status s
        cdef uint64_t slice_ns = 100_000_000  # wake to honour Ctrl-C
        cdef uint64_t left = <uint64_t>-1 if timeout is None else <uint64_t>(max(timeout, 0) * 1e9)
        cdef uint64_t step
        while True:
            step = slice_ns if left > slice_ns else left
            with nogil:
                s = ipu_request_wait(self.r, step)
            if ipu_request_is_done(self.r):
                break
            if left != <uint64_t>-1:
                left -= step
                if left == 0:
                    return False
            PyErr_CheckSignals()
        s = ipu_request_status(self.r)
        if s != IPU_OK:
            raise _errors.from_status(ipu_status_name(s).decode(), s, _request_error_message(s))
        return True


cdef str _request_error_message(ipu_status s):
    if s == 8:  # ERR_CLOSED
        return "the runner was closed before this request completed"
    return "request failed: " + ipu_status_str(s).decode()


cdef class Runtime:
    """A loaded executable serving requests on its own device thread."""
    cdef ipu_runtime *rt
    cdef readonly Executable executable
    cdef uint32_t n_anchors
    cdef readonly bint closed

    def __cinit__(self):
        self.rt = NULL
        self.closed = False

    def __init__(self, Executable executable not None, dict config):
        cdef ipu_runtime_config cfg = ipu_runtime_config_default()
        cdef ipu_status s
        cfg.num_threads = config.get("num_threads", 0)
        cfg.ring_buffer_size_multiplier = config.get("ring_buffer_size_multiplier", 2)
        cfg.timeout_ns = config.get("timeout_ns", 10_000_000)
        cfg.check_package_hash = config.get("check_package_hash", True)
        cfg.validate_io_params = config.get("validate_io_params", True)
        cfg.thread_safe = config.get("thread_safe", True)
        self.executable = executable
        self.n_anchors = executable.info.num_anchors
        with nogil:
            s = ipu_runtime_create(executable.e, &cfg, &self.rt)
        _check(s)

    def __dealloc__(self):
        if self.rt != NULL:
            with nogil:
                ipu_runtime_destroy(self.rt)

    def close(self):
        if self.rt != NULL and not self.closed:
            self.closed = True
            with nogil:
                ipu_runtime_close(self.rt)

    def submit(self, list inputs, list outputs, uint32_t num_batches, subgraph=None):
        """Queue a request. `inputs`/`outputs` are lists indexed by anchor (ndarray or None)."""
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
            desc.inputs = ins
            desc.outputs = outs
            desc.subgraph = IPU_NO_INDEX if subgraph is None else <uint32_t>subgraph
            desc.done = NULL
            desc.user_data = NULL
            req.buffers = (inputs, outputs)
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
                    num_threads=st.num_threads)
