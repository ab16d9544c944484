/* Requests: validation, submission (pushing slots), completion, waiting.
 * Protocol notes are in runtime_internal.h. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "runtime_internal.h"

/* ---- request object ----------------------------------------------------------------------- */

static void request_free(ipu_request *req) {
    ipu__free(req->inputs_copy);
    pthread_cond_destroy(&req->cv);
    pthread_mutex_destroy(&req->mu);
    ipu__free(req);
}

static ipu_status request_new(const ipu_request_desc *desc, uint32_t subgraph, ipu_request **out) {
    ipu_request *req = ipu__calloc(1, sizeof *req);
    if (!req) return ipu__fail(IPU_ERR_NOMEM, "submit: cannot allocate a request");
    pthread_condattr_t attr;
    int ok_attr = pthread_condattr_init(&attr) == 0;
    if (ok_attr) pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (!ok_attr || pthread_mutex_init(&req->mu, NULL) != 0) {
        if (ok_attr) pthread_condattr_destroy(&attr);
        ipu__free(req);
        return ipu__fail(IPU_ERR_INTERNAL, "submit: cannot initialise a request mutex");
    }
    if (pthread_cond_init(&req->cv, &attr) != 0) {
        pthread_condattr_destroy(&attr);
        pthread_mutex_destroy(&req->mu);
        ipu__free(req);
        return ipu__fail(IPU_ERR_INTERNAL, "submit: cannot initialise a request condvar");
    }
    pthread_condattr_destroy(&attr);
    atomic_init(&req->refs, 1);
    atomic_init(&req->state, IPU__REQ_PENDING);
    atomic_init(&req->finished, 0);
    atomic_init(&req->cancelled, 0);
    atomic_init(&req->cut, 0);
    atomic_init(&req->remaining, 0);
    req->status = IPU_ERR_INVALID_STATE;
    req->subgraph = subgraph;
    req->index_value = subgraph;
    req->t_submit = ipu__now_ns();
    req->done = desc->done;
    req->user_data = desc->user_data;
    *out = req;
    return IPU_OK;
}

void ipu__request_unref(ipu_request *req) {
    if (atomic_fetch_sub_explicit(&req->refs, 1, memory_order_acq_rel) == 1) request_free(req);
}

void ipu_request_release(ipu_request *req) {
    if (req) ipu__request_unref(req);
}

bool ipu__request_complete(ipu_runtime *rt, ipu_request *req, ipu_status st, const char *msg) {
    int expected = IPU__REQ_PENDING;
    if (!atomic_compare_exchange_strong(&req->state, &expected, IPU__REQ_CLAIMED)) return false;
    req->status = st;
    snprintf(req->msg, sizeof req->msg, "%s", st == IPU_OK || !msg ? "" : msg);
    atomic_store_explicit(&req->state, IPU__REQ_DONE, memory_order_release);
    ipu__stats_record(rt, st, req->t_submit);
    if (req->done) {
        /* The callback can read the details with ipu_last_error_message(). */
        if (st != IPU_OK) ipu__fail(st, "%s", req->msg);
        ipu__tl_in_callback++;
        req->done(req, st, req->user_data);
        ipu__tl_in_callback--;
    }
    pthread_mutex_lock(&req->mu);
    atomic_store_explicit(&req->finished, 1, memory_order_release);
    pthread_cond_broadcast(&req->cv);
    pthread_mutex_unlock(&req->mu);
    return true;
}

int ipu_request_is_done(const ipu_request *req) {
    return req && atomic_load_explicit(&req->state, memory_order_acquire) == IPU__REQ_DONE;
}

static ipu_status final_status(const ipu_request *req) {
    if (req->status != IPU_OK) return ipu__fail(req->status, "%s", req->msg);
    return IPU_OK;
}

ipu_status ipu_request_status(const ipu_request *req) {
    if (!req) return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_request_status: req is NULL");
    if (!ipu_request_is_done(req))
        return ipu__fail(IPU_ERR_INVALID_STATE, "request is still pending");
    return final_status(req);
}

ipu_status ipu_request_wait(ipu_request *req, uint64_t timeout_ns) {
    if (!req) return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_request_wait: req is NULL");
    if (!atomic_load_explicit(&req->finished, memory_order_acquire)) {
        if (timeout_ns == 0) return ipu__fail(IPU_ERR_TIMEOUT, "request is still pending");
        uint64_t now = ipu__now_ns();
        bool forever = timeout_ns >= UINT64_MAX - now;
        struct timespec ts = ipu__timespec_ns(forever ? 0 : now + timeout_ns);
        bool timed_out = false;
        pthread_mutex_lock(&req->mu);
        while (!atomic_load_explicit(&req->finished, memory_order_acquire)) {
            if (forever) {
                pthread_cond_wait(&req->cv, &req->mu);
            } else if (pthread_cond_timedwait(&req->cv, &req->mu, &ts) == ETIMEDOUT) {
                timed_out = !atomic_load_explicit(&req->finished, memory_order_acquire);
                break;
            }
        }
        pthread_mutex_unlock(&req->mu);
        if (timed_out)
            return ipu__fail(IPU_ERR_TIMEOUT, "request still pending after %llu ns",
                             (unsigned long long)timeout_ns);
    }
    return final_status(req);
}

/* ---- validation --------------------------------------------------------------------------- */

static const char *dir_name(ipu_direction d) { return d == IPU_DIR_INPUT ? "input" : "output"; }

/* "'X' (input float32[2,3], subgraph 1)" */
static const char *describe(const ipu_anchor_info *A, char *buf, size_t size) {
    int n = snprintf(buf, size, "'%s' (%s %s[", A->name, dir_name(A->direction),
                     ipu_dtype_name(A->desc.dtype) ? ipu_dtype_name(A->desc.dtype) : "?");
    for (uint32_t d = 0; d < A->desc.ndim && n > 0 && (size_t)n < size; d++)
        n += snprintf(buf + n, size - (size_t)n, d ? ",%lld" : "%lld", (long long)A->desc.dims[d]);
    if (n > 0 && (size_t)n < size) {
        if (A->subgraph == IPU_NO_INDEX)
            snprintf(buf + n, size - (size_t)n, "])");
        else
            snprintf(buf + n, size - (size_t)n, "], subgraph %u)", A->subgraph);
    }
    return buf;
}

/* First element of an integer (or float) buffer as a subgraph id. */
static uint32_t read_index(const void *p, ipu_dtype t) {
    const uint8_t *b = p;
    switch (t) {
        case IPU_DTYPE_UINT8:
        case IPU_DTYPE_INT8:
        case IPU_DTYPE_BOOL: return b[0];
        case IPU_DTYPE_UINT16:
        case IPU_DTYPE_INT16: return (uint32_t)b[0] | (uint32_t)b[1] << 8;
        case IPU_DTYPE_INT64:
        case IPU_DTYPE_UINT64: {
            uint64_t v = ipu__ld_u64(b);
            return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
        }
        case IPU_DTYPE_FLOAT32: {
            float f;
            memcpy(&f, b, 4);
            return f >= 0 && f < 4294967295.0f ? (uint32_t)f : UINT32_MAX;
        }
        default: return ipu__ld_u32(b);
    }
}

/* The request's buffer for anchor a (NULL: none given). */
static const char *buffer_of(const ipu_request_desc *d, const ipu_anchor_info *A, uint32_t a) {
    if (A->direction == IPU_DIR_INPUT) return d->inputs ? d->inputs[a] : NULL;
    return d->outputs ? d->outputs[a] : NULL;
}

static bool given(const ipu_request_desc *d, const ipu_anchor_info *A, uint32_t a) {
    return buffer_of(d, A, a) != NULL;
}

/* Check the request against the model; on success *sub_out is the selected subgraph.
 * Runs under submit_mu (reads streams[]). */
static ipu_status validate(const ipu_runtime *rt, const ipu_request_desc *d, uint32_t *sub_out) {
    char b1[256], b2[256];
    const bool strict = rt->cfg.validate_io_params != 0;
    if (rt->s->batching && (d->num_rows == 0 || d->num_rows > UINT32_MAX))
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                         "submit: num_rows must be 1..2^32-1 with "
                         "dynamic batching (batching_dim %u)",
                         rt->cfg.batching_dim);
    if (!rt->s->batching && d->num_batches == 0)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "submit: num_batches must be >= 1");
    for (uint32_t a = 0; a < rt->num_anchors; a++) {
        const ipu_anchor_info *A = &rt->s->anchors[a];
        bool wrong = A->direction == IPU_DIR_INPUT ? d->outputs && d->outputs[a]
                                                   : d->inputs && d->inputs[a];
        if (wrong)
            return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                             "submit: anchor %s is an %s; pass its buffer in %s[], not %s[]",
                             describe(A, b1, sizeof b1), dir_name(A->direction),
                             A->direction == IPU_DIR_INPUT ? "inputs" : "outputs",
                             A->direction == IPU_DIR_INPUT ? "outputs" : "inputs");
        if (!given(d, A, a) || a == rt->index_anchor) continue;
        if (rt->s->binds[a].kind == IPU_BIND_CALLBACK)
            return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                             "submit: anchor %s is served by a stream "
                             "callback and must not be given in requests",
                             describe(A, b1, sizeof b1));
        if (A->has_tensor_data && strict)
            return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                             "submit: anchor %s is a weight stored in "
                             "the container and cannot be fed",
                             describe(A, b1, sizeof b1));
    }
    uint32_t sub = d->subgraph;
    if (rt->index_anchor == IPU_NO_INDEX && rt->num_subgraphs == 1) {
        if (sub != IPU_NO_INDEX && sub != 0)
            return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                             "submit: subgraph %u requested but the "
                             "model has a single subgraph (0)",
                             sub);
        sub = 0;
    } else {
        if (sub != IPU_NO_INDEX && sub >= rt->num_subgraphs)
            return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                             "submit: subgraph %u requested but the "
                             "model has %u subgraphs",
                             sub, rt->num_subgraphs);
        uint32_t ia = rt->index_anchor;
        if (ia != IPU_NO_INDEX && d->inputs && d->inputs[ia]) {
            const ipu_anchor_info *I = &rt->s->anchors[ia];
            uint32_t v = read_index(d->inputs[ia], I->desc.dtype);
            if (v >= rt->num_subgraphs)
                return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                                 "submit: index anchor '%s' selects "
                                 "subgraph %u but the model has %u subgraphs",
                                 I->name, v, rt->num_subgraphs);
            if (sub != IPU_NO_INDEX && sub != v)
                return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                                 "submit: index anchor '%s' selects "
                                 "subgraph %u but the request asks for subgraph %u",
                                 I->name, v, sub);
            sub = v;
        }
        if (sub == IPU_NO_INDEX) {
            uint32_t first = IPU_NO_INDEX;
            for (uint32_t a = 0; a < rt->num_anchors; a++) {
                const ipu_anchor_info *A = &rt->s->anchors[a];
                if (a == ia || !ipu__streamed(rt, a) || A->subgraph == IPU_NO_INDEX ||
                    !given(d, A, a))
                    continue;
                if (first == IPU_NO_INDEX) {
                    first = a;
                } else if (A->subgraph != rt->s->anchors[first].subgraph) {
                    return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                                     "submit: cannot infer the "
                                     "subgraph: anchors %s and %s belong to different subgraphs",
                                     describe(&rt->s->anchors[first], b1, sizeof b1),
                                     describe(A, b2, sizeof b2));
                }
            }
            if (first == IPU_NO_INDEX)
                return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                                 "submit: cannot infer the subgraph of "
                                 "this fused model: no given anchor belongs to a single subgraph; "
                                 "set desc.subgraph%s%s%s",
                                 ia != IPU_NO_INDEX ? " or feed '" : "",
                                 ia != IPU_NO_INDEX ? rt->s->anchors[ia].name : "",
                                 ia != IPU_NO_INDEX ? "'" : "");
            sub = rt->s->anchors[first].subgraph;
        }
    }
    for (uint32_t a = 0; a < rt->num_anchors; a++) {
        const ipu_anchor_info *A = &rt->s->anchors[a];
        int role = ipu__anchor_role(rt, a, sub);
        if (role == IPU__ROLE_RING && !given(d, A, a))
            return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                             "submit: missing %s anchor %s required by "
                             "subgraph %u",
                             dir_name(A->direction), describe(A, b1, sizeof b1), sub);
        if (role == IPU__ROLE_NONE && strict && ipu__streamed(rt, a) && given(d, A, a))
            return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                             "submit: anchor %s does not belong to "
                             "subgraph %u (set validate_io_params=0 to ignore it)",
                             describe(A, b1, sizeof b1), sub);
    }
    *sub_out = sub;
    return IPU_OK;
}

/* ---- submission --------------------------------------------------------------------------- */

/* Done callback of every slot of a request (runs on the device thread, or on the thread that
 * disconnects the session). */
const atomic_int *ipu__request_cancel_flag(const ipu_slot *sl) {
    return &((const ipu_request *)sl->user_data)->cancelled;
}

bool ipu__request_alone(const ipu_slot *sl) {
    ipu_runtime *rt = ((const ipu_request *)sl->user_data)->rt;
    /* completions first: a submit meanwhile can only make the count larger (so it waits) */
    uint64_t done = atomic_load(&rt->st_completed) + atomic_load(&rt->st_failed);
    return atomic_load(&rt->st_submitted) - done <= 1;
}

void ipu_request_cancel(ipu_request *req) {
    if (req) atomic_store_explicit(&req->cancelled, 1, memory_order_relaxed);
}

static void slot_done(ipu_status st, void *ud) {
    ipu_request *req = ud;
    ipu_runtime *rt = req->rt;
    if (st != IPU_OK && st != IPU_ERR_CANCELLED) {
        char m[IPU__MSG_BYTES]; /* the session set the thread's last error to the message */
        snprintf(m, sizeof m, "%s", ipu_last_error_message());
        if (!ipu__closed(rt)) ipu__mark_failed(rt, st, m);
        ipu__request_complete(rt, req, st, m);
    } else {
        /* A cancelled iteration fails its own slots only, and the request completes with its
         * last slot (the device still reads its later input slots, quickly: their programs
         * stop at the first instruction). */
        if (st == IPU_ERR_CANCELLED) atomic_store_explicit(&req->cut, 1, memory_order_relaxed);
        if (atomic_fetch_sub(&req->remaining, 1) == 1) {
            bool cut = atomic_load_explicit(&req->cut, memory_order_relaxed);
            ipu__request_complete(rt, req, cut ? IPU_ERR_CANCELLED : IPU_OK,
                                  cut ? "the request was cancelled" : NULL);
        }
    }
    ipu__request_unref(req);
}

/* Under submit_mu: IPU_OK if the device is healthy. *retry: a failure is being handled and
 * auto_reset is on - wait (without submit_mu) and try again. */
static ipu_status health_check(ipu_runtime *rt, bool *retry) {
    *retry = false;
    if (atomic_load(&rt->health) == IPU__HEALTH_OK) return IPU_OK;
    ipu_status st = IPU_OK;
    pthread_mutex_lock(&rt->state_mu);
    int h = atomic_load(&rt->health);
    if (h == IPU__HEALTH_FAILING && rt->cfg.auto_reset)
        *retry = true;
    else if (h != IPU__HEALTH_OK)
        st = ipu__fail(IPU_ERR_NEEDS_RESET,
                       "submit: the device failed (%s: %s); call "
                       "ipu_runtime_reset (or set auto_reset)",
                       ipu_status_name(rt->fail_status), rt->fail_msg);
    pthread_mutex_unlock(&rt->state_mu);
    return st;
}

static void wait_recovery(ipu_runtime *rt) {
    pthread_mutex_lock(&rt->state_mu);
    while (atomic_load(&rt->health) == IPU__HEALTH_FAILING && !ipu__closed(rt))
        pthread_cond_wait(&rt->state_cv, &rt->state_mu);
    pthread_mutex_unlock(&rt->state_mu);
}

/* Bytes of anchor a's slot in one chunk of request d. */
static uint64_t slot_bytes(const ipu_runtime *rt, uint32_t a, const ipu_request_desc *d) {
    const ipu__geom *g = &rt->s->geom[a];
    if (!rt->s->batching) return rt->s->anchors[a].desc.nbytes;
    uint64_t n;
    return ipu__mul_u64(g->outer * g->inner, d->num_rows, &n) && n <= SIZE_MAX ? n : UINT64_MAX;
}

/* Slots per chunk; fails for requests that would queue nothing or too much. */
static ipu_status count_slots(const ipu_runtime *rt, const ipu_request_desc *d, uint32_t sub,
                              uint64_t *per_chunk) {
    uint64_t n = rt->index_anchor != IPU_NO_INDEX;
    for (uint32_t a = 0; a < rt->num_anchors; a++) {
        if (ipu__anchor_role(rt, a, sub) != IPU__ROLE_RING) continue;
        n++;
        if (slot_bytes(rt, a, d) == UINT64_MAX)
            return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                             "submit: %llu rows of anchor '%s' do not "
                             "fit in memory",
                             (unsigned long long)d->num_rows, rt->s->anchors[a].name);
    }
    if (n == 0)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                         "submit: every anchor of subgraph %u is "
                         "served by a stream callback: a request has nothing to queue",
                         sub);
    *per_chunk = n;
    return IPU_OK;
}

/* Bytes of anchor a's buffer in request d: every chunk (saturates, as slot_bytes). */
static uint64_t buffer_bytes(const ipu_runtime *rt, uint32_t a, const ipu_request_desc *d) {
    uint64_t nb = slot_bytes(rt, a, d), n;
    if (rt->s->batching) return nb;
    return ipu__mul_u64(nb, d->num_batches, &n) ? n : UINT64_MAX;
}

static bool ranges_overlap(const char *p, uint64_t np, const char *q, uint64_t nq) {
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
    return a < b ? b - a < np : a - b < nq;
}

/* Does input a share a byte with an output buffer of the request? */
static bool input_overlaps_output(const ipu_runtime *rt, const ipu_request_desc *d, uint32_t sub,
                                  uint32_t a) {
    const char *p = d->inputs[a];
    uint64_t np = buffer_bytes(rt, a, d);
    for (uint32_t b = 0; b < rt->num_anchors; b++) {
        if (rt->s->anchors[b].direction != IPU_DIR_OUTPUT ||
            ipu__anchor_role(rt, b, sub) != IPU__ROLE_RING)
            continue;
        if (ranges_overlap(p, np, d->outputs[b], buffer_bytes(rt, b, d))) return true;
    }
    return false;
}

/* A request spanning several iterations (N batches, or rows that may be split between device
 * batches) writes an iteration's outputs before later iterations read their inputs: an output
 * overlapping an input would overwrite inputs not read yet. Such inputs are copied here, into
 * one block owned by the request, and *d points at a desc whose inputs[] use the copies.
 * One-iteration requests read every input before writing: they need no copy. */
static ipu_status copy_overlapped_inputs(const ipu_runtime *rt, ipu_request *req,
                                         ipu_request_desc *d) {
    const uint32_t sub = req->subgraph, n = rt->num_anchors;
    if (rt->s->batching ? d->num_rows < 2 : d->num_batches < 2) return IPU_OK;
    uint64_t total = 0;
    for (uint32_t a = 0; a < n; a++) {
        if (rt->s->anchors[a].direction != IPU_DIR_INPUT ||
            ipu__anchor_role(rt, a, sub) != IPU__ROLE_RING || !input_overlaps_output(rt, d, sub, a))
            continue;
        total += (buffer_bytes(rt, a, d) + 63) & ~(uint64_t)63; /* the caller holds that much */
    }
    if (total == 0) return IPU_OK;
    const size_t table = (size_t)n * sizeof(void *);
    uint8_t *block = total <= SIZE_MAX - table - 64 ? ipu__malloc(table + 64 + (size_t)total)
                                                    : NULL;
    if (!block)
        return ipu__fail(IPU_ERR_NOMEM,
                         "submit: cannot allocate %llu bytes to copy the inputs "
                         "an output overlaps",
                         (unsigned long long)total);
    const void **ins = (const void **)(void *)block;
    uint8_t *data = (uint8_t *)(((uintptr_t)(block + table) + 63) & ~(uintptr_t)63);
    for (uint32_t a = 0; a < n; a++) {
        ins[a] = d->inputs[a];
        if (rt->s->anchors[a].direction != IPU_DIR_INPUT ||
            ipu__anchor_role(rt, a, sub) != IPU__ROLE_RING || !input_overlaps_output(rt, d, sub, a))
            continue;
        size_t nb = (size_t)buffer_bytes(rt, a, d);
        memcpy(data, d->inputs[a], nb);
        ins[a] = data;
        data += (nb + 63) & ~(size_t)63;
    }
    req->inputs_copy = block;
    d->inputs = ins;
    return IPU_OK;
}

/* Queue the slots of req; *pushed counts those queued. IPU_ERR_CLOSED / IPU_ERR_ABORTED when
 * the session stopped / the device failed first. Under submit_mu. */
static ipu_status push_request(ipu_runtime *rt, const ipu_request_desc *d, ipu_request *req,
                               uint64_t *pushed) {
    const uint32_t sub = req->subgraph;
    const uint64_t chunks = rt->s->batching ? 1 : d->num_batches;
    ipu_status st = IPU_OK;
    for (uint64_t k = 0; k < chunks && st == IPU_OK; k++) {
        if (rt->index_anchor != IPU_NO_INDEX) {
            ipu_slot sl = {&req->index_value, sizeof req->index_value, 0, slot_done, req};
            st = ipu__session_enqueue(rt->s, rt->index_anchor, &sl, UINT64_MAX, &rt->health);
            *pushed += st == IPU_OK;
        }
        for (int pass = 0; pass < 2 && st == IPU_OK; pass++) {
            ipu_direction dir = pass == 0 ? IPU_DIR_INPUT : IPU_DIR_OUTPUT;
            for (uint32_t a = 0; a < rt->num_anchors && st == IPU_OK; a++) {
                const ipu_anchor_info *A = &rt->s->anchors[a];
                if (A->direction != dir || ipu__anchor_role(rt, a, sub) != IPU__ROLE_RING) continue;
                uint8_t *base = dir == IPU_DIR_INPUT ? (uint8_t *)(uintptr_t)d->inputs[a]
                                                     : (uint8_t *)d->outputs[a];
                uint64_t nb = slot_bytes(rt, a, d);
                ipu_slot sl = {base + (size_t)(k * nb), nb,
                               rt->s->batching ? (uint32_t)d->num_rows : 0, slot_done, req};
                st = ipu__session_enqueue(rt->s, a, &sl, UINT64_MAX, &rt->health);
                *pushed += st == IPU_OK;
            }
        }
    }
    return st;
}

ipu_status ipu_runtime_submit(ipu_runtime *rt, const ipu_request_desc *desc, ipu_request **out) {
    if (!rt || !desc || !out)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_runtime_submit: NULL argument");
    if (ipu__tl_in_callback)
        return ipu__fail(IPU_ERR_INVALID_STATE,
                         "submit called from a stream or done callback "
                         "(the device thread): it could wait forever for queue space");
    for (;;) {
        if (ipu__closed(rt)) return ipu__fail(IPU_ERR_CLOSED, "submit: the runtime is closed");
        ipu_request *req = NULL;
        uint32_t sub = 0;
        uint64_t per_chunk = 0;
        bool retry = false;
        /* The mutex is taken even with thread_safe == 0: uncontended it costs ~20 ns and it is
         * what makes each ring single-producer and a request's slots contiguous. */
        pthread_mutex_lock(&rt->submit_mu);
        rt->submitted = true;
        ipu_status st = ipu__closed(rt) ? ipu__fail(IPU_ERR_CLOSED, "submit: the runtime is closed")
                                        : validate(rt, desc, &sub);
        if (st == IPU_OK) st = count_slots(rt, desc, sub, &per_chunk);
        if (st == IPU_OK) st = health_check(rt, &retry);
        if (st == IPU_OK && retry) {
            pthread_mutex_unlock(&rt->submit_mu);
            wait_recovery(rt);
            continue;
        }
        if (st == IPU_OK && !rt->device_started) st = ipu__start_device(rt);
        if (st == IPU_OK) st = request_new(desc, sub, &req);
        ipu_request_desc d = *desc;
        if (st == IPU_OK && (st = copy_overlapped_inputs(rt, req, &d)) != IPU_OK) request_free(req);
        if (st != IPU_OK) {
            pthread_mutex_unlock(&rt->submit_mu);
            return st;
        }
        req->rt = rt;
        uint64_t total = per_chunk * (rt->s->batching ? 1 : desc->num_batches), pushed = 0;
        /* One reference per slot, taken up front; slots never pushed give theirs back below.
         * The caller's reference (the initial 1) keeps the count above zero meanwhile. */
        atomic_fetch_add(&req->refs, total);
        atomic_store(&req->remaining, total);
        atomic_fetch_add_explicit(&rt->st_submitted, 1, memory_order_relaxed);
        st = push_request(rt, &d, req, &pushed);
        if (st != IPU_OK && pushed == 0) {
            /* Nothing refers to the request: the submit fails (closed) or is retried (the
             * health check reports the failure or waits for the automatic reset). */
            atomic_fetch_sub_explicit(&rt->st_submitted, 1, memory_order_relaxed);
            pthread_mutex_unlock(&rt->submit_mu);
            request_free(req);
            if (st == IPU_ERR_CLOSED) return ipu__fail(st, "submit: the runtime is closed");
            continue;
        }
        if (st == IPU_ERR_CLOSED) {
            /* Partly queued when the session stopped: the request was accepted and completes,
             * exactly once, with IPU_ERR_CLOSED. Its queued slots may all have been consumed
             * already, so it is handed to close() as the runtime's single orphan (holding one
             * reference): close() takes submit_mu after stopping the session - so after this
             * store - and completes it on the closing thread, like every request failed by
             * close. Later submitters see `closed` under submit_mu and queue nothing. */
            atomic_fetch_sub(&req->refs, total - pushed - 1);
            rt->orphan = req;
        } else if (st != IPU_OK) {
            /* Partly queued when the device failed: it fails now; its queued slots are failed
             * by the device's disconnect (after this thread releases submit_mu). */
            atomic_fetch_sub(&req->refs, total - pushed);
            char m[IPU__MSG_BYTES + 64];
            pthread_mutex_lock(&rt->state_mu);
            ipu_status fst = rt->fail_status;
            snprintf(m, sizeof m, "failed by an earlier iteration failure: %s", rt->fail_msg);
            pthread_mutex_unlock(&rt->state_mu);
            ipu__request_complete(rt, req, fst, m);
        }
        pthread_mutex_unlock(&rt->submit_mu);
        *out = req;
        return IPU_OK;
    }
}

/* ---- inline execution --------------------------------------------------------------------- */

/* Does the Main program run on the caller's buffer of anchor a (runtime.c plan_in_place)? Only
 * if the buffer is aligned for its dtype and, for an output, shares no byte with another
 * anchor's buffer of the request (the program would read what it has already overwritten). */
static bool use_in_place(const ipu_runtime *rt, const ipu_request_desc *d, uint32_t a) {
    const ipu_session *s = rt->s;
    const ipu_anchor_info *A = &s->anchors[a];
    const char *p = buffer_of(d, A, a);
    size_t es = ipu_dtype_size(A->desc.dtype);
    if (!rt->in_place[a] || !p || (es && (uintptr_t)p % es)) return false;
    for (uint32_t b = 0; A->direction == IPU_DIR_OUTPUT && b < rt->num_anchors; b++) {
        const ipu_anchor_info *B = &s->anchors[b];
        const char *q = buffer_of(d, B, b);
        if (b != a && q && p < q + B->desc.nbytes && q < p + A->desc.nbytes) return false;
    }
    return true;
}

/* One iteration of a validated one-batch request on this thread: what the device's serial
 * loop does for it (copy in, Main program, copy out; or the caller's buffers in place), with
 * the same stats, tracepoints and failure rules. */
static ipu_status run_inline(ipu_runtime *rt, const ipu_request_desc *d) {
    ipu_session *s = rt->s;
    const uint64_t t_submit = ipu__now_ns();
    uint64_t t0 = t_submit;
    if (s->prewake) ipu__pool_prewake(s->pool); /* the helpers wake while inputs are bound */
    atomic_fetch_add_explicit(&rt->st_submitted, 1, memory_order_relaxed);
    uint32_t bound = 0; /* buffers used in place */
    for (uint32_t a = 0; a < rt->num_anchors; a++) {
        const ipu_anchor_info *A = &s->anchors[a];
        if (A->direction != IPU_DIR_INPUT || !ipu__in_subgraph(s, a, 0)) continue;
        if (s->binds[a].kind == IPU_BIND_QUEUE) {
            if (use_in_place(rt, d, a))
                bound++, s->tensor_ptr[A->tensor] = (void *)d->inputs[a];
            else
                memcpy(s->tensor_ptr[A->tensor], d->inputs[a], (size_t)A->desc.nbytes);
        } else if (s->binds[a].kind == IPU_BIND_EMPTY) {
            memset(s->tensor_ptr[A->tensor], 0, (size_t)A->desc.nbytes);
        }
    }
    for (uint32_t a = 0; a < rt->num_anchors; a++) {
        const ipu_anchor_info *A = &s->anchors[a];
        if (A->direction == IPU_DIR_OUTPUT && ipu__anchor_role(rt, a, 0) == IPU__ROLE_RING &&
            use_in_place(rt, d, a))
            bound++, s->tensor_ptr[A->tensor] = d->outputs[a];
    }
    if (s->trace) ipu__trace_record(s->trace, IPU_TRACE_LOAD, 0, t0);
    t0 = ipu__trace_start(s);
    const ipu__frame f = {s->exe, s->tensor_ptr, NULL, 0, ipu__frame_stop, s};
    s->poll = rt->poll; /* the device is parked: this thread alone runs programs now */
    s->poll_ud = rt->poll_ud;
    s->poll_t0 = t_submit;
    ipu_status st = ipu__run_program(s, &f, s->exe->main_programs[0]);
    s->poll = NULL;
    if (s->trace) ipu__trace_record(s->trace, IPU_TRACE_COMPUTE, 0, t0);
    for (uint32_t a = 0; bound && a < rt->num_anchors; a++)
        if (rt->in_place[a]) s->tensor_ptr[s->anchors[a].tensor] = rt->in_place[a];
    if (bound) atomic_fetch_add_explicit(&rt->st_in_place, bound, memory_order_relaxed);
    t0 = ipu__trace_start(s);
    if (st == IPU_ERR_CANCELLED) { /* the request's own end: the device stays healthy */
        ipu__stats_record(rt, st, t_submit);
        return st; /* the message is the program's */
    }
    if (st != IPU_OK) {
        char m[IPU__MSG_BYTES];
        snprintf(m, sizeof m, "Main program of subgraph 0 failed: %.300s",
                 ipu_last_error_message());
        ipu__mark_failed(rt, st, m); /* nothing else is queued: no disconnect */
        ipu__recover(rt);
        ipu__stats_record(rt, st, t_submit);
        return ipu__fail(st, "%s", m);
    }
    for (uint32_t a = 0; a < rt->num_anchors; a++) {
        const ipu_anchor_info *A = &s->anchors[a];
        if (A->direction == IPU_DIR_OUTPUT && ipu__anchor_role(rt, a, 0) == IPU__ROLE_RING &&
            !use_in_place(rt, d, a))
            memcpy(d->outputs[a], s->tensor_ptr[A->tensor], (size_t)A->desc.nbytes);
    }
    if (s->trace) ipu__trace_record(s->trace, IPU_TRACE_STORE, 0, t0);
    atomic_fetch_add_explicit(&s->st_iterations, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->st_steps, 1, memory_order_relaxed);
    ipu__stats_record(rt, IPU_OK, t_submit);
    return IPU_OK;
}

/* Under submit_mu: may this request run inline (given a claimed or never started device)? */
static bool inline_allowed(const ipu_runtime *rt) {
    if (ipu__closed(rt) || atomic_load(&rt->health) != IPU__HEALTH_OK ||
        atomic_load(&rt->task_pending))
        return false;
    for (uint32_t a = 0; a < rt->num_anchors; a++)
        if (rt->s->binds[a].kind == IPU_BIND_CALLBACK) return false;
    return true;
}

/* Every ring empty: every request submitted so far has completed (the device is parked at the
 * start of a step), so running this one now keeps submission order. */
static bool rings_empty(const ipu_runtime *rt) {
    for (uint32_t a = 0; a < rt->num_anchors; a++)
        if (rt->s->rings[a] && ipu_ring_size(rt->s->rings[a]) != 0) return false;
    return true;
}

/* A runtime whose requests run inline only without concurrent callers (inline_alone): may
 * this one, `others` callers being inside ipu_runtime_execute with it? Not for IPU__CROWD_NS
 * after two callers were last seen at once: under a steady load from several threads, one
 * that happens to find itself alone would hold the device for a request that could run
 * beside another. */
#define IPU__CROWD_NS 100000000u
static bool uncrowded(ipu_runtime *rt, unsigned others) {
    uint64_t now = ipu__now_ns();
    if (others) {
        atomic_store_explicit(&rt->crowded_ns, now, memory_order_relaxed);
        return false;
    }
    uint64_t last = atomic_load_explicit(&rt->crowded_ns, memory_order_relaxed);
    return last == 0 || now - last > IPU__CROWD_NS;
}

static ipu_status execute(ipu_runtime *rt, const ipu_request_desc *desc, ipu_request **out,
                          unsigned others) {
    if (rt->inline_ok && !desc->done && desc->num_batches == 1 && !ipu__closed(rt) &&
        (!rt->inline_alone || (uncrowded(rt, others) && !ipu__pool_on_helper_cpu(rt->s->pool)))) {
        pthread_mutex_lock(&rt->submit_mu);
        bool claimed = false, own = inline_allowed(rt);
        if (own && rt->device_started) {
            claimed = ipu__claim_device(rt->s);
            own = claimed && rings_empty(rt);
        }
        if (own) {
            uint32_t sub = 0;
            rt->submitted = true;
            ipu_status st = validate(rt, desc, &sub);
            if (st == IPU_OK) st = run_inline(rt, desc);
            if (claimed) ipu__release_device(rt->s);
            pthread_mutex_unlock(&rt->submit_mu);
            return st;
        }
        if (claimed) ipu__release_device(rt->s);
        pthread_mutex_unlock(&rt->submit_mu);
    }
    return ipu_runtime_submit(rt, desc, out);
}

ipu_status ipu_runtime_execute(ipu_runtime *rt, const ipu_request_desc *desc, ipu_request **out) {
    if (!rt || !desc || !out)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_runtime_execute: NULL argument");
    *out = NULL;
    if (ipu__tl_in_callback)
        return ipu__fail(IPU_ERR_INVALID_STATE,
                         "execute called from a stream or done callback "
                         "(the device thread): it could wait forever for queue space");
    unsigned others = atomic_fetch_add_explicit(&rt->executing, 1, memory_order_relaxed);
    ipu_status st = execute(rt, desc, out, others);
    atomic_fetch_sub_explicit(&rt->executing, 1, memory_order_relaxed);
    return st;
}
