/* Container writer: collect blobs (copied on add, or borrowed), then serialise header + blob
 * table + blobs.
 *
 * Layout produced: the 64-byte header, the blob table (32 bytes per blob, in the order the blobs
 * were added), then each blob in the same order at the next multiple of 64, zero padding in
 * between. The file ends right after the last blob (no trailing padding). Anything the writer
 * accepts, the reader accepts. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/ipu_internal.h"

/* Defined in reader.c. */

typedef struct wblob {
    uint32_t type;
    uint32_t id;
    uint8_t *head; /* OPAQUE name header (owned) or NULL */
    size_t head_size;
    const uint8_t *data; /* payload: owned when `owned`, else borrowed from the caller */
    size_t data_size;
    bool owned;
    size_t size;  /* head_size + data_size: the blob as stored */
    uint64_t key; /* hash of the PROGRAM id or OPAQUE name (key_hash) */
} wblob;

struct ipu_container_writer {
    wblob *blobs;
    uint32_t count;
    uint32_t cap;
    /* PROGRAM ids and OPAQUE names must be unique: an open-addressing hash set of those blobs
     * (blob index + 1, 0 = empty slot), so adding n blobs costs O(n), not a scan per blob */
    uint32_t *keys;
    size_t keys_cap; /* a power of two, at least twice the keyed blobs; 0 before the first */
    uint32_t keyed;
    uint64_t compiler_hash;
    bool has_metadata;
    bool has_tensor_data;
};

ipu_status ipu_container_writer_create(ipu_container_writer **out) {
    if (!out) return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "container writer: NULL argument");
    ipu_container_writer *w = ipu__calloc(1, sizeof *w);
    if (!w) return ipu__fail(IPU_ERR_NOMEM, "container writer: out of memory");
    w->compiler_hash = ipu_compiler_hash();
    *out = w;
    return IPU_OK;
}

void ipu_container_writer_destroy(ipu_container_writer *w) {
    if (!w) return;
    for (uint32_t i = 0; i < w->count; i++) {
        ipu__free(w->blobs[i].head);
        if (w->blobs[i].owned) ipu__free((void *)w->blobs[i].data);
    }
    ipu__free(w->blobs);
    ipu__free(w->keys);
    ipu__free(w);
}

void ipu_container_writer_set_compiler_hash(ipu_container_writer *w, uint64_t hash) {
    if (w) w->compiler_hash = hash;
}

static uint64_t key_hash(uint32_t type, uint32_t id, const char *name, size_t len) {
    return type == IPU_BLOB_PROGRAM ? ipu_hash64(&id, sizeof id, 1) : ipu_hash64(name, len, 2);
}

static bool same_key(const wblob *b, uint32_t type, uint32_t id, const char *name, size_t len) {
    if (b->type != type) return false;
    if (type == IPU_BLOB_PROGRAM) return b->id == id;
    return ipu__ld_u32(b->head) == len && memcmp(b->head + 4, name, len) == 0; /* head: len, name */
}

/* The blob with this key, or NULL. */
static const wblob *find_key(const ipu_container_writer *w, uint64_t h, uint32_t type, uint32_t id,
                             const char *name, size_t len) {
    if (!w->keys_cap) return NULL;
    size_t mask = w->keys_cap - 1;
    for (size_t i = (size_t)h & mask; w->keys[i]; i = (i + 1) & mask) {
        const wblob *b = &w->blobs[w->keys[i] - 1];
        if (same_key(b, type, id, name, len)) return b;
    }
    return NULL;
}

static void put_key(uint32_t *keys, size_t cap, uint64_t h, uint32_t index) {
    size_t i = (size_t)h & (cap - 1);
    while (keys[i]) i = (i + 1) & (cap - 1);
    keys[i] = index + 1;
}

/* Room for one more keyed blob (the set at most half full). Nothing changes on failure. */
static ipu_status reserve_key(ipu_container_writer *w) {
    if (2 * ((size_t)w->keyed + 1) <= w->keys_cap) return IPU_OK;
    size_t cap = w->keys_cap ? 2 * w->keys_cap : 64;
    uint32_t *keys = ipu__calloc(cap, sizeof *keys);
    if (!keys) return ipu__fail(IPU_ERR_NOMEM, "container writer: out of memory");
    for (uint32_t i = 0; i < w->count; i++)
        if (w->blobs[i].type == IPU_BLOB_PROGRAM || w->blobs[i].type == IPU_BLOB_OPAQUE)
            put_key(keys, cap, w->blobs[i].key, i);
    ipu__free(w->keys);
    w->keys = keys;
    w->keys_cap = cap;
    return IPU_OK;
}

static ipu_status add_blob(ipu_container_writer *w, ipu_blob_type type, uint32_t id,
                           const char *name, const void *data, size_t size, bool copy) {
    if (!w || (!data && size > 0))
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "container writer: NULL argument");
    uint32_t t = (uint32_t)type;
    if (t < IPU_BLOB_METADATA || t > IPU_BLOB_OPAQUE)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "container writer: unknown blob type %" PRIu32,
                         t);
    if (t != IPU_BLOB_PROGRAM && id != 0)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                         "container writer: id %" PRIu32 " given for a blob that is not a PROGRAM",
                         id);
    if (t != IPU_BLOB_OPAQUE && name != NULL)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                         "container writer: a name is only allowed for OPAQUE blobs");
    if (w->count >= IPU_CONTAINER_MAX_BLOBS)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "container writer: too many blobs (limit %u)",
                         IPU_CONTAINER_MAX_BLOBS);
    if (t == IPU_BLOB_METADATA && w->has_metadata)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "container writer: second METADATA blob");
    if (t == IPU_BLOB_TENSOR_DATA && w->has_tensor_data)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "container writer: second TENSOR_DATA blob");
    uint64_t key = 0;
    if (t == IPU_BLOB_PROGRAM) {
        key = key_hash(t, id, NULL, 0);
        if (find_key(w, key, t, id, NULL, 0))
            return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                             "container writer: duplicate PROGRAM id %" PRIu32, id);
    }
    size_t name_len = 0, hdr = 0;
    if (t == IPU_BLOB_OPAQUE) {
        if (!name)
            return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                             "container writer: an OPAQUE blob needs a name");
        name_len = strnlen(name, 256);
        if (name_len < 1 || name_len > 255)
            return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                             "container writer: OPAQUE name must be 1..255 bytes");
        if (!ipu__utf8_valid((const uint8_t *)name, name_len))
            return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                             "container writer: OPAQUE name is not valid UTF-8");
        key = key_hash(t, 0, name, name_len);
        if (find_key(w, key, t, 0, name, name_len))
            return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                             "container writer: duplicate OPAQUE name \"%s\"", name);
        hdr = (4 + name_len + 7) & ~(size_t)7;
    }
    if (size > SIZE_MAX - hdr)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "container writer: blob too large");
    if (w->count == w->cap) {
        uint32_t ncap = w->cap ? w->cap * 2 : 8;
        wblob *nb = ipu__realloc(w->blobs, (size_t)ncap * sizeof *nb);
        if (!nb) return ipu__fail(IPU_ERR_NOMEM, "container writer: out of memory");
        w->blobs = nb;
        w->cap = ncap;
    }
    bool keyed = t == IPU_BLOB_PROGRAM || t == IPU_BLOB_OPAQUE;
    ipu_status st = keyed ? reserve_key(w) : IPU_OK;
    if (st != IPU_OK) return st;
    uint8_t *head = NULL, *own = NULL;
    if (hdr && !(head = ipu__calloc(1, hdr))) /* zero name padding */
        return ipu__fail(IPU_ERR_NOMEM, "container writer: out of memory");
    if (copy && size && !(own = ipu__malloc(size))) {
        ipu__free(head);
        return ipu__fail(IPU_ERR_NOMEM, "container writer: out of memory copying %zu bytes", size);
    }
    if (head) {
        ipu__st_u32(head, (uint32_t)name_len);
        memcpy(head + 4, name, name_len);
    }
    if (own) memcpy(own, data, size);
    if (keyed) {
        put_key(w->keys, w->keys_cap, key, w->count);
        w->keyed++;
    }
    w->blobs[w->count++] = (wblob){t,
                                   t == IPU_BLOB_PROGRAM ? id : 0,
                                   head,
                                   hdr,
                                   own ? own : data,
                                   size,
                                   own != NULL,
                                   hdr + size,
                                   key};
    if (t == IPU_BLOB_METADATA) w->has_metadata = true;
    if (t == IPU_BLOB_TENSOR_DATA) w->has_tensor_data = true;
    return IPU_OK;
}

ipu_status ipu_container_writer_add_blob(ipu_container_writer *w, ipu_blob_type type, uint32_t id,
                                         const char *name, const void *data, size_t size) {
    return add_blob(w, type, id, name, data, size, true);
}

ipu_status ipu_container_writer_add_blob_ref(ipu_container_writer *w, ipu_blob_type type,
                                             uint32_t id, const char *name, const void *data,
                                             size_t size) {
    return add_blob(w, type, id, name, data, size, false);
}

ipu_status ipu_container_writer_finish_into(ipu_container_writer *w, void *dst, size_t cap,
                                            size_t *size_out) {
    if (!w || !size_out)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "container writer: NULL argument");
    if (!w->has_metadata)
        return ipu__fail(IPU_ERR_INVALID_STATE, "container writer: no METADATA blob was added");
    const uint64_t align = IPU_CONTAINER_ALIGN;
    uint64_t pos = IPU_CONTAINER_HEADER_SIZE + (uint64_t)w->count * 32; /* <= 64 + 2^21 */
    for (uint32_t i = 0; i < w->count; i++) {
        uint64_t end;
        if (!ipu__add_u64(pos, align - 1, &pos) ||
            !ipu__add_u64(pos & ~(align - 1), w->blobs[i].size, &end))
            return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "container writer: total size overflows");
        pos = end;
    }
    if (pos > SIZE_MAX)
        return ipu__fail(IPU_ERR_NOMEM, "container writer: %" PRIu64 " bytes do not fit in memory",
                         pos);
    size_t total = (size_t)pos;
    *size_out = total;
    if (!dst) return IPU_OK;
    if (cap < total)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                         "container writer: the image needs %zu bytes, the buffer has %zu", total,
                         cap);
    uint8_t *buf = dst;
    memset(buf, 0, (size_t)IPU_CONTAINER_HEADER_SIZE + (size_t)w->count * 32);
    size_t off = IPU_CONTAINER_HEADER_SIZE + (size_t)w->count * 32;
    for (uint32_t i = 0; i < w->count; i++) {
        const wblob *b = &w->blobs[i];
        size_t start = (off + (size_t)(align - 1)) & ~(size_t)(align - 1);
        memset(buf + off, 0, start - off);
        if (b->head_size) memcpy(buf + start, b->head, b->head_size);
        if (b->data_size) memcpy(buf + start + b->head_size, b->data, b->data_size);
        uint8_t *e = buf + IPU_CONTAINER_HEADER_SIZE + (size_t)i * 32;
        ipu__st_u32(e, b->type);
        ipu__st_u32(e + 4, b->id);
        ipu__st_u64(e + 8, (uint64_t)start);
        ipu__st_u64(e + 16, (uint64_t)b->size);
        ipu__st_u64(e + 24, 0);
        off = start + b->size;
    }
    memcpy(buf, IPU_CONTAINER_MAGIC, 8);
    ipu__st_u32(buf + 8, IPU_CONTAINER_VERSION);
    ipu__st_u32(buf + 12, w->count);
    ipu__st_u64(buf + 16, (uint64_t)total);
    ipu__st_u64(buf + 24, w->compiler_hash);
    ipu__st_u64(buf + 40, IPU_CONTAINER_HEADER_SIZE);
    uint64_t sum;
    ipu_status st = ipu_container_checksum(buf + IPU_CONTAINER_HEADER_SIZE,
                                           total - IPU_CONTAINER_HEADER_SIZE, IPU_CONTAINER_VERSION,
                                           &sum);
    if (st == IPU_OK) ipu__st_u64(buf + 32, sum);
    return st;
}

ipu_status ipu_container_writer_finish(ipu_container_writer *w, void **data_out, size_t *size_out) {
    if (!w || !data_out || !size_out)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "container writer: NULL argument");
    size_t total;
    ipu_status st = ipu_container_writer_finish_into(w, NULL, 0, &total);
    if (st) return st;
    uint8_t *buf = ipu__malloc(total); /* the caller releases it with ipu_free() */
    if (!buf)
        return ipu__fail(IPU_ERR_NOMEM, "container writer: out of memory for %zu bytes", total);
    if ((st = ipu_container_writer_finish_into(w, buf, total, &total))) {
        ipu__free(buf);
        return st;
    }
    *data_out = buf;
    *size_out = total;
    return IPU_OK;
}

static const char *pick_int(int r, char *buf) { return r == 0 ? buf : "unknown error"; }
static const char *pick_ptr(char *r, char *buf) {
    (void)buf;
    return r ? r : "unknown error";
}
/* strerror_r is the GNU (char *) or the XSI (int) variant depending on the libc. */
#define IPU__PICK(r, buf) _Generic((r), int : pick_int, char * : pick_ptr)(r, buf)

static ipu_status io_fail(const char *what, const char *path, int e) {
    char buf[128];
    buf[0] = '\0';
    return ipu__fail(IPU_ERR_IO, "container writer: %s '%s': %s", what, path,
                     IPU__PICK(strerror_r(e, buf, sizeof buf), buf));
}

ipu_status ipu_container_writer_write_file(ipu_container_writer *w, const char *path) {
    if (!w || !path) return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "container writer: NULL argument");
    void *data = NULL;
    size_t size = 0;
    char *tmp = NULL;
    int fd = -1;
    bool created = false;
    ipu_status st = ipu_container_writer_finish(w, &data, &size);
    if (st != IPU_OK) return st;
    size_t plen = strlen(path);
    tmp = ipu__malloc(plen + 32);
    if (!tmp) {
        st = ipu__fail(IPU_ERR_NOMEM, "container writer: out of memory");
        goto out;
    }
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        st = io_fail("cannot create", tmp, errno);
        goto out;
    }
    created = true;
    const uint8_t *p = data;
    size_t left = size;
    while (left > 0) {
        ssize_t n = write(fd, p, left);
        if (n < 0) {
            if (errno == EINTR) continue;
            st = io_fail("cannot write", tmp, errno);
            goto out;
        }
        p += n;
        left -= (size_t)n;
    }
    if (fsync(fd) != 0) {
        st = io_fail("cannot sync", tmp, errno);
        goto out;
    }
    int rc = close(fd);
    fd = -1;
    if (rc != 0) {
        st = io_fail("cannot close", tmp, errno);
        goto out;
    }
    if (rename(tmp, path) != 0) {
        st = io_fail("cannot rename to", path, errno);
        goto out;
    }
    ipu__free(tmp);
    ipu__free(data);
    return IPU_OK;
out:
    if (fd >= 0) close(fd);
    if (created) unlink(tmp); /* best effort; nothing to do if it fails */
    ipu__free(tmp);
    ipu__free(data);
    return st;
}
