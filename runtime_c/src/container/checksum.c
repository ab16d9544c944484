/* The container checksum (header field `checksum`, docs/popef.md). Format version 1 hashes the
 * bytes after the header in one sequential pass; version 2 hashes chunks of
 * IPU_CONTAINER_CHUNK bytes independently and then the list of their hashes, so that files of
 * hundreds of MB are checked on several cores at open (one core reads ~7 GB/s from memory:
 * ResNet-50's 207 MB file took 28 of its 35 ms load in version 1's pass; on two cores the
 * chunks take 17 ms). */
#include <pthread.h>
#include <unistd.h>

#include "../common/ipu_internal.h"
#include "ipu/ipu_container.h"

#define MAX_THREADS 4
#define CHUNKS_PER_THREAD 8 /* at least 32 MiB per thread: a thread costs ~50 us */
#define STACK_CHUNKS 64     /* files up to 256 MiB keep the chunk hashes on the stack */

typedef struct {
    const uint8_t *data;
    size_t size, c0, c1; /* chunks [c0, c1) */
    uint8_t *hashes;     /* little-endian u64 per chunk */
} chunk_job;

static void *hash_chunks(void *arg) {
    const chunk_job *j = arg;
    for (size_t c = j->c0; c < j->c1; c++) {
        size_t off = c * IPU_CONTAINER_CHUNK;
        size_t n = j->size - off < IPU_CONTAINER_CHUNK ? j->size - off : IPU_CONTAINER_CHUNK;
        ipu__st_u64(j->hashes + 8 * c, ipu_hash64(j->data + off, n, (uint64_t)c));
    }
    return NULL;
}

/* Chunk hashes of `data` into `hashes` on up to MAX_THREADS threads (this one included); a
 * thread that cannot be started leaves its chunks to this one. */
static void hash_all_chunks(const uint8_t *data, size_t size, size_t chunks, uint8_t *hashes) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t nth = chunks / CHUNKS_PER_THREAD;
    if (nth > MAX_THREADS) nth = MAX_THREADS;
    if (cpus > 0 && nth > (size_t)cpus) nth = (size_t)cpus;
    if (nth < 1) nth = 1;
    chunk_job jobs[MAX_THREADS];
    pthread_t threads[MAX_THREADS];
    bool started[MAX_THREADS] = {false};
    for (size_t t = 0; t < nth; t++) /* contiguous ranges: one sequential stream per thread */
        jobs[t] = (chunk_job){data, size, chunks * t / nth, chunks * (t + 1) / nth, hashes};
    for (size_t t = 1; t < nth; t++)
        started[t] = pthread_create(&threads[t], NULL, hash_chunks, &jobs[t]) == 0;
    hash_chunks(&jobs[0]);
    for (size_t t = 1; t < nth; t++) {
        if (started[t])
            pthread_join(threads[t], NULL);
        else
            hash_chunks(&jobs[t]);
    }
}

ipu_status ipu_container_checksum(const void *data, size_t size, uint32_t version, uint64_t *out) {
    if ((!data && size) || !out)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_container_checksum: NULL argument");
    if (version == 1) {
        *out = ipu_hash64(data, size, 0);
        return IPU_OK;
    }
    size_t chunks = size / IPU_CONTAINER_CHUNK + (size % IPU_CONTAINER_CHUNK != 0);
    uint8_t stack[8 * STACK_CHUNKS], *hashes = stack;
    if (chunks > STACK_CHUNKS && !(hashes = ipu__malloc(8 * chunks)))
        return ipu__fail(IPU_ERR_NOMEM, "container checksum: out of memory for %zu chunk hashes",
                         chunks);
    hash_all_chunks(data, size, chunks, hashes);
    *out = ipu_hash64(hashes, 8 * chunks, 0);
    if (hashes != stack) ipu__free(hashes);
    return IPU_OK;
}
