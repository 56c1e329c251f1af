/*
 * One worker of a job, in C: all-reduces LEN int32, LEN floats and LEN
 * bfloat16 values whose sums it can predict, and checks them.
 *
 *     cargo build --release -p inagg-capi
 *     cc -std=c11 -Icapi/include capi/examples/allreduce.c -Ltarget/release \
 *        -Wl,-rpath,$PWD/target/release -linagg_capi -o allreduce
 *     ./allreduce "switch=127.0.0.1:47000 bind=127.0.0.1:5000 job=1 worker=0 workers=2 pool_size=128" 1000000
 *
 * Exit status: 0 verified, 1 a wrong sum or a failed all-reduce, 2 bad
 * arguments or configuration.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inagg.h"

/* Worker `rank`'s int32 at element i; sums wrap, as the switch's do. */
static int32_t pattern_i32(unsigned rank, size_t i) {
    return (int32_t)((uint32_t)i * 7919u + (uint32_t)rank * 1000003u);
}

/* Worker `rank`'s float at element i: multiples of 1/4 below 250 n, far
 * coarser than the quantum (2^-20 or finer here), so the sum is exact. */
static float pattern_f32(unsigned rank, size_t i) {
    return (float)(i % 1000) * 0.25f * (float)(rank + 1) * ((i & 1) ? -1.0f : 1.0f);
}

/* Worker `rank`'s bfloat16 at element i: small integers. Their sums are
 * multiples of m = n (n + 1) / 2 of magnitude at most 32 m, which bfloat16
 * (8 significant bits) holds exactly for n up to 7. */
static float pattern_bf16(unsigned rank, size_t i) {
    return (float)((int)(i % 64) - 32) * (float)(rank + 1);
}

/* A float's bfloat16 bit pattern, for floats that bfloat16 holds exactly. */
static uint16_t bf16_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)(u >> 16);
}

static float bf16_value(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* The unsigned number after "key": in the worker's info JSON. */
static int info_field(const char *json, const char *key, unsigned *out) {
    char pattern[32];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *at = strstr(json, pattern);
    return at && sscanf(at + strlen(pattern), "%u", out) == 1 ? 0 : -1;
}

static int fail(const char *what) {
    fprintf(stderr, "allreduce: %s: %s\n", what, inagg_last_error());
    return inagg_last_error_code() == INAGG_E_CONFIG ? 2 : 1;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: allreduce CONFIG LEN\n");
        return 2;
    }
    char *end;
    unsigned long long len = strtoull(argv[2], &end, 10);
    if (*end != '\0' || len == 0 || len > (1ull << 30)) {
        fprintf(stderr, "allreduce: LEN %s: give 1 to 2^30 elements\n", argv[2]);
        return 2;
    }
    if (inagg_abi_version() != INAGG_ABI_VERSION) {
        fprintf(stderr, "allreduce: library ABI %u, header %u\n", inagg_abi_version(), INAGG_ABI_VERSION);
        return 2;
    }
    inagg_worker *w = inagg_worker_new(argv[1]);
    if (!w) return fail("config");

    char info[1024];
    unsigned rank, workers;
    int n = inagg_worker_info(w, info, sizeof info);
    if (n < 0 || (size_t)n >= sizeof info || info_field(info, "worker", &rank) ||
        info_field(info, "workers", &workers)) {
        fprintf(stderr, "allreduce: unreadable worker info: %s\n", n < 0 ? inagg_last_error() : info);
        inagg_worker_free(w);
        return 1;
    }

    int32_t *ints = malloc(len * sizeof *ints);
    float *floats = malloc(len * sizeof *floats);
    uint16_t *brains = malloc(len * sizeof *brains);
    if (!ints || !floats || !brains || workers > 7) {
        fprintf(stderr, "allreduce: out of memory, or more than 7 workers (bfloat16 sums inexact)\n");
        return 1;
    }
    for (size_t i = 0; i < len; i++) {
        ints[i] = pattern_i32(rank, i);
        floats[i] = pattern_f32(rank, i);
        brains[i] = bf16_bits(pattern_bf16(rank, i));
    }
    inagg_stats si, sf, sb;
    if (inagg_allreduce_i32(w, ints, len, &si) != INAGG_OK) return fail("int32 all-reduce");
    if (inagg_allreduce_f32(w, floats, len, &sf) != INAGG_OK) return fail("float all-reduce");
    if (inagg_allreduce_bf16(w, brains, len, &sb) != INAGG_OK) return fail("bfloat16 all-reduce");

    size_t wrong = 0;
    for (size_t i = 0; i < len; i++) {
        uint32_t want_i = 0;
        double want_f = 0, want_b = 0;
        for (unsigned r = 0; r < workers; r++) {
            want_i += (uint32_t)pattern_i32(r, i);
            want_f += pattern_f32(r, i);
            want_b += pattern_bf16(r, i);
        }
        if ((uint32_t)ints[i] != want_i || (double)floats[i] != want_f ||
            (double)bf16_value(brains[i]) != want_b) {
            if (wrong++ == 0)
                fprintf(stderr, "allreduce: element %zu: %" PRId32 ", %g and %g, want %" PRId32 ", %g and %g\n",
                        i, ints[i], floats[i], bf16_value(brains[i]), (int32_t)want_i, want_f, want_b);
        }
    }
    printf("worker %u of %u: %llu int32, floats and bfloat16, %s; %" PRIu64 " packets, %" PRIu64
           " retransmissions, %.1f ms\n",
           rank, workers, len, wrong ? "WRONG" : "verified",
           si.packets_sent + sf.packets_sent + sb.packets_sent,
           si.retransmissions + sf.retransmissions + sb.retransmissions,
           (double)(si.elapsed_ns + sf.elapsed_ns + sb.elapsed_ns) / 1e6);
    free(ints);
    free(floats);
    free(brains);
    inagg_worker_free(w);
    return wrong ? 1 : 0;
}
