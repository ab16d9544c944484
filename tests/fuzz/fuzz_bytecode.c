/* libFuzzer target: the bytecode decoder and verifier (ipu_executable_create), then the
 * verified programs themselves.
 *
 * Input: length-prefixed sections (u32 length, bytes): METADATA, TENSOR_DATA (omitted when
 * empty), then up to 16 programs whose ids are 0, 1, 2, ... in order. The seeds are real
 * compiled models cut into these sections (tests/fuzz/make_seeds.py).
 *
 * What the verifier accepts must be safe to run: when the arena is at most 1 MiB, the harness
 * runs the Load program and then every other program once, single-threaded, on an arena filled
 * with the input's bytes (so index tensors hold arbitrary values). Run-time statuses are fine;
 * ASan/UBSan reports are not. */
#include "fuzz_common.h"
#include "interp/interp.h"

#define MAX_PROGRAMS 16u
#define MAX_ARENA ((uint64_t)1 << 20)

static void run_program(const ipu_executable *e, const ipu__frame *f, uint32_t p, void *scratch) {
    const ipu__program *pr = &e->programs[p];
    for (uint32_t i = 0; i < pr->n_instr; i++) {
        size_t work = ipu__instr_work(e, &pr->instr[i]);
        if (work && ipu__instr_run(f, &pr->instr[i], 0, work, scratch) != IPU_OK) return;
    }
}

static void run(const ipu_executable *e, const uint8_t *data, size_t size) {
    const ipu_executable_info *in = &e->info;
    if (in->arena_size > MAX_ARENA) return;
    size_t arena_bytes = in->arena_size ? (size_t)in->arena_size : 64;
    uint8_t *arena = aligned_alloc(64, arena_bytes);
    void **ptr = calloc(in->num_tensors ? in->num_tensors : 1, sizeof *ptr);
    void *scratch = aligned_alloc(64, IPU__WORKER_SCRATCH_BYTES);
    if (arena && ptr && scratch) {
        for (size_t i = 0; i < arena_bytes; i++) arena[i] = size ? data[i % size] : 0;
        for (uint32_t t = 0; t < in->num_tensors; t++) {
            const ipu__tensor *T = &e->tensors[t];
            ptr[t] = T->loc == IPU_LOC_ARENA ? (void *)(arena + T->offset)
                                             : (void *)(e->tensor_data + T->offset);
        }
        ipu__frame f = {.exe = e, .ptr = ptr};
        run_program(e, &f, e->load_program, scratch);
        for (uint32_t p = 0; p < in->num_programs; p++)
            if (p != e->load_program) run_program(e, &f, p, scratch);
    }
    free(scratch);
    free(ptr);
    free(arena);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_MAX_INPUT) return 0;
    fz_sections s = {data, size};
    const uint8_t *meta, *tdata, *prog;
    size_t meta_n, tdata_n, prog_n;
    if (!fz_next(&s, &meta, &meta_n) || !fz_next(&s, &tdata, &tdata_n)) return 0;
    ipu_container_writer *w = NULL;
    if (ipu_container_writer_create(&w) != IPU_OK) return 0;
    FUZZ_CHECK(ipu_container_writer_add_blob_ref(w, IPU_BLOB_METADATA, 0, NULL, meta, meta_n) ==
               IPU_OK);
    if (tdata_n)
        FUZZ_CHECK(ipu_container_writer_add_blob_ref(w, IPU_BLOB_TENSOR_DATA, 0, NULL, tdata,
                                                     tdata_n) == IPU_OK);
    for (uint32_t id = 0; id < MAX_PROGRAMS && fz_next(&s, &prog, &prog_n); id++)
        FUZZ_CHECK(ipu_container_writer_add_blob_ref(w, IPU_BLOB_PROGRAM, id, NULL, prog, prog_n) ==
                   IPU_OK);
    ipu_container *c = fz_finish(w);
    ipu_container_writer_destroy(w);
    if (!c) return 0;
    ipu_executable *e = fz_executable(c);
    if (e) run(e, data, size);
    ipu_executable_destroy(e);
    ipu_container_destroy(c);
    return 0;
}
