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
#define INAGG_ABI_VERSION 2u

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
 * admit the job. Either way: tree_rank, priority, timeout (s, default 10),
 * backend (socket; shm with shm=PATH, the socket of `inagg emu --shm PATH`;
 * or dpdk with eal="...", dpdk_port, switch_mac, queues).
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

/* Sums `len` IEEE binary16 values (their bit patterns, 2-byte aligned)
 * across the job's workers in place: widened to float, all-reduced as
 * inagg_allreduce_f32 does (the same packets: workers of one job may mix
 * the two) and rounded back to nearest-even, so within the float bound
 * plus 2^-10 (|sum| + that bound) + 2^-24; a sum past 65504 is infinite. */
int inagg_allreduce_f16(inagg_worker *worker, uint16_t *data, size_t len, inagg_stats *stats);

/* inagg_allreduce_f16 for bfloat16 values (the top halves of floats):
 * 2^-7 and 2^-133 in its bound. */
int inagg_allreduce_bf16(inagg_worker *worker, uint16_t *data, size_t len, inagg_stats *stats);

/* Many tensors per step, most urgent first (P3, ByteScheduler; FIFO for
 * comparison), with Geryon's priority classes on the packets: start a
 * schedule, submit each gradient as back-propagation produces it, and
 * take each sum as it completes. The schedule runs on a thread of its own;
 * the worker's plain all-reduces are refused until inagg_sched_end.
 *
 *     inagg_sched_begin(w, "p3", 65536, 1, layers, INAGG_DTYPE_F32);
 *     for (l = layers; l-- > 0;)                // backward: last layer first
 *         inagg_sched_submit_f32(w, grad[l], len[l], l, l < layers / 3, NULL);
 *     for (i = 0; i < layers; i++)              // first layer first, under p3
 *         inagg_sched_wait(w, &seq);            // grad[seq] holds its sum
 *     inagg_sched_end(w, &stats, &epochs);
 *
 * Every worker submits the same tensors (lengths, ranks, classes) in the
 * same order; the workers agree through the switch on which slices go in
 * each epoch (host-agent/src/sched.rs). */
#define INAGG_DTYPE_F32 0
#define INAGG_DTYPE_I32 1
#define INAGG_DTYPE_F16 2
#define INAGG_DTYPE_BF16 3

/* policy: "fifo", "p3" (credit 1) or "bytescheduler"; slice: elements per
 * slice (rounded up to whole packets, at most 2^30); credit: slices per
 * epoch (at most 2^16); tensors: at most 2^24. Beyond these (a negative
 * number passed as a size_t, say): INAGG_E_ARGUMENT. */
int inagg_sched_begin(inagg_worker *worker, const char *policy, size_t slice, size_t credit,
                      size_t tensors, int dtype);
/* rank: lower is served first (the layer's place in the forward pass);
 * class: the packets' priority class. `data` stays valid and untouched
 * until inagg_sched_wait reports its number (`*seq`, from 0 in submission
 * order); the sum is written into it then. */
int inagg_sched_submit_f32(inagg_worker *worker, float *data, size_t len, uint32_t rank,
                           uint8_t priority_class, size_t *seq);
int inagg_sched_submit_i32(inagg_worker *worker, int32_t *data, size_t len, uint32_t rank,
                           uint8_t priority_class, size_t *seq);
/* 16-bit floats as their bit patterns. A schedule counts its workers in
 * its tensors' type: at most 2048 workers for f16, 256 for bf16. */
int inagg_sched_submit_f16(inagg_worker *worker, uint16_t *data, size_t len, uint32_t rank,
                           uint8_t priority_class, size_t *seq);
int inagg_sched_submit_bf16(inagg_worker *worker, uint16_t *data, size_t len, uint32_t rank,
                            uint8_t priority_class, size_t *seq);
/* Blocks for the next completed sum; INAGG_E_ARGUMENT instead of blocking
 * when every submitted tensor has been reported. */
int inagg_sched_wait(inagg_worker *worker, size_t *seq);
/* Ends the schedule (an error, and a failed worker, unless every tensor was
 * submitted and reported); `transport`: counters over the epochs; `epochs`:
 * epochs run. Either may be NULL. */
int inagg_sched_end(inagg_worker *worker, inagg_stats *transport, uint64_t *epochs);

/* The worker's parameters as a JSON object (job, worker, rank, workers,
 * pool_size, elements, generation, priority, switch, local, backend,
 * timeout_s), written like snprintf: returns the JSON's length (call again
 * with a larger buffer if it is not below `size`), or a negative code. */
int inagg_worker_info(const inagg_worker *worker, char *out, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* INAGG_H */
