/* Packed operands: the verifier's hook for constant operands that kernels want in another layout
 * (docs/popef.md, "Pre-packed operands").
 *
 * A verifier that wants operand data packed (e.g. convolution weights in the sgemm A-panel
 * layout) calls ipu__packed_operand() with the instruction, a slot number of its choosing, a
 * layout tag, the byte size and a function that packs. When the container's packed blob has an
 * entry for (program id, instruction index, slot) with the same tag and size, the hook returns a
 * pointer into the mapped file and packs nothing; otherwise it allocates `size` bytes (64-byte
 * aligned, zeroed, owned by the executable) and calls the pack function. Either way the buffer
 * is recorded, so ipu_executable_packed_blob() can write all of them into a new packed blob. */
#ifndef IPU_PREPACK_H
#define IPU_PREPACK_H

#include "interp.h"

/* Packed layouts: one id per packing function; bump a layout's version when its bytes change. */
enum {
    IPU__PACK_SGEMM_A = 1, /* ipu__sgemm_pack_a panels (kernels.h): geom = {mr, KC, block rows} */
    IPU__PACK_SGEMM_B = 2, /* sgemm B panels (Bp[k][nr]): geom = {nr, KC, ...} */
    IPU__PACK_WINO = 3,    /* Winograd weights (ipu__wino_pack_weights): geom = {mr} */
};

/* What a packed buffer was made for. Two tags are equal when every field is. */
typedef struct ipu__pack_tag {
    uint32_t layout;  /* IPU__PACK_* */
    uint32_t version; /* of the layout's packing function */
    uint32_t isa;     /* micro-kernel ISA (ipu__ukr.isa) the layout was made for */
    uint32_t geom[4]; /* layout-specific geometry; unused entries 0 */
} ipu__pack_tag;

/* The constant tensor a packed operand is made from, seen as `nmat` matrices of rows x cols
 * (row-major, float32 for the layouts a tensor may be stored in): layout 1 (A panels): G groups
 * of [Cog, K]; layout 2 (B panels): B [K, N], or stored as its transpose [N, K] (trans). Written
 * into the packed blob, so that a tensor stored packed can be unpacked from its entry alone. */
typedef struct ipu__pack_src {
    uint32_t tensor, trans;
    uint64_t nmat, rows, cols;
} ipu__pack_src;

/* Fills the `size` bytes at dst (64-byte aligned, zeroed) from ctx and the tensor's bytes w. */
typedef void (*ipu__pack_fn)(const void *ctx, const void *w, void *dst);

/* Parse the container's packed blob, if any (after the metadata, before verifying), and find
 * the entry of every tensor stored packed. IPU_ERR_CORRUPT if malformed, or if a tensor stored
 * packed has no entry that can be unpacked exactly. */
ipu_status ipu__prepack_open(ipu_executable *e);
/* After verifying: unpack every tensor stored packed whose packed form is not what its one
 * reader uses (a file packed for another micro-kernel, ...), so that ipu__tensor_bytes holds its
 * values. IPU_ERR_NOMEM. */
ipu_status ipu__prepack_finish(ipu_executable *e);
void ipu__prepack_destroy(ipu_executable *e);

/* *out: the packed bytes for `slot` of instruction `index` of program `program_id` (see above),
 * made from `src`'s tensor (unpacked first when it is stored packed and the entry is not used).
 * Each slot at most once per instruction (IPU_ERR_INTERNAL otherwise); IPU_ERR_NOMEM if the
 * buffer cannot be allocated. */
ipu_status ipu__packed_operand(const ipu_executable *e, uint32_t program_id, uint32_t index,
                               uint32_t slot, const ipu__pack_src *src, const ipu__pack_tag *tag,
                               size_t size, ipu__pack_fn fn, const void *ctx, const void **out);

#endif
