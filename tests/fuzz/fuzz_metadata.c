/* libFuzzer target: METADATA parsing and anchor validation (ipu_executable_create).
 *
 * The input is the METADATA blob. The harness wraps it in a container with a 4 KiB zero
 * TENSOR_DATA blob and empty PROGRAM blobs with ids 0..7, so every input reaches the metadata
 * checks (the seeds are the metadata of real models, whose program ids are below 8). */
#include "fuzz_common.h"

#define TENSOR_DATA_BYTES 4096u
#define NUM_PROGRAMS 8u

static const uint8_t tensor_data[TENSOR_DATA_BYTES];
static const uint8_t empty_program[8];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_MAX_INPUT) return 0;
    ipu_container_writer *w = NULL;
    if (ipu_container_writer_create(&w) != IPU_OK) return 0;
    ipu_status st = ipu_container_writer_add_blob_ref(w, IPU_BLOB_METADATA, 0, NULL,
                                                      size ? data : NULL, size);
    FUZZ_CHECK(st == IPU_OK);
    st = ipu_container_writer_add_blob_ref(w, IPU_BLOB_TENSOR_DATA, 0, NULL, tensor_data,
                                           sizeof tensor_data);
    FUZZ_CHECK(st == IPU_OK);
    for (uint32_t id = 0; id < NUM_PROGRAMS; id++) {
        st = ipu_container_writer_add_blob_ref(w, IPU_BLOB_PROGRAM, id, NULL, empty_program,
                                               sizeof empty_program);
        FUZZ_CHECK(st == IPU_OK);
    }
    ipu_container *c = fz_finish(w);
    ipu_container_writer_destroy(w);
    if (!c) return 0;
    ipu_executable_destroy(fz_executable(c));
    ipu_container_destroy(c);
    return 0;
}
