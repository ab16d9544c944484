/* Container API edge cases that neither the fuzz targets nor test_container.c reach: NULL
 * arguments of every entry point, I/O failures of the reader and of the writer's atomic file
 * write (file-size limit, rename onto a directory), and blobs too large to describe. With the
 * fuzz replays they make the branch coverage of runtime_c/src/container/ (.ci/fuzz.sh). */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ipu.h"

static int failed;

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            failed++;                                                          \
            fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                      \
    } while (0)

static const uint8_t payload[200];

static ipu_container_writer *small_writer(void) {
    ipu_container_writer *w = NULL;
    CHECK(ipu_container_writer_create(&w) == IPU_OK);
    CHECK(ipu_container_writer_add_blob(w, IPU_BLOB_METADATA, 0, NULL, payload, 8) == IPU_OK);
    CHECK(ipu_container_writer_add_blob(w, IPU_BLOB_TENSOR_DATA, 0, NULL, payload, 200) == IPU_OK);
    return w;
}

static void test_null_arguments(void) {
    const ipu_status E = IPU_ERR_INVALID_ARGUMENT;
    ipu_container *c = NULL;
    ipu_blob_info b;
    void *data = NULL;
    size_t size = 0;
    CHECK(ipu_container_open(NULL, &c) == E);
    CHECK(ipu_container_open("x", NULL) == E);
    CHECK(ipu_container_open_memory(NULL, 10, &c) == E);
    CHECK(ipu_container_open_memory(payload, 10, NULL) == E);
    CHECK(ipu_container_blob(NULL, 0, &b) == E);
    CHECK(ipu_container_find_blob(NULL, IPU_BLOB_METADATA, 0, &b) == E);
    CHECK(ipu_container_format_version(NULL) == 0 && ipu_container_compiler_hash(NULL) == 0);
    CHECK(ipu_container_file_size(NULL) == 0 && ipu_container_blob_count(NULL) == 0);
    CHECK(ipu_container_writer_create(NULL) == E);
    ipu_container_writer *w = small_writer();
    CHECK(ipu_container_writer_finish(NULL, &data, &size) == E);
    CHECK(ipu_container_writer_finish(w, NULL, &size) == E);
    CHECK(ipu_container_writer_finish(w, &data, NULL) == E);
    CHECK(ipu_container_writer_write_file(NULL, "x") == E);
    CHECK(ipu_container_writer_write_file(w, NULL) == E);
    /* payload + name header would not fit in size_t */
    CHECK(ipu_container_writer_add_blob_ref(w, IPU_BLOB_OPAQUE, 0, "n", payload, SIZE_MAX) == E);
    ipu_container_writer_set_compiler_hash(NULL, 1);
    /* the image: a lookup of a type that is absent, and of an unknown type */
    CHECK(ipu_container_writer_finish(w, &data, &size) == IPU_OK);
    CHECK(ipu_container_open_memory(data, size, &c) == IPU_OK);
    CHECK(ipu_container_find_blob(c, IPU_BLOB_OPAQUE, 0, &b) == IPU_ERR_NOT_FOUND);
    CHECK(ipu_container_find_blob(c, (ipu_blob_type)99, 0, &b) == IPU_ERR_NOT_FOUND);
    CHECK(strstr(ipu_last_error_message(), "no ? blob") != NULL);
    CHECK(ipu_container_find_blob(c, IPU_BLOB_METADATA, 0, NULL) == E);
    ipu_container_destroy(c);
    free(data);
    ipu_container_writer_destroy(w);
}

static void test_reader_io_errors(const char *dir) {
    ipu_container *c = NULL;
    char path[512];
    snprintf(path, sizeof path, "%s/does-not-exist.popef", dir);
    CHECK(ipu_container_open(path, &c) == IPU_ERR_IO && c == NULL);
    CHECK(strstr(ipu_last_error_message(), "cannot open") != NULL);
    CHECK(ipu_container_open(dir, &c) == IPU_ERR_IO); /* a directory */
    CHECK(strstr(ipu_last_error_message(), "not a regular file") != NULL);
    snprintf(path, sizeof path, "%s/short.popef", dir);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(payload, 1, 10, f) == 10);
    if (f) fclose(f);
    CHECK(ipu_container_open(path, &c) == IPU_ERR_CORRUPT);
    CHECK(strstr(ipu_last_error_message(), "smaller than the 64-byte header") != NULL);
    unlink(path);
}

static void test_writer_io_errors(const char *dir) {
    ipu_container_writer *w = small_writer();
    char path[512];
    snprintf(path, sizeof path, "%s/no-such-dir/x.popef", dir);
    CHECK(ipu_container_writer_write_file(w, path) == IPU_ERR_IO);
    CHECK(strstr(ipu_last_error_message(), "cannot create") != NULL);
    /* rename onto a directory fails: the temporary file is removed */
    snprintf(path, sizeof path, "%s/a-directory", dir);
    CHECK(mkdir(path, 0755) == 0);
    CHECK(ipu_container_writer_write_file(w, path) == IPU_ERR_IO);
    CHECK(strstr(ipu_last_error_message(), "cannot rename") != NULL);
    rmdir(path);
    /* a file-size limit below the image size: write() fails with EFBIG */
    struct rlimit old, lim;
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    lim = old;
    lim.rlim_cur = 100;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    snprintf(path, sizeof path, "%s/too-big.popef", dir);
    if (setrlimit(RLIMIT_FSIZE, &lim) == 0) {
        ipu_status st = ipu_container_writer_write_file(w, path);
        CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
        CHECK(st == IPU_ERR_IO);
        CHECK(strstr(ipu_last_error_message(), "cannot write") != NULL);
        CHECK(access(path, F_OK) != 0);
    }
    signal(SIGXFSZ, prev);
    /* and the same writer still works */
    CHECK(ipu_container_writer_write_file(w, path) == IPU_OK);
    ipu_container *c = NULL;
    CHECK(ipu_container_open(path, &c) == IPU_OK && ipu_container_blob_count(c) == 2);
    ipu_container_destroy(c);
    unlink(path);
    ipu_container_writer_destroy(w);
}

int main(void) {
    char dir[] = "/tmp/ipu-edges-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    test_null_arguments();
    test_reader_io_errors(dir);
    test_writer_io_errors(dir);
    rmdir(dir);
    printf("test_container_edges: %s\n", failed ? "FAILED" : "ok");
    return failed ? 1 : 0;
}
