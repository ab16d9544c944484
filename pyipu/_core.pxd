# The cdef classes and C-level helpers of pyipu._core that its sibling modules cimport
# (pyipu/_session.pyx, pyipu/_fast_path.pyx). The modules share one libipu.so (meson.build), so
# the C state these handles point into (last error, log sink, forced ISA, allocator) is one.
cimport numpy as cnp

from pyipu._cipu cimport *


cdef class Container:
    cdef ipu_container *c
    cdef readonly str source


cdef class Executable:
    cdef ipu_executable *e
    cdef readonly Container container
    cdef ipu_executable_info info


cdef class _ErrorBox:
    cdef public object exc


cdef class Request:
    cdef ipu_request *r
    cdef object buffers
    cdef _ErrorBox box


cdef class Trace:
    cdef ipu_trace *t


cdef class Runtime:
    cdef object __weakref__
    cdef ipu_runtime *rt
    cdef readonly Executable executable
    cdef uint32_t n_anchors
    cdef readonly bint closed
    cdef _ErrorBox box
    cdef dict handlers
    cdef readonly Trace trace


# Raises the pyipu.errors class of a failed status, with the thread's last error message.
cdef int _check(ipu_status s) except -1
# A stream callback's user_data for _stream_trampoline.
cdef tuple _handler(owner, _ErrorBox box, fn, dtype, shape, bint is_input)
cdef ipu_status _stream_trampoline(void *buf, size_t nbytes, const ipu_anchor_info *anchor,
                                   void *user_data) noexcept with gil
cdef void _slot_trampoline(ipu_status status, void *user_data) noexcept with gil
cpdef uint64_t timeout_ns(timeout) except? 0
cdef bint _wait_request(ipu_request *r, uint64_t left, _ErrorBox box) except -1
cdef void _cancel_and_wait(ipu_request *r) noexcept
cdef int _raise_interrupt() except -1
# The data of an array handed to C whole (C-contiguous; writable when the C side writes it).
cdef void *_contiguous(cnp.ndarray a, bint writable) except NULL
