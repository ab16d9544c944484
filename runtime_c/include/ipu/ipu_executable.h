/* Executable: a container's metadata and programs, parsed and verified.
 *
 * METADATA blob layout (container format versions 1 and 2; little-endian, offsets from the
 * blob start):
 *   0   u32 ipu_version        2 (GC200, "ipu2") or 21 (C600, "ipu21")
 *   4   u32 num_ipus           >= 1
 *   8   u32 replication_factor >= 1
 *   12  u32 batches_per_step   >= 1 (PopEF deviceIterations)
 *   16  u32 num_io_tiles
 *   20  u32 num_tensors        <= IPU_MAX_TENSORS
 *   24  u32 num_anchors        <= num_tensors
 *   28  u32 num_subgraphs      >= 1 (> 1 only for fused models)
 *   32  u32 load_program       program id of the Load program
 *   36  u32 index_anchor       anchor index of the fused-model `index` input, or 0xFFFFFFFF
 *   40  u64 arena_size         bytes of device memory (multiple of 64)
 *   48  u32 strings_size       bytes in the string table
 *   52  u32 num_stages         0: not sharded; else the stage table follows main_programs
 *   56  u32 main_programs[num_subgraphs]   program id of each subgraph's Main program
 *       when num_stages > 0 (manual sharding; num_subgraphs must be 1):
 *       u32 stage_flags (IPU_STAGES_PIPELINED, IPU_STAGES_STEP_END), then num_stages records
 *       of 3 u32: program id (the stage's compute program; stage 0's is main_programs[0]), ipu
 *       (< num_ipus), copy program id (only COPY instructions: the stage's inter-IPU copies to
 *       the next stage) or 0xFFFFFFFF; with IPU_STAGES_STEP_END one more u32: the program id
 *       of the step-end program (see ipu_executable_info.step_end_program)
 *       zero pad to a multiple of 8
 *   then tensors[num_tensors], 96 bytes each:
 *       u32 dtype (ipu_dtype), u32 ndim (0..8), u32 location (ipu_location),
 *       u32 flags (IPU_TENSOR_STORED_PACKED, or 0),
 *       u64 offset (into the arena, or into the TENSOR_DATA blob; multiple of 64; 0 when stored
 *       packed),
 *       u64 nbytes (== product(dims) * dtype size), i64 dims[8] (unused entries 0)
 *   then anchors[num_anchors], 24 bytes each:
 *       u32 name_offset, u32 name_len (into the string table; 1..1024 bytes, unique),
 *       u32 direction (ipu_direction), u32 tensor (index), u32 subgraph (or 0xFFFFFFFF: all),
 *       u32 flags (IPU_ANCHOR_TENSOR_DATA: a weight whose bytes are in the container)
 *   then the string table (strings_size bytes), zero pad to a multiple of 8; end of blob.
 *
 * Tensors may share storage (views): two ARENA tensors may overlap; the compiler guarantees that
 * no instruction writes a tensor that overlaps one of its inputs unless the opcode allows it.
 * An anchor's tensor shape is one batch; a request carries N batches stacked along dim 0.
 *
 * Threads: an executable is immutable once created; its accessors may be called from any number
 * of threads at once, and any number of sessions/runtimes may share it. Accessors that fail
 * return IPU_ERR_INVALID_ARGUMENT for a NULL pointer and IPU_ERR_NOT_FOUND for an index out of
 * range, and leave *out unchanged. Every pointer they return (names, operand lists) is owned by
 * the executable and valid until ipu_executable_destroy. */
#ifndef IPU_EXECUTABLE_H
#define IPU_EXECUTABLE_H

#include "ipu_container.h"

#ifdef __cplusplus
extern "C" {
#endif

#define IPU_MAX_TENSORS (1u << 20)
#define IPU_NO_INDEX 0xFFFFFFFFu

typedef enum ipu_location { IPU_LOC_ARENA = 1, IPU_LOC_TENSOR_DATA = 2 } ipu_location;
typedef enum ipu_direction { IPU_DIR_INPUT = 1, IPU_DIR_OUTPUT = 2 } ipu_direction;
enum { IPU_ANCHOR_TENSOR_DATA = 1u };
/* Tensor flag: a float32 TENSOR_DATA tensor whose bytes are not in the TENSOR_DATA blob but only
 * in its packed form, in the entry of the packed blob that names it (docs/popef.md, "Pre-packed
 * operands"); its offset is 0. A reader that does not know the flag refuses the file. */
enum { IPU_TENSOR_STORED_PACKED = 1u };
enum { IPU_STAGES_PIPELINED = 1u, IPU_STAGES_STEP_END = 2u };
#define IPU_MAX_STAGES 4096u

typedef struct ipu_executable ipu_executable;

typedef struct ipu_executable_info {
    uint32_t ipu_version, num_ipus, replication_factor, batches_per_step, num_io_tiles;
    uint32_t num_tensors, num_anchors, num_subgraphs, num_programs;
    uint32_t index_anchor; /* IPU_NO_INDEX when the model is not fused */
    uint64_t arena_size;
    uint32_t num_stages;    /* 0: not sharded (manual sharding: see ipu_executable_stage) */
    int pipelined;          /* stages of consecutive batches run concurrently */
    uint32_t num_variables; /* weight anchors kept as variables (ipu_executable_variable) */
    /* Program id of the step-end program, or IPU_NO_INDEX. A sharded executable may have one:
     * it runs once after every step in which a batch ran (after a pipeline drained), alone on
     * the device, and may use every stage's memory; a streamed input anchor then holds the
     * step's last batch. Training applies a step's accumulated gradients in it. */
    uint32_t step_end_program;
} ipu_executable_info;

/* One stage of a sharded model. A Main iteration runs the stages in order, each followed by its
 * copy program; pipelined, stage s computes batch i - s while stage 0 computes batch i. */
typedef struct ipu_stage_info {
    uint32_t program;      /* program id of the stage's compute program */
    uint32_t ipu;          /* virtual IPU */
    uint32_t copy_program; /* program id of its copies to the next stage, or IPU_NO_INDEX */
} ipu_stage_info;

typedef struct ipu_tensor_desc {
    ipu_dtype dtype;
    uint32_t ndim;
    int64_t dims[IPU_MAX_DIMS];
    uint64_t nbytes;
} ipu_tensor_desc;

typedef struct ipu_anchor_info {
    const char *name; /* NUL-terminated, owned by the executable */
    ipu_direction direction;
    uint32_t tensor;
    uint32_t subgraph; /* IPU_NO_INDEX: belongs to every subgraph */
    int has_tensor_data;
    ipu_tensor_desc desc; /* one batch */
} ipu_anchor_info;

typedef struct ipu_program_info {
    uint32_t id;
    uint32_t num_instructions;
} ipu_program_info;

typedef struct ipu_instruction_info {
    ipu_opcode opcode;
    uint32_t num_inputs, num_outputs, num_attrs;
    const uint32_t *inputs, *outputs; /* tensor indices, owned by the executable */
    const int64_t *attrs;
} ipu_instruction_info;

/* Parse and verify metadata and every program (opcodes, operand counts and indices, dtypes,
 * shapes, attributes) and pack constant operands (see below). `c` is borrowed and must outlive
 * the executable (weights are used in place from it). On success *out is a new executable the
 * caller owns. Errors: IPU_ERR_INVALID_ARGUMENT (NULL), IPU_ERR_CORRUPT (metadata, or a
 * malformed packed blob), IPU_ERR_BAD_PROGRAM (a program fails verification: opcode, operands,
 * dtypes, shapes, attributes), IPU_ERR_NOMEM; then nothing stays allocated. */
IPU_API IPU_NODISCARD ipu_status ipu_executable_create(const ipu_container *c,
                                                       ipu_executable **out);
/* Accepts NULL. Every session and runtime created from `e` must be destroyed first. */
IPU_API void ipu_executable_destroy(ipu_executable *e);

/* Copy of the executable's summary (all zero for NULL `e`; nothing for NULL `out`). */
IPU_API void ipu_executable_get_info(const ipu_executable *e, ipu_executable_info *out);
/* Anchor `index` (< num_anchors): the model's named inputs and outputs, indexed as in requests. */
IPU_API IPU_NODISCARD ipu_status ipu_executable_anchor(const ipu_executable *e, uint32_t index,
                                                       ipu_anchor_info *out);
/* Index of the anchor named `name` (exact, case-sensitive; borrowed); IPU_ERR_NOT_FOUND. */
IPU_API IPU_NODISCARD ipu_status ipu_executable_find_anchor(const ipu_executable *e,
                                                            const char *name, uint32_t *index_out);
/* Descriptor of tensor `index` (< num_tensors). */
IPU_API IPU_NODISCARD ipu_status ipu_executable_tensor(const ipu_executable *e, uint32_t index,
                                                       ipu_tensor_desc *out);
/* Programs are numbered 0..num_programs-1 in container order; info.id is the program id. */
IPU_API IPU_NODISCARD ipu_status ipu_executable_program(const ipu_executable *e, uint32_t index,
                                                        ipu_program_info *out);
/* Instruction `i` of program number `program_index` (a disassembler's view). */
IPU_API IPU_NODISCARD ipu_status ipu_executable_instruction(const ipu_executable *e,
                                                            uint32_t program_index, uint32_t i,
                                                            ipu_instruction_info *out);
/* Program id of the Load program (0 for NULL `e`). */
IPU_API uint32_t ipu_executable_load_program(const ipu_executable *e);
/* Program id of subgraph `subgraph`'s Main program (< num_subgraphs). */
IPU_API IPU_NODISCARD ipu_status ipu_executable_main_program(const ipu_executable *e,
                                                             uint32_t subgraph, uint32_t *id_out);
/* Variables: state that programs update and that persists between steps (trained weights,
 * optimizer state). A weight anchor is a variable when the Load program COPYs its tensor into
 * an ARENA tensor: that tensor then holds the variable's current value, starting from the
 * weight's bytes (or what its binding supplies) at every Load, read and written by the Main
 * programs (the compiler keeps its arena bytes for it alone), and read or written between steps
 * with ipu_session_read_variable / ipu_runtime_read_variable and their _write_ pairs. *out: the
 * ARENA tensor of weight anchor `anchor` (< num_anchors); IPU_ERR_NOT_FOUND when it is not a
 * variable. */
IPU_API IPU_NODISCARD ipu_status ipu_executable_variable(const ipu_executable *e, uint32_t anchor,
                                                         uint32_t *tensor_out);
/* Stage `stage` (< num_stages) of a sharded executable. */
IPU_API IPU_NODISCARD ipu_status ipu_executable_stage(const ipu_executable *e, uint32_t stage,
                                                      ipu_stage_info *out);

/* Pre-packed operands (docs/popef.md, "Pre-packed operands"). While verifying, the executable
 * packs some constant operands (float32 convolution weights, ...) into the layout of the
 * micro-kernel in use. A container may carry them already packed, in the OPAQUE blob named
 * IPU_PACKED_BLOB_NAME: an entry whose key, layout tag and size match is used in place (read from
 * the mapped file, no copy); any other operand is packed at load as without the blob. A tensor
 * flagged IPU_TENSOR_STORED_PACKED exists only as its entry's packed bytes: unpacked at load
 * where its packed form is not used as it is. A malformed packed blob, or a tensor stored packed
 * without an entry that unpacks into it exactly, makes ipu_executable_create fail with
 * IPU_ERR_CORRUPT. */
#define IPU_PACKED_BLOB_NAME "pyipu.packed"
#define IPU_PACKED_VERSION 2u /* version 1 (64-byte entries, no source tensor) is read too */
/* How many packed operands the executable holds: `mapped` used in place from the container's
 * packed blob, `packed` packed at load. Either pointer may be NULL. */
IPU_API void ipu_executable_packed_counts(const ipu_executable *e, uint32_t *mapped,
                                          uint32_t *packed);
/* The payload of a packed blob holding every packed operand of `e` (name it IPU_PACKED_BLOB_NAME;
 * its data is 64-byte aligned in a file only under that name): *size is set to its length, and
 * when `dst` is not NULL and `cap >= *size` the payload is written there (call with dst NULL to
 * size the buffer). IPU_ERR_NOT_FOUND when `e` packs nothing, IPU_ERR_INVALID_ARGUMENT when
 * `cap` is too small. */
IPU_API IPU_NODISCARD ipu_status ipu_executable_packed_blob(const ipu_executable *e, void *dst,
                                                            size_t cap, size_t *size);
/* *out: 1 when a writer may store tensor `index` only packed (IPU_TENSOR_STORED_PACKED): a
 * float32 weight whose one use in every program (its Load BIND aside) is an operand packed in a
 * layout that ipu_packed_unpack inverts exactly; else 0. IPU_ERR_NOT_FOUND for an index out of
 * range. */
IPU_API IPU_NODISCARD ipu_status ipu_executable_packed_only(const ipu_executable *e, uint32_t index,
                                                            int *out);
/* The original bytes of tensor `tensor` from the packed blob payload (size bytes, 4-byte
 * aligned) whose entry names it as its source, unpacked into dst (nbytes, which must be the
 * tensor's size). IPU_ERR_NOT_FOUND: no entry names it (or the payload is another version);
 * IPU_ERR_CORRUPT: a malformed payload or entry, a layout that cannot be unpacked exactly, or
 * a source of another size than nbytes; IPU_ERR_INVALID_ARGUMENT: NULL, misaligned payload. */
IPU_API IPU_NODISCARD ipu_status ipu_packed_unpack(const void *payload, size_t size,
                                                   uint32_t tensor, void *dst, size_t nbytes);

#ifdef __cplusplus
}
#endif
#endif
