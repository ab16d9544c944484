/* Executable tests: the instruction verifier's error cases, and real containers (writer ->
 * reader -> ipu_executable_create) that are run, plus malformed metadata and bad programs. */
#include "kernel_harness.h"

/* ---- verifier errors ---------------------------------------------------------------------- */

static void expect_bad(ipu_status st, const char *needle) {
    CHECK(st == IPU_ERR_BAD_PROGRAM && strstr(ipu_last_error_message(), needle),
          "want BAD_PROGRAM with \"%s\", got %s: %s", needle, ipu_status_name(st),
          ipu_last_error_message());
}

static void test_verifier(void) {
    H *h = h_new(1 << 20);
    uint32_t a = T(h, FLOAT32, 2, 3, 4), b = T(h, FLOAT32, 2, 5, 6), y = T(h, FLOAT32, 2, 3, 6);
    uint32_t bi = T(h, INT32, 2, 4, 6), bj = T(h, INT32, 2, 4, 6), v = T(h, FLOAT32, 3),
             w = T(h, FLOAT32, 4);
    uint32_t g1 = T(h, FLOAT32, 3, 4), g2 = T(h, FLOAT32, 5, 6), gy = T(h, FLOAT32, 3, 6);
    expect_bad(verify_only(h, IPU_OP_MATMUL, 2, (uint32_t[]){a, b}, y, 0, NULL),
               "program 7 instruction 3 (matmul): inner dims differ: a[...,K=4] vs b[K=5,...]");
    expect_bad(verify_only(h, IPU_OP_MATMUL, 2, (uint32_t[]){a, bi}, y, 0, NULL), "dtype int32");
    expect_bad(verify_only(h, IPU_OP_ADD, 2, (uint32_t[]){a, b}, y, 0, NULL), "do not broadcast");
    expect_bad(verify_only(h, IPU_OP_ADD, 2, (uint32_t[]){v, w}, y, 0, NULL), "do not broadcast");
    expect_bad(verify_only(h, IPU_OP_ADD, 2, (uint32_t[]){a, v}, a, 0, NULL), "overlaps");
    expect_bad(verify_only(h, IPU_OP_ADD, 1, (uint32_t[]){a}, y, 0, NULL),
               "1 inputs, expected 2..2");
    expect_bad(verify_only(h, IPU_OP_ADD, 2, (uint32_t[]){a, 99}, y, 0, NULL), "out of range");
    expect_bad(verify_only(h, (ipu_opcode)99, 1, (uint32_t[]){a}, y, 0, NULL), "unknown opcode 99");
    expect_bad(verify_only(h, IPU_OP_RELU, 1, (uint32_t[]){a}, y, 1, (int64_t[]){0}),
               "1 attributes, expected 0");
    expect_bad(verify_only(h, IPU_OP_TRANSPOSE, 1, (uint32_t[]){a}, y, 3, (int64_t[]){0, 0, 1}),
               "permutation");
    expect_bad(verify_only(h, IPU_OP_CONCAT, 1, (uint32_t[]){a}, y, 1, (int64_t[]){3}),
               "axis 3 out of range");
    expect_bad(verify_only(h, IPU_OP_REDUCE_SUM, 1, (uint32_t[]){a}, v, 3, (int64_t[]){3, 4, 2}),
               "numel");
    expect_bad(verify_only(h, IPU_OP_SOFTMAX, 1, (uint32_t[]){bi}, bj, 3, (int64_t[]){1, 24, 1}),
               "not float32/float16");
    expect_bad(verify_only(h, IPU_OP_GEMM, 2, (uint32_t[]){g1, g2}, gy, 4, (int64_t[]){1, 0, 0, 0}),
               "inner dims differ");
    expect_bad(verify_only(h, IPU_OP_GEMM, 2, (uint32_t[]){g1, g2}, gy, 4, (int64_t[]){2, 0, 0, 0}),
               "transA must be 0 or 1");
    expect_bad(verify_only(h, IPU_OP_EXPAND, 1, (uint32_t[]){w}, y, 0, NULL), "does not broadcast");
    expect_bad(verify_only(h, IPU_OP_COPY, 1, (uint32_t[]){a}, y, 0, NULL), "bytes");
    expect_bad(verify_only(h, IPU_OP_BIND, 0, NULL, y, 0, NULL), "BIND outside the Load program");
    /* UNARY / BINARY / WHERE */
    uint32_t bb = T(h, BOOL, 2, 4, 6), bc = T(h, BOOL, 2, 4, 6), cy = T(h, INT32, 2, 4, 6);
    expect_bad(verify_only(h, IPU_OP_UNARY, 1, (uint32_t[]){bi}, bj, 3, (int64_t[]){99, 0, 0}),
               "unknown unary function 99");
    expect_bad(verify_only(h, IPU_OP_UNARY, 1, (uint32_t[]){bi}, bj, 3,
                           (int64_t[]){IPU__UN_EXP, 0, 0}),
               "does not take dtype int32");
    expect_bad(verify_only(h, IPU_OP_UNARY, 1, (uint32_t[]){bi}, bj, 1, (int64_t[]){IPU__UN_NEG}),
               "1 attributes, expected 3");
    expect_bad(verify_only(h, IPU_OP_UNARY, 1, (uint32_t[]){bi}, bb, 3,
                           (int64_t[]){IPU__UN_NEG, 0, 0}),
               "dtype");
    expect_bad(verify_only(h, IPU_OP_BINARY, 2, (uint32_t[]){bi, bj}, cy, 1,
                           (int64_t[]){IPU__BIN_LESS}),
               "expected int32, int32 -> bool");
    expect_bad(verify_only(h, IPU_OP_BINARY, 2, (uint32_t[]){bi, bj}, cy, 1,
                           (int64_t[]){IPU__BIN_AND}),
               "does not take dtype int32");
    /* element-wise functions of the integer / classification kinds */
    uint32_t vb = T(h, BOOL, 3), v2 = T(h, FLOAT32, 3), vb2 = T(h, BOOL, 3);
    expect_bad(verify_only(h, IPU_OP_BINARY, 2, (uint32_t[]){v, v}, v2, 1,
                           (int64_t[]){IPU__BIN_BITWISE_AND}),
               "binary function 15 does not take dtype float32");
    expect_bad(verify_only(h, IPU_OP_BINARY, 2, (uint32_t[]){vb, vb}, vb2, 1,
                           (int64_t[]){IPU__BIN_BITSHIFT_LEFT}),
               "does not take dtype bool");
    expect_bad(verify_only(h, IPU_OP_UNARY, 1, (uint32_t[]){v}, v2, 3,
                           (int64_t[]){IPU__UN_ISNAN, 0, 0}),
               "output dtype float32, expected bool");
    expect_bad(verify_only(h, IPU_OP_UNARY, 1, (uint32_t[]){v}, v2, 3,
                           (int64_t[]){IPU__UN_BITWISE_NOT, 0, 0}),
               "does not take dtype float32");
    CHECK(verify_only(h, IPU_OP_UNARY, 1, (uint32_t[]){v}, vb, 3,
                      (int64_t[]){IPU__UN_ISINF, 0, 0}) == IPU_OK,
          "isinf ok");
    CHECK(verify_only(h, IPU_OP_BINARY, 2, (uint32_t[]){bi, bj}, cy, 1,
                      (int64_t[]){IPU__BIN_POW}) == IPU_OK,
          "int pow ok");
    CHECK(verify_only(h, IPU_OP_BINARY, 2, (uint32_t[]){v, v}, v2, 1, (int64_t[]){IPU__BIN_MOD}) ==
              IPU_OK,
          "float mod ok");
    expect_bad(verify_only(h, IPU_OP_BINARY, 2, (uint32_t[]){bi, bj}, cy, 1,
                           (int64_t[]){IPU__BIN_COUNT}),
               "unknown binary function");
    expect_bad(verify_only(h, IPU_OP_BINARY, 2, (uint32_t[]){a, v}, y, 1,
                           (int64_t[]){IPU__BIN_MIN}),
               "not the broadcast");
    expect_bad(verify_only(h, IPU_OP_WHERE, 3, (uint32_t[]){bi, bj, bj}, cy, 0, NULL),
               "expected (bool, T, T) -> T");
    expect_bad(verify_only(h, IPU_OP_WHERE, 3, (uint32_t[]){v, w, w}, y, 0, NULL),
               "expected (bool, T, T) -> T");
    CHECK(verify_only(h, IPU_OP_WHERE, 3, (uint32_t[]){bb, bi, bj}, cy, 0, NULL) == IPU_OK,
          "where ok");
    CHECK(verify_only(h, IPU_OP_BINARY, 2, (uint32_t[]){bi, bj}, bc, 1,
                      (int64_t[]){IPU__BIN_EQUAL}) == IPU_OK,
          "equal ok");
    h->t[w].loc = IPU_LOC_TENSOR_DATA;
    expect_bad(verify_only(h, IPU_OP_RELU, 1, (uint32_t[]){v}, w, 0, NULL),
               "writes TENSOR_DATA tensor");
    /* COPY onto identical storage is allowed (no-op) */
    CHECK(verify_only(h, IPU_OP_COPY, 1, (uint32_t[]){a}, a, 0, NULL) == IPU_OK, "copy in place");
    h_free(h);
}

/* ---- containers --------------------------------------------------------------------------- */

typedef struct prog_buf {
    uint8_t b[2048];
    size_t n;
    uint32_t count;
} prog_buf;

static void pb_add(prog_buf *p, uint16_t op, uint8_t nin, const uint32_t *ops, uint8_t nout,
                   uint16_t nattr, const int64_t *attr) {
    if (p->n == 0) p->n = 8;
    uint8_t *q = p->b + p->n;
    q[0] = (uint8_t)op;
    q[1] = (uint8_t)(op >> 8);
    q[2] = nin;
    q[3] = nout;
    q[4] = (uint8_t)nattr;
    q[5] = (uint8_t)(nattr >> 8);
    q[6] = q[7] = 0;
    uint32_t nops = (uint32_t)nin + nout, words = nops + (nops & 1);
    for (uint32_t i = 0; i < words; i++) ipu__st_u32(q + 8 + 4 * i, i < nops ? ops[i] : 0);
    for (uint32_t i = 0; i < nattr; i++) ipu__st_u64(q + 8 + 4 * words + 8 * i, (uint64_t)attr[i]);
    p->n += 8 + 4 * words + 8 * (size_t)nattr;
    ipu__st_u32(p->b, ++p->count);
    ipu__st_u32(p->b + 4, 0);
}

/* Model: y = relu(x @ W + bias); W, bias in TENSOR_DATA. Tensors:
 * 0 x f32[4,8] arena@0, 1 W f32[8,16] data@0, 2 bias f32[16] data@512, 3 h f32[4,16] arena@128,
 * 4 h2 arena@384, 5 y arena@640. Anchors "x" (in), "y" (out), "W" (in, tensor data).
 * Programs: id 5 = Load (BIND 1, BIND 2), id 9 = Main. `mut` selects a corruption. */
enum { MT_OFF = 64, MA_OFF = 64 + 6 * 96, MS_OFF = MA_OFF + 3 * 24, META_SIZE = MS_OFF + 8 };

static ipu_status build(int mut, ipu_container **cout, ipu_executable **eout, float *wdata) {
    uint8_t meta[META_SIZE + 64];
    size_t msize = META_SIZE;
    memset(meta, 0, sizeof meta);
    uint32_t hdr[14] = {2, 1, 1, 4, 0, 6, 3, 1, 5, IPU_NO_INDEX};
    for (int i = 0; i < 10; i++) ipu__st_u32(meta + 4 * i, hdr[i]);
    ipu__st_u64(meta + 40, 1024);
    ipu__st_u32(meta + 48, 3); /* strings "xyW" */
    ipu__st_u32(meta + 56, 9);
    struct {
        uint32_t loc;
        uint64_t off;
        uint32_t nd;
        int64_t d0, d1;
    } ts[6] = {{1, 0, 2, 4, 8},    {2, 0, 2, 8, 16},   {2, 512, 1, 16, 0},
               {1, 128, 2, 4, 16}, {1, 384, 2, 4, 16}, {1, 640, 2, 4, 16}};
    for (int i = 0; i < 6; i++) {
        uint8_t *t = meta + MT_OFF + 96 * i;
        ipu__st_u32(t, IPU_DTYPE_FLOAT32);
        ipu__st_u32(t + 4, ts[i].nd);
        ipu__st_u32(t + 8, ts[i].loc);
        ipu__st_u64(t + 16, ts[i].off);
        ipu__st_u64(t + 24, (uint64_t)(ts[i].d0 * (ts[i].nd == 2 ? ts[i].d1 : 1) * 4));
        ipu__st_u64(t + 32, (uint64_t)ts[i].d0);
        if (ts[i].nd == 2) ipu__st_u64(t + 40, (uint64_t)ts[i].d1);
    }
    uint32_t an[3][6] = {{0, 1, 1, 0, IPU_NO_INDEX, 0},
                         {1, 1, 2, 5, 0, 0},
                         {2, 1, 1, 1, IPU_NO_INDEX, 1}};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 6; k++) ipu__st_u32(meta + MA_OFF + 24 * i + 4 * k, an[i][k]);
    memcpy(meta + MS_OFF, "xyW", 3);
    prog_buf load = {0}, main = {0};
    if (mut == 46) pb_add(&load, IPU_OP_EXPAND, 1, (uint32_t[]){2, 4}, 1, 0, NULL);
    if (mut != 44) pb_add(&load, IPU_OP_BIND, 0, (uint32_t[]){1}, 1, 0, NULL);
    if (mut != 44 && mut != 45) pb_add(&load, IPU_OP_BIND, 0, (uint32_t[]){2}, 1, 0, NULL);
    if (mut == 47) pb_add(&load, IPU_OP_EXPAND, 1, (uint32_t[]){2, 4}, 1, 0, NULL);
    if (load.n == 0) load.n = 8; /* no instructions: the header alone */
    pb_add(&main, IPU_OP_MATMUL, 2, (uint32_t[]){0, 1, 3}, 1, 0, NULL);
    pb_add(&main, IPU_OP_ADD, 2, (uint32_t[]){3, 2, 4}, 1, 0, NULL);
    pb_add(&main, IPU_OP_RELU, 1, (uint32_t[]){4, 5}, 1, 0, NULL);
    switch (mut) {
        case 1: ipu__st_u32(meta, 3); break;                          /* ipu_version */
        case 2: ipu__st_u32(meta + MT_OFF + 96 * 3 + 4, 9); break;    /* ndim 9 */
        case 3: ipu__st_u64(meta + MT_OFF + 96 * 3 + 24, 260); break; /* nbytes */
        case 4: ipu__st_u64(meta + MT_OFF + 96 * 3 + 16, 160); break; /* unaligned */
        case 5: ipu__st_u64(meta + MT_OFF + 96 * 5 + 16, 832); break; /* beyond arena */
        case 6: memcpy(meta + MS_OFF, "xxW", 3); break;               /* duplicate name */
        case 7: ipu__st_u32(meta + MA_OFF + 4, 0); break;             /* empty name */
        case 8: ipu__st_u32(meta + MA_OFF + 12, 6); break;            /* anchor tensor */
        case 9: msize += 8; break;                                    /* trailing bytes */
        case 10: ipu__st_u32(meta + 52, 1); break;                    /* reserved */
        case 11: ipu__st_u32(meta + 56, 4); break;                    /* main program id */
        case 12: ipu__st_u32(meta + 36, 3); break;                    /* index_anchor */
        case 13: ipu__st_u64(meta + MT_OFF + 96 * 3 + 32, (uint64_t)-4); break; /* negative dim */
        case 14: ipu__st_u32(meta + MA_OFF + 16, 1); break;         /* anchor subgraph */
        case 15: ipu__st_u64(meta + MT_OFF + 96 + 16, 1024); break; /* beyond tensor data */
        case 16: ipu__st_u32(meta + 60, 1); break;                  /* padding */
        case 17:
            ipu__st_u32(meta + MA_OFF + 24 * 2 + 20, 0);
            break; /* weight anchor flag */
        /* roles (test_roles) */
        case 40: ipu__st_u32(meta + 36, 2); break;                  /* index = weight */
        case 41: ipu__st_u32(meta + MA_OFF + 24 * 2 + 8, 2); break; /* output weight */
        case 42: ipu__st_u32(meta + 36, 0); break;                  /* index f32[4,8] */
        case 43:
            ipu__st_u32(meta + 56, 5);
            break; /* Main is Load */
        /* bad programs */
        case 20:
            ipu__st_u64(meta + MT_OFF + 96 + 32, 5);
            ipu__st_u64(meta + MT_OFF + 96 + 24, 320);
            break;
        case 21: main.b[8] = 99; break; /* unknown opcode */
        case 22: main.n -= 8; break;    /* truncated */
        case 23: pb_add(&main, IPU_OP_BIND, 0, (uint32_t[]){1}, 1, 0, NULL); break;
        case 24: pb_add(&main, IPU_OP_RELU, 1, (uint32_t[]){4, 1}, 1, 0, NULL); break;
        case 25: pb_add(&main, IPU_OP_RELU, 1, (uint32_t[]){4, 6}, 1, 0, NULL); break;
        case 26: main.b[14] = 1; break;         /* reserved */
        case 27: ipu__st_u32(main.b, 9); break; /* count too big */
        default: break;
    }
    float tdata[160];
    for (int i = 0; i < 160; i++) tdata[i] = wdata ? wdata[i] : 0;
    uint8_t td[576];
    memset(td, 0, sizeof td);
    memcpy(td, tdata, 512);
    memcpy(td + 512, tdata + 128, 64);
    ipu_container_writer *w = NULL;
    void *img = NULL;
    size_t isz = 0;
    ipu_status st = ipu_container_writer_create(&w);
    if (!st) st = ipu_container_writer_add_blob(w, IPU_BLOB_METADATA, 0, NULL, meta, msize);
    if (!st) st = ipu_container_writer_add_blob(w, IPU_BLOB_PROGRAM, 9, NULL, main.b, main.n);
    if (!st) st = ipu_container_writer_add_blob(w, IPU_BLOB_TENSOR_DATA, 0, NULL, td, sizeof td);
    if (!st) st = ipu_container_writer_add_blob(w, IPU_BLOB_PROGRAM, 5, NULL, load.b, load.n);
    if (!st) st = ipu_container_writer_finish(w, &img, &isz);
    ipu_container_writer_destroy(w);
    if (st) {
        printf("container build failed: %s\n", ipu_last_error_message());
        return st;
    }
    st = ipu_container_open_memory(img, isz, cout);
    ipu_free(img);
    if (st) {
        printf("container open failed: %s\n", ipu_last_error_message());
        return st;
    }
    *eout = NULL;
    return ipu_executable_create(*cout, eout);
}

static void run_program(const ipu_executable *e, uint32_t pidx, void **ptr, void *scratch) {
    ipu__frame f = {.exe = e, .ptr = ptr};
    const ipu__program *p = &e->programs[pidx];
    for (uint32_t i = 0; i < p->n_instr; i++) {
        size_t w = ipu__instr_work(e, &p->instr[i]);
        CHECK(ipu__instr_run(&f, &p->instr[i], 0, w, scratch) == IPU_OK, "program run");
    }
}

static void test_container(void) {
    float wd[160];
    for (int i = 0; i < 160; i++) wd[i] = rndf();
    ipu_container *c = NULL;
    ipu_executable *e = NULL;
    ipu_status st = build(0, &c, &e, wd);
    CHECK(st == IPU_OK, "create: %s", ipu_last_error_message());
    if (st == IPU_OK) {
        ipu_executable_info info;
        ipu_executable_get_info(e, &info);
        CHECK(info.num_tensors == 6 && info.num_anchors == 3 && info.num_programs == 2 &&
                  info.batches_per_step == 4 && info.arena_size == 1024 &&
                  info.index_anchor == IPU_NO_INDEX,
              "info");
        CHECK(ipu_executable_load_program(e) == 5, "load program id");
        uint32_t id = 0, ai = 0;
        CHECK(ipu_executable_main_program(e, 0, &id) == IPU_OK && id == 9, "main program id");
        CHECK(ipu_executable_main_program(e, 1, &id) == IPU_ERR_NOT_FOUND, "main program range");
        CHECK(ipu_executable_find_anchor(e, "W", &ai) == IPU_OK && ai == 2, "find anchor");
        CHECK(ipu_executable_find_anchor(e, "z", &ai) == IPU_ERR_NOT_FOUND, "find missing anchor");
        ipu_anchor_info an;
        CHECK(ipu_executable_anchor(e, 1, &an) == IPU_OK && strcmp(an.name, "y") == 0 &&
                  an.direction == IPU_DIR_OUTPUT && an.tensor == 5 && an.subgraph == 0 &&
                  !an.has_tensor_data && an.desc.ndim == 2 && an.desc.dims[1] == 16 &&
                  an.desc.nbytes == 256,
              "anchor info");
        CHECK(ipu_executable_anchor(e, 2, &an) == IPU_OK && an.has_tensor_data, "weight anchor");
        ipu_tensor_desc td;
        CHECK(ipu_executable_tensor(e, 2, &td) == IPU_OK && td.ndim == 1 && td.dims[0] == 16,
              "tensor");
        ipu_program_info pi;
        ipu_instruction_info ii;
        CHECK(ipu_executable_program(e, 0, &pi) == IPU_OK && pi.id == 9 && pi.num_instructions == 3,
              "program");
        CHECK(ipu_executable_instruction(e, 0, 1, &ii) == IPU_OK && ii.opcode == IPU_OP_ADD &&
                  ii.num_inputs == 2 && ii.inputs[1] == 2 && ii.outputs[0] == 4,
              "instruction");
        CHECK(ipu_executable_instruction(e, 0, 3, &ii) == IPU_ERR_NOT_FOUND, "instruction range");
        /* execute Load then Main */
        uint8_t *arena = aligned_alloc(64, 1024);
        void *scratch = aligned_alloc(64, IPU__WORKER_SCRATCH_BYTES);
        void *ptr[6];
        for (int t = 0; t < 6; t++)
            ptr[t] = e->tensors[t].loc == IPU_LOC_ARENA ? arena + e->tensors[t].offset : NULL;
        float *x = ptr[0];
        for (int i = 0; i < 32; i++) x[i] = rndf();
        run_program(e, e->load_program, ptr, scratch);
        CHECK(ptr[1] != NULL && memcmp(ptr[1], wd, 512) == 0, "BIND points at tensor data");
        run_program(e, e->main_programs[0], ptr, scratch);
        const float *y = ptr[5];
        double worst = 0;
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 16; j++) {
                float s = 0;
                for (int k = 0; k < 8; k++) s += x[i * 8 + k] * wd[k * 16 + j];
                s += wd[128 + j];
                s = s < 0 ? 0 : s;
                double err = fabs(y[i * 16 + j] - s);
                if (err > worst) worst = err;
            }
        CHECK(worst < 1e-4, "container model result err %g", worst);
        free(arena);
        free(scratch);
    }
    ipu_executable_destroy(e);
    ipu_container_destroy(c);
    for (int mut = 1; mut <= 27; mut++) {
        if (mut > 17 && mut < 20) continue;
        c = NULL;
        e = NULL;
        st = build(mut, &c, &e, wd);
        ipu_status want = mut < 20 ? IPU_ERR_CORRUPT : IPU_ERR_BAD_PROGRAM;
        CHECK(st == want && e == NULL, "mutation %d: got %s (%s)", mut, ipu_status_name(st),
              ipu_last_error_message());
        if (mut == 20)
            CHECK(
                strstr(
                    ipu_last_error_message(),
                    "program 9 instruction 0 (matmul): inner dims differ: a[...,K=8] vs b[K=5,...]") !=
                    NULL,
                "message: %s", ipu_last_error_message());
        ipu_executable_destroy(e);
        ipu_container_destroy(c);
    }
}

/* Properties of the whole executable the runtime relies on: anchor roles and where they live,
 * and every weight an instruction reads bound by the Load program before the read. */
static void test_roles(void) {
    static const struct {
        int mut;
        ipu_status want;
        const char *msg;
    } cases[] = {
        {40, IPU_ERR_CORRUPT, "metadata: index_anchor 2 is a TENSOR_DATA anchor (a weight)"},
        {41, IPU_ERR_CORRUPT,
         "metadata: anchor 2: a TENSOR_DATA anchor (a weight) must be an input"},
        {42, IPU_ERR_CORRUPT,
         "metadata: index_anchor 0: tensor 0 is float32 with 32 elements, not one integer"},
        {43, IPU_ERR_CORRUPT, "metadata: main program 5 of subgraph 0 is the Load program"},
        {44, IPU_ERR_BAD_PROGRAM,
         "program 9 instruction 0 (matmul): input 1 reads TENSOR_DATA tensor 1, which the Load program does not BIND"},
        {45, IPU_ERR_BAD_PROGRAM,
         "program 9 instruction 1 (add): input 1 reads TENSOR_DATA tensor 2, which the Load program does not BIND"},
        {46, IPU_ERR_BAD_PROGRAM,
         "program 5 instruction 0 (expand): input 0 reads TENSOR_DATA tensor 2, which the Load program does not BIND before it"},
        {47, IPU_OK, ""},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ipu_container *c = NULL;
        ipu_executable *e = NULL;
        ipu_status st = build(cases[k].mut, &c, &e, NULL);
        CHECK(st == cases[k].want && (st == IPU_OK) == (e != NULL) &&
                  strstr(ipu_last_error_message(), cases[k].msg) != NULL,
              "roles %d: got %s (%s)", cases[k].mut, ipu_status_name(st), ipu_last_error_message());
        ipu_executable_destroy(e);
        ipu_container_destroy(c);
    }
}

/* ---- ipu_packed_unpack ---------------------------------------------------------------------- */

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* A version-2 payload with one entry: B [3, 5] of tensor 7 in B panels of width 4. */
static void test_packed_unpack(void) {
    enum { K = 3, N = 5, NR = 4, PANELS = 2, AT = 16 + 96 };
    _Alignas(64) uint8_t p[AT + PANELS * NR * K * 4];
    float b[K * N], packed[PANELS * NR * K], got[K * N]; /* (the host's float bytes) */
    memset(p, 0, sizeof p);
    memset(packed, 0, sizeof packed);
    for (int i = 0; i < K * N; i++) b[i] = (float)i * 0.25f - 1.0f;
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++) packed[j / NR * K * NR + k * NR + j % NR] = b[k * N + j];
    memcpy(p, "PYIPUPK", 8);
    put_u32(p + 8, IPU_PACKED_VERSION);
    put_u32(p + 12, 1);
    uint8_t *r = p + 16;
    put_u32(r + 12, 2); /* layout 2 */
    put_u32(r + 16, 1);
    put_u32(r + 20, 2);
    put_u32(r + 24, NR);
    put_u32(r + 28, 256);
    put_u32(r + 40, 7);
    put_u64(r + 48, AT);
    put_u64(r + 56, sizeof packed);
    put_u64(r + 64, 1);
    put_u64(r + 72, K);
    put_u64(r + 80, N);
    memcpy(p + AT, packed, sizeof packed);
    CHECK(ipu_packed_unpack(p, sizeof p, 7, got, sizeof got) == IPU_OK &&
              memcmp(got, b, sizeof b) == 0,
          "B panels unpacked exactly: %s", ipu_last_error_message());
    CHECK(ipu_packed_unpack(p, sizeof p, 6, got, sizeof got) == IPU_ERR_NOT_FOUND, "tensor 6");
    CHECK(ipu_packed_unpack(p, sizeof p, 7, got, sizeof got - 4) == IPU_ERR_CORRUPT, "nbytes");
    CHECK(ipu_packed_unpack(p + 1, sizeof p - 1, 7, got, sizeof got) == IPU_ERR_INVALID_ARGUMENT,
          "misaligned payload");
    CHECK(ipu_packed_unpack(p, sizeof p - 4, 7, got, sizeof got) == IPU_ERR_CORRUPT, "cut short");
    put_u32(r + 44, 1); /* trans: stored [N, K], the same bytes read as the transpose */
    CHECK(ipu_packed_unpack(p, sizeof p, 7, got, sizeof got) == IPU_ERR_CORRUPT,
          "trans: B [5, 3], one panel of 5 rows, is another size");
    put_u32(r + 44, 0);
    put_u32(r + 12, 3); /* Winograd: not invertible */
    CHECK(ipu_packed_unpack(p, sizeof p, 7, got, sizeof got) == IPU_ERR_CORRUPT, "layout 3");
}

int main(void) {
    test_verifier();
    test_container();
    test_roles();
    test_packed_unpack();
    return check_summary();
}
