/* Packed operands (prepack.h): the container's packed blob, the verifier's hook and the writer of
 * a new packed blob.
 *
 * Packed blob payload (OPAQUE blob IPU_PACKED_BLOB_NAME; little-endian; docs/popef.md):
 *   0   u8[8] magic "PYIPUPK\0"
 *   8   u32   version (IPU_PACKED_VERSION; another version: the blob is ignored)
 *   12  u32   count
 *   16  count entries of 64 bytes:
 *       0 u32 program id, 4 u32 instruction index, 8 u32 slot,
 *       12 u32 layout, 16 u32 layout version, 20 u32 isa, 24 u32 geom[4],
 *       40 u64 reserved (0), 48 u64 offset (from the payload start), 56 u64 size
 *   then the packed bytes; each entry's bytes start 64-byte aligned in the file. */
#include <stdlib.h>
#include <string.h>

#include "prepack.h"

#define HEAD 16u
#define ENTRY 64u
static const uint8_t MAGIC[8] = {'P', 'Y', 'I', 'P', 'U', 'P', 'K', 0};

typedef struct pk_key {
    uint32_t program, instr, slot;
} pk_key;

typedef struct pk_rec {
    pk_key key;
    ipu__pack_tag tag;
    uint64_t size;
    const uint8_t *data; /* into the container, or owned */
    bool owned;
} pk_rec;

typedef struct ipu__prepack {
    pk_rec *index; /* entries of the container's packed blob, sorted by key */
    uint32_t n_index;
    pk_rec *used; /* every buffer handed out, in verification order */
    uint32_t n_used, cap_used, n_mapped;
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

static ipu_status parse_entries(ipu__prepack *pk, const uint8_t *p, uint64_t size) {
    uint32_t n = ipu__ld_u32(p + 12);
    if (n > (size - HEAD) / ENTRY)
        return ipu__fail(IPU_ERR_CORRUPT, "packed blob: %u entries do not fit in %llu bytes", n,
                         (unsigned long long)size);
    pk->index = ipu__calloc(n, sizeof *pk->index);
    if (!pk->index) return ipu__fail(IPU_ERR_NOMEM, "out of memory indexing the packed blob");
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *r = p + HEAD + (uint64_t)i * ENTRY;
        pk_rec *x = &pk->index[i];
        x->key = (pk_key){ipu__ld_u32(r), ipu__ld_u32(r + 4), ipu__ld_u32(r + 8)};
        x->tag.layout = ipu__ld_u32(r + 12);
        x->tag.version = ipu__ld_u32(r + 16);
        x->tag.isa = ipu__ld_u32(r + 20);
        for (int g = 0; g < 4; g++) x->tag.geom[g] = ipu__ld_u32(r + 24 + 4 * g);
        uint64_t res = ipu__ld_u64(r + 40), off = ipu__ld_u64(r + 48), len = ipu__ld_u64(r + 56);
        if (res != 0) return corrupt_entry(i, "reserved field not zero", res, 0);
        if (off > size || len > size - off)
            return corrupt_entry(i, "offset + size exceed the blob", off, len);
        if (off < HEAD + (uint64_t)n * ENTRY)
            return corrupt_entry(i, "data overlaps the entry table", off, len);
        if ((uintptr_t)(p + off) % IPU_CONTAINER_ALIGN != 0)
            return corrupt_entry(i, "data not 64-byte aligned in the file", off, len);
        x->size = len;
        x->data = p + off;
    }
    pk->n_index = n;
    qsort(pk->index, n, sizeof *pk->index, cmp_key);
    for (uint32_t i = 1; i < n; i++)
        if (cmp_key(&pk->index[i - 1].key, &pk->index[i].key) == 0)
            return ipu__fail(IPU_ERR_CORRUPT,
                             "packed blob: two entries for program %u instruction %u slot %u",
                             pk->index[i].key.program, pk->index[i].key.instr,
                             pk->index[i].key.slot);
    return IPU_OK;
}

ipu_status ipu__prepack_open(ipu_executable *e) {
    ipu__prepack *pk = ipu__calloc(1, sizeof *pk);
    if (!pk) return ipu__fail(IPU_ERR_NOMEM, "out of memory loading executable");
    e->prepack = pk;
    ipu_blob_info bi;
    bool found;
    ipu_status st = find_blob(e->container, &bi, &found);
    if (st || !found) return st;
    const uint8_t *p = bi.data;
    if (bi.size < HEAD || memcmp(p, MAGIC, sizeof MAGIC) != 0)
        return ipu__fail(IPU_ERR_CORRUPT, "packed blob: %llu bytes without the PYIPUPK header",
                         (unsigned long long)bi.size);
    if (ipu__ld_u32(p + 8) != IPU_PACKED_VERSION) return IPU_OK; /* another writer's: unused */
    return parse_entries(pk, p, bi.size);
}

void ipu__prepack_destroy(ipu_executable *e) {
    ipu__prepack *pk = e->prepack;
    if (!pk) return;
    for (uint32_t i = 0; i < pk->n_used; i++)
        if (pk->used[i].owned) ipu__aligned_free((void *)pk->used[i].data);
    ipu__free(pk->used);
    ipu__free(pk->index);
    ipu__free(pk);
    e->prepack = NULL;
}

static const pk_rec *lookup(const ipu__prepack *pk, const pk_key *k, const ipu__pack_tag *tag,
                            uint64_t size) {
    const pk_rec *hit = pk->n_index ? bsearch(k, pk->index, pk->n_index, sizeof *pk->index, cmp_key)
                                    : NULL;
    if (!hit || hit->size != size || memcmp(&hit->tag, tag, sizeof *tag) != 0) return NULL;
    return hit;
}

ipu_status ipu__packed_operand(const ipu_executable *e, uint32_t program_id, uint32_t index,
                               uint32_t slot, const ipu__pack_tag *tag, size_t size,
                               ipu__pack_fn fn, const void *ctx, const void **out) {
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
    *r = (pk_rec){.key = {program_id, index, slot}, .tag = *tag, .size = size};
    const pk_rec *hit = lookup(pk, &r->key, tag, size);
    if (hit) {
        r->data = hit->data;
        pk->n_mapped++;
    } else {
        uint8_t *buf = ipu__big_alloc(size);
        if (!buf)
            return ipu__fail(IPU_ERR_NOMEM, "out of memory packing an operand (%zu bytes)", size);
        memset(buf, 0, size); /* padding the pack function skips is zero in a written blob */
        fn(ctx, buf);
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

ipu_status ipu_executable_packed_blob(const ipu_executable *e, void *dst, size_t cap,
                                      size_t *size) {
    if (!e || !size)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_executable_packed_blob: NULL argument");
    const ipu__prepack *pk = e->prepack;
    if (!pk || pk->n_used == 0)
        return ipu__fail(IPU_ERR_NOT_FOUND, "the executable has no packed operands");
    /* the payload starts this far into its 64-byte aligned blob: the OPAQUE name header */
    uint64_t lead = (4 + sizeof IPU_PACKED_BLOB_NAME - 1 + 7) & ~(uint64_t)7;
    uint64_t end = HEAD + (uint64_t)pk->n_used * ENTRY;
    for (uint32_t i = 0; i < pk->n_used; i++)
        end = align_up(lead + end, IPU_CONTAINER_ALIGN) - lead + pk->used[i].size;
    *size = (size_t)end;
    if (!dst) return IPU_OK;
    if (cap < end)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "packed blob: %llu bytes do not fit in %zu",
                         (unsigned long long)end, cap);
    uint8_t *p = dst;
    memset(p, 0, HEAD + (size_t)pk->n_used * ENTRY);
    memcpy(p, MAGIC, sizeof MAGIC);
    ipu__st_u32(p + 8, IPU_PACKED_VERSION);
    ipu__st_u32(p + 12, pk->n_used);
    uint64_t off = HEAD + (uint64_t)pk->n_used * ENTRY;
    for (uint32_t i = 0; i < pk->n_used; i++) {
        const pk_rec *x = &pk->used[i];
        uint8_t *r = p + HEAD + (uint64_t)i * ENTRY;
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
        ipu__st_u64(r + 48, off);
        ipu__st_u64(r + 56, x->size);
        memcpy(p + off, x->data, (size_t)x->size);
        off += x->size;
    }
    return IPU_OK;
}
