/* libFuzzer target with a structure-aware mutator: semantic edits of valid containers.
 *
 * Byte mutations rarely get past the checksum, the layout checks and the instruction checks
 * together, so they cannot reach properties of the whole executable (which anchor a role names,
 * where its tensor lives, whether the Load program binds every weight before it is read). The
 * mutator (LLVMFuzzerCustomMutator) decodes a container into its blobs, edits METADATA fields,
 * anchors, tensors, stages and program instructions as a compiler bug would (point a role at
 * another anchor or program, flip a direction or location, alias two tensors, drop, duplicate, swap or move
 * instructions, redirect an operand, change an attribute), and writes the result again with
 * the container writer, so every input has a valid checksum and reaches ipu_executable_create.
 *
 * What the verifier accepts is then run as the runtime runs it: a session (one thread) with
 * every input fed zeros, every output discarded and the index anchor selecting each subgraph
 * in turn, the Load program, then one step of Main per subgraph. Run-time statuses are fine;
 * sanitizer reports are not, and neither is a change to any byte of the container (weights
 * are read in place from a read-only mapping). The seeds are the container seeds. */
#include <stdio.h>

#include "fuzz_common.h"

#define FZ_MAX_BLOBS 64u
#define FZ_MAX_INSTR 2048u
#define FZ_MAX_ARENA ((uint64_t)16 << 20)
#define FZ_MAX_BPS 4u

/* ---- decoded container ------------------------------------------------------------------- */

typedef struct fz_blob {
    uint32_t type, id;
    char name[256];
    uint8_t *data; /* owned copy */
    size_t size;
} fz_blob;

typedef struct fz_image {
    fz_blob b[FZ_MAX_BLOBS];
    uint32_t n;
    uint64_t hash;
} fz_image;

static void fz_image_free(fz_image *m) {
    for (uint32_t i = 0; i < m->n; i++) free(m->b[i].data);
    memset(m->b, 0, sizeof m->b); /* the image is static: leave no pointer to freed data */
    m->n = 0;
}

static int fz_decode(const uint8_t *data, size_t size, fz_image *m) {
    ipu_container *c = NULL;
    m->n = 0;
    if (ipu_container_open_memory(data, size, &c) != IPU_OK) return 0;
    uint32_t n = ipu_container_blob_count(c);
    int ok = n <= FZ_MAX_BLOBS;
    m->hash = ipu_container_compiler_hash(c);
    for (uint32_t i = 0; ok && i < n; i++) {
        ipu_blob_info bi;
        ok = ipu_container_blob(c, i, &bi) == IPU_OK;
        fz_blob *b = &m->b[m->n];
        b->type = bi.type;
        b->id = bi.id;
        b->name[0] = '\0';
        if (ok && bi.name) snprintf(b->name, sizeof b->name, "%s", bi.name);
        b->size = (size_t)bi.size;
        b->data = malloc(b->size ? b->size : 1);
        ok = ok && b->data;
        if (ok) {
            memcpy(b->data, bi.data, b->size);
            m->n++;
        }
    }
    ipu_container_destroy(c);
    if (!ok) fz_image_free(m);
    return ok;
}

/* The image written again (valid header and checksum), into `out` if it fits: its size or 0. */
static size_t fz_encode(const fz_image *m, uint8_t *out, size_t cap) {
    ipu_container_writer *w = NULL;
    if (ipu_container_writer_create(&w) != IPU_OK) return 0;
    ipu_container_writer_set_compiler_hash(w, m->hash);
    int ok = 1;
    for (uint32_t i = 0; ok && i < m->n; i++)
        ok = ipu_container_writer_add_blob_ref(w, m->b[i].type, m->b[i].id,
                                               m->b[i].type == IPU_BLOB_OPAQUE ? m->b[i].name
                                                                               : NULL,
                                               m->b[i].data, m->b[i].size) == IPU_OK;
    size_t need = 0;
    ok = ok && ipu_container_writer_finish_into(w, NULL, 0, &need) == IPU_OK && need <= cap &&
         ipu_container_writer_finish_into(w, out, cap, &need) == IPU_OK;
    ipu_container_writer_destroy(w);
    return ok ? need : 0;
}

/* ---- random choices ------------------------------------------------------------------------ */

typedef struct fz_rng {
    uint64_t s;
} fz_rng;

static uint32_t fz_rand(fz_rng *r, uint32_t n) { /* uniform enough in [0, n) for n >= 1 */
    r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
    return n ? (uint32_t)((r->s >> 33) % n) : 0;
}

static void st32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static fz_blob *fz_find(fz_image *m, uint32_t type, uint32_t k) { /* k-th blob of a type */
    for (uint32_t i = 0; i < m->n; i++)
        if (m->b[i].type == type && k-- == 0) return &m->b[i];
    return NULL;
}

static uint32_t fz_count(const fz_image *m, uint32_t type) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < m->n; i++) n += m->b[i].type == type;
    return n;
}

/* ---- METADATA: fixed part, tensor and anchor tables (layout in docs/popef.md) ------------- */

typedef struct fz_meta {
    uint8_t *p;
    uint32_t num_tensors, num_anchors, num_subgraphs;
    size_t tensors, anchors; /* table offsets */
} fz_meta;

static int fz_meta_view(fz_blob *b, fz_meta *v) {
    if (!b || b->size < 56) return 0;
    uint8_t *p = b->data;
    v->p = p;
    v->num_tensors = fz_ld_u32(p + 20);
    v->num_anchors = fz_ld_u32(p + 24);
    v->num_subgraphs = fz_ld_u32(p + 28);
    uint32_t stages = fz_ld_u32(p + 52);
    uint64_t stage_at = 56 + 4 * (uint64_t)v->num_subgraphs;
    if (stages && stage_at + 4 > b->size) return 0;
    uint32_t step_end = stages ? (fz_ld_u32(p + stage_at) & IPU_STAGES_STEP_END) != 0 : 0;
    uint64_t end = stage_at + (stages ? 4 + 12 * (uint64_t)stages : 0) + 4 * step_end;
    v->tensors = (size_t)((end + 7) & ~(uint64_t)7);
    v->anchors = v->tensors + 96 * (size_t)v->num_tensors;
    return v->num_subgraphs <= 1024 && v->num_tensors <= 4096 && v->num_anchors <= 4096 &&
           v->anchors + 24 * (uint64_t)v->num_anchors <= b->size;
}

static uint32_t fz_program_id(fz_image *m, fz_rng *r) {
    uint32_t n = fz_count(m, IPU_BLOB_PROGRAM);
    fz_blob *p = fz_find(m, IPU_BLOB_PROGRAM, fz_rand(r, n ? n : 1));
    return p ? p->id : fz_rand(r, 4);
}

static void fz_mutate_meta(fz_image *m, fz_meta *v, fz_rng *r) {
    uint8_t *p = v->p;
    uint32_t na = v->num_anchors, nt = v->num_tensors;
    switch (fz_rand(r, 10)) {
        case 0: /* the index anchor: another anchor, or none */
            st32(p + 36, fz_rand(r, 4) ? fz_rand(r, na ? na : 1) : IPU_NO_INDEX);
            break;
        case 1: st32(p + 32, fz_program_id(m, r)); break; /* load program */
        case 2: /* a subgraph's main program (a mutated header may declare none) */
            if (!v->num_subgraphs) break;
            st32(p + 56 + 4 * (size_t)fz_rand(r, v->num_subgraphs), fz_program_id(m, r));
            break;
        case 3: { /* an anchor's direction (1 input, 2 output) */
            if (!na) break;
            uint8_t *a = p + v->anchors + 24 * (size_t)fz_rand(r, na);
            st32(a + 8, 3 - fz_ld_u32(a + 8));
            break;
        }
        case 4: { /* an anchor's weight flag, with its tensor's location to match or not */
            if (!na) break;
            uint8_t *a = p + v->anchors + 24 * (size_t)fz_rand(r, na);
            uint32_t flag = fz_ld_u32(a + 20) ^ 1;
            st32(a + 20, flag);
            uint32_t t = fz_ld_u32(a + 12);
            if (t < nt && fz_rand(r, 2)) {
                st32(p + v->tensors + 96 * (size_t)t + 8, flag ? 2 : 1);
                fz_st_u64(p + v->tensors + 96 * (size_t)t + 16, 0);
            }
            break;
        }
        case 5: { /* an anchor names another tensor, or another subgraph */
            if (!na) break;
            uint8_t *a = p + v->anchors + 24 * (size_t)fz_rand(r, na);
            if (fz_rand(r, 2))
                st32(a + 12, fz_rand(r, nt ? nt : 1));
            else
                st32(a + 16, fz_rand(r, 3) ? fz_rand(r, v->num_subgraphs) : IPU_NO_INDEX);
            break;
        }
        case 6: { /* a tensor moves to the other memory, at offset 0 */
            if (!nt) break;
            uint8_t *t = p + v->tensors + 96 * (size_t)fz_rand(r, nt);
            st32(t + 8, 3 - fz_ld_u32(t + 8));
            fz_st_u64(t + 16, 0);
            break;
        }
        case 7: { /* a tensor aliases another's storage */
            if (nt < 2) break;
            uint8_t *t = p + v->tensors + 96 * (size_t)fz_rand(r, nt);
            const uint8_t *u = p + v->tensors + 96 * (size_t)fz_rand(r, nt);
            memmove(t + 8, u + 8, 4);
            memmove(t + 16, u + 16, 8);
            break;
        }
        case 8: { /* a stage's compute, copy or step-end program (after the main programs) */
            uint32_t ns = fz_ld_u32(p + 52);
            if (!ns || ns > 4096) break;
            size_t table = 56 + 4 * (size_t)v->num_subgraphs;
            if ((fz_ld_u32(p + table) & IPU_STAGES_STEP_END) && fz_rand(r, 3) == 0) {
                st32(p + table + 4 + 12 * (size_t)ns, fz_program_id(m, r));
                break;
            }
            size_t at = table + 4 + 12 * (size_t)fz_rand(r, ns);
            st32(p + at + (fz_rand(r, 2) ? 8 : 0), fz_program_id(m, r));
            break;
        }
        default: /* batches_per_step, within what the harness runs */
            st32(p + 12, 1 + fz_rand(r, FZ_MAX_BPS));
            break;
    }
}

/* ---- programs: instruction lists (encoding in docs/bytecode.md) --------------------------- */

typedef struct fz_prog {
    uint32_t n;
    uint32_t at[FZ_MAX_INSTR], len[FZ_MAX_INSTR]; /* byte ranges in the blob */
} fz_prog;

static int fz_prog_view(const fz_blob *b, fz_prog *v) {
    if (b->size < 8) return 0;
    uint32_t n = fz_ld_u32(b->data);
    size_t pos = 8;
    if (n > FZ_MAX_INSTR) return 0;
    for (uint32_t i = 0; i < n; i++) {
        if (b->size - pos < 8) return 0;
        const uint8_t *q = b->data + pos;
        uint32_t nops = (uint32_t)q[2] + q[3], words = nops + (nops & 1);
        size_t len = 8 + 4 * (size_t)words + 8 * (size_t)(q[4] | q[5] << 8);
        if (b->size - pos < len) return 0;
        v->at[i] = (uint32_t)pos;
        v->len[i] = (uint32_t)len;
        pos += len;
    }
    v->n = n;
    return pos == b->size;
}

/* Replace `dst`'s instructions by `order` (indices into src's list, src may be dst). */
static int fz_prog_write(fz_blob *dst, const fz_blob *src, const fz_prog *sv, const uint32_t *order,
                         uint32_t n, const uint8_t *extra, uint32_t extra_len) {
    size_t size = 8 + extra_len;
    for (uint32_t i = 0; i < n; i++) size += sv->len[order[i]];
    uint8_t *out = malloc(size);
    if (!out) return 0;
    st32(out, n + (extra_len ? 1 : 0));
    st32(out + 4, 0);
    size_t pos = 8;
    for (uint32_t i = 0; i < n; i++) {
        memcpy(out + pos, src->data + sv->at[order[i]], sv->len[order[i]]);
        pos += sv->len[order[i]];
    }
    if (extra_len) memcpy(out + pos, extra, extra_len);
    free(dst->data);
    dst->data = out;
    dst->size = size;
    return 1;
}

static void fz_mutate_program(fz_image *m, const fz_meta *mv, fz_rng *r) {
    uint32_t np = fz_count(m, IPU_BLOB_PROGRAM);
    if (!np) return;
    fz_blob *b = fz_find(m, IPU_BLOB_PROGRAM, fz_rand(r, np));
    static fz_prog v, v2;
    static uint32_t order[FZ_MAX_INSTR];
    if (!fz_prog_view(b, &v)) return;
    for (uint32_t i = 0; i < v.n; i++) order[i] = i;
    uint32_t n = v.n, i = fz_rand(r, n ? n : 1), j = fz_rand(r, n ? n : 1);
    uint32_t nt = mv ? mv->num_tensors : 1;
    switch (fz_rand(r, 7)) {
        case 0: /* drop an instruction (a BIND, say) */
            if (!n) return;
            memmove(order + i, order + i + 1, sizeof *order * (n - i - 1));
            fz_prog_write(b, b, &v, order, n - 1, NULL, 0);
            return;
        case 1: /* swap two instructions: a read may come before its BIND */
            order[i] = j;
            order[j] = i;
            fz_prog_write(b, b, &v, order, n, NULL, 0);
            return;
        case 2: { /* move an instruction to the end of another program */
            fz_blob *to = fz_find(m, IPU_BLOB_PROGRAM, fz_rand(r, np));
            if (!n || to == b || !fz_prog_view(to, &v2) || v2.n >= FZ_MAX_INSTR) return;
            uint8_t ins[8 + 4 * 512 + 8 * 64];
            uint32_t len = v.len[i];
            if (len > sizeof ins) return; /* more attributes than any opcode takes */
            memcpy(ins, b->data + v.at[i], len);
            memmove(order + i, order + i + 1, sizeof *order * (n - i - 1));
            fz_prog_write(b, b, &v, order, n - 1, NULL, 0);
            for (uint32_t k = 0; k < v2.n; k++) order[k] = k;
            fz_prog_write(to, to, &v2, order, v2.n, ins, len);
            return;
        }
        case 3: { /* redirect an operand to another tensor */
            if (!n) return;
            uint8_t *q = b->data + v.at[i];
            uint32_t nops = (uint32_t)q[2] + q[3];
            if (nops) st32(q + 8 + 4 * (size_t)fz_rand(r, nops), fz_rand(r, nt ? nt : 1));
            return;
        }
        case 4: { /* an attribute: small, or another attribute's value */
            if (!n) return;
            uint8_t *q = b->data + v.at[i];
            uint32_t nops = (uint32_t)q[2] + q[3], na = (uint32_t)(q[4] | q[5] << 8);
            if (!na) return;
            uint8_t *a = q + 8 + 4 * (size_t)(nops + (nops & 1));
            int64_t val = (int64_t)fz_rand(r, 8) - 2;
            if (fz_rand(r, 2)) memcpy(&val, a + 8 * (size_t)fz_rand(r, na), 8);
            memcpy(a + 8 * (size_t)fz_rand(r, na), &val, 8);
            return;
        }
        case 5: /* duplicate an instruction */
            if (!n || n >= FZ_MAX_INSTR) return;
            memmove(order + i + 1, order + i, sizeof *order * (n - i));
            fz_prog_write(b, b, &v, order, n + 1, NULL, 0);
            return;
        default: { /* another opcode with the same operand counts */
            if (!n) return;
            uint8_t *q = b->data + v.at[i];
            for (uint32_t tries = 0; tries < 16; tries++) {
                uint32_t op = 1 + fz_rand(r, 48), lo, hi, no;
                if (ipu_opcode_arity((ipu_opcode)op, &lo, &hi, &no) == IPU_OK && q[2] >= lo &&
                    q[2] <= hi && q[3] == no) {
                    q[0] = (uint8_t)op;
                    q[1] = (uint8_t)(op >> 8);
                    return;
                }
            }
            return;
        }
    }
}

/* libFuzzer's byte mutator when linked with libFuzzer (absent in the replay build). */
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size) __attribute__((weak));

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed) {
    static fz_image m;
    if (!fz_decode(data, size, &m))
        return LLVMFuzzerMutate ? LLVMFuzzerMutate(data, size, max_size) : size;
    fz_rng r = {seed * 0x9E3779B97F4A7C15ull + 1};
    uint32_t edits = 1 + fz_rand(&r, 3);
    for (uint32_t k = 0; k < edits; k++) {
        fz_meta mv;
        int have_meta = fz_meta_view(fz_find(&m, IPU_BLOB_METADATA, 0), &mv);
        uint32_t what = fz_rand(&r, 8);
        if (what < 3 && have_meta) {
            fz_mutate_meta(&m, &mv, &r);
        } else if (what == 3 && LLVMFuzzerMutate &&
                   m.n) { /* bytes of one blob, checksum kept valid */
            fz_blob *b = &m.b[fz_rand(&r, m.n)];
            if (b->type == IPU_BLOB_OPAQUE || b->size == 0) continue;
            b->size = LLVMFuzzerMutate(b->data, b->size, b->size);
        } else {
            fz_mutate_program(&m, have_meta ? &mv : NULL, &r);
        }
    }
    size_t n = fz_encode(&m, data, max_size);
    fz_image_free(&m);
    return n ? n : size;
}

/* ---- running what the verifier accepts ---------------------------------------------------- */

typedef struct fz_index {
    uint32_t next, num_subgraphs;
} fz_index;

static ipu_status fz_index_fn(void *buf, size_t nbytes, const ipu_anchor_info *a, void *ud) {
    (void)a;
    fz_index *x = ud;
    uint32_t v = x->next++ % x->num_subgraphs;
    memcpy(buf, &v, nbytes < sizeof v ? nbytes : sizeof v);
    return IPU_OK;
}

static uint64_t fz_blobs_hash(const ipu_container *c) {
    uint64_t h = 0;
    for (uint32_t i = 0; i < ipu_container_blob_count(c); i++) {
        ipu_blob_info b;
        FUZZ_CHECK(ipu_container_blob(c, i, &b) == IPU_OK);
        h = ipu_hash64(b.data, (size_t)b.size, h);
    }
    return h;
}

/* `weights_empty`: weights are fed zeros instead of bound from the container (the Load program's
 * BINDs of them are skipped: the session's own buffers take their place). */
static void fz_run(const ipu_container *c, const ipu_executable *e, int weights_empty) {
    ipu_executable_info info;
    ipu_executable_get_info(e, &info);
    if (info.arena_size > FZ_MAX_ARENA || info.batches_per_step > FZ_MAX_BPS) return;
    ipu_session_config cfg = ipu_session_config_default();
    cfg.num_threads = 1;
    cfg.overlap_io = 0;
    cfg.check_package_hash = 0;
    ipu_session *s = NULL;
    if (ipu_session_create(e, &cfg, &s) != IPU_OK) return;
    fz_index index = {0, info.num_subgraphs};
    for (uint32_t a = 0; a < info.num_anchors; a++) {
        ipu_anchor_info A;
        FUZZ_CHECK(ipu_executable_anchor(e, a, &A) == IPU_OK);
        if (A.has_tensor_data && !weights_empty) continue; /* bound by the Load program */
        if (a == info.index_anchor && !A.has_tensor_data)
            FUZZ_CHECK(ipu_session_bind(s, a, IPU_BIND_CALLBACK, fz_index_fn, &index) == IPU_OK);
        else
            FUZZ_CHECK(ipu_session_bind(s, a, IPU_BIND_EMPTY, NULL, NULL) == IPU_OK);
    }
    uint64_t before = fz_blobs_hash(c);
    if (ipu_session_run_load(s) == IPU_OK)
        for (uint32_t k = 0; k < info.num_subgraphs && k < 4; k++) {
            ipu_step_result res;
            (void)ipu_session_run_main(s, &res);
        }
    ipu_session_destroy(s);
    FUZZ_CHECK(fz_blobs_hash(c) == before); /* nothing writes the container */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_MAX_INPUT) return 0;
    ipu_container *c = NULL;
    if (ipu_container_open_memory(data, size, &c) != IPU_OK) return 0;
    ipu_executable *e = fz_executable(c);
    if (e) fz_run(c, e, data[size - 1] & 1);
    ipu_executable_destroy(e);
    ipu_container_destroy(c);
    return 0;
}
