/* PopEF-style container: reader (mmap, validated) and writer.
 *
 * Byte layout, format version 2 (version 1 differs only in its checksum; both are read). All
 * integers little-endian; every blob starts at a multiple of
 * 64 bytes from the start of the file; padding bytes are zero.
 *
 *   Header (64 bytes, at offset 0)
 *     0   u8[8]  magic "PYIPUEF\0"
 *     8   u32    format_version (IPU_CONTAINER_VERSION)
 *     12  u32    blob_count (<= IPU_CONTAINER_MAX_BLOBS)
 *     16  u64    file_size: total length of the file in bytes
 *     24  u64    compiler_hash: ipu_compiler_hash() of the compiler that wrote the file
 *     32  u64    checksum: ipu_container_checksum(bytes [64, file_size), format_version)
 *     40  u64    blob_table_offset (always 64)
 *     48  u8[16] reserved, zero
 *   Blob table (blob_count entries of 32 bytes, at blob_table_offset)
 *     0   u32    type (ipu_blob_type)
 *     4   u32    id   (program id for PROGRAM blobs, 0 otherwise)
 *     8   u64    offset from the start of the file (multiple of 64, >= end of the blob table)
 *     16  u64    size in bytes (offset + size <= file_size, blobs do not overlap)
 *     24  u64    reserved, zero
 *   Blobs, in any order. Contents by type:
 *     METADATA (exactly one)    tensors, anchors, program flow, target: see docs/popef.md
 *     TENSOR_DATA (at most one) raw tensor bytes, addressed by tensor offset (multiples of 64)
 *     PROGRAM (one per id)      instruction list: see docs/bytecode.md
 *     OPAQUE (any number)       u32 name_len, name bytes (UTF-8, 1..255), zero pad to 8, payload
 *
 * The reader checks every count, size and offset before use and the checksum of the whole file;
 * any violation gives IPU_ERR_CORRUPT (IPU_ERR_VERSION for a format version other than 1 and
 * 2). Tensor data is used in place: pointers returned by ipu_container_blob point into the mapping.
 *
 * Threads: a container is immutable once opened; every const accessor may be called from any
 * number of threads at once. A writer is used by one thread at a time.
 * Memory: containers and writers are allocated through the ipu_allocator (ipu_alloc.h); the file
 * mapping of ipu_container_open is made with mmap. On any error `*out` is left unchanged and
 * nothing stays allocated. */
#ifndef IPU_CONTAINER_H
#define IPU_CONTAINER_H

#include "ipu_common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define IPU_CONTAINER_MAGIC "PYIPUEF"
#define IPU_CONTAINER_VERSION 2u              /* written; versions 1 and 2 are read */
#define IPU_CONTAINER_MIN_VERSION 1u          /* the oldest version read */
#define IPU_CONTAINER_CHUNK ((size_t)4 << 20) /* bytes per chunk of the version 2 checksum */
#define IPU_CONTAINER_HEADER_SIZE 64u
#define IPU_CONTAINER_ALIGN 64u
#define IPU_CONTAINER_MAX_BLOBS 65536u

typedef enum ipu_blob_type {
    IPU_BLOB_METADATA = 1,
    IPU_BLOB_TENSOR_DATA = 2,
    IPU_BLOB_PROGRAM = 3,
    IPU_BLOB_OPAQUE = 4,
} ipu_blob_type;

typedef struct ipu_container ipu_container;

typedef struct ipu_blob_info {
    ipu_blob_type type;
    uint32_t id;
    const void *data; /* points into the container; valid while the container lives */
    uint64_t size;
    const char *name; /* OPAQUE only: NUL-terminated copy owned by the container; else NULL */
} ipu_blob_info;

/* Open and validate a file (memory-mapped, read-only). `path` is borrowed (only during the call).
 * On success *out is a new container the caller owns (ipu_container_destroy). Errors:
 * IPU_ERR_INVALID_ARGUMENT (NULL), IPU_ERR_IO (cannot open/stat/map, not a regular file),
 * IPU_ERR_CORRUPT, IPU_ERR_VERSION, IPU_ERR_NOMEM. The file may be changed or deleted after the
 * call only by replacing it (rename), not by rewriting it in place: the mapping is private. */
IPU_API IPU_NODISCARD ipu_status ipu_container_open(const char *path, ipu_container **out);
/* Validate an in-memory image. The bytes are copied (64-byte aligned, through the allocator);
 * `data` is borrowed during the call only. Errors as ipu_container_open, without IPU_ERR_IO. */
IPU_API IPU_NODISCARD ipu_status ipu_container_open_memory(const void *data, size_t size,
                                                           ipu_container **out);
/* Accepts NULL. Invalidates every pointer obtained from the container. Every executable created
 * from it must be destroyed first. */
IPU_API void ipu_container_destroy(ipu_container *c);

/* The header's checksum of the `size` bytes after the header (`data`) as format version `version`
 * defines it (docs/popef.md): version 1, ipu_hash64(data, size, 0); version 2 (and any other
 * value), ipu_hash64 of the little-endian u64 hashes of its IPU_CONTAINER_CHUNK-byte chunks
 * (chunk i: ipu_hash64(chunk, its size, i)), with seed 0. Version 2 hashes the chunks on up to
 * 4 threads, at most one per online CPU and 8 chunks or more each (files of 64 MiB and more).
 * Errors: IPU_ERR_INVALID_ARGUMENT (NULL), IPU_ERR_NOMEM (more than 256 MiB: the chunk hashes
 * are allocated). */
IPU_API IPU_NODISCARD ipu_status ipu_container_checksum(const void *data, size_t size,
                                                        uint32_t version, uint64_t *out);

/* Header fields of the container (0 for NULL). */
IPU_API uint32_t ipu_container_format_version(const ipu_container *c);
IPU_API uint64_t ipu_container_compiler_hash(const ipu_container *c);
IPU_API uint64_t ipu_container_file_size(const ipu_container *c);
IPU_API uint32_t ipu_container_blob_count(const ipu_container *c);
/* Blob `index` (< blob_count, in blob table order). The pointers in *out are owned by the
 * container. IPU_ERR_INVALID_ARGUMENT for a NULL pointer or an index out of range. */
IPU_API IPU_NODISCARD ipu_status ipu_container_blob(const ipu_container *c, uint32_t index,
                                                    ipu_blob_info *out);
/* First blob of `type` (and `id` for programs); IPU_ERR_NOT_FOUND if there is none. */
IPU_API IPU_NODISCARD ipu_status ipu_container_find_blob(const ipu_container *c, ipu_blob_type type,
                                                         uint32_t id, ipu_blob_info *out);

/* Writer: collect blobs, then serialise. Blob bytes are copied when added (add_blob_ref: borrowed,
 * and must stay valid and unchanged until the writer is destroyed). */
typedef struct ipu_container_writer ipu_container_writer;
/* A new, empty writer owned by the caller. IPU_ERR_NOMEM. */
IPU_API IPU_NODISCARD ipu_status ipu_container_writer_create(ipu_container_writer **out);
/* Frees the writer and its copies of the blobs. Accepts NULL. */
IPU_API void ipu_container_writer_destroy(ipu_container_writer *w);
/* Append a blob. `name` is used for OPAQUE blobs only (1..255 bytes of UTF-8, copied) and must be
 * NULL otherwise; `id` is 0 except for PROGRAM blobs (unique ids). At most one METADATA and one
 * TENSOR_DATA blob. IPU_ERR_INVALID_ARGUMENT for any violation, IPU_ERR_NOMEM; after an error
 * the writer is unchanged and still usable. */
IPU_API IPU_NODISCARD ipu_status ipu_container_writer_add_blob(ipu_container_writer *w,
                                                               ipu_blob_type type, uint32_t id,
                                                               const char *name, const void *data,
                                                               size_t size);
IPU_API IPU_NODISCARD ipu_status ipu_container_writer_add_blob_ref(ipu_container_writer *w,
                                                                   ipu_blob_type type, uint32_t id,
                                                                   const char *name,
                                                                   const void *data, size_t size);
/* Override the compiler hash (default ipu_compiler_hash()); used by tests. Ignores NULL. */
IPU_API void ipu_container_writer_set_compiler_hash(ipu_container_writer *w, uint64_t hash);
/* Serialise to a buffer allocated through the library's allocator (ipu_alloc.h); the caller
 * owns *data_out and frees it with ipu_free() (plain free() only works with the system
 * allocator). */
IPU_API IPU_NODISCARD ipu_status ipu_container_writer_finish(ipu_container_writer *w,
                                                             void **data_out, size_t *size_out);
/* Serialise into the caller's buffer: *size_out is set to the image size; the image is written
 * when `dst` is not NULL (IPU_ERR_INVALID_ARGUMENT if `cap` is smaller). dst NULL: size only.
 * Allocates nothing. IPU_ERR_INVALID_STATE when no METADATA blob was added. */
IPU_API IPU_NODISCARD ipu_status ipu_container_writer_finish_into(ipu_container_writer *w,
                                                                  void *dst, size_t cap,
                                                                  size_t *size_out);
/* Serialise to a file: written to "<path>.tmp.<pid>", synced, then renamed over `path`, so a
 * reader never sees a half-written file; on error the temporary file is removed and `path` is
 * untouched. IPU_ERR_IO (with the OS error in the message), IPU_ERR_NOMEM, and the errors of
 * ipu_container_writer_finish. The writer stays usable. */
IPU_API IPU_NODISCARD ipu_status ipu_container_writer_write_file(ipu_container_writer *w,
                                                                 const char *path);

#ifdef __cplusplus
}
#endif
#endif
