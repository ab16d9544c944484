/* Packed operands (prepack.h): the container's packed blob, the verifier's hook, tensors stored
 * packed and the writer of a new packed blob.
 *
 * Packed blob payload (OPAQUE blob IPU_PACKED_BLOB_NAME; little-endian; docs/popef.md):
 *   0   u8[8] magic "PYIPUPK\0"
 *   8   u32   version (IPU_PACKED_VERSION, or 1; another version: the blob is ignored)
 *   12  u32   count
 *   16  count entries of 96 bytes (version 1: 64):
 *       0 u32 program id, 4 u32 instruction index, 8 u32 slot,
 *       12 u32 layout, 16 u32 layout version, 20 u32 isa, 24 u32 geom[4],
 *       40 u32 source tensor, 44 u32 trans (version 1: u64 reserved, 0),
 *       48 u64 offset (from the payload start), 56 u64 size,
 *       64 u64 nmat, 72 u64 rows, 80 u64 cols (ipu__pack_src), 88 u64 reserved (0)
 *   then the packed bytes; each entry's bytes start 64-byte aligned in the file. */
#include <stdlib.h>
#include <string.h>

#include "prepack.h"

#include "kernels/conv.h"
#include "kernels/kernels.h"

#define HEAD 16u
#define ENTRY 96u    /* version 2 */
#define ENTRY_V1 64u /* version 1 */
static const uint8_t MAGIC[8] = {'P', 'Y', 'I', 'P', 'U', 'P', 'K', 0};

typedef struct pk_key {
    uint32_t program, instr, slot;
} pk_key;

typedef struct pk_rec {
    pk_key key;
    ipu__pack_tag tag;
    ipu__pack_src src; /* tensor IPU_NO_INDEX: a version-1 entry */
    uint64_t size;
    const uint8_t *data; /* into the container, or owned */
    bool owned;
} pk_rec;

/* A tensor stored packed: its entry, and its bytes once unpacked. */
typedef struct pk_tensor {
    const pk_rec *entry;
    uint8_t *orig; /* owned, or NULL */
    bool mapped;   /* its entry was used in place */
} pk_tensor;

typedef struct ipu__prepack {
    pk_rec *index; /* entries of the container's packed blob, sorted by key */
    uint32_t n_index;
    pk_rec *used; /* every buffer handed out, in verification order */
    uint32_t n_used, cap_used, n_mapped;
    pk_tensor *tens; /* [num_tensors] when some tensor is stored packed, else NULL */
} ipu__prepack;

static int cmp_key(const void *a, const void *b) {
    const pk_key *x = a, *y = b;
    if (x->program != y->program) return x->program < y->program ? -1 : 1;
    if (x->instr != y->instr) return x->instr < y->instr ? -1 : 1;
    return (x->slot > y->slot) - (x->slot < y->slot);
}

static ipu_status corrupt_entry(uint32_t i, const char *what, uint64_t a, uint64_t b) {
    return ipu__fail(IPU_ERR_CORRUPT, "packed blob: entry %u: %s (%llu, %llu)", i, what,
                     (unsigned long long)a, (unsigned long long)b);
}

/* *out: the blob named IPU_PACKED_BLOB_NAME, if *found; IPU_ERR_CORRUPT if two are. */
static ipu_status find_blob(const ipu_container *c, ipu_blob_info *out, bool *found) {
    *found = false;
    uint32_t nb = ipu_container_blob_count(c);
    for (uint32_t i = 0; i < nb; i++) {
        ipu_blob_info bi;
        ipu_status st = ipu_container_blob(c, i, &bi);
        if (st) return st;
        if (bi.type != IPU_BLOB_OPAQUE || strcmp(bi.name, IPU_PACKED_BLOB_NAME) != 0) continue;
        if (*found)
            return ipu__fail(IPU_ERR_CORRUPT, "packed blob: more than one %s blob",
                             IPU_PACKED_BLOB_NAME);
        *out = bi;
        *found = true;
    }
    return IPU_OK;
}

/* Is x's packed form one that unpacks exactly into nbytes (layouts 1 and 2 of float32), and of
 * exactly the size its geometry gives? Else *why says what is wrong. */
static bool unpackable(const pk_rec *x, uint64_t nbytes, const char **why) {
    const ipu__pack_src *s = &x->src;
    const uint32_t *g = x->tag.geom;
    uint64_t tile = g[0], mn, floats, per;
    *why = "a layout that cannot be unpacked exactly";
    if ((x->tag.layout != IPU__PACK_SGEMM_A && x->tag.layout != IPU__PACK_SGEMM_B) ||
        x->tag.version != 1 || tile < 1 || tile > 64 || g[3] != 0)
        return false;
    *why = "a source shape that is not the tensor's";
    if (!ipu__mul_u64(s->nmat, s->rows, &mn) || !ipu__mul_u64(mn, s->cols, &floats) ||
        floats > UINT64_MAX / 4 || floats * 4 != nbytes || s->trans > 1)
        return false;
    if (x->tag.layout == IPU__PACK_SGEMM_A) { /* groups of [rows, cols] in blocks of g[2] rows */
        uint64_t kc = g[1], mb = g[2];
        if (kc < 1 || mb < 1 || s->trans) return false;
        uint64_t mbl = s->rows / mb + (s->rows % mb != 0), blk = (mb + tile - 1) / tile * tile;
        if (!ipu__mul_u64(blk, s->cols, &per) || !ipu__mul_u64(per, mbl, &per)) return false;
    } else { /* B [K, N] (trans: stored [N, K]) in panels of g[0] columns */
        uint64_t k = s->trans ? s->cols : s->rows, n = s->trans ? s->rows : s->cols;
        if (g[2] != 0) return false;
        if (!ipu__mul_u64((n + tile - 1) / tile * tile, k, &per)) return false;
    }
    *why = "a size that is not its geometry's";
    return ipu__mul_u64(per, s->nmat, &per) && per <= UINT64_MAX / 4 && per * 4 == x->size;
}

/* The source tensor's bytes from x (unpackable). */
static void unpack(const pk_rec *x, void *dst) {
    const ipu__pack_src *s = &x->src;
    const float *src = (const float *)x->data;
    float *w = dst;
    int tile = (int)x->tag.geom[0];
    int64_t rows = (int64_t)s->rows, cols = (int64_t)s->cols;
    if (x->tag.layout == IPU__PACK_SGEMM_A) {
        ipu__conv_unpack_weights(src, (int64_t)s->nmat, rows, cols, tile, x->tag.geom[1],
                                 x->tag.geom[2], w);
        return;
    }
    int64_t k = s->trans ? cols : rows, n = s->trans ? rows : cols;
    size_t per = ipu__sgemm_packed_b_floats(k, n, tile);
    for (uint64_t i = 0; i < s->nmat; i++)
        ipu__sgemm_unpack_b_all(src + i * per, k, n, tile, w + i * (uint64_t)(k * n),
                                s->trans ? 1 : n, s->trans ? k : 1);
}

/* The entries of payload p (size bytes, version `ver`) into *out (n_out of them, sorted by
 * key). `aligned`: the data must be 64-byte aligned in memory (a mapped file); else 4. */
static ipu_status parse_entries(const uint8_t *p, uint64_t size, uint32_t ver, bool aligned,
                                pk_rec **out, uint32_t *n_out) {
    uint32_t n = ipu__ld_u32(p + 12), esz = ver == 1 ? ENTRY_V1 : ENTRY;
    *out = NULL;
    *n_out = 0;
    if (n > (size - HEAD) / esz)
        return ipu__fail(IPU_ERR_CORRUPT, "packed blob: %u entries do not fit in %llu bytes", n,
                         (unsigned long long)size);
    pk_rec *index = ipu__calloc(n ? n : 1, sizeof *index);
    if (!index) return ipu__fail(IPU_ERR_NOMEM, "out of memory indexing the packed blob");
    *out = index;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *r = p + HEAD + (uint64_t)i * esz;
        pk_rec *x = &index[i];
        x->key = (pk_key){ipu__ld_u32(r), ipu__ld_u32(r + 4), ipu__ld_u32(r + 8)};
        x->tag.layout = ipu__ld_u32(r + 12);
        x->tag.version = ipu__ld_u32(r + 16);
        x->tag.isa = ipu__ld_u32(r + 20);
        for (int g = 0; g < 4; g++) x->tag.geom[g] = ipu__ld_u32(r + 24 + 4 * g);
        uint64_t res = ipu__ld_u64(r + 40), off = ipu__ld_u64(r + 48), len = ipu__ld_u64(r + 56);
        x->src.tensor = IPU_NO_INDEX;
        if (ver != 1) {
            x->src = (ipu__pack_src){ipu__ld_u32(r + 40), ipu__ld_u32(r + 44), ipu__ld_u64(r + 64),
                                     ipu__ld_u64(r + 72), ipu__ld_u64(r + 80)};
            res = ipu__ld_u64(r + 88);
        }
        if (res != 0) return corrupt_entry(i, "reserved field not zero", res, 0);
        if (x->src.trans > 1) return corrupt_entry(i, "trans not 0 or 1", x->src.trans, 0);
        if (off > size || len > size - off)
            return corrupt_entry(i, "offset + size exceed the blob", off, len);
        if (off < HEAD + (uint64_t)n * esz)
            return corrupt_entry(i, "data overlaps the entry table", off, len);
        if ((uintptr_t)(p + off) % (aligned ? IPU_CONTAINER_ALIGN : 4) != 0)
            return corrupt_entry(i, "data not 64-byte aligned in the file", off, len);
        x->size = len;
        x->data = p + off;
    }
    *n_out = n;
    qsort(index, n, sizeof *index, cmp_key);
    for (uint32_t i = 1; i < n; i++)
        if (cmp_key(&index[i - 1].key, &index[i].key) == 0)
            return ipu__fail(IPU_ERR_CORRUPT,
                             "packed blob: two entries for program %u instruction %u slot %u",
                             index[i].key.program, index[i].key.instr, index[i].key.slot);
    return IPU_OK;
}

/* The payload's header: IPU_OK with *ver 0 for another version (ignored). */
static ipu_status check_head(const uint8_t *p, uint64_t size, uint32_t *ver) {
    if (size < HEAD || memcmp(p, MAGIC, sizeof MAGIC) != 0)
        return ipu__fail(IPU_ERR_CORRUPT, "packed blob: %llu bytes without the PYIPUPK header",
                         (unsigned long long)size);
    *ver = ipu__ld_u32(p + 8);
    if (*ver != 1 && *ver != IPU_PACKED_VERSION) *ver = 0; /* another writer's: unused */
    return IPU_OK;
}

/* Every tensor stored packed gets its entry, which must unpack into it exactly. */
static ipu_status find_stored(ipu_executable *e, ipu__prepack *pk) {
    uint32_t nt = e->info.num_tensors, first = IPU_NO_INDEX;
    for (uint32_t t = 0; t < nt && first == IPU_NO_INDEX; t++)
        if (e->tensors[t].flags & IPU_TENSOR_STORED_PACKED) first = t;
    if (first == IPU_NO_INDEX) return IPU_OK;
    pk->tens = ipu__calloc(nt, sizeof *pk->tens);
    if (!pk->tens) return ipu__fail(IPU_ERR_NOMEM, "out of memory loading executable");
    for (uint32_t i = 0; i < pk->n_index; i++) {
        const pk_rec *x = &pk->index[i];
        uint32_t t = x->src.tensor;
        if (t == IPU_NO_INDEX) continue;
        if (t >= nt)
            return ipu__fail(IPU_ERR_CORRUPT, "packed blob: an entry names tensor %u of %u", t, nt);
        if (!(e->tensors[t].flags & IPU_TENSOR_STORED_PACKED)) continue;
        if (pk->tens[t].entry)
            return ipu__fail(IPU_ERR_CORRUPT, "packed blob: two entries hold tensor %u", t);
        const char *why;
        if (!unpackable(x, e->tensors[t].desc.nbytes, &why))
            return ipu__fail(IPU_ERR_CORRUPT, "packed blob: the entry of tensor %u has %s", t, why);
        pk->tens[t].entry = x;
    }
    for (uint32_t t = first; t < nt; t++)
        if ((e->tensors[t].flags & IPU_TENSOR_STORED_PACKED) && !pk->tens[t].entry)
            return ipu__fail(IPU_ERR_CORRUPT,
                             "tensor %u is stored packed but no packed blob entry holds it", t);
    return IPU_OK;
}

ipu_status ipu__prepack_open(ipu_executable *e) {
    ipu__prepack *pk = ipu__calloc(1, sizeof *pk);
    if (!pk) return ipu__fail(IPU_ERR_NOMEM, "out of memory loading executable");
    e->prepack = pk;
    ipu_blob_info bi;
    bool found;
    uint32_t ver = 0;
    ipu_status st = find_blob(e->container, &bi, &found);
    if (!st && found) st = check_head(bi.data, bi.size, &ver);
    if (!st && ver) st = parse_entries(bi.data, bi.size, ver, true, &pk->index, &pk->n_index);
    return st ? st : find_stored(e, pk);
}

static ipu_status materialize(const ipu_executable *e, uint32_t t) {
    pk_tensor *x = &e->prepack->tens[t];
    if (x->orig) return IPU_OK;
    uint64_t n = e->tensors[t].desc.nbytes;
    x->orig = ipu__big_alloc((size_t)(n ? n : 1));
    if (!x->orig)
        return ipu__fail(IPU_ERR_NOMEM, "out of memory unpacking tensor %u (%llu bytes)", t,
                         (unsigned long long)n);
    unpack(x->entry, x->orig);
    return IPU_OK;
}

/* Input uses of every tensor in every program (a BIND has none). NULL: out of memory. */
static uint32_t *count_uses(const ipu_executable *e) {
    uint32_t *uses = ipu__calloc(e->info.num_tensors ? e->info.num_tensors : 1, sizeof *uses);
    for (uint32_t k = 0; uses && k < e->info.num_programs; k++)
        for (uint32_t i = 0; i < e->programs[k].n_instr; i++) {
            const ipu__instr *ins = &e->programs[k].instr[i];
            for (uint32_t j = 0; j < ins->n_in; j++) uses[ins->in[j]]++;
        }
    return uses;
}

ipu_status ipu__prepack_finish(ipu_executable *e) {
    ipu__prepack *pk = e->prepack;
    if (!pk || !pk->tens) return IPU_OK;
    uint32_t *uses = count_uses(e);
    if (!uses) return ipu__fail(IPU_ERR_NOMEM, "out of memory loading executable");
    ipu_status st = IPU_OK;
    for (uint32_t t = 0; t < e->info.num_tensors && !st; t++)
        if (pk->tens[t].entry && (!pk->tens[t].mapped || uses[t] != 1)) st = materialize(e, t);
    ipu__free(uses);
    return st;
}

const uint8_t *ipu__tensor_bytes(const ipu_executable *e, uint32_t t) {
    const ipu__tensor *x = &e->tensors[t];
    if (!(x->flags & IPU_TENSOR_STORED_PACKED)) return e->tensor_data + x->offset;
    const pk_tensor *p = &e->prepack->tens[t];
    return p->orig ? p->orig : p->entry->data;
}

void ipu__prepack_destroy(ipu_executable *e) {
    ipu__prepack *pk = e->prepack;
    if (!pk) return;
    for (uint32_t i = 0; i < pk->n_used; i++)
        if (pk->used[i].owned) ipu__aligned_free((void *)pk->used[i].data);
    if (pk->tens)
        for (uint32_t t = 0; t < e->info.num_tensors; t++) ipu__aligned_free(pk->tens[t].orig);
    ipu__free(pk->tens);
    ipu__free(pk->used);
    ipu__free(pk->index);
    ipu__free(pk);
    e->prepack = NULL;
}

static const pk_rec *lookup(const ipu__prepack *pk, const pk_rec *r) {
    const pk_rec *hit = pk->n_index
                            ? bsearch(&r->key, pk->index, pk->n_index, sizeof *pk->index, cmp_key)
                            : NULL;
    if (!hit || hit->size != r->size || memcmp(&hit->tag, &r->tag, sizeof r->tag) != 0) return NULL;
    if (hit->src.tensor != IPU_NO_INDEX && memcmp(&hit->src, &r->src, sizeof r->src) != 0)
        return NULL; /* made from another tensor or shape */
    return hit;
}

ipu_status ipu__packed_operand(const ipu_executable *e, uint32_t program_id, uint32_t index,
                               uint32_t slot, const ipu__pack_src *src, const ipu__pack_tag *tag,
                               size_t size, ipu__pack_fn fn, const void *ctx, const void **out) {
    ipu__prepack *pk = e->prepack;
    /* an instruction's requests are consecutive: a slot asked twice is a verifier bug, and its
     * written blob would be refused */
    for (uint32_t i = pk->n_used;
         i-- > 0 && pk->used[i].key.program == program_id && pk->used[i].key.instr == index;)
        if (pk->used[i].key.slot == slot)
            return ipu__fail(IPU_ERR_INTERNAL, "program %u instruction %u: slot %u packed twice",
                             program_id, index, slot);
    if (pk->n_used == pk->cap_used) {
        uint32_t cap = pk->cap_used ? 2 * pk->cap_used : 16;
        pk_rec *u = ipu__malloc(sizeof *u * cap);
        if (!u) return ipu__fail(IPU_ERR_NOMEM, "out of memory recording a packed operand");
        if (pk->n_used) memcpy(u, pk->used, sizeof *u * pk->n_used);
        ipu__free(pk->used);
        pk->used = u;
        pk->cap_used = cap;
    }
    pk_rec *r = &pk->used[pk->n_used];
    *r = (pk_rec){.key = {program_id, index, slot}, .tag = *tag, .src = *src, .size = size};
    pk_tensor *stored = pk->tens && pk->tens[src->tensor].entry ? &pk->tens[src->tensor] : NULL;
    const pk_rec *hit = lookup(pk, r);
    if (hit) {
        r->data = hit->data;
        pk->n_mapped++;
        if (stored && stored->entry == hit) stored->mapped = true;
    } else {
        ipu_status st = stored ? materialize(e, src->tensor) : IPU_OK;
        if (st) return st;
        uint8_t *buf = ipu__big_alloc(size);
        if (!buf)
            return ipu__fail(IPU_ERR_NOMEM, "out of memory packing an operand (%zu bytes)", size);
        memset(buf, 0, size); /* padding the pack function skips is zero in a written blob */
        fn(ctx, ipu__tensor_bytes(e, src->tensor), buf);
        r->data = buf;
        r->owned = true;
    }
    pk->n_used++;
    *out = r->data;
    return IPU_OK;
}

void ipu_executable_packed_counts(const ipu_executable *e, uint32_t *mapped, uint32_t *packed) {
    const ipu__prepack *pk = e ? e->prepack : NULL;
    if (mapped) *mapped = pk ? pk->n_mapped : 0;
    if (packed) *packed = pk ? pk->n_used - pk->n_mapped : 0;
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* Is x written into a packed blob? Not Winograd weights: U = G g G^T does not invert exactly, so
 * their 3x3 originals stay in TENSOR_DATA, and a file carrying U as well would hold them 25/9
 * times; they are packed at load (ipu__wino_pack_weights). */
static bool written(const pk_rec *x) { return x->tag.layout != IPU__PACK_WINO; }

ipu_status ipu_executable_packed_blob(const ipu_executable *e, void *dst, size_t cap,
                                      size_t *size) {
    if (!e || !size)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_executable_packed_blob: NULL argument");
    const ipu__prepack *pk = e->prepack;
    uint32_t n = 0;
    for (uint32_t i = 0; pk && i < pk->n_used; i++) n += written(&pk->used[i]);
    if (n == 0) return ipu__fail(IPU_ERR_NOT_FOUND, "the executable has no packed operands");
    /* the payload starts this far into its 64-byte aligned blob: the OPAQUE name header */
    uint64_t lead = (4 + sizeof IPU_PACKED_BLOB_NAME - 1 + 7) & ~(uint64_t)7;
    uint64_t end = HEAD + (uint64_t)n * ENTRY;
    for (uint32_t i = 0; i < pk->n_used; i++)
        if (written(&pk->used[i]))
            end = align_up(lead + end, IPU_CONTAINER_ALIGN) - lead + pk->used[i].size;
    *size = (size_t)end;
    if (!dst) return IPU_OK;
    if (cap < end)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "packed blob: %llu bytes do not fit in %zu",
                         (unsigned long long)end, cap);
    uint8_t *p = dst;
    memset(p, 0, HEAD + (size_t)n * ENTRY);
    memcpy(p, MAGIC, sizeof MAGIC);
    ipu__st_u32(p + 8, IPU_PACKED_VERSION);
    ipu__st_u32(p + 12, n);
    uint64_t off = HEAD + (uint64_t)n * ENTRY;
    for (uint32_t i = 0, j = 0; i < pk->n_used; i++) {
        const pk_rec *x = &pk->used[i];
        if (!written(x)) continue;
        uint8_t *r = p + HEAD + (uint64_t)j++ * ENTRY;
        uint64_t at = align_up(lead + off, IPU_CONTAINER_ALIGN) - lead;
        memset(p + off, 0, (size_t)(at - off)); /* zero padding */
        off = at;
        ipu__st_u32(r, x->key.program);
        ipu__st_u32(r + 4, x->key.instr);
        ipu__st_u32(r + 8, x->key.slot);
        ipu__st_u32(r + 12, x->tag.layout);
        ipu__st_u32(r + 16, x->tag.version);
        ipu__st_u32(r + 20, x->tag.isa);
        for (int g = 0; g < 4; g++) ipu__st_u32(r + 24 + 4 * g, x->tag.geom[g]);
        ipu__st_u32(r + 40, x->src.tensor);
        ipu__st_u32(r + 44, x->src.trans);
        ipu__st_u64(r + 48, off);
        ipu__st_u64(r + 56, x->size);
        ipu__st_u64(r + 64, x->src.nmat);
        ipu__st_u64(r + 72, x->src.rows);
        ipu__st_u64(r + 80, x->src.cols);
        memcpy(p + off, x->data, (size_t)x->size);
        off += x->size;
    }
    return IPU_OK;
}

ipu_status ipu_executable_packed_only(const ipu_executable *e, uint32_t index, int *out) {
    if (!e || !out)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_executable_packed_only: NULL argument");
    if (index >= e->info.num_tensors)
        return ipu__fail(IPU_ERR_NOT_FOUND, "tensor %u out of range (%u tensors)", index,
                         e->info.num_tensors);
    *out = 0;
    const ipu__tensor *t = &e->tensors[index];
    const ipu__prepack *pk = e->prepack;
    if (t->loc != IPU_LOC_TENSOR_DATA || t->desc.dtype != IPU_DTYPE_FLOAT32 || !pk) return IPU_OK;
    const pk_rec *use = NULL; /* the one packed operand made from it */
    for (uint32_t i = 0; i < pk->n_used; i++)
        if (pk->used[i].src.tensor == index) {
            if (use) return IPU_OK;
            use = &pk->used[i];
        }
    const char *why;
    if (!use || !unpackable(use, t->desc.nbytes, &why)) return IPU_OK;
    uint32_t *uses = count_uses(e);
    if (!uses) return ipu__fail(IPU_ERR_NOMEM, "out of memory");
    bool one = uses[index] == 1;
    ipu__free(uses);
    for (uint32_t k = 0; one && k < e->info.num_programs; k++) { /* and it is that operand */
        const ipu__program *pr = &e->programs[k];
        if (pr->id != use->key.program) continue;
        const ipu__instr *ins = use->key.instr < pr->n_instr ? &pr->instr[use->key.instr] : NULL;
        *out = ins && use->key.slot < ins->n_in && ins->in[use->key.slot] == index;
    }
    return IPU_OK;
}

ipu_status ipu_packed_unpack(const void *payload, size_t size, uint32_t tensor, void *dst,
                             size_t nbytes) {
    if (!payload || (!dst && nbytes))
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_packed_unpack: NULL argument");
    if ((uintptr_t)payload % 4 != 0)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_packed_unpack: payload not 4-byte aligned");
    uint32_t ver, n = 0;
    pk_rec *index = NULL;
    ipu_status st = check_head(payload, size, &ver);
    if (!st && ver) st = parse_entries(payload, size, ver, false, &index, &n);
    const pk_rec *x = NULL;
    for (uint32_t i = 0; !st && i < n; i++)
        if (index[i].src.tensor == tensor) {
            if (x)
                st = ipu__fail(IPU_ERR_CORRUPT, "packed blob: two entries hold tensor %u", tensor);
            x = &index[i];
        }
    const char *why;
    if (!st && !x)
        st = ipu__fail(IPU_ERR_NOT_FOUND, "packed blob: no entry holds tensor %u", tensor);
    else if (!st && !unpackable(x, nbytes, &why))
        st = ipu__fail(IPU_ERR_CORRUPT, "packed blob: the entry of tensor %u (%zu bytes) has %s",
                       tensor, nbytes, why);
    if (!st) unpack(x, dst);
    ipu__free(index);
    return st;
}
