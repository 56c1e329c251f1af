/*
 * Packet headers, shared by p4/v1model and p4/tna (docs/PROTOCOL.md,
 * "Framing" and "Header"; the byte layout's executable form is
 * wire/src/header.rs). All fields are big-endian on the wire, as P4 extracts
 * them.
 */
#ifndef _INAGG_HEADERS_P4_
#define _INAGG_HEADERS_P4_

header ethernet_h {
    bit<48> dst_addr;
    bit<48> src_addr;
    bit<16> ether_type;
}

/* IPv4 without options: inagg traffic must have IHL 5 (others are not
 * parsed past IPv4 and are forwarded as plain traffic). */
header ipv4_h {
    bit<4>  version;
    bit<4>  ihl;
    bit<8>  diffserv;
    bit<16> total_len;
    bit<16> identification;
    bit<3>  flags;
    bit<13> frag_offset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> hdr_checksum;
    bit<32> src_addr;
    bit<32> dst_addr;
}

header udp_h {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

/* The 24-byte inagg header (docs/PROTOCOL.md, "Header"). */
header inagg_h {
    bit<8>  version;      /*  0: 1 */
    bit<8>  kind;         /*  1: 1 contribution, 2 result, 3 group datagram,
                                 4 detour, 5 query, 6 status */
    bit<8>  flags;        /*  2: bit 0 shadow set, bits 1-7 reserved (0) */
    bit<8>  priority;     /*  3: priority class, echoed in results */
    bit<16> job;          /*  4 */
    bit<16> slot;         /*  6: index within the job's pool */
    bit<16> worker;       /*  8: sender; in a result, the receiver */
    bit<16> generation;   /* 10 */
    bit<8>  exponent;     /* 12: block exponent, max-reduced */
    bit<8>  reserved0;    /* 13: 0 */
    bit<16> count;        /* 14: result: contributions aggregated */
    bit<16> elements;     /* 16: K */
    bit<16> reserved1;    /* 18: 0 */
    bit<32> packet_id;    /* 20: echoed in results */
}

/* K int32 elements, two's complement (docs/PROTOCOL.md, "Integer
 * arithmetic": bit<32> addition wraps exactly as the protocol requires). */
#define INAGG_PAYLOAD_FIELD(n) bit<32> e##n;
header payload_h {
    INAGG_FOR_EACH_ELEMENT(INAGG_PAYLOAD_FIELD)
}

/* The block after a status's header (docs/PROTOCOL.md, "Loss recovery";
 * wire/src/status.rs): whose contributions the set holds, of how many
 * members, and flags (STATUS_ANSWERED). */
header status_h {
    bit<64> bitmap;
    bit<16> members;
    bit<16> flags;
}

#endif /* _INAGG_HEADERS_P4_ */
