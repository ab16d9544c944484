/* Status, dtype and opcode tables (from the .def files), per-thread error messages, hashing. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "ipu_internal.h"

const char *ipu_status_str(ipu_status s) {
    switch (s) {
#define IPU_STATUS(name, value, msg) \
    case IPU_##name:                 \
        return msg;
#include "ipu/ipu_status.def"
#undef IPU_STATUS
        default: return "unknown status";
    }
}

const char *ipu_status_name(ipu_status s) {
    switch (s) {
#define IPU_STATUS(name, value, msg) \
    case IPU_##name:                 \
        return #name;
#include "ipu/ipu_status.def"
#undef IPU_STATUS
        default: return "UNKNOWN";
    }
}

size_t ipu_dtype_size(ipu_dtype t) {
    switch (t) {
#define IPU_DTYPE(name, value, size, str) \
    case IPU_DTYPE_##name:                \
        return size;
#include "ipu/ipu_dtype.def"
#undef IPU_DTYPE
        default: return 0;
    }
}

const char *ipu_dtype_name(ipu_dtype t) {
    switch (t) {
#define IPU_DTYPE(name, value, size, str) \
    case IPU_DTYPE_##name:                \
        return str;
#include "ipu/ipu_dtype.def"
#undef IPU_DTYPE
        default: return NULL;
    }
}

const char *ipu_opcode_name(ipu_opcode op) {
    switch (op) {
#define IPU_OP(name, value, str, min_in, max_in, n_out, ...) \
    case IPU_OP_##name:                                      \
        return str;
#include "ipu/ipu_ops.def"
#undef IPU_OP
        default: return NULL;
    }
}

ipu_status ipu_opcode_arity(ipu_opcode op, uint32_t *min_in_out, uint32_t *max_in_out,
                            uint32_t *n_out_out) {
    if (!min_in_out || !max_in_out || !n_out_out)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_opcode_arity: NULL output pointer");
    switch (op) {
#define IPU_OP(name, value, str, min_in, max_in, n_out, ...) \
    case IPU_OP_##name:                                      \
        *min_in_out = min_in;                                \
        *max_in_out = max_in;                                \
        *n_out_out = n_out;                                  \
        return IPU_OK;
#include "ipu/ipu_ops.def"
#undef IPU_OP
        default: return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "unknown opcode %d", (int)op);
    }
}

const char *ipu_unary_fn_name(int fn) {
    switch (fn) {
#define IPU_UNARY(name, value) \
    case value:                \
        return #name;
#include "ipu/ipu_fns.def"
#undef IPU_UNARY
        default: return NULL;
    }
}

const char *ipu_binary_fn_name(int fn) {
    switch (fn) {
#define IPU_BINARY(name, value) \
    case value:                 \
        return #name;
#include "ipu/ipu_fns.def"
#undef IPU_BINARY
        default: return NULL;
    }
}

const char *ipu_reduce_fn_name(int fn) {
    switch (fn) {
#define IPU_REDUCE(name, value) \
    case value:                 \
        return #name;
#include "ipu/ipu_fns.def"
#undef IPU_REDUCE
        default: return NULL;
    }
}

const char *ipu_act_fn_name(int fn) {
    switch (fn) {
#define IPU_ACT(name, value) \
    case value:              \
        return #name;
#include "ipu/ipu_fns.def"
#undef IPU_ACT
        default: return NULL;
    }
}

static _Thread_local char last_error[512];

ipu_status ipu__fail(ipu_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    ipu__log(IPU_LOG_DEBUG, "%s: %s", ipu_status_name(s), last_error); /* no-op when off */
    return s;
}

/* ---- log callback ---- */

/* log_level is read without the lock on every log site (cheap when logging is off); the
 * callback and its user data change together under log_mu, which also serialises calls. */
static atomic_int log_level = IPU_LOG_OFF;
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static ipu_log_fn log_fn;
static void *log_user;

void ipu_set_log_callback(ipu_log_fn fn, void *user_data, ipu_log_level min_level) {
    if (!fn || (int)min_level < IPU_LOG_DEBUG || (int)min_level > IPU_LOG_OFF)
        min_level = IPU_LOG_OFF;
    pthread_mutex_lock(&log_mu);
    log_fn = min_level == IPU_LOG_OFF ? NULL : fn;
    log_user = user_data;
    atomic_store(&log_level, (int)min_level);
    pthread_mutex_unlock(&log_mu);
}

const char *ipu_log_level_name(ipu_log_level level) {
    switch (level) {
        case IPU_LOG_DEBUG: return "debug";
        case IPU_LOG_INFO: return "info";
        case IPU_LOG_WARNING: return "warning";
        case IPU_LOG_ERROR: return "error";
        case IPU_LOG_OFF: return "off";
        default: return NULL;
    }
}

bool ipu__log_enabled(ipu_log_level level) {
    return (int)level >= atomic_load_explicit(&log_level, memory_order_relaxed);
}

void ipu__log(ipu_log_level level, const char *fmt, ...) {
    if (!ipu__log_enabled(level)) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&log_mu);
    if (log_fn && (int)level >= atomic_load(&log_level)) log_fn(level, msg, log_user);
    pthread_mutex_unlock(&log_mu);
}

void ipu__clear_error(void) { last_error[0] = '\0'; }

const char *ipu_last_error_message(void) { return last_error; }

/* ipu_hash64: 32 bytes per round in 4 lanes, multiply-xorshift mixing (fast enough to check a multi-GB
 * file at memory speed). Specified in docs/popef.md. */
static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

uint64_t ipu_hash64(const void *data, size_t size, uint64_t seed) {
    const uint8_t *p = data;
    uint64_t h[4] = {seed ^ 0x9e3779b97f4a7c15ULL, seed + 0x632be59bd9b4e019ULL,
                     seed ^ 0x85ebca77c2b2ae63ULL, seed + 0x27d4eb2f165667c5ULL};
    size_t i = 0;
    for (; i + 32 <= size; i += 32) {
        for (int k = 0; k < 4; k++) {
            h[k] = (h[k] ^ ipu__ld_u64(p + i + 8 * (size_t)k)) * 0x9fb21c651e98df25ULL;
            h[k] ^= h[k] >> 29;
        }
    }
    uint64_t acc = (uint64_t)size;
    for (int k = 0; k < 4; k++) acc = mix64(acc ^ h[k]);
    for (; i + 8 <= size; i += 8) acc = mix64(acc ^ ipu__ld_u64(p + i));
    uint64_t tail = 0;
    for (size_t j = 0; i + j < size; j++) tail |= (uint64_t)p[i + j] << (8 * j);
    return mix64(acc ^ tail ^ 0xa0761d6478bd642fULL);
}

uint64_t ipu_compiler_hash(void) {
    return ipu_hash64(IPU_VERSION_STRING, strlen(IPU_VERSION_STRING), 0);
}
