# cython: language_level=3, boundscheck=False, wraparound=False
"""Runner.execute's fast path for one-batch requests.

Re-exported as pyipu._core.FastPath; reads the C fields of pyipu._core.Runtime (_core.pxd).
"""
from cpython.dict cimport PyDict_Next, PyDict_Size
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from cpython.unicode cimport PyUnicode_CheckExact, PyUnicode_Compare
from libc.stdint cimport uint32_t, uint64_t
from libc.stdlib cimport free, malloc

cimport numpy as cnp

from pyipu._cipu cimport *
from pyipu._core cimport (
    Runtime,
    _cancel_and_wait,
    _check,
    _raise_interrupt,
    _wait_request,
)

import numpy as np

cnp.import_array()


cdef enum:
    _FP_STACK_ANCHORS = 64  # per-call pointer tables on the stack up to this many anchors
    _FP_MAX_DIMS = 8


cdef class FastPath:
    """Runner.execute for one-batch requests: checks the caller's dicts against a table made
    once per runner, reads the data pointers with the NumPy C API and runs the request with the
    GIL released (inline on this thread when ipu_runtime_execute can), allocating no Python
    object. Any request it does not recognise as plainly valid (another mapping type, unknown
    or missing names, wrong dtype, layout or shape, N batches) is left to the caller's validating
    path: execute() returns False then, having done nothing."""
    cdef Runtime runtime
    cdef tuple names  # keeps the name objects the table points at alive
    cdef uint32_t n
    cdef Py_ssize_t n_in, n_out
    # per anchor (weights stored in the PopEF count too: old ONNX files list them as inputs)
    cdef PyObject **name_ptr
    cdef int *direction  # 1 input, 2 output, 0 not fed per request
    cdef int *type_num
    cdef int *ndim
    cdef cnp.npy_intp *dims  # [n][_FP_MAX_DIMS]

    def __init__(self, Runtime runtime not None, list anchors):
        """anchors[i] = (name, direction, numpy dtype, shape) of anchor i; direction 0 for
        anchors a request does not feed (weights, the index, stream-callback anchors)."""
        cdef uint32_t i
        cdef int d
        if runtime.n_anchors != len(anchors) or self.name_ptr != NULL:
            raise ValueError("FastPath: one entry per anchor, made once")
        self.runtime = runtime
        self.names = tuple(str(a[0]) for a in anchors)
        self.n = len(anchors)
        cdef size_t m = self.n if self.n else 1
        self.name_ptr = <PyObject **>malloc(m * sizeof(PyObject *))
        self.direction = <int *>malloc(m * sizeof(int))
        self.type_num = <int *>malloc(m * sizeof(int))
        self.ndim = <int *>malloc(m * sizeof(int))
        self.dims = <cnp.npy_intp *>malloc(m * _FP_MAX_DIMS * sizeof(cnp.npy_intp))
        if (self.name_ptr == NULL or self.direction == NULL or self.type_num == NULL
                or self.ndim == NULL or self.dims == NULL):
            raise MemoryError("FastPath: cannot allocate the anchor table")
        self.n_in = self.n_out = 0
        for i in range(self.n):
            name, direction, dtype, shape = anchors[i]
            self.name_ptr[i] = <PyObject *>self.names[i]
            shape = tuple(shape)
            if direction and len(shape) > _FP_MAX_DIMS:
                direction = 0  # left to the general path
            self.direction[i] = direction
            self.type_num[i] = np.dtype(dtype).num
            self.ndim[i] = len(shape) if direction else 0
            for d in range(self.ndim[i]):
                self.dims[i * _FP_MAX_DIMS + d] = shape[d]
            if direction == 1:
                self.n_in += 1
            elif direction == 2:
                self.n_out += 1

    def __dealloc__(self):
        free(self.name_ptr)
        free(self.direction)
        free(self.type_num)
        free(self.ndim)
        free(self.dims)

    cdef inline int _find(self, PyObject *key) noexcept:
        cdef uint32_t i
        for i in range(self.n):
            if self.name_ptr[i] == key:
                return i
        if not PyUnicode_CheckExact(<object>key):
            return -1
        for i in range(self.n):
            if PyUnicode_Compare(<object>self.name_ptr[i], <object>key) == 0:
                return i
        return -1

    cdef inline bint _fill(self, dict mapping, int direction, void **ptrs,
                           PyObject **objs) noexcept:
        """Pointers (and borrowed arrays) of `mapping` by anchor index; False unless all are
        plainly valid. Runs no Python code, so the dict cannot change meanwhile."""
        cdef Py_ssize_t pos = 0
        cdef PyObject *key
        cdef PyObject *value
        cdef cnp.ndarray a
        cdef int i, d
        while PyDict_Next(mapping, &pos, &key, &value):
            i = self._find(key)
            if i < 0 or self.direction[i] != direction or ptrs[i] != NULL:
                return False
            if not cnp.PyArray_Check(<object>value):
                return False
            a = <cnp.ndarray>value
            if (cnp.PyArray_TYPE(a) != self.type_num[i] or not cnp.PyArray_ISNOTSWAPPED(a)
                    or not cnp.PyArray_IS_C_CONTIGUOUS(a) or cnp.PyArray_NDIM(a) != self.ndim[i]):
                return False
            if direction == 2 and not cnp.PyArray_ISWRITEABLE(a):
                return False
            for d in range(self.ndim[i]):
                if cnp.PyArray_DIMS(a)[d] != self.dims[i * _FP_MAX_DIMS + d]:
                    return False
            ptrs[i] = cnp.PyArray_DATA(a)
            objs[i] = value
        return True

    def execute(self, inputs, outputs):
        """Run the request if it is a plain one-batch request (True), else do nothing (False).
        Raises the request's typed error if it ran and failed."""
        cdef void *stack[3 * _FP_STACK_ANCHORS]
        cdef void **ptrs = stack
        if (type(inputs) is not dict or type(outputs) is not dict or self.runtime.closed
                or PyDict_Size(inputs) != self.n_in or PyDict_Size(outputs) != self.n_out
                or self.n_in + self.n_out == 0):
            return False
        if self.n > _FP_STACK_ANCHORS:  # many anchors (weights listed as inputs): a C buffer
            ptrs = <void **>malloc(3 * self.n * sizeof(void *))
            if ptrs == NULL:
                return False  # the general path reports what it can
        try:
            return self._run(inputs, outputs, ptrs, ptrs + self.n, <PyObject **>(ptrs + 2 * self.n))
        finally:
            if ptrs != stack:
                free(ptrs)

    cdef bint _run(self, inputs, outputs, void **ins, void **outs, PyObject **objs) except -1:
        cdef ipu_request_desc desc
        cdef ipu_request *req = NULL
        cdef ipu_status s
        cdef uint32_t i
        for i in range(self.n):
            ins[i] = NULL
            outs[i] = NULL
            objs[i] = NULL
        if (not self._fill(<dict>inputs, 1, ins, objs)
                or not self._fill(<dict>outputs, 2, outs, objs)):
            return False
        desc.num_batches = 1
        desc.num_rows = 0
        desc.inputs = <const void **>ins
        desc.outputs = outs
        desc.subgraph = IPU_NO_INDEX
        desc.done = NULL
        desc.user_data = NULL
        # Another thread may change the dicts while the GIL is released: hold the arrays.
        for i in range(self.n):
            if objs[i] != NULL:
                Py_INCREF(<object>objs[i])
        try:
            with nogil:
                s = ipu_runtime_execute(self.runtime.rt, &desc, &req)
            if req == NULL:
                if s == IPU_ERR_CANCELLED:
                    _raise_interrupt()  # stopped by Ctrl-C: raise KeyboardInterrupt
                _check(s)  # ran inline (or was refused): its final status
                return True
            try:
                _wait_request(req, <uint64_t>-1, self.runtime.box)
            finally:
                _cancel_and_wait(req)  # interrupted: it still uses the arrays until it stops
                ipu_request_release(req)
        finally:
            for i in range(self.n):
                if objs[i] != NULL:
                    Py_DECREF(<object>objs[i])
        return True
