# Declarations mirroring runtime_c/include/ipu/*.h (the public C API).
from libc.stdint cimport int64_t, uint16_t, uint32_t, uint64_t


cdef extern from "ipu/ipu.h" nogil:
    ctypedef int ipu_status
    ctypedef int ipu_dtype
    ctypedef int ipu_opcode
    ctypedef int ipu_blob_type
    ctypedef int ipu_location
    ctypedef int ipu_direction

    enum: IPU_OK
    enum: IPU_ERR_NOT_FOUND
    enum: IPU_ERR_CANCELLED
    enum: IPU_MAX_DIMS
    enum: IPU_NO_INDEX
    enum: IPU_MAX_THREADS
    enum: IPU_STATUS_COUNT_

    const char *ipu_status_str(ipu_status s)
    const char *ipu_status_name(ipu_status s)
    size_t ipu_dtype_size(ipu_dtype t)
    const char *ipu_dtype_name(ipu_dtype t)
    const char *ipu_opcode_name(ipu_opcode op)
    ipu_status ipu_opcode_arity(ipu_opcode op, uint32_t *min_in_out, uint32_t *max_in_out,
                                uint32_t *n_out_out)
    const char *ipu_unary_fn_name(int fn)
    const char *ipu_binary_fn_name(int fn)
    const char *ipu_reduce_fn_name(int fn)
    const char *ipu_act_fn_name(int fn)
    const char *ipu_last_error_message()
    uint64_t ipu_hash64(const void *data, size_t size, uint64_t seed)
    uint64_t ipu_compiler_hash()

    # container
    ctypedef struct ipu_container:
        pass
    ctypedef struct ipu_blob_info:
        ipu_blob_type type
        uint32_t id
        const void *data
        uint64_t size
        const char *name
    ipu_status ipu_container_open(const char *path, ipu_container **out)
    ipu_status ipu_container_open_memory(const void *data, size_t size, ipu_container **out)
    void ipu_container_destroy(ipu_container *c)
    uint32_t ipu_container_format_version(const ipu_container *c)
    uint64_t ipu_container_compiler_hash(const ipu_container *c)
    uint64_t ipu_container_file_size(const ipu_container *c)
    uint32_t ipu_container_blob_count(const ipu_container *c)
    ipu_status ipu_container_blob(const ipu_container *c, uint32_t index, ipu_blob_info *out)

    ctypedef struct ipu_container_writer:
        pass
    ipu_status ipu_container_writer_create(ipu_container_writer **out)
    void ipu_container_writer_destroy(ipu_container_writer *w)
    ipu_status ipu_container_writer_add_blob(ipu_container_writer *w, ipu_blob_type type,
                                             uint32_t id, const char *name, const void *data,
                                             size_t size)
    ipu_status ipu_container_writer_add_blob_ref(ipu_container_writer *w, ipu_blob_type type,
                                                 uint32_t id, const char *name, const void *data,
                                                 size_t size)
    ipu_status ipu_container_writer_finish_into(ipu_container_writer *w, void *dst, size_t cap,
                                                size_t *size_out)
    void ipu_container_writer_set_compiler_hash(ipu_container_writer *w, uint64_t hash)
    ipu_status ipu_container_writer_finish(ipu_container_writer *w, void **data_out,
                                           size_t *size_out)

    # executable
    ctypedef struct ipu_executable:
        pass
    ctypedef struct ipu_executable_info:
        uint32_t ipu_version, num_ipus, replication_factor, batches_per_step, num_io_tiles
        uint32_t num_tensors, num_anchors, num_subgraphs, num_programs
        uint32_t index_anchor
        uint64_t arena_size
        uint32_t num_stages
        int pipelined
        uint32_t num_variables
        uint32_t step_end_program
    ctypedef struct ipu_tensor_desc:
        ipu_dtype dtype
        uint32_t ndim
        int64_t dims[8]
        uint64_t nbytes
    ctypedef struct ipu_anchor_info:
        const char *name
        ipu_direction direction
        uint32_t tensor
        uint32_t subgraph
        int has_tensor_data
        ipu_tensor_desc desc
    ctypedef struct ipu_program_info:
        uint32_t id
        uint32_t num_instructions
    ctypedef struct ipu_instruction_info:
        ipu_opcode opcode
        uint32_t num_inputs, num_outputs, num_attrs
        const uint32_t *inputs
        const uint32_t *outputs
        const int64_t *attrs
    ipu_status ipu_executable_create(const ipu_container *c, ipu_executable **out)
    void ipu_executable_destroy(ipu_executable *e)
    void ipu_executable_get_info(const ipu_executable *e, ipu_executable_info *out)
    ipu_status ipu_executable_anchor(const ipu_executable *e, uint32_t index, ipu_anchor_info *out)
    ipu_status ipu_executable_tensor(const ipu_executable *e, uint32_t index, ipu_tensor_desc *out)
    ipu_status ipu_executable_program(const ipu_executable *e, uint32_t index,
                                      ipu_program_info *out)
    ipu_status ipu_executable_instruction(const ipu_executable *e, uint32_t program_index,
                                          uint32_t i, ipu_instruction_info *out)
    uint32_t ipu_executable_load_program(const ipu_executable *e)
    ipu_status ipu_executable_main_program(const ipu_executable *e, uint32_t subgraph,
                                           uint32_t *id_out)
    ctypedef struct ipu_stage_info:
        uint32_t program, ipu, copy_program
    ipu_status ipu_executable_stage(const ipu_executable *e, uint32_t stage, ipu_stage_info *out)
    ipu_status ipu_executable_variable(const ipu_executable *e, uint32_t anchor,
                                       uint32_t *tensor_out)
    const char *IPU_PACKED_BLOB_NAME
    void ipu_executable_packed_counts(const ipu_executable *e, uint32_t *mapped, uint32_t *packed)
    ipu_status ipu_executable_packed_blob(const ipu_executable *e, void *dst, size_t cap,
                                          size_t *size)
    ipu_status ipu_executable_packed_only(const ipu_executable *e, uint32_t index, int *out)
    ipu_status ipu_packed_unpack(const void *payload, size_t size, uint32_t tensor, void *dst,
                                 size_t nbytes)
    enum: IPU_TENSOR_STORED_PACKED

    # session (low-level API)
    ctypedef struct ipu_session:
        pass
    ctypedef int ipu_binding
    enum: IPU_BIND_QUEUE
    enum: IPU_BIND_EMPTY
    enum: IPU_BIND_CALLBACK
    enum: IPU_BIND_TENSOR_DATA
    ctypedef struct ipu_session_config:
        # BEGIN GENERATED ipu_session_config: tools/gen_config.py from pyipu/_options.py
        uint32_t num_threads
        uint32_t ring_capacity
        uint64_t timeout_ns
        uint64_t batch_timeout_ns
        uint32_t batching_dim
        int flush_on_waiting_outputs
        int check_package_hash
        int overlap_io
        int pin_threads
        # END GENERATED ipu_session_config
    ipu_session_config ipu_session_config_default()
    ipu_status ipu_session_create(const ipu_executable *exe, const ipu_session_config *cfg,
                                  ipu_session **out)
    void ipu_session_destroy(ipu_session *s)
    ctypedef ipu_status (*ipu_stream_fn)(void *buf, size_t nbytes, const ipu_anchor_info *anchor,
                                         void *user_data)
    ipu_status ipu_session_bind(ipu_session *s, uint32_t anchor, ipu_binding b, ipu_stream_fn fn,
                                void *user_data)
    ipu_binding ipu_session_binding(const ipu_session *s, uint32_t anchor)
    ipu_status ipu_session_run_load(ipu_session *s)
    ipu_status ipu_session_read_variable(ipu_session *s, uint32_t anchor, void *dst,
                                         size_t nbytes)
    ipu_status ipu_session_write_variable(ipu_session *s, uint32_t anchor, const void *src,
                                          size_t nbytes)
    ctypedef struct ipu_step_result:
        uint32_t iterations
        uint32_t padded_iterations
    ipu_status ipu_session_run_main(ipu_session *s, ipu_step_result *out)
    void ipu_session_stop(ipu_session *s)
    int ipu_session_stopped(const ipu_session *s)
    ctypedef void (*ipu_slot_done_fn)(ipu_status status, void *user_data)
    ctypedef struct ipu_slot:
        void *data
        uint64_t nbytes
        uint32_t rows
        ipu_slot_done_fn done
        void *user_data
    ipu_status ipu_session_enqueue(ipu_session *s, uint32_t anchor, const ipu_slot *slot,
                                   uint64_t timeout_ns)
    void ipu_session_flush(ipu_session *s)
    void ipu_session_disconnect(ipu_session *s, ipu_status status)
    size_t ipu_session_queue_depth(const ipu_session *s, uint32_t anchor)
    ctypedef struct ipu_session_stats:
        uint64_t steps, iterations, padded_iterations, padded_rows
        uint32_t num_threads
        int overlap_io
        uint64_t pipeline_ticks, concurrent_ticks
        uint64_t concurrent_iterations
    void ipu_session_get_stats(const ipu_session *s, ipu_session_stats *out)

    # runtime
    ctypedef struct ipu_runtime:
        pass
    ctypedef struct ipu_request:
        pass
    ctypedef struct ipu_runtime_config:
        # BEGIN GENERATED ipu_runtime_config: tools/gen_config.py from pyipu/_options.py
        uint32_t num_threads
        uint32_t ring_buffer_size_multiplier
        uint64_t timeout_ns
        uint64_t batch_timeout_ns
        uint32_t batching_dim
        int flush_on_waiting_outputs
        int auto_reset
        int check_package_hash
        int validate_io_params
        int thread_safe
        int overlap_io
        int pin_threads
        int no_wait_when_alone
        # END GENERATED ipu_runtime_config
    ipu_runtime_config ipu_runtime_config_default()
    ipu_status ipu_runtime_create(const ipu_executable *exe, const ipu_runtime_config *cfg,
                                  ipu_runtime **out)
    ipu_status ipu_runtime_close(ipu_runtime *rt)
    void ipu_runtime_destroy(ipu_runtime *rt)
    ipu_status ipu_runtime_reset(ipu_runtime *rt)
    ipu_status ipu_runtime_read_variable(ipu_runtime *rt, uint32_t anchor, void *dst,
                                         size_t nbytes)
    ipu_status ipu_runtime_write_variable(ipu_runtime *rt, uint32_t anchor, const void *src,
                                          size_t nbytes)
    ipu_status ipu_runtime_set_stream_callback(ipu_runtime *rt, uint32_t anchor, ipu_stream_fn fn,
                                               void *user_data)
    ctypedef void (*ipu_request_done_fn)(ipu_request *req, ipu_status status, void *user_data)
    ctypedef struct ipu_request_desc:
        uint32_t num_batches
        uint64_t num_rows
        const void *const *inputs
        void *const *outputs
        uint32_t subgraph
        ipu_request_done_fn done
        void *user_data
    ipu_status ipu_runtime_submit(ipu_runtime *rt, const ipu_request_desc *desc,
                                  ipu_request **out)
    ipu_status ipu_runtime_execute(ipu_runtime *rt, const ipu_request_desc *desc,
                                   ipu_request **out)
    ipu_status ipu_request_wait(ipu_request *req, uint64_t timeout_ns)
    int ipu_request_is_done(const ipu_request *req)
    ipu_status ipu_request_status(const ipu_request *req)
    void ipu_request_release(ipu_request *req)
    void ipu_request_cancel(ipu_request *req)
    enum: IPU_POLL_INTERVAL_NS
    ctypedef int (*ipu_poll_fn)(void *user_data) noexcept nogil
    ipu_status ipu_runtime_set_poll(ipu_runtime *rt, ipu_poll_fn fn, void *user_data)
    ctypedef struct ipu_runtime_stats:
        uint64_t requests_submitted, requests_completed, requests_failed
        uint64_t steps, iterations, padded_iterations, padded_rows
        uint64_t latency_p50_ns, latency_p99_ns
        double throughput_rps
        uint32_t num_threads
        uint64_t pipeline_ticks, concurrent_ticks
        uint64_t concurrent_iterations
        uint64_t in_place_buffers
    void ipu_runtime_get_stats(const ipu_runtime *rt, ipu_runtime_stats *out)
    size_t ipu_runtime_queue_depth(const ipu_runtime *rt, uint32_t anchor)

    ctypedef struct ipu_trace:
        pass
    ctypedef enum ipu_trace_kind:
        IPU_TRACE_LOAD
        IPU_TRACE_COMPUTE
        IPU_TRACE_STORE
    ctypedef struct ipu_trace_event:
        uint64_t start_ns, end_ns
        uint32_t kind
        uint32_t subgraph
        uint64_t seq
    ipu_status ipu_trace_create(size_t capacity, ipu_trace **out)
    void ipu_trace_destroy(ipu_trace *t)
    size_t ipu_trace_capacity(const ipu_trace *t)
    ipu_status ipu_trace_read(ipu_trace *t, ipu_trace_event *out, size_t cap, size_t *count,
                              uint64_t *dropped)
    void ipu_trace_clear(ipu_trace *t)
    ipu_status ipu_runtime_set_trace(ipu_runtime *rt, ipu_trace *t)


# Internal to the core (kernels/isa.h): the CPU's instruction-set levels and the one switch
# forcing a level for every kernel family; the sgemm micro-kernel's level in use (kernels.h).
cdef extern int ipu__isa_force(int level) nogil
cdef extern int ipu__isa_best() nogil
cdef extern const char *ipu__isa_name(int level) nogil
cdef extern int ipu__sgemm_isa() nogil
# Internal to the core (kernels.h), for tests: the bulk float16 conversions.
cdef extern void ipu__cvt_f16_to_f32(const uint16_t *src, float *dst, size_t n) nogil
cdef extern void ipu__cvt_f32_to_f16(const float *src, uint16_t *dst, size_t n) nogil
