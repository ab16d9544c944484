/* Internal: the parsed executable and the kernel interface used by the runtime.
 *
 * The runtime executes a program instruction by instruction. For each instruction it asks
 * ipu__instr_work() for the number of independent work items, splits [0, work) into one range
 * per worker, calls ipu__instr_run() on every worker, and waits at a barrier before the next
 * instruction (BSP). Kernels contain no thread code. */
#ifndef IPU_INTERP_H
#define IPU_INTERP_H

#include <stdatomic.h>

#include "../common/ipu_internal.h"

/* Per-worker scratch, 64-byte aligned: IPU__WORKER_SCRATCH_BYTES are allocated; kernels plan
 * within the first IPU__SCRATCH_BYTES, except the float32 MatMul, whose packed block of B may
 * take the rest (256 rows of up to 2976 columns: A is then packed once per K-block, not once
 * per block of columns, for a B up to that wide). */
#define IPU__SCRATCH_BYTES ((size_t)1 << 20)
#define IPU__WORKER_SCRATCH_BYTES ((size_t)3 << 20)

typedef struct ipu__tensor {
    ipu_tensor_desc desc;
    ipu_location loc;
    uint32_t flags; /* IPU_TENSOR_STORED_PACKED */
    uint64_t offset;
    uint64_t numel;
} ipu__tensor;

typedef struct ipu__anchor {
    char *name; /* owned, NUL-terminated */
    ipu_direction direction;
    uint32_t tensor;
    uint32_t subgraph;
    uint32_t flags;
    uint32_t variable; /* the ARENA tensor Load copies this weight into, or IPU_NO_INDEX */
} ipu__anchor;

typedef struct ipu__instr {
    ipu_opcode op;
    uint32_t n_in, n_out, n_attr;
    uint32_t *in; /* owned copies */
    uint32_t *out;
    int64_t *attr;
    void *plan; /* kernel-specific data precomputed by the verifier (owned), or NULL */
} ipu__instr;

typedef struct ipu__stage {
    uint32_t program; /* index into programs[] (an id until resolved) */
    uint32_t ipu;
    uint32_t copy; /* index into programs[], or IPU_NO_INDEX */
} ipu__stage;

typedef struct ipu__program {
    uint32_t id;
    uint32_t n_instr;
    ipu__instr *instr;
} ipu__program;

struct ipu_executable {
    const ipu_container *container;
    ipu_executable_info info;
    ipu__tensor *tensors;
    ipu__anchor *anchors;
    ipu__program *programs;
    uint32_t load_program;      /* index into programs[] (not the id) */
    uint32_t *main_programs;    /* [num_subgraphs] indices into programs[] */
    ipu__stage *stages;         /* [info.num_stages] or NULL */
    uint32_t step_end;          /* index into programs[], or IPU_NO_INDEX */
    const uint8_t *tensor_data; /* TENSOR_DATA blob or NULL */
    uint64_t tensor_data_size;
    struct ipu__prepack *prepack; /* packed operands (prepack.h); mutable while verifying */
};

/* The bytes of TENSOR_DATA tensor `t`: in the TENSOR_DATA blob or, stored packed, unpacked at
 * load or else (its one reader uses the packed form) the packed bytes themselves, which the
 * reader's kernel recognises by their address (prepack.c). */
const uint8_t *ipu__tensor_bytes(const ipu_executable *e, uint32_t t);

/* Execution frame: base pointer of every tensor. ARENA tensors are set by the runtime
 * (arena + offset); TENSOR_DATA tensors are set by BIND instructions of the Load program.
 * cancel[0..ncancel): the flags of the requests the program runs for (the runtime's
 * ipu_request_cancel; none: not cancellable). Once every one is non-zero the program stops
 * between instructions, and between pieces of an instruction's work items, with
 * IPU_ERR_CANCELLED (relaxed loads).
 * stop(f): asked by a kernel between chunks of one long work item (a row of millions of
 * elements), from any worker; true stops the kernel with IPU_ERR_CANCELLED. NULL: never;
 * stop_ctx is the runtime's. */
typedef struct ipu__frame {
    const ipu_executable *exe;
    void **ptr;
    const atomic_int *const *cancel;
    uint32_t ncancel;
    bool (*stop)(const struct ipu__frame *f);
    void *stop_ctx;
} ipu__frame;

/* Number of work items of `ins` (0 when the output is empty). */
size_t ipu__instr_work(const ipu_executable *e, const ipu__instr *ins);
/* Does `ins` run a range of consecutive items faster in one piece (ipu__plan.contiguous)? */
bool ipu__instr_contiguous(const ipu__instr *ins);
/* Run work items [begin, end) of `ins`. Safe to call concurrently for disjoint ranges.
 * `scratch` has IPU__WORKER_SCRATCH_BYTES bytes private to the calling thread. */
ipu_status ipu__instr_run(const ipu__frame *f, const ipu__instr *ins, size_t begin, size_t end,
                          void *scratch);

#endif
