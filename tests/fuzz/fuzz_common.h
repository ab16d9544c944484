/* Shared by the libFuzzer targets in tests/fuzz/ (one translation unit each).
 *
 * Every target defines LLVMFuzzerTestOneInput. Built with clang -fsanitize=fuzzer it is a
 * libFuzzer binary (.ci/fuzz.sh); linked with replay_main.c it is a plain program that replays
 * files and directories (the seed corpus and every regression file, under meson test).
 *
 * FUZZ_CHECK states an invariant of the library (not of the input): a failure traps, so the
 * fuzzer reports it like a crash. */
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ipu.h"

#define FUZZ_CHECK(cond)               \
    do {                               \
        if (!(cond)) __builtin_trap(); \
    } while (0)

/* Inputs above this size are ignored (libFuzzer's -max_len keeps them smaller anyway). */
#define FUZZ_MAX_INPUT ((size_t)1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static inline uint32_t fz_ld_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void fz_st_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Length-prefixed sections: u32 length, then that many bytes; repeated. */
typedef struct fz_sections {
    const uint8_t *p;
    size_t left;
} fz_sections;

static inline int fz_next(fz_sections *s, const uint8_t **out, size_t *len) {
    if (s->left < 4) return 0;
    uint32_t n = fz_ld_u32(s->p);
    if (n > s->left - 4) return 0;
    *out = s->p + 4;
    *len = n;
    s->p += 4 + (size_t)n;
    s->left -= 4 + (size_t)n;
    return 1;
}

/* Serialise `w` and open the image. The writer's contract is that the reader accepts anything
 * it wrote, so a failure of either step other than running out of memory is a bug. */
static inline ipu_container *fz_finish(ipu_container_writer *w) {
    void *img = NULL;
    size_t n = 0;
    ipu_status st = ipu_container_writer_finish(w, &img, &n);
    FUZZ_CHECK(st == IPU_OK || st == IPU_ERR_NOMEM);
    if (st != IPU_OK) return NULL;
    ipu_container *c = NULL;
    st = ipu_container_open_memory(img, n, &c);
    free(img);
    FUZZ_CHECK(st == IPU_OK || st == IPU_ERR_NOMEM);
    return st == IPU_OK ? c : NULL;
}

/* Accessors of a valid executable: every anchor is found again by its name. */
static inline void fz_walk_executable(const ipu_executable *e) {
    ipu_executable_info info;
    ipu_executable_get_info(e, &info);
    for (uint32_t i = 0; i < info.num_anchors; i++) {
        ipu_anchor_info a;
        FUZZ_CHECK(ipu_executable_anchor(e, i, &a) == IPU_OK);
        uint32_t found = 0;
        FUZZ_CHECK(ipu_executable_find_anchor(e, a.name, &found) == IPU_OK && found == i);
        FUZZ_CHECK(a.tensor < info.num_tensors && a.desc.ndim <= IPU_MAX_DIMS);
    }
    for (uint32_t t = 0; t < info.num_tensors; t++) {
        ipu_tensor_desc d;
        FUZZ_CHECK(ipu_executable_tensor(e, t, &d) == IPU_OK);
        FUZZ_CHECK(d.nbytes == 0 || ipu_dtype_size(d.dtype) != 0);
    }
    for (uint32_t s = 0; s < info.num_subgraphs; s++) {
        uint32_t id;
        FUZZ_CHECK(ipu_executable_main_program(e, s, &id) == IPU_OK);
    }
    for (uint32_t s = 0; s < info.num_stages; s++) {
        ipu_stage_info si;
        FUZZ_CHECK(ipu_executable_stage(e, s, &si) == IPU_OK && si.ipu < info.num_ipus);
    }
    for (uint32_t p = 0; p < info.num_programs; p++) {
        ipu_program_info pi;
        FUZZ_CHECK(ipu_executable_program(e, p, &pi) == IPU_OK);
        for (uint32_t i = 0; i < pi.num_instructions; i++) {
            ipu_instruction_info ii;
            FUZZ_CHECK(ipu_executable_instruction(e, p, i, &ii) == IPU_OK);
            uint32_t lo, hi, no;
            FUZZ_CHECK(ipu_opcode_arity(ii.opcode, &lo, &hi, &no) == IPU_OK);
            FUZZ_CHECK(ii.num_inputs >= lo && ii.num_inputs <= hi && ii.num_outputs == no);
            for (uint32_t k = 0; k < ii.num_inputs; k++)
                FUZZ_CHECK(ii.inputs[k] < info.num_tensors);
        }
    }
}

/* ipu_executable_create on `c`: NULL with a load status (e left NULL) when it fails, else the
 * executable after fz_walk_executable. */
static inline ipu_executable *fz_executable(const ipu_container *c) {
    ipu_executable *e = NULL;
    ipu_status st = ipu_executable_create(c, &e);
    if (st != IPU_OK) {
        FUZZ_CHECK(e == NULL);
        FUZZ_CHECK(st == IPU_ERR_CORRUPT || st == IPU_ERR_BAD_PROGRAM || st == IPU_ERR_NOMEM);
        return NULL;
    }
    fz_walk_executable(e);
    return e;
}

#endif
