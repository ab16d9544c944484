/* libFuzzer target: the container reader (ipu_container_open_memory), the writer, and the
 * whole load path of an accepted container (ipu_executable_create).
 *
 * Each input is parsed twice: as it is, and with its header's file_size and checksum fixed up
 * so that mutations reach the blob table and the blobs instead of stopping at the checksum.
 * A container the reader accepts must round-trip through the writer to the same blobs. */
#include "fuzz_common.h"

static void check_round_trip(const ipu_container *c) {
    uint32_t n = ipu_container_blob_count(c);
    ipu_container_writer *w = NULL;
    if (ipu_container_writer_create(&w) != IPU_OK) return;
    ipu_container_writer_set_compiler_hash(w, ipu_container_compiler_hash(c));
    for (uint32_t i = 0; i < n; i++) {
        ipu_blob_info b;
        FUZZ_CHECK(ipu_container_blob(c, i, &b) == IPU_OK);
        ipu_status st = ipu_container_writer_add_blob_ref(w, b.type, b.id, b.name, b.data,
                                                          (size_t)b.size);
        FUZZ_CHECK(st == IPU_OK);
    }
    ipu_container *again = fz_finish(w);
    if (again) {
        FUZZ_CHECK(ipu_container_blob_count(again) == n);
        FUZZ_CHECK(ipu_container_compiler_hash(again) == ipu_container_compiler_hash(c));
        for (uint32_t i = 0; i < n; i++) {
            ipu_blob_info a, b;
            FUZZ_CHECK(ipu_container_blob(c, i, &a) == IPU_OK);
            FUZZ_CHECK(ipu_container_blob(again, i, &b) == IPU_OK);
            FUZZ_CHECK(a.type == b.type && a.id == b.id && a.size == b.size);
            FUZZ_CHECK(a.size == 0 || memcmp(a.data, b.data, (size_t)a.size) == 0);
            FUZZ_CHECK((a.name == NULL) == (b.name == NULL));
            FUZZ_CHECK(a.name == NULL || strcmp(a.name, b.name) == 0);
        }
        ipu_container_destroy(again);
    }
    ipu_container_writer_destroy(w);
}

static void parse(const uint8_t *data, size_t size) {
    ipu_container *c = NULL;
    ipu_status st = ipu_container_open_memory(data, size, &c);
    if (st != IPU_OK) {
        FUZZ_CHECK(c == NULL);
        FUZZ_CHECK(st == IPU_ERR_CORRUPT || st == IPU_ERR_VERSION || st == IPU_ERR_NOMEM);
        FUZZ_CHECK(ipu_last_error_message()[0] != '\0');
        return;
    }
    FUZZ_CHECK(ipu_container_file_size(c) == size);
    uint32_t version = ipu_container_format_version(c);
    FUZZ_CHECK(version >= IPU_CONTAINER_MIN_VERSION && version <= IPU_CONTAINER_VERSION);
    uint32_t n = ipu_container_blob_count(c);
    unsigned sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        ipu_blob_info b;
        FUZZ_CHECK(ipu_container_blob(c, i, &b) == IPU_OK);
        /* touch the first and last byte: ASan catches a blob that points outside the image */
        if (b.size) sum += ((const uint8_t *)b.data)[0] + ((const uint8_t *)b.data)[b.size - 1];
        FUZZ_CHECK((b.type == IPU_BLOB_OPAQUE) == (b.name != NULL));
        if (b.name) sum += (unsigned)strlen(b.name);
    }
    ipu_blob_info b;
    FUZZ_CHECK(ipu_container_blob(c, n, &b) == IPU_ERR_INVALID_ARGUMENT);
    FUZZ_CHECK(ipu_container_find_blob(c, IPU_BLOB_METADATA, 0, &b) == IPU_OK);
    st = ipu_container_find_blob(c, IPU_BLOB_TENSOR_DATA, 0, &b);
    FUZZ_CHECK(st == IPU_OK || st == IPU_ERR_NOT_FOUND);
    st = ipu_container_find_blob(c, IPU_BLOB_PROGRAM, sum & 3, &b);
    FUZZ_CHECK(st == IPU_OK || st == IPU_ERR_NOT_FOUND);
    check_round_trip(c);
    ipu_executable_destroy(fz_executable(c));
    ipu_container_destroy(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_MAX_INPUT) return 0;
    parse(data, size);
    if (size < IPU_CONTAINER_HEADER_SIZE) return 0;
    uint8_t *copy = malloc(size);
    if (!copy) return 0;
    memcpy(copy, data, size);
    fz_st_u64(copy + 16, size);
    uint64_t sum = 0; /* by the header's version (the reader rejects unknown ones first) */
    if (ipu_container_checksum(copy + IPU_CONTAINER_HEADER_SIZE, size - IPU_CONTAINER_HEADER_SIZE,
                               fz_ld_u32(copy + 8), &sum) != IPU_OK) {
        free(copy);
        return 0;
    }
    fz_st_u64(copy + 32, sum);
    parse(copy, size);
    free(copy);
    return 0;
}
