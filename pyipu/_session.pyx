# cython: language_level=3, boundscheck=False, wraparound=False
"""The low-level Session API (Model Runtime's Session): programs run on the caller's thread.

Re-exported as pyipu._core.Session; built on pyipu._core's types and helpers (_core.pxd).
"""
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.stdint cimport uint32_t, uint64_t

cimport numpy as cnp

from pyipu._cipu cimport *
from pyipu._core cimport (
    Executable,
    _check,
    _contiguous,
    _ErrorBox,
    _handler,
    _slot_trampoline,
    _stream_trampoline,
    timeout_ns,
)

cnp.import_array()


cdef class Session:
    """A loaded executable whose programs run on the caller's thread (Model Runtime Session)."""
    cdef object __weakref__
    cdef ipu_session *s
    cdef readonly Executable executable
    cdef _ErrorBox box
    cdef dict handlers

    def __cinit__(self):
        self.s = NULL

    def __init__(self, Executable executable not None, dict config):
        cdef ipu_session_config cfg = ipu_session_config_default()
        cdef ipu_status st
        # BEGIN GENERATED copy: tools/gen_config.py from pyipu/_options.py
        cfg.num_threads = config.get("num_threads", cfg.num_threads)
        cfg.ring_capacity = config.get("ring_capacity", cfg.ring_capacity)
        cfg.timeout_ns = config.get("timeout_ns", cfg.timeout_ns)
        cfg.batch_timeout_ns = config.get("batch_timeout_ns", cfg.batch_timeout_ns)
        cfg.batching_dim = config.get("batching_dim", cfg.batching_dim)
        cfg.flush_on_waiting_outputs = config.get("flush_on_waiting_outputs",
                                                  cfg.flush_on_waiting_outputs)
        cfg.check_package_hash = config.get("check_package_hash", cfg.check_package_hash)
        cfg.overlap_io = config.get("overlap_io", cfg.overlap_io)
        cfg.pin_threads = config.get("pin_threads", cfg.pin_threads)
        # END GENERATED copy
        self.executable = executable
        self.box = _ErrorBox()
        self.handlers = {}
        with nogil:
            st = ipu_session_create(executable.e, &cfg, &self.s)
        _check(st)

    def __dealloc__(self):
        if self.s != NULL:
            with nogil:
                ipu_session_destroy(self.s)

    cdef int _raise_pending(self) except -1:
        exc = self.box.exc
        if exc is not None:
            self.box.exc = None
            raise exc
        return 0

    def bind(self, uint32_t anchor, int binding, fn=None, dtype=None, shape=None,
             bint is_input=True):
        """Bind an anchor: IPU_BIND_QUEUE/EMPTY/TENSOR_DATA, or CALLBACK with fn(array)."""
        cdef void *ud = NULL
        cdef ipu_stream_fn cb = NULL
        if binding == IPU_BIND_CALLBACK:
            handler = _handler(self, self.box, fn, dtype, shape, is_input)
            self.handlers[anchor] = handler  # kept alive for the session's lifetime
            ud = <void *>handler
            cb = _stream_trampoline
        else:
            self.handlers.pop(anchor, None)
        _check(ipu_session_bind(self.s, anchor, binding, cb, ud))

    def binding(self, uint32_t anchor):
        return ipu_session_binding(self.s, anchor)

    def run_load(self):
        cdef ipu_status st
        with nogil:
            st = ipu_session_run_load(self.s)
        self._raise_pending()
        _check(st)

    def run_main(self):
        """One step; returns (iterations, padded_iterations)."""
        cdef ipu_status st
        cdef ipu_step_result r
        with nogil:
            st = ipu_session_run_main(self.s, &r)
        self._raise_pending()
        _check(st)
        return r.iterations, r.padded_iterations

    def stop(self):
        with nogil:
            ipu_session_stop(self.s)

    def stopped(self):
        return bool(ipu_session_stopped(self.s))

    def read_variable(self, uint32_t anchor, cnp.ndarray out not None):
        """Copy variable `anchor` into `out` (C-contiguous, its size) between two steps."""
        cdef void *dst = _contiguous(out, True)
        cdef size_t n = out.nbytes
        cdef ipu_status st
        with nogil:
            st = ipu_session_read_variable(self.s, anchor, dst, n)
        _check(st)

    def write_variable(self, uint32_t anchor, cnp.ndarray value not None):
        """Copy `value` (C-contiguous, the variable's size) into variable `anchor`."""
        cdef const void *src = _contiguous(value, False)
        cdef size_t n = value.nbytes
        cdef ipu_status st
        with nogil:
            st = ipu_session_write_variable(self.s, anchor, src, n)
        _check(st)

    def enqueue(self, uint32_t anchor, cnp.ndarray array not None, uint32_t rows=0,
                callback=None, timeout=None):
        """Queue a zero-copy slot; the array stays referenced until its callback ran."""
        cdef ipu_slot slot
        cdef ipu_status st
        cdef uint64_t t = timeout_ns(timeout)
        holder = (self.box, array, callback)
        slot.data = cnp.PyArray_DATA(array)
        slot.nbytes = array.nbytes
        slot.rows = rows
        slot.done = _slot_trampoline
        slot.user_data = <void *>holder
        Py_INCREF(holder)
        with nogil:
            st = ipu_session_enqueue(self.s, anchor, &slot, t)
        if st != IPU_OK:
            Py_DECREF(holder)
            _check(st)

    def flush(self):
        ipu_session_flush(self.s)

    def disconnect(self):
        with nogil:
            ipu_session_disconnect(self.s, 8)  # IPU_ERR_CLOSED
        self._raise_pending()

    def queue_depth(self, uint32_t anchor):
        return ipu_session_queue_depth(self.s, anchor)

    def stats(self):
        cdef ipu_session_stats st
        ipu_session_get_stats(self.s, &st)
        return dict(steps=st.steps, iterations=st.iterations,
                    padded_iterations=st.padded_iterations, padded_rows=st.padded_rows,
                    num_threads=st.num_threads, overlap_io=bool(st.overlap_io),
                    pipeline_ticks=st.pipeline_ticks, concurrent_ticks=st.concurrent_ticks,
                    concurrent_iterations=st.concurrent_iterations)
