/*
 * inagg: in-network aggregation for distributed training, the worker side
 * as a C library (libinagg_capi.so, built by `cargo build --release -p
 * inagg-capi` into target/release/).
 *
 * A worker joins one job on a switch (the emulator, bmv2 or Tofino) and
 * all-reduces buffers in place: each worker sends its values once and
 * receives the sum once. Every worker of a job makes the same calls with the
 * same lengths, in the same order.
 *
 *     inagg_worker *w = inagg_worker_new(
 *         "switch=127.0.0.1:47000 bind=127.0.0.1:5000 job=1 worker=0 workers=2 pool_size=128");
 *     if (!w) { fprintf(stderr, "%s\n", inagg_last_error()); return 1; }
 *     if (inagg_allreduce_f32(w, grad, n, NULL) != INAGG_OK) { ... inagg_last_error() ... }
 *     inagg_worker_free(w);
 *
 * Every function returns INAGG_OK (0) or a negative INAGG_E_* code and
 * leaves a message for inagg_last_error() on the calling thread. None
 * aborts or unwinds into the caller. A worker may be called from any
 * thread, one call at a time (concurrent calls wait for each other).
 *
 * The byte layout on the wire and the error bound of float sums:
 * docs/PROTOCOL.md. The configuration keys: capi/README.md.
 */
#ifndef INAGG_H
#define INAGG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header describes; compare with inagg_abi_version(). */
#define INAGG_ABI_VERSION 1u

#define INAGG_OK 0
/* A NULL pointer, a misaligned buffer, a length too large: the caller's. */
#define INAGG_E_ARGUMENT (-1)
/* The configuration string is unusable, or the controller refused it. */
#define INAGG_E_CONFIG (-2)
/* A socket failed, or the controller could not be reached. */
#define INAGG_E_IO (-3)
/* No progress within `timeout` seconds: the switch, the job or another
 * worker is not as this worker expects (the message says which). */
#define INAGG_E_TIMEOUT (-4)
/* The DPDK data path failed. */
#define INAGG_E_DPDK (-5)
/* An earlier all-reduce of this worker failed: its job's slots may hold
 * that call's partial state. Free the worker and create new ones for every
 * worker of the job (a new session), or register again with the controller. */
#define INAGG_E_FAILED (-6)
/* A bug in inagg (a panic caught at the boundary). */
#define INAGG_E_PANIC (-7)

typedef struct InaggWorker inagg_worker;

/* Counters of one all-reduce on one worker. */
typedef struct inagg_stats {
    uint64_t packets_sent;      /* retransmissions included */
    uint64_t packets_received;
    uint64_t retransmissions;   /* packets sent again after a timeout */
    uint64_t timeouts;          /* slot timeouts that fired */
    uint64_t stale_results;     /* duplicates and late copies */
    uint64_t handshakes;        /* slots that joined this session */
    uint64_t handshake_retries;
    uint64_t malformed;         /* datagrams that did not parse */
    uint64_t foreign;           /* valid packets for another job or kind */
    uint64_t send_errors;
    uint64_t bytes_sent;
    uint64_t bytes_received;
    uint64_t payload_bytes;     /* bytes of the buffer reduced */
    uint64_t elapsed_ns;        /* wall time of the call */
} inagg_stats;

uint32_t inagg_abi_version(void);
const char *inagg_version(void);

/* The message of the last failed call on this thread ("" after success);
 * valid until the thread's next inagg call. */
const char *inagg_last_error(void);
/* The code of the last call on this thread. */
int inagg_last_error_code(void);

/* A worker from `key=value` entries separated by spaces (a value with
 * spaces goes in double quotes). Without a controller: switch (default
 * 127.0.0.1:47000), bind, job (its id), worker (or rank), workers,
 * pool_size, elements (K, default 64), generation. With
 * controller=ADDR: job (its name), rank, bind, token, register_wait (s,
 * default 60); the controller gives the rest and this call waits for it to
 * admit the job. Either way: tree_rank, priority, timeout (s, default 10).
 * NULL on failure: inagg_last_error() says why. */
inagg_worker *inagg_worker_new(const char *config);

/* Frees a worker; NULL is ignored. No call on it may be running. */
void inagg_worker_free(inagg_worker *worker);

/* Sums `len` floats across the job's workers in place, quantized to int32
 * with a shared block exponent: within n * 2^(E + ceil(log2 n) - 31) +
 * 2^-23 |sum| of the exact sum (docs/PROTOCOL.md). `data` is 4-byte
 * aligned; `stats` may be NULL. */
int inagg_allreduce_f32(inagg_worker *worker, float *data, size_t len, inagg_stats *stats);

/* Sums `len` int32 across the job's workers in place, exactly (wrapping on
 * overflow, as the switch does). */
int inagg_allreduce_i32(inagg_worker *worker, int32_t *data, size_t len, inagg_stats *stats);

/* The worker's parameters as a JSON object (job, worker, rank, workers,
 * pool_size, elements, generation, priority, switch, local, backend,
 * timeout_s), written like snprintf: returns the JSON's length (call again
 * with a larger buffer if it is not below `size`), or a negative code. */
int inagg_worker_info(const inagg_worker *worker, char *out, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* INAGG_H */
