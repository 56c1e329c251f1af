/*
 * inagg P4 programs: compile-time configuration, shared by p4/v1model and
 * p4/tna. Every value can be overridden on the compiler command line with
 * -DNAME=VALUE (p4/build.sh passes its -D arguments through, and K=... /
 * SLOTS=... from the environment).
 */
#ifndef _INAGG_CONFIG_P4_
#define _INAGG_CONFIG_P4_

/*
 * K: int32 elements per packet (docs/PROTOCOL.md, "Framing"). The switch
 * parses and aggregates exactly K elements; a job's K (the `elements`
 * parameter of its job_table entry) must equal it, and a contribution with
 * another element count is dropped as wrong_elements.
 *
 * Default 64: 256 bytes of payload, SwitchML's one-pass size and the
 * protocol's default. It must be a decimal literal, a multiple of 8 between 8
 * and 256, because the per-element code is generated in blocks of 8
 * (common/elements.p4). -DK=... is accepted as a shorthand for -DINAGG_K=...
 */
#if defined(K) && !defined(INAGG_K)
#define INAGG_K K
#endif
#ifndef INAGG_K
#define INAGG_K 64
#endif
#if INAGG_K < 8 || INAGG_K > 256 || (INAGG_K % 8) != 0
#error "INAGG_K (K) must be a multiple of 8 between 8 and 256"
#endif

/*
 * SLOTS: slots of aggregator memory shared by all jobs' pools
 * (docs/PROTOCOL.md, "Switch state"). Each slot has two shadow sets, so every
 * per-set register has 2 * SLOTS entries, index (pool_base + slot) * 2 + set.
 * Default 8192, as the emulator (emu::SwitchConfig) and SwitchML's Tofino
 * program: 2 * 8192 64-bit pair entries fill 8 SRAM blocks of one Tofino
 * stage per pair register. -DSLOTS=... is a shorthand for -DINAGG_SLOTS=...
 */
#if defined(SLOTS) && !defined(INAGG_SLOTS)
#define INAGG_SLOTS SLOTS
#endif
#ifndef INAGG_SLOTS
#define INAGG_SLOTS 8192
#endif
#define INAGG_SETS (2 * INAGG_SLOTS)

/* The UDP destination port that marks inagg traffic (docs/PROTOCOL.md). */
#ifndef INAGG_UDP_PORT
#define INAGG_UDP_PORT 47000
#endif

/*
 * Per-job counters are indexed by job id, so they hold INAGG_MAX_JOBS
 * entries: job ids at or above it are not counted per job (everything else
 * works). bmv2 keeps all 65536; the TNA program lowers the default to 1024
 * to save SRAM (tna/inagg.p4).
 */
#ifndef INAGG_MAX_JOBS
#define INAGG_MAX_JOBS 65536
#endif

/* Table sizes: entries the control plane can install. */
#ifndef INAGG_JOB_TABLE_SIZE
#define INAGG_JOB_TABLE_SIZE 1024      /* jobs */
#endif
#ifndef INAGG_WORKER_TABLE_SIZE
#define INAGG_WORKER_TABLE_SIZE 8192   /* workers of all jobs (64 x 128) */
#endif
#ifndef INAGG_GROUP_TABLE_SIZE
#define INAGG_GROUP_TABLE_SIZE 1024    /* multicast groups: jobs' and made by hand */
#endif
#ifndef INAGG_MEMBER_TABLE_SIZE
#define INAGG_MEMBER_TABLE_SIZE 8192   /* members of all groups */
#endif
#ifndef INAGG_RELAY_TABLE_SIZE
#define INAGG_RELAY_TABLE_SIZE 1024    /* relay entries, and jobs' detours (auxiliary paths) */
#endif
#ifndef INAGG_PORTS
#define INAGG_PORTS 512                /* bmv2 port numbers (9 bits) */
#endif
#ifndef INAGG_L2_TABLE_SIZE
#define INAGG_L2_TABLE_SIZE 1024       /* MAC addresses for plain forwarding */
#endif

#endif /* _INAGG_CONFIG_P4_ */
