/* In-memory PopEF models for the runtime tests: a tiny encoder of METADATA and PROGRAM blobs
 * (layouts in ipu_executable.h and docs/bytecode.md) on top of ipu_container_writer, plus the
 * models used by tests/c/test_runtime.c, test_session.c and test_serving.c. Test-only. */
#ifndef IPU_TEST_RUNTIME_MODELS_H
#define IPU_TEST_RUNTIME_MODELS_H

#include <stdlib.h>
#include <string.h>

#include "ipu/ipu.h"

#define M_UNUSED __attribute__((unused)) /* not every test uses every helper */

typedef struct {
    uint32_t dtype, loc;
    uint64_t offset;
    uint32_t ndim;
    int64_t dims[8];
} m_tensor;
typedef struct {
    const char *name;
    uint32_t dir, tensor, subgraph, flags;
} m_anchor;
typedef struct {
    uint16_t op;
    uint8_t nin, nout;
    uint32_t ops[8];
} m_instr;
typedef struct {
    uint32_t id, n;
    m_instr ins[4];
} m_prog;
typedef struct {
    uint32_t bps, nsub, load, index_anchor;
    uint32_t main[4];
    uint64_t arena;
    uint32_t nt, na, np;
    m_tensor t[8];
    m_anchor a[8];
    m_prog p[4];
    const void *tdata;
    size_t tdsize;
    int set_hash;
    uint64_t hash;
    uint32_t io_tiles;      /* num_io_tiles (0 by default) */
    uint32_t num_ipus;      /* 0: 1 */
    uint32_t nst, st_flags; /* stage table (manual sharding): count, flags */
    uint32_t st[4][3];      /* program id, ipu, copy program id */
    uint16_t nattr[4][4];   /* attributes of instruction [i] of program p[k]: [k][i] */
    int64_t attr[4][4][4];
} m_model;

static M_UNUSED void put32(uint8_t *p, uint32_t v) {
    memcpy(p, &v, 4);
} /* tests run little-endian */
static M_UNUSED void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

static M_UNUSED uint64_t tensor_nbytes(const m_tensor *t) {
    uint64_t n = t->dtype == IPU_DTYPE_UINT32 || t->dtype == IPU_DTYPE_FLOAT32 ||
                         t->dtype == IPU_DTYPE_INT32
                     ? 4
                     : 1;
    for (uint32_t d = 0; d < t->ndim; d++) n *= (uint64_t)t->dims[d];
    return n;
}

static M_UNUSED size_t encode_metadata(const m_model *m, uint8_t *buf) {
    size_t strings = 0;
    for (uint32_t i = 0; i < m->na; i++) strings += strlen(m->a[i].name);
    put32(buf + 0, 2);
    put32(buf + 4, m->num_ipus ? m->num_ipus : 1);
    put32(buf + 8, 1);
    put32(buf + 12, m->bps);
    put32(buf + 16, m->io_tiles);
    put32(buf + 20, m->nt);
    put32(buf + 24, m->na);
    put32(buf + 28, m->nsub);
    put32(buf + 32, m->load);
    put32(buf + 36, m->index_anchor);
    put64(buf + 40, m->arena);
    put32(buf + 48, (uint32_t)strings);
    put32(buf + 52, m->nst);
    size_t o = 56;
    for (uint32_t s = 0; s < m->nsub; s++, o += 4) put32(buf + o, m->main[s]);
    if (m->nst) {
        put32(buf + o, m->st_flags);
        o += 4;
        for (uint32_t k = 0; k < m->nst; k++)
            for (int j = 0; j < 3; j++, o += 4) put32(buf + o, m->st[k][j]);
    }
    o = (o + 7) & ~(size_t)7;
    for (uint32_t i = 0; i < m->nt; i++, o += 96) {
        const m_tensor *t = &m->t[i];
        put32(buf + o, t->dtype);
        put32(buf + o + 4, t->ndim);
        put32(buf + o + 8, t->loc);
        put32(buf + o + 12, 0);
        put64(buf + o + 16, t->offset);
        put64(buf + o + 24, tensor_nbytes(t));
        for (int d = 0; d < 8; d++) put64(buf + o + 32 + 8 * (size_t)d, (uint64_t)t->dims[d]);
    }
    uint32_t soff = 0;
    for (uint32_t i = 0; i < m->na; i++, o += 24) {
        const m_anchor *a = &m->a[i];
        uint32_t len = (uint32_t)strlen(a->name);
        put32(buf + o, soff);
        put32(buf + o + 4, len);
        put32(buf + o + 8, a->dir);
        put32(buf + o + 12, a->tensor);
        put32(buf + o + 16, a->subgraph);
        put32(buf + o + 20, a->flags);
        soff += len;
    }
    for (uint32_t i = 0; i < m->na; i++) {
        size_t len = strlen(m->a[i].name);
        memcpy(buf + o, m->a[i].name, len);
        o += len;
    }
    while (o % 8) buf[o++] = 0;
    return o;
}

static M_UNUSED size_t encode_program(const m_model *m, uint32_t pi, uint8_t *buf) {
    const m_prog *p = &m->p[pi];
    put32(buf, p->n);
    put32(buf + 4, 0);
    size_t o = 8;
    for (uint32_t i = 0; i < p->n; i++) {
        const m_instr *in = &p->ins[i];
        uint16_t op = in->op, zero = 0, nattr = m->nattr[pi][i];
        memcpy(buf + o, &op, 2);
        buf[o + 2] = in->nin;
        buf[o + 3] = in->nout;
        memcpy(buf + o + 4, &nattr, 2);
        memcpy(buf + o + 6, &zero, 2);
        o += 8;
        uint32_t nops = (uint32_t)in->nin + in->nout;
        for (uint32_t k = 0; k < nops; k++, o += 4) put32(buf + o, in->ops[k]);
        if (nops % 2) {
            put32(buf + o, 0);
            o += 4;
        }
        for (uint32_t k = 0; k < nattr; k++, o += 8) put64(buf + o, (uint64_t)m->attr[pi][i][k]);
    }
    return o;
}

static M_UNUSED ipu_status model_writer(const m_model *m, ipu_container_writer **out) {
    static uint8_t buf[1 << 16];
    ipu_container_writer *w = NULL;
    ipu_status st = ipu_container_writer_create(&w);
    if (st) return st;
    memset(buf, 0, sizeof buf);
    size_t n = encode_metadata(m, buf);
    st = ipu_container_writer_add_blob(w, IPU_BLOB_METADATA, 0, NULL, buf, n);
    for (uint32_t i = 0; i < m->np && st == IPU_OK; i++) {
        memset(buf, 0, sizeof buf);
        n = encode_program(m, i, buf);
        st = ipu_container_writer_add_blob(w, IPU_BLOB_PROGRAM, m->p[i].id, NULL, buf, n);
    }
    if (st == IPU_OK && m->tdata)
        st = ipu_container_writer_add_blob(w, IPU_BLOB_TENSOR_DATA, 0, NULL, m->tdata, m->tdsize);
    if (m->set_hash) ipu_container_writer_set_compiler_hash(w, m->hash);
    if (st) {
        ipu_container_writer_destroy(w);
        return st;
    }
    *out = w;
    return IPU_OK;
}

static M_UNUSED ipu_status build(const m_model *m, ipu_container **c_out, ipu_executable **e_out) {
    ipu_container_writer *w;
    void *data = NULL;
    size_t size = 0;
    ipu_status st = model_writer(m, &w);
    if (st) return st;
    st = ipu_container_writer_finish(w, &data, &size);
    ipu_container_writer_destroy(w);
    if (st) return st;
    st = ipu_container_open_memory(data, size, c_out);
    ipu_free(data);
    if (st) return st;
    st = ipu_executable_create(*c_out, e_out);
    if (st) {
        ipu_container_destroy(*c_out);
        *c_out = NULL;
    }
    return st;
}

enum {
    F32 = IPU_DTYPE_FLOAT32,
    U32 = IPU_DTYPE_UINT32,
    I32 = IPU_DTYPE_INT32,
    ARENA = IPU_LOC_ARENA,
    TDATA = IPU_LOC_TENSOR_DATA,
    IN = IPU_DIR_INPUT,
    OUT = IPU_DIR_OUTPUT,
    ALL = (int)IPU_NO_INDEX
};

/* Z = X + Y, float32[rows, cols]. */
static M_UNUSED m_model add_model(int64_t rows, int64_t cols, uint32_t bps) {
    m_model m;
    memset(&m, 0, sizeof m);
    uint64_t nb = ((uint64_t)(rows * cols * 4) + 63) & ~(uint64_t)63;
    m.bps = bps;
    m.nsub = 1;
    m.load = 0;
    m.index_anchor = IPU_NO_INDEX;
    m.main[0] = 1;
    m.arena = 3 * nb;
    m.nt = 3;
    m.na = 3;
    m.np = 2;
    for (uint32_t i = 0; i < 3; i++) m.t[i] = (m_tensor){F32, ARENA, i * nb, 2, {rows, cols}};
    m.a[0] = (m_anchor){"X", IN, 0, IPU_NO_INDEX, 0};
    m.a[1] = (m_anchor){"Y", IN, 1, IPU_NO_INDEX, 0};
    m.a[2] = (m_anchor){"Z", OUT, 2, IPU_NO_INDEX, 0};
    m.p[0] = (m_prog){0, 0, {{0}}};
    m.p[1] = (m_prog){1, 1, {{IPU_OP_ADD, 2, 1, {0, 1, 2}}}};
    return m;
}

/* Fused: index (uint32[1]); subgraph 0: Z0 = X0 + Y; subgraph 1: Z1 = X1 * Y; float32[2,3]. */
static M_UNUSED m_model fused_model(void) {
    m_model m;
    memset(&m, 0, sizeof m);
    m.bps = 1;
    m.nsub = 2;
    m.load = 0;
    m.index_anchor = 0;
    m.main[0] = 1;
    m.main[1] = 2;
    m.arena = 6 * 64;
    m.nt = 6;
    m.na = 6;
    m.np = 3;
    m.t[0] = (m_tensor){U32, ARENA, 0, 1, {1}};
    for (uint32_t i = 1; i < 6; i++) m.t[i] = (m_tensor){F32, ARENA, 64 * i, 2, {2, 3}};
    m.a[0] = (m_anchor){"index", IN, 0, IPU_NO_INDEX, 0};
    m.a[1] = (m_anchor){"X0", IN, 1, 0, 0};
    m.a[2] = (m_anchor){"X1", IN, 2, 1, 0};
    m.a[3] = (m_anchor){"Y", IN, 3, IPU_NO_INDEX, 0};
    m.a[4] = (m_anchor){"Z0", OUT, 4, 0, 0};
    m.a[5] = (m_anchor){"Z1", OUT, 5, 1, 0};
    m.p[0] = (m_prog){0, 0, {{0}}};
    m.p[1] = (m_prog){1, 1, {{IPU_OP_ADD, 2, 1, {1, 3, 4}}}};
    m.p[2] = (m_prog){2, 1, {{IPU_OP_MUL, 2, 1, {2, 3, 5}}}};
    return m;
}

typedef struct {
    ipu_container *c;
    ipu_executable *e;
    ipu_runtime *rt;
} fixture;

static M_UNUSED ipu_status fx_open(fixture *f, const m_model *m, const ipu_runtime_config *cfg) {
    memset(f, 0, sizeof *f);
    ipu_status st = build(m, &f->c, &f->e);
    if (st == IPU_OK) st = ipu_runtime_create(f->e, cfg, &f->rt);
    return st;
}

static M_UNUSED void fx_close(fixture *f) {
    ipu_runtime_destroy(f->rt);
    ipu_executable_destroy(f->e);
    ipu_container_destroy(f->c);
}

static M_UNUSED ipu_runtime_config cfg_threads(uint32_t nth) {
    ipu_runtime_config c = ipu_runtime_config_default();
    c.num_threads = nth;
    return c;
}

/* Submit Z = X + Y for N batches of `n` floats each. */
static M_UNUSED ipu_status submit_add(ipu_runtime *rt, uint32_t N, const float *x, const float *y,
                                      float *z, ipu_request_done_fn done, void *ud,
                                      ipu_request **out) {
    const void *ins[3] = {x, y, NULL};
    void *outs[3] = {NULL, NULL, z};
    ipu_request_desc d = {.num_batches = N,
                          .inputs = ins,
                          .outputs = outs,
                          .subgraph = IPU_NO_INDEX,
                          .done = done,
                          .user_data = ud};
    return ipu_runtime_submit(rt, &d, out);
}

static M_UNUSED uint32_t rng_next(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

#endif
