/*
 * Constants of the inagg protocol (docs/PROTOCOL.md) and of the headers
 * around it, shared by p4/v1model and p4/tna.
 */
#ifndef _INAGG_PROTOCOL_P4_
#define _INAGG_PROTOCOL_P4_

const bit<16> ETHERTYPE_IPV4  = 16w0x0800;
const bit<8>  IP_PROTOCOL_UDP = 8w17;

/* Bytes of the headers that the length checks add up (docs/PROTOCOL.md,
 * "Framing": a datagram is exactly 24 + 4 * elements bytes). */
const bit<32> ETHERNET_BYTES  = 14;
const bit<32> IPV4_BYTES      = 20;    /* IPv4 without options */
const bit<32> UDP_BYTES       = 8;
const bit<32> INAGG_HEADER_BYTES = 24;
const bit<32> STATUS_BYTES       = 12;   /* a status's block after the header */

/* docs/PROTOCOL.md, "Header". */
const bit<16> INAGG_PORT        = INAGG_UDP_PORT;
const bit<8>  INAGG_VERSION     = 1;
const bit<8>  KIND_CONTRIBUTION = 1;
const bit<8>  KIND_RESULT       = 2;
const bit<8>  KIND_GROUP        = 3;   /* group datagram ("Multicast groups") */
const bit<8>  KIND_DETOUR       = 4;   /* a partial sum on an auxiliary path ("Auxiliary paths") */
const bit<8>  KIND_QUERY        = 5;   /* a member asks about its round ("Loss recovery") */
const bit<8>  KIND_STATUS       = 6;   /* the switch's answer: the set's bitmap */
const bit<8>  KIND_ANNOUNCE     = 7;   /* a member re-announces a round's result ("A switch that lost its state") */
const bit<16> QUERY_NUDGE       = 1;   /* a query's count: the status to the missing members too */
const bit<16> STATUS_ANSWERED   = 1;   /* status flag: the round's result went for a query of the asker's already */
const bit<8>  FLAG_SET          = 8w0x01;  /* bit 0: shadow set */
const bit<8>  FLAGS_RESERVED    = 8w0xfe;  /* bits 1-7: must be 0 */

/* Results leave the switch as fresh packets. */
const bit<8>  RESULT_TTL = 64;

/* Workers per job: the width of the slot bitmap (docs/PROTOCOL.md, "Switch
 * state"; wire::MAX_WORKERS). */
#define INAGG_MAX_WORKERS 64

/*
 * Drop reasons, in the emulator's order (switch-api/src/counters.rs,
 * DropReason::ALL): the index of the drop counter. Reasons 8 and 9 are the
 * emulator's fault injector, which a switch does not have; the counter keeps
 * their indices so that both count the same things at the same place.
 */
typedef bit<8> drop_reason_t;
const drop_reason_t DROP_MALFORMED         = 0;  /* length, version, kind, reserved bits */
const drop_reason_t DROP_NOT_CONTRIBUTION  = 1;  /* a result not from a tree job's parent */
const drop_reason_t DROP_UNKNOWN_JOB       = 2;  /* no job_table entry */
const drop_reason_t DROP_UNKNOWN_WORKER    = 3;  /* sender is not the worker it names */
const drop_reason_t DROP_SLOT_OUT_OF_POOL  = 4;  /* slot >= pool size */
const drop_reason_t DROP_WRONG_ELEMENTS    = 5;  /* elements != the job's K */
const drop_reason_t DROP_STALE_GENERATION  = 6;  /* generation != the job's */
const drop_reason_t DROP_DUPLICATE_PENDING = 7;  /* retransmission to an incomplete set */
/* 10 undeliverable and 11 queue_full are the emulator's egress. */
const drop_reason_t DROP_UNKNOWN_GROUP     = 12; /* group datagram: no group_table entry (v1model) */
const drop_reason_t DROP_UNEXPECTED_RESULT = 13; /* a parent's result no set waits for (v1model) */
const drop_reason_t DROP_UNKNOWN_RELAY     = 14; /* a detour no relay entry and no job takes (v1model) */
const drop_reason_t DROP_STALE_ROUND       = 15; /* a late copy of a complete round (v1model) */
#define INAGG_DROP_REASONS 16

#endif /* _INAGG_PROTOCOL_P4_ */
