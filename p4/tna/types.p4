/*
 * The TNA program's internal headers, header stacks and metadata. The
 * packet's own headers are the shared ones (common/headers.p4).
 */
#ifndef _INAGG_TNA_TYPES_P4_
#define _INAGG_TNA_TYPES_P4_

/*
 * bridged_md_h: prepended by the ingress deparser to every packet that goes
 * to egress, parsed and removed by the egress parser and deparser. It tells
 * egress what the packet is.
 */
const bit<8> BRIDGE_FORWARD          = 0;  /* plain traffic, unchanged */
const bit<8> BRIDGE_FLOOD            = 1;  /* plain traffic, one copy per port */
const bit<8> BRIDGE_RECIRCULATE      = 2;  /* pass 1 of a result, to the recirculation port */
const bit<8> BRIDGE_RESULT_UNICAST   = 3;  /* a result resent to its sender */
const bit<8> BRIDGE_RESULT_MULTICAST = 4;  /* a result copy for one worker */
const bit<8> BRIDGE_GROUP_COPY       = 5;  /* a group datagram's copy for one member */
const bit<8> BRIDGE_STATUS_MULTICAST = 6;  /* a query's status copy: the asker, or a member the round waits for */

header bridged_md_h {
    bit<8>   kind;
    bit<7>   pad0;
    PortId_t ingress_port;
    bit<16>  member;        /* a group datagram's sender: its copy is dropped */
}

/*
 * harvest_h: carried through the recirculation port, in front of the
 * Ethernet header, by a result from its first pass to its last (see
 * slot_state.p4, "Two passes"), and with INAGG_SPLIT_VALUES by every
 * contribution to the pass that adds its second half of the values
 * (accumulators.p4). Never leaves the switch.
 */
header harvest_h {
    bit<16>  set_index;   /* (pool_base + slot) * 2 + set */
    bit<16>  mcast_grp;   /* the job's group, for a multicast */
    bit<7>   pad0;
    PortId_t reply_port;  /* the sender's port, for a unicast resend */
    bit<8>   multicast;   /* 1: multicast to the job, 0: unicast to reply_port */
    bit<8>   values_op;   /* the pass's: VALUES_READ_EVEN for a result's last
                             pass, else the first pass's, for the second half */
    bit<8>   result;      /* second-half pass: 1 a result (a last pass
                             follows), 0 absorbed (dropped after it);
                             HARVEST_ANNOUNCE: an announcement taken
                             (mcast_grp then carries the job's n) */
}

struct ingress_headers_t {
    bridged_md_h bridged;
    harvest_h    harvest;
    ethernet_h   ethernet;
    ipv4_h       ipv4;
    udp_h        udp;
    inagg_h      inagg;
    payload_h    payload;
    status_h     status;     /* made by the switch: a query's answer */
}

/* Egress parses results up to the inagg header; the payload passes
 * through. A status copy's block is parsed too: its bitmap prunes the
 * copies (StatusRewrite). */
struct egress_headers_t {
    bridged_md_h bridged;
    ethernet_h   ethernet;
    ipv4_h       ipv4;
    udp_h        udp;
    inagg_h      inagg;
    status_h     status;
}

/* What job_table installs for the packet's job (docs/PROTOCOL.md, "Switch
 * state"). */
struct job_md_t {
    bit<16> worker_count;   /* n */
    bit<16> last;           /* n - 1 */
    bit<16> elements;       /* K */
    bit<16> generation;
    bit<16> mcast_grp;
}

/* Which pass a packet is on (the parser: from harvest_h). Two bits, the
 * values it takes: Tofino 1 at K = 64 with announcements ran short of
 * ingress PHV by this field at 8. */
const bit<2> PASS_NETWORK     = 0;  /* from a front-panel port */
const bit<2> PASS_LAST        = 1;  /* a result's last pass: the even sums */
const bit<2> PASS_SECOND_HALF = 2;  /* INAGG_SPLIT_VALUES: the second half of the values */
const bit<2> PASS_ANNOUNCE    = 3;  /* an announcement taken: its writes (slot_state.p4) */

const bit<8> HARVEST_ANNOUNCE = 2;  /* harvest_h.result of an announcement's second pass */

/* What the pair registers do with this packet (accumulators.p4). */
const bit<8> VALUES_NONE        = 0;
const bit<8> VALUES_STORE       = 1;  /* first of a round: write both elements */
const bit<8> VALUES_ADD         = 2;  /* add both, read back the odd one */
const bit<8> VALUES_READ_ODD    = 3;  /* retransmission: read the odd one */
const bit<8> VALUES_READ_EVEN   = 4;  /* second pass: read the even one */

struct ingress_metadata_t {
    job_md_t      job;
    bool          checksum_error;   /* IPv4 header checksum, from the parser */

    /* Admission (admission.p4). */
    bit<16>       worker;           /* worker id installed for the sender */
    bit<1>        group;            /* a group datagram (kind 3): GroupRelay, not a job */
    bit<16>       member;           /* ... the member id installed for its sender */
    bit<1>        drop;
    bit<4>        drop_reason;      /* drop_reason_t, whose values are below
                                     * INAGG_DROP_REASONS (16): four bits are
                                     * all it takes (Tofino 1 at K = 64 with
                                     * announcements ran short of ingress PHV
                                     * by this field at 8) */
    bit<16>       slot_addr;        /* pool_base + slot */
    bit<16>       slot_room;        /* pool_size - slot, saturating: 0 = outside */
    bit<16>       payload_less_len; /* 4 * elements - UDP length: -32 when right */
    bit<16>       ip_udp_gap;       /* IPv4 total length - UDP length: 20 .. 0x7fff */
    bit<1>        inagg;            /* to the inagg port (the parser) */
    bit<1>        query;            /* a query (kind 5): answered, nothing changes (the parser) */
    bit<1>        nudge_asked;      /* ... whose count is QUERY_NUDGE (the parser) */
    bit<1>        announce;         /* an announcement (kind 7; the parser: read in its first pass only) */
    bit<1>        malformed;        /* a length, field or parse check failed */

    /* Slot state (slot_state.p4). */
    bit<16>       set_index;        /* (pool_base + slot) * 2 + set: 16 bits, SLOTS <= 32768 */
    bit<32>       mask_lo;          /* the worker's bit among workers 0..31 */
    bit<32>       mask_hi;          /* ... among workers 32..63 */
    bit<32>       before_lo;        /* bitmap half of the set before this packet; a join's,
                                     * ^ others_*: 0 in both when it completes the set */
    bit<32>       before_hi;
    bit<32>       others_lo;        /* the job's members but the sender, workers 0..31 */
    bit<32>       others_hi;        /* ... workers 32..63 */
    bit<16>       solo;             /* 1: a job of one member */
    bit<16>       weight;           /* the contribution's: max(count, 1) */
    bit<16>       round;            /* the set's round after this packet (slot_state.p4,
                                     * `rounds`): its weight if complete, else 0 */
    bit<16>       exponent;         /* the set's max exponent after this packet */
    bit<1>        retransmission;
    bit<8>        values_op;
    bit<2>        pass;             /* PASS_*, the parser */
    bit<1>        select_queue;     /* QueueSelect at the end of ingress */
    bit<32>       query_packet_id;  /* the query's own, for its status */
    bit<1>        owed;             /* a query the stored result owes (slot_state.p4) */
    bit<8>        answered;         /* ... `answers`: 0 past two answers, else the result */
    bit<8>        query_priority;
}

struct egress_metadata_t {
    bit<1> copy_dropped;            /* no endpoint for this copy's replication id */
}

#endif /* _INAGG_TNA_TYPES_P4_ */
