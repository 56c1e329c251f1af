/*
 * Results (docs/PROTOCOL.md, end of "Slot state machine"), in two passes
 * (slot_state.p4, "Two passes").
 *
 * ResultHarvest, pass 1, for a contribution that completed its set, a
 * retransmission to a complete set, or a query of a complete set that
 * holds its worker (its lengths grow by the K values the passes fill in): the packet becomes the set's result
 * (kind 2, count = the set's weight, the set's max exponent, round packet id and priority,
 * the odd sums; job, slot, set, generation, K and the sender's worker id
 * unchanged), addressed back the way it came (Ethernet, IPv4 and UDP source
 * and destination swapped). harvest_h, put in front of it, records where it
 * goes, and it leaves through the recirculation port.
 *
 * ResultDelivery, pass 2, when it comes back: Accumulators has read the even
 * sums; the result goes to the job's multicast group (first completion; the
 * egress table result_receivers rewrites each copy from its replication id)
 * or back to the sender's port (a retransmission: the emulator's `resent`).
 */
#ifndef _INAGG_TNA_RESULT_P4_
#define _INAGG_TNA_RESULT_P4_

/* Addresses a packet back the way it came: Ethernet, IPv4 and UDP source
 * and destination swap, so what the switch sends comes from the address the
 * workers send to. TTL as for a fresh packet; UDP checksum 0, since egress
 * may rewrite the destination per copy. Results and group datagrams' copies
 * (group_relay.p4) both leave this way. */
action address_back(inout ingress_headers_t hdr) {
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

/* Sends the packet to the recirculation port with harvest_h in front, for
 * its next pass (slot_state.p4, "Two passes"; accumulators.p4). */
action to_recirculation(inout ingress_headers_t hdr,
                        inout ingress_intrinsic_metadata_for_tm_t ig_tm_md,
                        bit<16> set_index, bit<16> mcast_grp, PortId_t reply_port,
                        bit<8> multicast, bit<8> values_op, bit<8> result) {
    hdr.harvest.setValid();
    hdr.harvest.set_index = set_index;
    hdr.harvest.mcast_grp = mcast_grp;
    hdr.harvest.pad0 = 0;
    hdr.harvest.reply_port = reply_port;
    hdr.harvest.multicast = multicast;
    hdr.harvest.values_op = values_op;
    hdr.harvest.result = result;
    hdr.bridged.kind = BRIDGE_RECIRCULATE;
    ig_tm_md.ucast_egress_port = INAGG_RECIRC_PORT;
}

control ResultHarvest(inout ingress_headers_t hdr,
                      inout ingress_metadata_t ig_md,
                      in ingress_intrinsic_metadata_t ig_intr_md,
                      inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {

    /* A query turned into the result: its lengths were the header's. The
     * job's K is the compiled one (Admission refuses any other). */
    action grow_to_result() {
        hdr.udp.length = (bit<16>)(UDP_BYTES + INAGG_HEADER_BYTES + 4 * INAGG_K);
        hdr.ipv4.total_len = (bit<16>)(IPV4_BYTES + UDP_BYTES + INAGG_HEADER_BYTES + 4 * INAGG_K);
    }

    action make_result() {
        hdr.inagg.kind = KIND_RESULT;
        hdr.inagg.count = ig_md.round;
        hdr.inagg.exponent = ig_md.exponent[7:0];
        address_back(hdr);
    }

    action recirculate(bit<8> multicast) {
#ifdef INAGG_SPLIT_VALUES
        /* The second half first (accumulators.p4), then the last pass. */
        to_recirculation(hdr, ig_tm_md, ig_md.set_index, ig_md.job.mcast_grp,
                         ig_intr_md.ingress_port, multicast, ig_md.values_op, 1);
#else
        to_recirculation(hdr, ig_tm_md, ig_md.set_index, ig_md.job.mcast_grp,
                         ig_intr_md.ingress_port, multicast, VALUES_READ_EVEN, 1);
#endif
    }

    apply {
        if (ig_md.query == 1) {
            grow_to_result();
        }
        make_result();
        /* The result goes to every member when this contribution completed
         * the set; back to the sender alone for a resend or a query (whose
         * bit a held-back copy may have taken out: retransmission 0). */
        if (ig_md.retransmission == 1 || ig_md.query == 1) {
            recirculate(0);
        } else {
            recirculate(1);
        }
    }
}

#ifdef INAGG_SPLIT_VALUES
/*
 * The second half's pass (INAGG_SPLIT_VALUES, accumulators.p4).
 * SecondHalfEntry: an absorbed contribution's first pass sends it on to
 * the pass that adds its second half (`result` 0; ResultHarvest sends a
 * result, `result` 1). SecondHalfExit, after that pass: a result goes round
 * once more to read the even sums, and an absorbed contribution is dropped
 * (nothing leaves; not a drop).
 */
control SecondHalfEntry(inout ingress_headers_t hdr,
                        in ingress_metadata_t ig_md,
                        inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    apply {
        to_recirculation(hdr, ig_tm_md, ig_md.set_index, 0, 0, 0, ig_md.values_op, 0);
    }
}

control SecondHalfExit(inout ingress_headers_t hdr,
                       inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                       inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    apply {
        if (hdr.harvest.result == 1) {
            hdr.harvest.values_op = VALUES_READ_EVEN;
            hdr.bridged.kind = BRIDGE_RECIRCULATE;
            ig_tm_md.ucast_egress_port = INAGG_RECIRC_PORT;
        } else {
            ig_dprsr_md.drop_ctl = 1;
        }
    }
}
#endif

control ResultDelivery(inout ingress_headers_t hdr,
                       inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {

    /* harvest_h removed in each destination's action, not after them: a
     * statement of its own was a logical table of its own, in the
     * verdict's stages, which have none to spare. */
    action to_job() {
        ig_tm_md.mcast_grp_a = hdr.harvest.mcast_grp;
        hdr.bridged.kind = BRIDGE_RESULT_MULTICAST;
        hdr.harvest.setInvalid();
    }

    action to_sender() {
        ig_tm_md.ucast_egress_port = hdr.harvest.reply_port;
        hdr.bridged.kind = BRIDGE_RESULT_UNICAST;
        hdr.harvest.setInvalid();
    }

    apply {
        if (hdr.harvest.multicast == 1) {
            to_job();
        } else {
            to_sender();
        }
    }
}

/*
 * StatusAnswer: a query that the stored result does not answer gets the
 * set's status in one pass (docs/PROTOCOL.md, "Loss recovery";
 * emu/src/switch.rs, Job::query): kind 6, in count n for a complete set,
 * 0 for an empty one (whose round is an older one's) and n - 1 for any
 * other (the program counts no contributors: p4/README.md, "Differences
 * from the emulator"), exponent 0, the query's own packet id and priority,
 * flags ANSWERED when the round's result went for two of the asker's
 * queries already; then the 12-byte block with the set's bitmap and n.
 * Addressed back the way it came, to the asker alone;
 * or, when the query asks for nudges (its count QUERY_NUDGE) and the set
 * holds the asker's contribution and waits for others, multicast to the
 * job's group, where StatusRewrite keeps the asker's copy and those of the
 * members whose bits are clear (docs/PROTOCOL.md, "Loss recovery").
 */
control StatusAnswer(inout ingress_headers_t hdr,
                     inout ingress_metadata_t ig_md,
                     in ingress_intrinsic_metadata_t ig_intr_md,
                     inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {

    action make_status() {
        hdr.payload.setInvalid();
        hdr.status.setValid();
        hdr.status.bitmap = ig_md.before_hi ++ ig_md.before_lo;
        hdr.status.members = ig_md.job.worker_count;
        /* Owed but not answered with it: past two answers. */
        hdr.status.flags = (bit<16>)ig_md.owed;
        hdr.inagg.kind = KIND_STATUS;
        hdr.inagg.exponent = 0;
        /* SlotState left the query's id XOR the round's (in the header). */
        hdr.inagg.packet_id = hdr.inagg.packet_id ^ ig_md.query_packet_id;
        hdr.inagg.priority = ig_md.query_priority;
        hdr.udp.length = (bit<16>)(UDP_BYTES + INAGG_HEADER_BYTES + STATUS_BYTES);
        hdr.ipv4.total_len = (bit<16>)(IPV4_BYTES + UDP_BYTES + INAGG_HEADER_BYTES + STATUS_BYTES);
        address_back(hdr);
    }

    /* The status made in each destination's action, not after them: a
     * statement of its own was a logical table of its own, in the
     * verdict's stages, which have none to spare. */
    action to_asker() {
        ig_tm_md.ucast_egress_port = ig_intr_md.ingress_port;
        hdr.bridged.kind = BRIDGE_RESULT_UNICAST;
        make_status();
    }

    action to_waiting_members() {
        ig_tm_md.mcast_grp_a = ig_md.job.mcast_grp;
        hdr.bridged.kind = BRIDGE_STATUS_MULTICAST;
        make_status();
    }

    action count_members() {
        hdr.inagg.count = ig_md.job.worker_count;
    }

    action count_waiting() {
        hdr.inagg.count = ig_md.job.last;
    }

    action count_none() {
        hdr.inagg.count = 0;
    }

    /* The status's count: 0 for an empty set (both bitmap halves 0), else
     * n - 1 for one that waits (round 0), else n; the first match wins.
     * One ternary table, where an if-chain (one condition reads at most 4
     * bytes of PHV) made three tables in the verdict's stages. Compiled
     * in. */
    table status_count {
        key = {
            ig_md.round     : ternary @name("round");
            ig_md.before_lo : ternary @name("before_lo");
            ig_md.before_hi : ternary @name("before_hi");
        }
        actions = {
            count_members;
            count_waiting;
            count_none;
        }
        const default_action = count_members();
        const entries = {
            (_, 0, 0) : count_none();
            (0, _, _) : count_waiting();
        }
        size = 2;
    }

    apply {
        /* The asker's bit is set (SlotState's retransmission) and the set
         * still waits (a complete one's status goes to the asker alone:
         * past its two answers): a nudge when the query asks for one. */
        if (ig_md.retransmission == 1 && ig_md.nudge_asked == 1 && ig_md.round == 0) {
            to_waiting_members();
        } else {
            to_asker();
        }
        status_count.apply();
    }
}

#endif /* _INAGG_TNA_RESULT_P4_ */
