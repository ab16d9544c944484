/* Container reader: open (mmap or owned copy), validate every field before use, accessors.
 *
 * Validation order (the first violation wins; see docs/popef.md for the full table):
 *   size >= header, magic, format_version (IPU_ERR_VERSION), file_size == actual size,
 *   blob_table_offset == 64, blob_count <= IPU_CONTAINER_MAX_BLOBS and the table fits, header
 *   reserved bytes zero, checksum, then per blob: known type, id 0 unless PROGRAM, reserved zero,
 *   offset aligned, offset >= end of table, offset + size <= file_size, at most one METADATA and
 *   one TENSOR_DATA, OPAQUE name header; then: a METADATA blob exists, no two blobs overlap, no
 *   two PROGRAM blobs share an id, no two OPAQUE blobs share a name. Header fields are read with
 *   byte loads, never through casts. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/ipu_internal.h"

typedef struct cblob {
    uint32_t type;
    uint32_t id;
    uint64_t offset; /* table values */
    uint64_t size;
    uint64_t data_off; /* what ipu_blob_info exposes (payload for OPAQUE) */
    uint64_t data_size;
    char *name; /* OPAQUE only, owned */
} cblob;

struct ipu_container {
    const uint8_t *base;
    size_t size;
    void *map;   /* mmap'd region (file) or NULL */
    void *owned; /* aligned copy (memory) or NULL */
    uint32_t version;
    uint32_t blob_count;
    uint64_t compiler_hash;
    uint64_t file_size;
    cblob *blobs;
};

/* ---- helpers ---- */

/* Strict UTF-8 (no overlong forms, surrogates or code points above U+10FFFF); see ipu_internal.h. */
bool ipu__utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
            cp = c & 0x1Fu;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            cp = c & 0x0Fu;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            cp = c & 0x07u;
        } else {
            return false; /* continuation byte, 0xC0/0xC1 (overlong) or 0xF5.. */
        }
        if (len > n - i) return false;
        for (size_t k = 1; k < len; k++) {
            uint8_t cc = s[i + k];
            if ((cc & 0xC0u) != 0x80u) return false;
            cp = (cp << 6) | (cc & 0x3Fu);
        }
        if (len == 3 && (cp < 0x800u || (cp >= 0xD800u && cp <= 0xDFFFu))) return false;
        if (len == 4 && (cp < 0x10000u || cp > 0x10FFFFu)) return false;
        i += len;
    }
    return true;
}

static const char *pick_int(int r, char *buf) { return r == 0 ? buf : "unknown error"; }
static const char *pick_ptr(char *r, char *buf) {
    (void)buf;
    return r ? r : "unknown error";
}
/* strerror_r is the GNU (char *) or the XSI (int) variant depending on the libc. */
#define IPU__PICK(r, buf) _Generic((r), int : pick_int, char * : pick_ptr)(r, buf)

static const char *err_text(int e, char *buf, size_t n) {
    buf[0] = '\0';
    return IPU__PICK(strerror_r(e, buf, n), buf);
}

static ipu_status io_fail(const char *what, const char *path, int e) {
    char buf[128];
    return ipu__fail(IPU_ERR_IO, "container: %s '%s': %s", what, path,
                     err_text(e, buf, sizeof buf));
}

static bool range_ok(uint64_t off, uint64_t len, uint64_t total) {
    return off <= total && len <= total - off;
}

static const char *type_name(uint32_t t) {
    switch (t) {
        case IPU_BLOB_METADATA: return "METADATA";
        case IPU_BLOB_TENSOR_DATA: return "TENSOR_DATA";
        case IPU_BLOB_PROGRAM: return "PROGRAM";
        case IPU_BLOB_OPAQUE: return "OPAQUE";
        default: return "?";
    }
}

typedef struct span {
    uint64_t key; /* offset, or program id */
    uint64_t size;
    uint32_t index;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    if (x->size != y->size) return x->size < y->size ? -1 : 1;
    return x->index < y->index ? -1 : (x->index > y->index);
}

typedef struct named {
    const char *name;
    uint32_t index;
} named;

static int named_cmp(const void *a, const void *b) {
    const named *x = a, *y = b;
    int r = strcmp(x->name, y->name);
    return r ? r : (x->index > y->index) - (x->index < y->index);
}

/* ---- validation ---- */

static ipu_status check_header(ipu_container *c) {
    const uint8_t *p = c->base;
    uint64_t actual = (uint64_t)c->size;
    if (actual < IPU_CONTAINER_HEADER_SIZE)
        return ipu__fail(IPU_ERR_CORRUPT,
                         "container: file is %" PRIu64 " bytes, smaller than the %u-byte header",
                         actual, IPU_CONTAINER_HEADER_SIZE);
    if (memcmp(p, IPU_CONTAINER_MAGIC, 8) != 0)
        return ipu__fail(IPU_ERR_CORRUPT, "container: bad magic (not a pyipu container)");
    uint32_t version = ipu__ld_u32(p + 8);
    if (version < IPU_CONTAINER_MIN_VERSION || version > IPU_CONTAINER_VERSION)
        return ipu__fail(IPU_ERR_VERSION,
                         "container: format version %" PRIu32
                         " is not supported (this runtime reads versions %u to %u)",
                         version, IPU_CONTAINER_MIN_VERSION, IPU_CONTAINER_VERSION);
    uint32_t count = ipu__ld_u32(p + 12);
    uint64_t file_size = ipu__ld_u64(p + 16);
    if (file_size != actual)
        return ipu__fail(IPU_ERR_CORRUPT,
                         "container: header file_size %" PRIu64
                         " differs from the actual size %" PRIu64 " (truncated or padded file)",
                         file_size, actual);
    uint64_t table_off = ipu__ld_u64(p + 40);
    if (table_off != IPU_CONTAINER_HEADER_SIZE)
        return ipu__fail(IPU_ERR_CORRUPT, "container: blob_table_offset %" PRIu64 " is not %u",
                         table_off, IPU_CONTAINER_HEADER_SIZE);
    if (count > IPU_CONTAINER_MAX_BLOBS)
        return ipu__fail(IPU_ERR_CORRUPT, "container: blob_count %" PRIu32 " exceeds the limit %u",
                         count, IPU_CONTAINER_MAX_BLOBS);
    uint64_t table_bytes, table_end;
    if (!ipu__mul_u64(count, 32, &table_bytes) ||
        !ipu__add_u64(table_off, table_bytes, &table_end) || table_end > file_size)
        return ipu__fail(IPU_ERR_CORRUPT,
                         "container: blob table (%" PRIu32 " entries at offset %" PRIu64
                         ") extends past the end of the file (%" PRIu64 " bytes)",
                         count, table_off, file_size);
    for (int i = 48; i < 64; i++)
        if (p[i] != 0)
            return ipu__fail(IPU_ERR_CORRUPT, "container: reserved header byte %d is not zero", i);
    uint64_t stored = ipu__ld_u64(p + 32);
    uint64_t computed;
    ipu_status st = ipu_container_checksum(p + IPU_CONTAINER_HEADER_SIZE,
                                           c->size - IPU_CONTAINER_HEADER_SIZE, version, &computed);
    if (st != IPU_OK) return st;
    if (stored != computed)
        return ipu__fail(IPU_ERR_CORRUPT,
                         "container: checksum mismatch (stored 0x%016" PRIx64
                         ", computed 0x%016" PRIx64 ")",
                         stored, computed);
    c->version = version;
    c->blob_count = count;
    c->file_size = file_size;
    c->compiler_hash = ipu__ld_u64(p + 24);
    return IPU_OK;
}

/* OPAQUE payload header: u32 name_len (1..255), name bytes, zero pad to 8, payload. */
static ipu_status check_opaque(ipu_container *c, uint32_t i, cblob *b) {
    const uint8_t *p = c->base + b->offset;
    if (b->size < 4)
        return ipu__fail(IPU_ERR_CORRUPT,
                         "container: blob %" PRIu32 " (OPAQUE) is %" PRIu64
                         " bytes, too small for its name header",
                         i, b->size);
    uint32_t name_len = ipu__ld_u32(p);
    if (name_len < 1 || name_len > 255)
        return ipu__fail(IPU_ERR_CORRUPT,
                         "container: blob %" PRIu32 " (OPAQUE) name length %" PRIu32
                         " is outside 1..255",
                         i, name_len);
    uint64_t hdr = ((uint64_t)4 + name_len + 7) & ~(uint64_t)7;
    if (hdr > b->size)
        return ipu__fail(IPU_ERR_CORRUPT,
                         "container: blob %" PRIu32 " (OPAQUE) name of %" PRIu32
                         " bytes does not fit in the blob (%" PRIu64 " bytes)",
                         i, name_len, b->size);
    if (memchr(p + 4, 0, name_len) != NULL)
        return ipu__fail(IPU_ERR_CORRUPT,
                         "container: blob %" PRIu32 " (OPAQUE) name contains a NUL byte", i);
    if (!ipu__utf8_valid(p + 4, name_len))
        return ipu__fail(IPU_ERR_CORRUPT,
                         "container: blob %" PRIu32 " (OPAQUE) name is not valid UTF-8", i);
    for (uint64_t k = 4 + (uint64_t)name_len; k < hdr; k++)
        if (p[k] != 0)
            return ipu__fail(IPU_ERR_CORRUPT,
                             "container: blob %" PRIu32 " (OPAQUE) name padding is not zero", i);
    b->name = ipu__malloc((size_t)name_len + 1);
    if (!b->name) return ipu__fail(IPU_ERR_NOMEM, "container: out of memory copying a blob name");
    memcpy(b->name, p + 4, name_len);
    b->name[name_len] = '\0';
    b->data_off = b->offset + hdr;
    b->data_size = b->size - hdr;
    return IPU_OK;
}

static ipu_status check_blobs(ipu_container *c) {
    uint32_t n = c->blob_count;
    uint64_t table_end = IPU_CONTAINER_HEADER_SIZE + (uint64_t)n * 32; /* checked in header */
    ipu_status st = IPU_OK;
    span *spans = NULL;
    c->blobs = ipu__calloc(n ? n : 1, sizeof *c->blobs);
    spans = ipu__malloc((n ? n : 1) * sizeof *spans);
    if (!c->blobs || !spans) {
        st = ipu__fail(IPU_ERR_NOMEM, "container: out of memory for %" PRIu32 " blobs", n);
        goto out;
    }
    int64_t metadata = -1, tensor_data = -1;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *e = c->base + IPU_CONTAINER_HEADER_SIZE + (size_t)i * 32;
        cblob *b = &c->blobs[i];
        b->type = ipu__ld_u32(e);
        b->id = ipu__ld_u32(e + 4);
        b->offset = ipu__ld_u64(e + 8);
        b->size = ipu__ld_u64(e + 16);
        uint64_t reserved = ipu__ld_u64(e + 24);
        if (b->type < IPU_BLOB_METADATA || b->type > IPU_BLOB_OPAQUE) {
            st = ipu__fail(IPU_ERR_CORRUPT, "container: blob %" PRIu32 " has unknown type %" PRIu32,
                           i, b->type);
            goto out;
        }
        if (b->type != IPU_BLOB_PROGRAM && b->id != 0) {
            st = ipu__fail(IPU_ERR_CORRUPT,
                           "container: blob %" PRIu32 " (%s) has id %" PRIu32 ", must be 0", i,
                           type_name(b->type), b->id);
            goto out;
        }
        if (reserved != 0) {
            st = ipu__fail(IPU_ERR_CORRUPT,
                           "container: blob %" PRIu32 " reserved field is not zero", i);
            goto out;
        }
        if (b->offset % IPU_CONTAINER_ALIGN != 0) {
            st = ipu__fail(IPU_ERR_CORRUPT,
                           "container: blob %" PRIu32 " offset %" PRIu64 " is not a multiple of %u",
                           i, b->offset, IPU_CONTAINER_ALIGN);
            goto out;
        }
        if (b->offset < table_end) {
            st = ipu__fail(IPU_ERR_CORRUPT,
                           "container: blob %" PRIu32 " offset %" PRIu64
                           " is inside the header or blob table (which ends at %" PRIu64 ")",
                           i, b->offset, table_end);
            goto out;
        }
        if (!range_ok(b->offset, b->size, c->file_size)) {
            st = ipu__fail(IPU_ERR_CORRUPT,
                           "container: blob %" PRIu32 " offset %" PRIu64 " + size %" PRIu64
                           " exceeds file size %" PRIu64,
                           i, b->offset, b->size, c->file_size);
            goto out;
        }
        b->data_off = b->offset;
        b->data_size = b->size;
        if (b->type == IPU_BLOB_METADATA) {
            if (metadata >= 0) {
                st = ipu__fail(IPU_ERR_CORRUPT,
                               "container: blob %" PRIu32
                               " is a second METADATA blob (first is blob %" PRId64 ")",
                               i, metadata);
                goto out;
            }
            metadata = i;
        } else if (b->type == IPU_BLOB_TENSOR_DATA) {
            if (tensor_data >= 0) {
                st = ipu__fail(IPU_ERR_CORRUPT,
                               "container: blob %" PRIu32
                               " is a second TENSOR_DATA blob (first is blob %" PRId64 ")",
                               i, tensor_data);
                goto out;
            }
            tensor_data = i;
        } else if (b->type == IPU_BLOB_OPAQUE) {
            st = check_opaque(c, i, b);
            if (st != IPU_OK) goto out;
        }
        spans[i] = (span){b->offset, b->size, i};
    }
    if (metadata < 0) {
        st = ipu__fail(IPU_ERR_CORRUPT, "container: no METADATA blob");
        goto out;
    }
    /* Overlap: sorted by offset, each blob must start at or after the end of the previous. */
    qsort(spans, n, sizeof *spans, span_cmp);
    for (uint32_t k = 1; k < n; k++) {
        const span *a = &spans[k - 1], *b = &spans[k];
        if (b->key < a->key + a->size) { /* a->key + a->size <= file_size: no wrap */
            st = ipu__fail(IPU_ERR_CORRUPT,
                           "container: blob %" PRIu32 " [%" PRIu64 ", +%" PRIu64
                           ") overlaps blob %" PRIu32 " [%" PRIu64 ", +%" PRIu64 ")",
                           b->index, b->key, b->size, a->index, a->key, a->size);
            goto out;
        }
    }
    /* Unique program ids. */
    uint32_t np = 0;
    for (uint32_t i = 0; i < n; i++)
        if (c->blobs[i].type == IPU_BLOB_PROGRAM) spans[np++] = (span){c->blobs[i].id, 0, i};
    qsort(spans, np, sizeof *spans, span_cmp);
    for (uint32_t k = 1; k < np; k++) {
        if (spans[k].key == spans[k - 1].key) {
            st = ipu__fail(IPU_ERR_CORRUPT,
                           "container: blobs %" PRIu32 " and %" PRIu32 " are both PROGRAM %" PRIu64,
                           spans[k - 1].index, spans[k].index, spans[k].key);
            goto out;
        }
    }
    /* Unique OPAQUE names (they are looked up by name, e.g. IPU_PACKED_BLOB_NAME). */
    uint32_t no = 0;
    for (uint32_t i = 0; i < n; i++) no += c->blobs[i].type == IPU_BLOB_OPAQUE;
    if (no > 1) {
        named *names = ipu__malloc(no * sizeof *names);
        if (!names) {
            st = ipu__fail(IPU_ERR_NOMEM, "container: out of memory for %" PRIu32 " blobs", n);
            goto out;
        }
        for (uint32_t i = 0, k = 0; i < n; i++)
            if (c->blobs[i].type == IPU_BLOB_OPAQUE) names[k++] = (named){c->blobs[i].name, i};
        qsort(names, no, sizeof *names, named_cmp);
        for (uint32_t k = 1; k < no && st == IPU_OK; k++)
            if (strcmp(names[k - 1].name, names[k].name) == 0)
                st = ipu__fail(IPU_ERR_CORRUPT,
                               "container: blobs %" PRIu32 " and %" PRIu32
                               " are both OPAQUE \"%s\"",
                               names[k - 1].index, names[k].index, names[k].name);
        ipu__free(names);
    }
out:
    ipu__free(spans);
    return st;
}

/* ---- create / destroy ---- */

void ipu_container_destroy(ipu_container *c) {
    if (!c) return;
    if (c->blobs) {
        for (uint32_t i = 0; i < c->blob_count; i++) ipu__free(c->blobs[i].name);
        ipu__free(c->blobs);
    }
    if (c->map) munmap(c->map, c->size);
    ipu__aligned_free(c->owned);
    ipu__free(c);
}

static ipu_status validate(ipu_container *c) {
    ipu_status st = check_header(c);
    if (st != IPU_OK) {
        c->blob_count = 0; /* nothing allocated yet; keep destroy's loop empty */
        return st;
    }
    return check_blobs(c);
}

ipu_status ipu_container_open_memory(const void *data, size_t size, ipu_container **out) {
    if (!out || (!data && size > 0))
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "container: NULL argument");
    if (size < IPU_CONTAINER_HEADER_SIZE)
        return ipu__fail(IPU_ERR_CORRUPT,
                         "container: image is %zu bytes, smaller than the "
                         "%u-byte header",
                         size, IPU_CONTAINER_HEADER_SIZE);
    ipu_status st;
    ipu_container *c = ipu__calloc(1, sizeof *c);
    if (!c) return ipu__fail(IPU_ERR_NOMEM, "container: out of memory");
    c->owned = ipu__big_alloc(size);
    if (!c->owned) {
        st = ipu__fail(IPU_ERR_NOMEM, "container: out of memory copying a %zu-byte image", size);
        goto fail;
    }
    memcpy(c->owned, data, size);
    c->base = c->owned;
    c->size = size;
    st = validate(c);
    if (st != IPU_OK) goto fail;
    *out = c;
    return IPU_OK;
fail:
    ipu_container_destroy(c);
    return st;
}

ipu_status ipu_container_open(const char *path, ipu_container **out) {
    if (!path || !out) return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "container: NULL argument");
    ipu_status st;
    ipu_container *c = NULL;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (fstat then rejects it). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return io_fail("cannot open", path, errno);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = io_fail("cannot stat", path, errno);
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = ipu__fail(IPU_ERR_IO, "container: '%s' is not a regular file", path);
        goto fail;
    }
    if (sb.st_size < (off_t)IPU_CONTAINER_HEADER_SIZE) {
        st = ipu__fail(IPU_ERR_CORRUPT,
                       "container: '%s' is %lld bytes, smaller than the %u-byte "
                       "header",
                       path, (long long)sb.st_size, IPU_CONTAINER_HEADER_SIZE);
        goto fail;
    }
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX) {
        st = ipu__fail(IPU_ERR_IO, "container: '%s' is too large to map", path);
        goto fail;
    }
    c = ipu__calloc(1, sizeof *c);
    if (!c) {
        st = ipu__fail(IPU_ERR_NOMEM, "container: out of memory");
        goto fail;
    }
    size_t size = (size_t)sb.st_size;
    void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
        st = io_fail("cannot map", path, errno);
        goto fail;
    }
    close(fd);
    fd = -1;
    c->map = m;
    c->base = m;
    c->size = size;
    st = validate(c);
    if (st != IPU_OK) goto fail;
    ipu__log(IPU_LOG_INFO, "container '%s': %u blobs, %zu bytes, mapped", path, c->blob_count,
             size);
    *out = c;
    return IPU_OK;
fail:
    if (fd >= 0) close(fd);
    ipu_container_destroy(c);
    return st;
}

/* ---- accessors ---- */

uint32_t ipu_container_format_version(const ipu_container *c) { return c ? c->version : 0; }
uint64_t ipu_container_compiler_hash(const ipu_container *c) { return c ? c->compiler_hash : 0; }
uint64_t ipu_container_file_size(const ipu_container *c) { return c ? c->file_size : 0; }
uint32_t ipu_container_blob_count(const ipu_container *c) { return c ? c->blob_count : 0; }

static void fill_info(const ipu_container *c, const cblob *b, ipu_blob_info *out) {
    out->type = (ipu_blob_type)b->type;
    out->id = b->id;
    out->data = c->base + b->data_off;
    out->size = b->data_size;
    out->name = b->name;
}

ipu_status ipu_container_blob(const ipu_container *c, uint32_t index, ipu_blob_info *out) {
    if (!c || !out) return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "container: NULL argument");
    if (index >= c->blob_count)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                         "container: blob index %" PRIu32 " out of range (%" PRIu32 " blobs)",
                         index, c->blob_count);
    fill_info(c, &c->blobs[index], out);
    return IPU_OK;
}

ipu_status ipu_container_find_blob(const ipu_container *c, ipu_blob_type type, uint32_t id,
                                   ipu_blob_info *out) {
    if (!c || !out) return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "container: NULL argument");
    for (uint32_t i = 0; i < c->blob_count; i++) {
        const cblob *b = &c->blobs[i];
        if (b->type == (uint32_t)type && (type != IPU_BLOB_PROGRAM || b->id == id)) {
            fill_info(c, b, out);
            return IPU_OK;
        }
    }
    if (type == IPU_BLOB_PROGRAM)
        return ipu__fail(IPU_ERR_NOT_FOUND, "container: no PROGRAM blob with id %" PRIu32, id);
    return ipu__fail(IPU_ERR_NOT_FOUND, "container: no %s blob", type_name((uint32_t)type));
}
