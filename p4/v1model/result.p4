/*
 * ResultDispatch: turns a contribution that completed its set, or a
 * retransmission to a complete set, or a tree job's result from its parent,
 * into the set's result and sends it (docs/PROTOCOL.md, end of "Slot state
 * machine", and "Aggregation trees"). Aggregate has already put the set's
 * weight (count: the workers the sum holds), max exponent, round packet id
 * and priority, and sums into the packet; Admission has put the local job id
 * into a parent's result. The result also carries, unchanged from the packet: the
 * job, slot, set, generation (= the job's: admission checked it), K and the
 * sender's worker id.
 *
 *   complete, first time  -> multicast to the job's group; the egress table
 *                            result_receivers rewrites each copy's
 *                            destination and worker id from its replication
 *                            id (ResultRewrite)
 *   retransmission        -> unicast back to the sender, out of the port it
 *                            came in on (the emulator's `resent`); by a
 *                            detour, to the member it names instead
 *   query, complete with   -> the same unicast; the query had no payload, so
 *   the asker's bit           the lengths grow by the K values Aggregate put
 *                            in (docs/PROTOCOL.md, "Loss recovery")
 *
 * Either way the packet is addressed back the way it came: Ethernet, IPv4
 * and UDP source and destination swap, so the result comes from the address
 * and port the workers send to.
 */
#ifndef _INAGG_V1MODEL_RESULT_P4_
#define _INAGG_V1MODEL_RESULT_P4_

/* Addresses a packet back the way it came: Ethernet, IPv4 and UDP source
 * and destination swap, so what the switch sends comes from the address the
 * workers send to. TTL as for a fresh packet; UDP checksum 0, since egress
 * may rewrite the destination per copy. Results and group datagram copies
 * (group_relay.p4) both leave this way. */
action address_back(inout headers_t hdr) {
    bit<48> mac = hdr.ethernet.dst_addr;
    hdr.ethernet.dst_addr = hdr.ethernet.src_addr;
    hdr.ethernet.src_addr = mac;

    bit<32> addr = hdr.ipv4.dst_addr;
    hdr.ipv4.dst_addr = hdr.ipv4.src_addr;
    hdr.ipv4.src_addr = addr;
    hdr.ipv4.ttl = RESULT_TTL;

    bit<16> port = hdr.udp.dst_port;
    hdr.udp.dst_port = hdr.udp.src_port;
    hdr.udp.src_port = port;
    hdr.udp.checksum = 0;
}

control ResultDispatch(inout headers_t hdr,
                       inout metadata_t meta,
                       inout standard_metadata_t standard_metadata) {

    action make_result() {
        hdr.inagg.kind = KIND_RESULT;
        address_back(hdr);
        meta.inagg.is_result = 1;
    }

    /* A query turned into the result: its lengths were the header's. */
    action grow_to_result() {
        hdr.udp.length = (bit<16>)(UDP_BYTES + INAGG_HEADER_BYTES) + (hdr.inagg.elements << 2);
        hdr.ipv4.total_len = (bit<16>)IPV4_BYTES + hdr.udp.length;
    }

    action multicast_to_job() {
        standard_metadata.mcast_grp = meta.job.mcast_grp;
        meta.inagg.multicast = 1;
    }

    action unicast_to_sender() {
        standard_metadata.egress_spec = standard_metadata.ingress_port;
        meta.inagg.multicast = 0;
    }

    /* A retransmission that came by a detour: the sender is a relay, so
     * the result goes to the member's own endpoint (detour_table's entry),
     * as the emulator's resend does. */
    action unicast_to_member() {
        hdr.ethernet.dst_addr = meta.member_endpoint.mac;
        hdr.ipv4.dst_addr = meta.member_endpoint.addr;
        hdr.udp.dst_port = meta.member_endpoint.port;
        standard_metadata.egress_spec = meta.member_endpoint.egress_port;
        meta.inagg.multicast = 0;
    }

    apply {
        if (hdr.inagg.kind == KIND_QUERY) {
            hdr.status.setInvalid();
            grow_to_result();
        }
        make_result();
        if (meta.inagg.retransmission == 1 && meta.inagg.detour == 1) {
            unicast_to_member();
        } else if (meta.inagg.retransmission == 1) {
            unicast_to_sender();
        } else {
            multicast_to_job();
        }
    }
}

/*
 * StatusAnswer: a query that the stored result does not answer gets the
 * set's status (docs/PROTOCOL.md, "Loss recovery"; emu/src/switch.rs,
 * Job::query): the header with kind 6, the contributors in count, exponent
 * 0 and the query's packet id; then the 12-byte block Aggregate filled.
 * Addressed back the way it came, to the asker alone; or, when the set
 * holds the asker's contribution and waits for others (Aggregate's nudge),
 * multicast to the job's group, where ResultRewrite keeps the asker's copy
 * and those of the members whose bits are clear (not child switches), and
 * leaves the worker
 * field naming the asker.
 */
control StatusAnswer(inout headers_t hdr,
                     inout metadata_t meta,
                     inout standard_metadata_t standard_metadata) {

    action make_status() {
        hdr.payload.setInvalid();
        hdr.inagg.kind = KIND_STATUS;
        hdr.udp.length = (bit<16>)(UDP_BYTES + INAGG_HEADER_BYTES + STATUS_BYTES);
        hdr.ipv4.total_len = (bit<16>)IPV4_BYTES + hdr.udp.length;
        address_back(hdr);
        meta.inagg.is_result = 1;
    }

    action to_asker() {
        standard_metadata.egress_spec = standard_metadata.ingress_port;
        meta.inagg.multicast = 0;
    }

    action to_waiting_members() {
        standard_metadata.mcast_grp = meta.job.mcast_grp;
        meta.inagg.multicast = 1;
    }

    apply {
        make_status();
        if (meta.inagg.nudge == 1) {
            to_waiting_members();
        } else {
            to_asker();
        }
    }
}

#endif /* _INAGG_V1MODEL_RESULT_P4_ */
