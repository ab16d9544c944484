/* Executable: parse and range-check the METADATA blob (layout in ipu_executable.h), locate the
 * TENSOR_DATA blob, decode every PROGRAM blob (docs/bytecode.md) and verify each instruction
 * (verify_ops.c). Metadata errors are IPU_ERR_CORRUPT, program errors IPU_ERR_BAD_PROGRAM. */
#include <stdlib.h>
#include <string.h>

#include "interp.h"
#include "kernels/kernels.h"
#include "prepack.h"

#define TENSOR_REC 96u
#define ANCHOR_REC 24u
#define MAX_NAME 1024u
#define MAX_ATTRS 64u

static uint16_t ld_u16(const uint8_t *p) { return (uint16_t)(p[0] | (unsigned)p[1] << 8); }

static bool all_zero(const uint8_t *p, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        if (p[i]) return false;
    return true;
}

static uint64_t pad8(uint64_t x) { return (x + 7) & ~(uint64_t)7; }

static ipu_status nomem(void) {
    return ipu__fail(IPU_ERR_NOMEM, "out of memory loading executable");
}

static int cmp_anchor_name(const void *a, const void *b) {
    return strcmp((*(const ipu__anchor *const *)a)->name, (*(const ipu__anchor *const *)b)->name);
}

typedef struct prog_key {
    uint32_t id, index;
} prog_key;

static int cmp_prog_key(const void *a, const void *b) {
    uint32_t x = ((const prog_key *)a)->id, y = ((const prog_key *)b)->id;
    return (x > y) - (x < y);
}

static ipu_status parse_tensor(ipu_executable *e, uint32_t i, const uint8_t *r) {
    ipu__tensor *t = &e->tensors[i];
    uint32_t dtype = ipu__ld_u32(r), ndim = ipu__ld_u32(r + 4), loc = ipu__ld_u32(r + 8);
    uint32_t flags = ipu__ld_u32(r + 12);
    uint64_t off = ipu__ld_u64(r + 16), nbytes = ipu__ld_u64(r + 24);
    size_t es = ipu_dtype_size((ipu_dtype)dtype);
    if (es == 0)
        return ipu__fail(IPU_ERR_CORRUPT, "metadata: tensor %u: unknown dtype %u", i, dtype);
    if (ndim > IPU_MAX_DIMS)
        return ipu__fail(IPU_ERR_CORRUPT, "metadata: tensor %u: ndim %u > %u", i, ndim,
                         IPU_MAX_DIMS);
    if (loc != IPU_LOC_ARENA && loc != IPU_LOC_TENSOR_DATA)
        return ipu__fail(IPU_ERR_CORRUPT, "metadata: tensor %u: unknown location %u", i, loc);
    if (flags & ~(uint32_t)IPU_TENSOR_STORED_PACKED)
        return ipu__fail(IPU_ERR_CORRUPT, "metadata: tensor %u: reserved flags 0x%x", i, flags);
    bool stored = flags & IPU_TENSOR_STORED_PACKED; /* its bytes are in the packed blob */
    if (stored && (loc != IPU_LOC_TENSOR_DATA || dtype != IPU_DTYPE_FLOAT32 || off != 0))
        return ipu__fail(IPU_ERR_CORRUPT,
                         "metadata: tensor %u: stored packed but not a float32 TENSOR_DATA "
                         "tensor at offset 0",
                         i);
    if (off % IPU_CONTAINER_ALIGN != 0)
        return ipu__fail(IPU_ERR_CORRUPT, "metadata: tensor %u: offset %llu not a multiple of 64",
                         i, (unsigned long long)off);
    /* span: the product of the dims with zeros counted as 1. Bounding it (not only numel,
     * which a zero dim makes 0) keeps every partial product of dims, e.g. strides, in int64. */
    uint64_t numel = 1, span = 1, want;
    for (uint32_t d = 0; d < IPU_MAX_DIMS; d++) {
        int64_t dim = (int64_t)ipu__ld_u64(r + 32 + 8 * d);
        if (d >= ndim) {
            if (dim != 0)
                return ipu__fail(IPU_ERR_CORRUPT,
                                 "metadata: tensor %u: unused dim %u is %lld, not 0", i, d,
                                 (long long)dim);
            continue;
        }
        if (dim < 0)
            return ipu__fail(IPU_ERR_CORRUPT, "metadata: tensor %u: dim %u is negative (%lld)", i,
                             d, (long long)dim);
        if (!ipu__mul_u64(numel, (uint64_t)dim, &numel) || numel > (uint64_t)INT64_MAX ||
            !ipu__mul_u64(span, dim ? (uint64_t)dim : 1, &span) || span > (uint64_t)INT64_MAX)
            return ipu__fail(IPU_ERR_CORRUPT, "metadata: tensor %u: element count overflows", i);
        t->desc.dims[d] = dim;
    }
    if (!ipu__mul_u64(numel, es, &want) || want != nbytes)
        return ipu__fail(IPU_ERR_CORRUPT,
                         "metadata: tensor %u: nbytes %llu != %llu elements x %zu bytes (%s)", i,
                         (unsigned long long)nbytes, (unsigned long long)numel, es,
                         ipu_dtype_name((ipu_dtype)dtype));
    uint64_t end, limit = loc == IPU_LOC_ARENA ? e->info.arena_size : e->tensor_data_size;
    if (stored) limit = UINT64_MAX; /* checked against its packed blob entry */
    if (loc == IPU_LOC_TENSOR_DATA && !stored && !e->tensor_data)
        return ipu__fail(IPU_ERR_CORRUPT,
                         "metadata: tensor %u is in TENSOR_DATA but the container has none", i);
    if (!ipu__add_u64(off, nbytes, &end) || end > limit)
        return ipu__fail(IPU_ERR_CORRUPT,
                         "metadata: tensor %u: bytes [%llu, +%llu) exceed the %s (%llu bytes)", i,
                         (unsigned long long)off, (unsigned long long)nbytes,
                         loc == IPU_LOC_ARENA ? "arena" : "TENSOR_DATA blob",
                         (unsigned long long)limit);
    t->desc.dtype = (ipu_dtype)dtype;
    t->desc.ndim = ndim;
    t->desc.nbytes = nbytes;
    t->loc = (ipu_location)loc;
    t->flags = flags;
    t->offset = off;
    t->numel = numel;
    return IPU_OK;
}

static ipu_status parse_anchor(ipu_executable *e, uint32_t i, const uint8_t *r,
                               const uint8_t *strings, uint32_t strings_size) {
    ipu__anchor *a = &e->anchors[i];
    uint32_t noff = ipu__ld_u32(r), nlen = ipu__ld_u32(r + 4), dir = ipu__ld_u32(r + 8);
    uint32_t tensor = ipu__ld_u32(r + 12), sg = ipu__ld_u32(r + 16), flags = ipu__ld_u32(r + 20);
    if (nlen < 1 || nlen > MAX_NAME)
        return ipu__fail(IPU_ERR_CORRUPT, "metadata: anchor %u: name length %u not in 1..%u", i,
                         nlen, MAX_NAME);
    if ((uint64_t)noff + nlen > strings_size)
        return ipu__fail(IPU_ERR_CORRUPT,
                         "metadata: anchor %u: name [%u, +%u) exceeds the string table (%u bytes)",
                         i, noff, nlen, strings_size);
    if (memchr(strings + noff, 0, nlen))
        return ipu__fail(IPU_ERR_CORRUPT, "metadata: anchor %u: name contains a NUL byte", i);
    if (dir != IPU_DIR_INPUT && dir != IPU_DIR_OUTPUT)
        return ipu__fail(IPU_ERR_CORRUPT, "metadata: anchor %u: unknown direction %u", i, dir);
    if (tensor >= e->info.num_tensors)
        return ipu__fail(IPU_ERR_CORRUPT,
                         "metadata: anchor %u: tensor %u out of range (%u tensors)", i, tensor,
                         e->info.num_tensors);
    if (sg != IPU_NO_INDEX && sg >= e->info.num_subgraphs)
        return ipu__fail(IPU_ERR_CORRUPT, "metadata: anchor %u: subgraph %u out of range (%u)", i,
                         sg, e->info.num_subgraphs);
    if (flags & ~(uint32_t)IPU_ANCHOR_TENSOR_DATA)
        return ipu__fail(IPU_ERR_CORRUPT, "metadata: anchor %u: unknown flags 0x%x", i, flags);
    /* the session streams every other anchor through the arena; a weight is only read */
    if ((flags & IPU_ANCHOR_TENSOR_DATA) && dir != IPU_DIR_INPUT)
        return ipu__fail(IPU_ERR_CORRUPT,
                         "metadata: anchor %u: a TENSOR_DATA anchor (a weight) "
                         "must be an input",
                         i);
    ipu_location want = (flags & IPU_ANCHOR_TENSOR_DATA) ? IPU_LOC_TENSOR_DATA : IPU_LOC_ARENA;
    if (e->tensors[tensor].loc != want)
        return ipu__fail(IPU_ERR_CORRUPT, "metadata: anchor %u: tensor %u must be in the %s", i,
                         tensor, want == IPU_LOC_ARENA ? "arena" : "TENSOR_DATA blob");
    a->name = ipu__malloc((size_t)nlen + 1);
    if (!a->name) return nomem();
    memcpy(a->name, strings + noff, nlen);
    a->name[nlen] = '\0';
    a->direction = (ipu_direction)dir;
    a->tensor = tensor;
    a->subgraph = sg;
    a->flags = flags;
    a->variable = IPU_NO_INDEX;
    return IPU_OK;
}

/* The runtime writes the selected subgraph id into the index anchor's tensor (session_main.c)
 * and reads one element of its dtype from a request's buffer (request.c): it must be an input
 * in the arena (a weight lives in the read-only mapping of the file) holding one integer. */
static ipu_status check_index_anchor(const ipu_executable *e) {
    uint32_t ia = e->info.index_anchor;
    const ipu__anchor *a = &e->anchors[ia];
    const ipu__tensor *t = &e->tensors[a->tensor];
    if (a->direction != IPU_DIR_INPUT)
        return ipu__fail(IPU_ERR_CORRUPT, "metadata: index_anchor %u is not an input", ia);
    if (a->flags & IPU_ANCHOR_TENSOR_DATA)
        return ipu__fail(IPU_ERR_CORRUPT,
                         "metadata: index_anchor %u is a TENSOR_DATA anchor "
                         "(a weight); the subgraph index must be an arena input",
                         ia);
    switch (t->desc.dtype) {
        case IPU_DTYPE_INT8:
        case IPU_DTYPE_UINT8:
        case IPU_DTYPE_INT16:
        case IPU_DTYPE_UINT16:
        case IPU_DTYPE_INT32:
        case IPU_DTYPE_UINT32:
        case IPU_DTYPE_INT64:
        case IPU_DTYPE_UINT64:
            if (t->numel == 1) return IPU_OK;
            break;
        default: break;
    }
    return ipu__fail(IPU_ERR_CORRUPT,
                     "metadata: index_anchor %u: tensor %u is %s with %llu "
                     "elements, not one integer",
                     ia, a->tensor,
                     ipu_dtype_name(t->desc.dtype) ? ipu_dtype_name(t->desc.dtype) : "?",
                     (unsigned long long)t->numel);
}

static ipu_status parse_metadata(ipu_executable *e, const ipu_container *c) {
    ipu_blob_info mb;
    ipu_status st = ipu_container_find_blob(c, IPU_BLOB_METADATA, 0, &mb);
    if (st == IPU_ERR_NOT_FOUND)
        return ipu__fail(IPU_ERR_CORRUPT, "container has no METADATA blob");
    if (st) return st;
    ipu_blob_info tb;
    st = ipu_container_find_blob(c, IPU_BLOB_TENSOR_DATA, 0, &tb);
    if (st == IPU_OK) {
        e->tensor_data = tb.data;
        e->tensor_data_size = tb.size;
    } else if (st != IPU_ERR_NOT_FOUND) {
        return st;
    }
    const uint8_t *p = mb.data;
    uint64_t size = mb.size;
    if (size < 56)
        return ipu__fail(IPU_ERR_CORRUPT, "metadata: blob of %llu bytes is shorter than its header",
                         (unsigned long long)size);
    ipu_executable_info *in = &e->info;
    in->ipu_version = ipu__ld_u32(p);
    in->num_ipus = ipu__ld_u32(p + 4);
    in->replication_factor = ipu__ld_u32(p + 8);
    in->batches_per_step = ipu__ld_u32(p + 12);
    in->num_io_tiles = ipu__ld_u32(p + 16);
    in->num_tensors = ipu__ld_u32(p + 20);
    in->num_anchors = ipu__ld_u32(p + 24);
    in->num_subgraphs = ipu__ld_u32(p + 28);
    uint32_t load_id = ipu__ld_u32(p + 32);
    in->index_anchor = ipu__ld_u32(p + 36);
    in->arena_size = ipu__ld_u64(p + 40);
    uint32_t strings_size = ipu__ld_u32(p + 48);
    in->num_stages = ipu__ld_u32(p + 52);
    if (in->ipu_version != 2 && in->ipu_version != 21)
        return ipu__fail(IPU_ERR_CORRUPT, "metadata: unknown ipu_version %u (expected 2 or 21)",
                         in->ipu_version);
    if (in->num_ipus < 1 || in->replication_factor < 1 || in->batches_per_step < 1)
        return ipu__fail(
            IPU_ERR_CORRUPT,
            "metadata: num_ipus %u, replication_factor %u, batches_per_step %u must be >= 1",
            in->num_ipus, in->replication_factor, in->batches_per_step);
    if (in->num_tensors > IPU_MAX_TENSORS)
        return ipu__fail(IPU_ERR_CORRUPT, "metadata: num_tensors %u > %u", in->num_tensors,
                         IPU_MAX_TENSORS);
    if (in->num_anchors > in->num_tensors)
        return ipu__fail(IPU_ERR_CORRUPT, "metadata: num_anchors %u > num_tensors %u",
                         in->num_anchors, in->num_tensors);
    if (in->num_subgraphs < 1) return ipu__fail(IPU_ERR_CORRUPT, "metadata: num_subgraphs is 0");
    if (in->index_anchor != IPU_NO_INDEX && in->index_anchor >= in->num_anchors)
        return ipu__fail(IPU_ERR_CORRUPT, "metadata: index_anchor %u out of range (%u anchors)",
                         in->index_anchor, in->num_anchors);
    if (in->arena_size % IPU_CONTAINER_ALIGN != 0)
        return ipu__fail(IPU_ERR_CORRUPT, "metadata: arena_size %llu not a multiple of 64",
                         (unsigned long long)in->arena_size);
    if (in->num_stages > IPU_MAX_STAGES)
        return ipu__fail(IPU_ERR_CORRUPT, "metadata: num_stages %u > %u", in->num_stages,
                         IPU_MAX_STAGES);
    if (in->num_stages && in->num_subgraphs != 1)
        return ipu__fail(IPU_ERR_CORRUPT,
                         "metadata: a sharded model (%u stages) must have one "
                         "subgraph, not %u",
                         in->num_stages, in->num_subgraphs);
    /* Layout: all counts are < 2^32, so these sums cannot overflow 64 bits. */
    uint64_t stage_at = 56 + 4 * (uint64_t)in->num_subgraphs;
    uint32_t stage_flags = 0;
    if (in->num_stages) {
        if (stage_at + 4 > size)
            return ipu__fail(IPU_ERR_CORRUPT, "metadata: blob ends before the stage table");
        stage_flags = ipu__ld_u32(p + stage_at);
        if (stage_flags & ~(uint32_t)(IPU_STAGES_PIPELINED | IPU_STAGES_STEP_END))
            return ipu__fail(IPU_ERR_CORRUPT, "metadata: unknown stage flags 0x%x", stage_flags);
    }
    uint64_t main_end = stage_at + (in->num_stages ? 4 + 12 * (uint64_t)in->num_stages : 0) +
                        (stage_flags & IPU_STAGES_STEP_END ? 4 : 0);
    uint64_t tens_at = pad8(main_end);
    uint64_t anch_at = tens_at + (uint64_t)TENSOR_REC * in->num_tensors;
    uint64_t str_at = anch_at + (uint64_t)ANCHOR_REC * in->num_anchors;
    uint64_t str_end = str_at + strings_size, end = pad8(str_end);
    if (end != size)
        return ipu__fail(
            IPU_ERR_CORRUPT,
            "metadata: blob is %llu bytes, layout (%u subgraphs, %u tensors, %u anchors, %u string bytes) needs %llu",
            (unsigned long long)size, in->num_subgraphs, in->num_tensors, in->num_anchors,
            strings_size, (unsigned long long)end);
    if (!all_zero(p + main_end, tens_at - main_end) || !all_zero(p + str_end, end - str_end))
        return ipu__fail(IPU_ERR_CORRUPT, "metadata: padding bytes not zero");
    e->main_programs = ipu__calloc(in->num_subgraphs, sizeof(uint32_t));
    e->tensors = ipu__calloc(in->num_tensors, sizeof(ipu__tensor));
    e->anchors = ipu__calloc(in->num_anchors, sizeof(ipu__anchor));
    if (!e->main_programs || !e->tensors || !e->anchors) return nomem();
    for (uint32_t s = 0; s < in->num_subgraphs; s++)
        e->main_programs[s] = ipu__ld_u32(p + 56 + 4 * (uint64_t)s);
    in->step_end_program = IPU_NO_INDEX;
    if (in->num_stages) {
        in->pipelined = (stage_flags & IPU_STAGES_PIPELINED) != 0;
        if (stage_flags & IPU_STAGES_STEP_END)
            in->step_end_program = ipu__ld_u32(p + stage_at + 4 + 12 * (uint64_t)in->num_stages);
        e->stages = ipu__calloc(in->num_stages, sizeof *e->stages);
        if (!e->stages) return nomem();
        for (uint32_t k = 0; k < in->num_stages; k++) {
            const uint8_t *q = p + stage_at + 4 + 12 * (uint64_t)k;
            e->stages[k] = (ipu__stage){ipu__ld_u32(q), ipu__ld_u32(q + 4), ipu__ld_u32(q + 8)};
            if (e->stages[k].ipu >= in->num_ipus)
                return ipu__fail(IPU_ERR_CORRUPT,
                                 "metadata: stage %u is on IPU %u, but num_ipus "
                                 "is %u",
                                 k, e->stages[k].ipu, in->num_ipus);
        }
        if (e->stages[0].program != e->main_programs[0])
            return ipu__fail(IPU_ERR_CORRUPT,
                             "metadata: stage 0 program %u is not the Main "
                             "program %u",
                             e->stages[0].program, e->main_programs[0]);
    }
    e->load_program = load_id; /* ids for now; resolved to indices later */
    for (uint32_t i = 0; i < in->num_tensors; i++)
        if ((st = parse_tensor(e, i, p + tens_at + (uint64_t)TENSOR_REC * i))) return st;
    for (uint32_t i = 0; i < in->num_anchors; i++)
        if ((st = parse_anchor(e, i, p + anch_at + (uint64_t)ANCHOR_REC * i, p + str_at,
                               strings_size)))
            return st;
    if (in->index_anchor != IPU_NO_INDEX && (st = check_index_anchor(e))) return st;
    if (in->num_anchors > 1) {
        ipu__anchor **order = ipu__malloc(sizeof(ipu__anchor *) * in->num_anchors);
        if (!order) return nomem();
        for (uint32_t i = 0; i < in->num_anchors; i++) order[i] = &e->anchors[i];
        qsort(order, in->num_anchors, sizeof *order, cmp_anchor_name);
        for (uint32_t i = 1; i < in->num_anchors; i++) {
            if (strcmp(order[i - 1]->name, order[i]->name) == 0) {
                st = ipu__fail(IPU_ERR_CORRUPT, "metadata: duplicate anchor name \"%.200s\"",
                               order[i]->name);
                break;
            }
        }
        ipu__free(order);
    }
    return st;
}

static ipu_status bad_prog(uint32_t id, const char *what, unsigned long long a,
                           unsigned long long b) {
    return ipu__fail(IPU_ERR_BAD_PROGRAM, "program %u: %s (%llu, %llu)", id, what, a, b);
}

static ipu_status parse_program(ipu__program *pr, const uint8_t *p, uint64_t size) {
    uint32_t id = pr->id;
    if (size < 8) return bad_prog(id, "blob shorter than its 8-byte header (size, 8)", size, 8);
    uint32_t n = ipu__ld_u32(p);
    if (ipu__ld_u32(p + 4) != 0)
        return ipu__fail(IPU_ERR_BAD_PROGRAM, "program %u: reserved header field not zero", id);
    if (n > (size - 8) / 8)
        return bad_prog(id, "instruction count exceeds what the blob can hold (count, blob size)",
                        n, size);
    pr->instr = ipu__calloc(n, sizeof(ipu__instr));
    if (!pr->instr) return nomem();
    pr->n_instr = n;
    uint64_t pos = 8;
    for (uint32_t i = 0; i < n; i++) {
        ipu__instr *ins = &pr->instr[i];
        if (size - pos < 8)
            return ipu__fail(IPU_ERR_BAD_PROGRAM, "program %u instruction %u: truncated header", id,
                             i);
        const uint8_t *q = p + pos;
        uint32_t n_in = q[2], n_out = q[3], n_attr = ld_u16(q + 4);
        ins->op = (ipu_opcode)ld_u16(q);
        if (ld_u16(q + 6) != 0)
            return ipu__fail(IPU_ERR_BAD_PROGRAM,
                             "program %u instruction %u: reserved field not zero", id, i);
        if (n_attr > MAX_ATTRS)
            return ipu__fail(IPU_ERR_BAD_PROGRAM, "program %u instruction %u: %u attributes > %u",
                             id, i, n_attr, MAX_ATTRS);
        uint32_t nops = n_in + n_out, words = nops + (nops & 1);
        uint64_t len = 8 + 4 * (uint64_t)words + 8 * (uint64_t)n_attr;
        if (size - pos < len)
            return ipu__fail(
                IPU_ERR_BAD_PROGRAM,
                "program %u instruction %u: %llu bytes needed at offset %llu, blob has %llu", id, i,
                (unsigned long long)len, (unsigned long long)pos, (unsigned long long)size);
        if ((n_in && !(ins->in = ipu__malloc(sizeof(uint32_t) * n_in))) ||
            (n_out && !(ins->out = ipu__malloc(sizeof(uint32_t) * n_out))) ||
            (n_attr && !(ins->attr = ipu__malloc(sizeof(int64_t) * n_attr))))
            return nomem();
        ins->n_in = n_in;
        ins->n_out = n_out;
        ins->n_attr = n_attr;
        for (uint32_t k = 0; k < n_in; k++) ins->in[k] = ipu__ld_u32(q + 8 + 4 * k);
        for (uint32_t k = 0; k < n_out; k++) ins->out[k] = ipu__ld_u32(q + 8 + 4 * (n_in + k));
        if ((nops & 1) && ipu__ld_u32(q + 8 + 4 * nops) != 0)
            return ipu__fail(IPU_ERR_BAD_PROGRAM,
                             "program %u instruction %u: operand padding not zero", id, i);
        for (uint32_t k = 0; k < n_attr; k++)
            ins->attr[k] = (int64_t)ipu__ld_u64(q + 8 + 4 * words + 8 * k);
        pos += len;
    }
    if (pos != size)
        return bad_prog(id, "blob does not end after the last instruction (end, blob size)", pos,
                        size);
    return IPU_OK;
}

static ipu_status find_prog(const prog_key *keys, uint32_t n, uint32_t id, uint32_t *index) {
    prog_key k = {id, 0};
    const prog_key *hit = n ? bsearch(&k, keys, n, sizeof k, cmp_prog_key) : NULL;
    if (!hit) return IPU_ERR_NOT_FOUND;
    *index = hit->index;
    return IPU_OK;
}

/* Stage program ids → indices; copy programs must hold only COPY instructions. */
static ipu_status resolve_stages(ipu_executable *e, const prog_key *keys, uint32_t np) {
    uint32_t end_id = e->info.step_end_program;
    e->step_end = IPU_NO_INDEX;
    if (end_id != IPU_NO_INDEX &&
        (find_prog(keys, np, end_id, &e->step_end) || e->step_end == e->load_program))
        return ipu__fail(IPU_ERR_CORRUPT,
                         "metadata: step-end program %u does not exist or is the Load program",
                         end_id);
    for (uint32_t k = 0; k < e->info.num_stages; k++) {
        ipu__stage *sg = &e->stages[k];
        uint32_t id = sg->program;
        if (find_prog(keys, np, id, &sg->program) || sg->program == e->load_program)
            return ipu__fail(IPU_ERR_CORRUPT,
                             "metadata: program %u of stage %u does not exist "
                             "or is the Load program",
                             id, k);
        if (sg->copy == IPU_NO_INDEX) continue;
        id = sg->copy;
        if (find_prog(keys, np, id, &sg->copy) || sg->copy == e->load_program)
            return ipu__fail(IPU_ERR_CORRUPT,
                             "metadata: copy program %u of stage %u does not "
                             "exist or is the Load program",
                             id, k);
        const ipu__program *pr = &e->programs[sg->copy];
        for (uint32_t i = 0; i < pr->n_instr; i++)
            if (pr->instr[i].op != IPU_OP_COPY)
                return ipu__fail(IPU_ERR_BAD_PROGRAM,
                                 "copy program %u of stage %u: instruction "
                                 "%u is not a COPY",
                                 id, k, i);
    }
    return IPU_OK;
}

/* Variables (ipu_executable_variable): the first COPY of the Load program from each weight
 * anchor's tensor into an ARENA tensor. A variable's tensor is the device's state, so no anchor
 * may stream it and no two weights may share it. */
static ipu_status find_variables(ipu_executable *e) {
    const ipu__program *load = &e->programs[e->load_program];
    uint32_t nt = e->info.num_tensors;
    uint32_t *anchor_of = ipu__calloc(nt ? nt : 1, sizeof *anchor_of); /* anchor + 1, or 0 */
    uint32_t *var_of = ipu__calloc(nt ? nt : 1, sizeof *var_of);       /* anchor + 1, or 0 */
    ipu_status st = IPU_OK;
    if (!anchor_of || !var_of) {
        st = ipu__fail(IPU_ERR_NOMEM, "out of memory loading executable");
        goto done;
    }
    for (uint32_t a = e->info.num_anchors; a-- > 0;) anchor_of[e->anchors[a].tensor] = a + 1;
    for (uint32_t i = 0; i < load->n_instr; i++) {
        const ipu__instr *ins = &load->instr[i];
        if (ins->op != IPU_OP_COPY || e->tensors[ins->out[0]].loc != IPU_LOC_ARENA) continue;
        uint32_t src = anchor_of[ins->in[0]], dst = ins->out[0];
        if (!src || !(e->anchors[src - 1].flags & IPU_ANCHOR_TENSOR_DATA)) continue;
        ipu__anchor *A = &e->anchors[src - 1];
        if (A->variable != IPU_NO_INDEX) continue; /* a second copy of it: not its variable */
        uint32_t clash = anchor_of[dst] ? anchor_of[dst] : var_of[dst];
        if (clash) {
            st = ipu__fail(IPU_ERR_BAD_PROGRAM,
                           "Load program instruction %u: variable '%s' is tensor %u, which "
                           "anchor '%s' also uses",
                           i, A->name, dst, e->anchors[clash - 1].name);
            goto done;
        }
        A->variable = dst;
        var_of[dst] = src;
        e->info.num_variables++;
    }
done:
    ipu__free(anchor_of);
    ipu__free(var_of);
    return st;
}

ipu_status ipu_executable_create(const ipu_container *c, ipu_executable **out) {
    if (!c || !out)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_executable_create: NULL argument");
    ipu_status st = IPU_OK;
    prog_key *keys = NULL;
    ipu_executable *e = ipu__calloc(1, sizeof *e);
    if (!e) return nomem();
    e->container = c;
    if ((st = parse_metadata(e, c))) goto fail;
    if ((st = ipu__prepack_open(e))) goto fail;
    uint32_t nb = ipu_container_blob_count(c), np = 0;
    for (uint32_t i = 0; i < nb; i++) {
        ipu_blob_info bi;
        if ((st = ipu_container_blob(c, i, &bi))) goto fail;
        np += bi.type == IPU_BLOB_PROGRAM;
    }
    e->programs = ipu__calloc(np, sizeof(ipu__program));
    keys = ipu__malloc(sizeof(prog_key) * (np ? np : 1));
    if (!e->programs || !keys) {
        st = nomem();
        goto fail;
    }
    for (uint32_t i = 0, k = 0; i < nb; i++) {
        ipu_blob_info bi;
        if ((st = ipu_container_blob(c, i, &bi))) goto fail;
        if (bi.type != IPU_BLOB_PROGRAM) continue;
        e->programs[k].id = bi.id;
        keys[k].id = bi.id;
        keys[k].index = k;
        e->info.num_programs = ++k;
        if ((st = parse_program(&e->programs[k - 1], bi.data, bi.size))) goto fail;
    }
    qsort(keys, np, sizeof *keys, cmp_prog_key);
    for (uint32_t i = 1; i < np; i++) {
        if (keys[i].id == keys[i - 1].id) {
            st = ipu__fail(IPU_ERR_CORRUPT, "duplicate program id %u", keys[i].id);
            goto fail;
        }
    }
    uint32_t load_id = e->load_program;
    if (find_prog(keys, np, load_id, &e->load_program)) {
        st = ipu__fail(IPU_ERR_CORRUPT, "metadata: load_program %u does not exist", load_id);
        goto fail;
    }
    for (uint32_t s = 0; s < e->info.num_subgraphs; s++) {
        uint32_t id = e->main_programs[s];
        if (find_prog(keys, np, id, &e->main_programs[s])) {
            st = ipu__fail(IPU_ERR_CORRUPT,
                           "metadata: main program %u of subgraph %u does not exist", id, s);
            goto fail;
        }
        if (e->main_programs[s] == e->load_program) { /* BIND is for the Load program only */
            st = ipu__fail(IPU_ERR_CORRUPT,
                           "metadata: main program %u of subgraph %u is the "
                           "Load program",
                           id, s);
            goto fail;
        }
    }
    if ((st = resolve_stages(e, keys, np))) goto fail;
    for (uint32_t k = 0; k < np; k++) {
        ipu__program *pr = &e->programs[k];
        for (uint32_t i = 0; i < pr->n_instr; i++)
            if ((st = ipu__verify_instr(e, pr->id, k == e->load_program, i, &pr->instr[i])))
                goto fail;
    }
    if ((st = ipu__verify_binds(e)) || (st = ipu__verify_stages(e))) goto fail;
    if ((st = find_variables(e))) goto fail;
    if ((st = ipu__prepack_finish(e))) goto fail;
    ipu__free(keys);
    *out = e;
    return IPU_OK;
fail:
    ipu__free(keys);
    ipu_executable_destroy(e);
    return st;
}

void ipu_executable_destroy(ipu_executable *e) {
    if (!e) return;
    if (e->programs) {
        for (uint32_t k = 0; k < e->info.num_programs; k++) {
            ipu__program *pr = &e->programs[k];
            for (uint32_t i = 0; pr->instr && i < pr->n_instr; i++) {
                ipu__free(pr->instr[i].in);
                ipu__free(pr->instr[i].out);
                ipu__free(pr->instr[i].attr);
                ipu__free(pr->instr[i].plan);
            }
            ipu__free(pr->instr);
        }
    }
    ipu__prepack_destroy(e);
    if (e->anchors)
        for (uint32_t i = 0; i < e->info.num_anchors; i++) ipu__free(e->anchors[i].name);
    ipu__free(e->programs);
    ipu__free(e->anchors);
    ipu__free(e->tensors);
    ipu__free(e->main_programs);
    ipu__free(e->stages);
    ipu__free(e);
}

void ipu_executable_get_info(const ipu_executable *e, ipu_executable_info *out) {
    if (!out) return;
    if (!e) {
        memset(out, 0, sizeof *out);
        return;
    }
    *out = e->info;
}

ipu_status ipu_executable_tensor(const ipu_executable *e, uint32_t index, ipu_tensor_desc *out) {
    if (!e || !out)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_executable_tensor: NULL argument");
    if (index >= e->info.num_tensors)
        return ipu__fail(IPU_ERR_NOT_FOUND, "tensor %u out of range (%u tensors)", index,
                         e->info.num_tensors);
    *out = e->tensors[index].desc;
    return IPU_OK;
}

ipu_status ipu_executable_anchor(const ipu_executable *e, uint32_t index, ipu_anchor_info *out) {
    if (!e || !out)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_executable_anchor: NULL argument");
    if (index >= e->info.num_anchors)
        return ipu__fail(IPU_ERR_NOT_FOUND, "anchor %u out of range (%u anchors)", index,
                         e->info.num_anchors);
    const ipu__anchor *a = &e->anchors[index];
    out->name = a->name;
    out->direction = a->direction;
    out->tensor = a->tensor;
    out->subgraph = a->subgraph;
    out->has_tensor_data = (a->flags & IPU_ANCHOR_TENSOR_DATA) != 0;
    out->desc = e->tensors[a->tensor].desc;
    return IPU_OK;
}

ipu_status ipu_executable_find_anchor(const ipu_executable *e, const char *name,
                                      uint32_t *index_out) {
    if (!e || !name || !index_out)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_executable_find_anchor: NULL argument");
    for (uint32_t i = 0; i < e->info.num_anchors; i++) {
        if (strcmp(e->anchors[i].name, name) == 0) {
            *index_out = i;
            return IPU_OK;
        }
    }
    return ipu__fail(IPU_ERR_NOT_FOUND, "no anchor named \"%.200s\"", name);
}

ipu_status ipu_executable_program(const ipu_executable *e, uint32_t index, ipu_program_info *out) {
    if (!e || !out)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_executable_program: NULL argument");
    if (index >= e->info.num_programs)
        return ipu__fail(IPU_ERR_NOT_FOUND, "program index %u out of range (%u programs)", index,
                         e->info.num_programs);
    out->id = e->programs[index].id;
    out->num_instructions = e->programs[index].n_instr;
    return IPU_OK;
}

ipu_status ipu_executable_instruction(const ipu_executable *e, uint32_t program_index, uint32_t i,
                                      ipu_instruction_info *out) {
    if (!e || !out)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_executable_instruction: NULL argument");
    if (program_index >= e->info.num_programs)
        return ipu__fail(IPU_ERR_NOT_FOUND, "program index %u out of range (%u programs)",
                         program_index, e->info.num_programs);
    const ipu__program *pr = &e->programs[program_index];
    if (i >= pr->n_instr)
        return ipu__fail(IPU_ERR_NOT_FOUND, "instruction %u out of range (program %u has %u)", i,
                         pr->id, pr->n_instr);
    const ipu__instr *ins = &pr->instr[i];
    out->opcode = ins->op;
    out->num_inputs = ins->n_in;
    out->num_outputs = ins->n_out;
    out->num_attrs = ins->n_attr;
    out->inputs = ins->in;
    out->outputs = ins->out;
    out->attrs = ins->attr;
    return IPU_OK;
}

ipu_status ipu_executable_variable(const ipu_executable *e, uint32_t anchor, uint32_t *tensor_out) {
    if (!e || !tensor_out)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_executable_variable: NULL argument");
    if (anchor >= e->info.num_anchors)
        return ipu__fail(IPU_ERR_NOT_FOUND, "anchor %u out of range (%u anchors)", anchor,
                         e->info.num_anchors);
    if (e->anchors[anchor].variable == IPU_NO_INDEX)
        return ipu__fail(IPU_ERR_NOT_FOUND, "anchor '%s' is not a variable",
                         e->anchors[anchor].name);
    *tensor_out = e->anchors[anchor].variable;
    return IPU_OK;
}

uint32_t ipu_executable_load_program(const ipu_executable *e) {
    return e ? e->programs[e->load_program].id : 0;
}

ipu_status ipu_executable_main_program(const ipu_executable *e, uint32_t subgraph,
                                       uint32_t *id_out) {
    if (!e || !id_out)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_executable_main_program: NULL argument");
    if (subgraph >= e->info.num_subgraphs)
        return ipu__fail(IPU_ERR_NOT_FOUND, "subgraph %u out of range (%u subgraphs)", subgraph,
                         e->info.num_subgraphs);
    *id_out = e->programs[e->main_programs[subgraph]].id;
    return IPU_OK;
}

ipu_status ipu_executable_stage(const ipu_executable *e, uint32_t stage, ipu_stage_info *out) {
    if (!e || !out)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_executable_stage: NULL argument");
    if (stage >= e->info.num_stages)
        return ipu__fail(IPU_ERR_NOT_FOUND, "stage %u out of range (%u stages)", stage,
                         e->info.num_stages);
    const ipu__stage *sg = &e->stages[stage];
    out->program = e->programs[sg->program].id;
    out->ipu = sg->ipu;
    out->copy_program = sg->copy == IPU_NO_INDEX ? IPU_NO_INDEX : e->programs[sg->copy].id;
    return IPU_OK;
}
