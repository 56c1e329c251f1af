/*
 * Parsers (docs/PROTOCOL.md, "Framing").
 *
 * Ingress: intrinsic metadata, then either a second-pass result from the
 * recirculation port (harvest_h in front of its Ethernet header) or a packet
 * from a front-panel port; then Ethernet / IPv4 / UDP to the inagg port /
 * inagg header / K int32, the payload only when the header announces exactly
 * K elements. The IPv4 checksum is verified here; a parser error (a packet
 * shorter than its headers) is left to admission, which reads
 * ig_intr_md_from_prsr.parser_err and counts the packet as malformed.
 *
 * Egress: the bridged header, then for results and group datagrams' copies
 * the headers up to inagg (the payload is not needed in egress and passes
 * through unparsed).
 */
#ifndef _INAGG_TNA_PARSER_P4_
#define _INAGG_TNA_PARSER_P4_

parser InaggIngressParser(packet_in pkt,
                          out ingress_headers_t hdr,
                          out ingress_metadata_t ig_md,
                          out ingress_intrinsic_metadata_t ig_intr_md) {

    Checksum() ipv4_checksum;

    state start {
        pkt.extract(ig_intr_md);
        pkt.advance(PORT_METADATA_SIZE);
        ig_md.checksum_error = false;
        ig_md.drop = 0;
        ig_md.drop_reason = 0;
        ig_md.retransmission = 0;
        ig_md.group = 0;
        ig_md.values_op = VALUES_NONE;
        ig_md.pass = PASS_NETWORK;
        ig_md.select_queue = 0;
        ig_md.inagg = 0;
        ig_md.query = 0;
        ig_md.nudge_asked = 0;
        ig_md.owed = 0;
        ig_md.answered = 0;
        ig_md.announce = 0;
        transition select(ig_intr_md.ingress_port) {
            INAGG_RECIRC_PORT: parse_harvest;
            default: parse_ethernet;
        }
    }

    /* What the pass does with the values is known here, so that the pair
     * registers' tables wait for no stage: a result's last pass reads the
     * even sums of every pair; the second-half pass (INAGG_SPLIT_VALUES)
     * does the first pass's operation on the second half only (both read
     * harvest_h's values_op for the second half, accumulators.p4). */
    state parse_harvest {
        pkt.extract(hdr.harvest);
        ig_md.set_index = hdr.harvest.set_index;
        transition select(hdr.harvest.values_op, hdr.harvest.result) {
            (VALUES_READ_EVEN, _): parse_last_pass;
#ifdef INAGG_ANNOUNCE
            (_, HARVEST_ANNOUNCE): parse_announce_pass;
#endif
            default: parse_second_half;
        }
    }

#ifdef INAGG_ANNOUNCE
    /* An announcement's second pass writes the round it brings: every
     * value stored (with INAGG_SPLIT_VALUES the first half; the second
     * in a pass of its own after it, as a contribution's), the set's
     * slot and the job's n from harvest_h (there is no admission in this
     * pass). */
    state parse_announce_pass {
        ig_md.pass = PASS_ANNOUNCE;
        ig_md.values_op = VALUES_STORE;
        transition parse_ethernet;
    }
#endif

    state parse_last_pass {
        ig_md.pass = PASS_LAST;
        ig_md.values_op = VALUES_READ_EVEN;
        transition parse_ethernet;
    }

    state parse_second_half {
        ig_md.pass = PASS_SECOND_HALF;
        transition parse_ethernet;
    }

    state parse_ethernet {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        ipv4_checksum.add(hdr.ipv4);
        /* verify() deposits the engine's error flag: true when the header
         * checksum is wrong (the convention of Intel's TNA examples). */
        ig_md.checksum_error = ipv4_checksum.verify();
        transition select(hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (4w4, 4w5, 13w0, IP_PROTOCOL_UDP): parse_udp;
            default: accept;
        }
    }

    state parse_udp {
        pkt.extract(hdr.udp);
        transition select(hdr.udp.dst_port) {
            INAGG_PORT: parse_inagg;
            default: accept;
        }
    }

    /* To the inagg port: Admission's business (known here, so that its
     * tables need no stage to find it out). */
    state parse_inagg {
        ig_md.inagg = 1;
        pkt.extract(hdr.inagg);
        /* A query is the header alone; a status (never for a switch) is
         * refused by Admission unparsed. */
        transition select(hdr.inagg.kind, hdr.inagg.elements) {
            (KIND_QUERY, _): parse_query;
            (KIND_STATUS, _): accept;
#ifdef INAGG_ANNOUNCE
            (KIND_ANNOUNCE, INAGG_K): parse_announce;
#endif
            (_, INAGG_K): parse_payload;
            default: accept;
        }
    }

    /* A query whose count asks for nudges (docs/PROTOCOL.md, "Loss
     * recovery") is marked here, so that StatusAnswer's choice of
     * destination is one gateway on two bits. */
#ifdef INAGG_ANNOUNCE
    /* An announcement (docs/PROTOCOL.md, "A switch that lost its state"):
     * its first pass only reads; its second (from the recirculation port)
     * writes. Marked in every pass, not only in its first: nothing reads
     * ig_md.announce but in a packet's first pass (Admission, SlotState's
     * worker_mask and round_classifier, the verdict's branch for it; an
     * announcement's second pass takes other branches, and so do the
     * passes that add values), and a select on the ingress port here
     * held a 16-bit parser match register from the first state on, which
     * left parse_ipv4 too few. */
    state parse_announce {
        ig_md.announce = 1;
        transition parse_payload;
    }
#endif

    state parse_query {
        ig_md.query = 1;
        transition select(hdr.inagg.count) {
            QUERY_NUDGE: parse_nudge_query;
            default: accept;
        }
    }

    state parse_nudge_query {
        ig_md.nudge_asked = 1;
        transition accept;
    }

    state parse_payload {
        pkt.extract(hdr.payload);
        transition accept;
    }
}

parser InaggEgressParser(packet_in pkt,
                         out egress_headers_t hdr,
                         out egress_metadata_t eg_md,
                         out egress_intrinsic_metadata_t eg_intr_md) {

    state start {
        pkt.extract(eg_intr_md);
        pkt.extract(hdr.bridged);
        eg_md.copy_dropped = 0;
        transition select(hdr.bridged.kind) {
            BRIDGE_RESULT_UNICAST: parse_inagg_headers;
            BRIDGE_RESULT_MULTICAST: parse_inagg_headers;
            BRIDGE_GROUP_COPY: parse_inagg_headers;
            BRIDGE_STATUS_MULTICAST: parse_status_copy;
            default: accept;
        }
    }

    state parse_status_copy {
        pkt.extract(hdr.ethernet);
        pkt.extract(hdr.ipv4);
        pkt.extract(hdr.udp);
        pkt.extract(hdr.inagg);
        pkt.extract(hdr.status);
        transition accept;
    }

    /* A result or a group datagram's copy is always Ethernet / IPv4 / UDP /
     * inagg: ingress parsed it so. */
    state parse_inagg_headers {
        pkt.extract(hdr.ethernet);
        pkt.extract(hdr.ipv4);
        pkt.extract(hdr.udp);
        pkt.extract(hdr.inagg);
        transition accept;
    }
}

#endif /* _INAGG_TNA_PARSER_P4_ */
