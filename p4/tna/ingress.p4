/*
 * InaggIngress: wires the ingress controls together and owns the counters.
 *
 *   the last pass of a result (from the recirculation port):
 *       Accumulators (read the even sums) -> ResultDelivery + QueueSelect
 *   INAGG_SPLIT_VALUES, the second half's pass (accumulators.p4):
 *       Accumulators (the second half) -> SecondHalf (a result on to its
 *       last pass; an absorbed contribution dropped)
 *   UDP to the inagg port:
 *       Admission -> SlotState -> Accumulators -> ResultHarvest (complete),
 *       or absorbed, or a drop counted by reason
 *   ... a query (kind 5):
 *       Admission -> SlotState (reads only) -> Accumulators -> ResultHarvest
 *       (the stored result, two passes) or StatusAnswer + QueueSelect
 *   ... a group datagram (kind 3):
 *       Admission -> GroupRelay + QueueSelect (one pass, no register)
 *   ... an announcement (kind 7):
 *       Admission -> SlotState (reads only) -> announce_verdict (taken:
 *       on to its second pass; else dropped)
 *   an announcement's second pass (from the recirculation port):
 *       (split: AnnounceMembers ->) SlotState (writes the round) ->
 *       Accumulators (stores) -> dropped, or split, on to a second half's
 *       pass
 *   anything else:
 *       L2Forwarding
 *
 * Accumulators is applied once, after the branch, with the operation the
 * branch chose (VALUES_NONE for everything that does not touch the sums):
 * one application keeps each pair register at one access per packet.
 *
 * QueueSelect is applied once, at the end, for a result's second pass and
 * for a group datagram.
 *
 * Counters (PACKETS_AND_BYTES), the same as the v1model program's:
 *   rx [1], drops [16] by drop reason (common/protocol.p4), and per job id
 *   job_contributions, job_results, job_resent_results, job_duplicates,
 *   job_dropped, job_queries [INAGG_MAX_JOBS]. Results and resends are
 *   counted in pass 1; a query answered with the stored result counts as a
 *   resend too.
 *   group_packets [INAGG_MAX_JOBS] counts group datagrams admitted, by
 *   group id (copies: InaggEgress).
 */
#ifndef _INAGG_TNA_INGRESS_P4_
#define _INAGG_TNA_INGRESS_P4_

/* A status (made by StatusAnswer) and a payload are never both in a
 * packet: a query carries none, and the status replaces the stored result
 * it did not get. Nor is a status in a result's second pass. Their fields
 * may share PHV containers (at K = 64 on Tofino 1, ingress PHV ran short
 * by 13 field slices without these, 5 with them). */
@pa_mutually_exclusive("ingress", "hdr.status.bitmap", "hdr.payload.e00")
@pa_mutually_exclusive("ingress", "hdr.status.bitmap", "hdr.payload.e01")
@pa_mutually_exclusive("ingress", "hdr.status.members", "hdr.payload.e02")
@pa_mutually_exclusive("ingress", "hdr.status.flags", "hdr.payload.e02")
@pa_mutually_exclusive("ingress", "hdr.status.bitmap", "hdr.harvest.set_index")
/* The bitmap halves in containers of their own: overlaid with admission's
 * fields, bf-p4c 9.13.4 stopped with "Compiler Bug: Metadata initialization
 * analysis incorrect" (join_round rewrites them in place). */
@pa_no_overlay("ingress", "ig_md.before_lo")
@pa_no_overlay("ingress", "ig_md.before_hi")
control InaggIngress(inout ingress_headers_t hdr,
                     inout ingress_metadata_t ig_md,
                     in ingress_intrinsic_metadata_t ig_intr_md,
                     in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                     inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                     inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {

    Counter<bit<64>, bit<1>>(1, CounterType_t.PACKETS_AND_BYTES) rx;
    Counter<bit<64>, drop_reason_t>(INAGG_DROP_REASONS, CounterType_t.PACKETS_AND_BYTES) drops;
    Counter<bit<64>, bit<16>>(INAGG_MAX_JOBS, CounterType_t.PACKETS_AND_BYTES) job_contributions;
    Counter<bit<64>, bit<16>>(INAGG_MAX_JOBS, CounterType_t.PACKETS_AND_BYTES) job_results;
    Counter<bit<64>, bit<16>>(INAGG_MAX_JOBS, CounterType_t.PACKETS_AND_BYTES) job_resent_results;
    Counter<bit<64>, bit<16>>(INAGG_MAX_JOBS, CounterType_t.PACKETS_AND_BYTES) job_duplicates;
    Counter<bit<64>, bit<16>>(INAGG_MAX_JOBS, CounterType_t.PACKETS_AND_BYTES) job_dropped;
    Counter<bit<64>, bit<16>>(INAGG_MAX_JOBS, CounterType_t.PACKETS_AND_BYTES) job_queries;
    Counter<bit<64>, bit<16>>(INAGG_MAX_JOBS, CounterType_t.PACKETS_AND_BYTES) group_packets;

    Admission() admission;
    SlotState() slot_state;
    Accumulators() accumulators;
    ResultHarvest() result_harvest;
    ResultDelivery() result_delivery;
#ifdef INAGG_SPLIT_VALUES
    AccumulatorsSecond() accumulators_second;
    SecondHalfEntry() second_half_entry;
    SecondHalfExit() second_half_exit;
#endif
#if defined(INAGG_ANNOUNCE) && defined(INAGG_SPLIT_VALUES)
    AnnounceMembers() announce_members;
#endif
    StatusAnswer() status_answer;
    GroupRelay() group_relay;
    QueueSelect() queue_select;
    L2Forwarding() l2_forwarding;

#ifdef INAGG_ANNOUNCE
    action announce_take() {
        to_recirculation(hdr, ig_tm_md, ig_md.set_index, ig_md.job.worker_count,
                         0, 0, VALUES_STORE, HARVEST_ANNOUNCE);
    }

    action announce_ignore() {
        ig_dprsr_md.drop_ctl = 1;
    }

    /* An announcement's first pass: taken when its set sums that very
     * round part-way (not empty: a bitmap half not 0; not complete: round
     * 0; the round's packet id the announcement's: SlotState's XOR 0),
     * else ignored. One ternary table, the first match winning, in place
     * of an if-chain: a table per branch, in the verdict's stages, which
     * have no logical table to spare (with it, Tofino 1 at K = 64 needed
     * 13 stages). Compiled in. */
    table announce_verdict {
        key = {
            ig_md.round           : ternary @name("round");
            ig_md.query_packet_id : ternary @name("packet_id_xor");
            ig_md.before_lo       : ternary @name("before_lo");
            ig_md.before_hi       : ternary @name("before_hi");
        }
        actions = {
            announce_take;
            announce_ignore;
        }
        const default_action = announce_ignore();
        const entries = {
            (_, _, 0, 0) : announce_ignore();
            (0, 0, _, _) : announce_take();
        }
        size = 2;
    }
#endif

    apply {
        hdr.bridged.setValid();
        hdr.bridged.kind = BRIDGE_FORWARD;
        hdr.bridged.pad0 = 0;
        hdr.bridged.ingress_port = ig_intr_md.ingress_port;
        hdr.bridged.member = 0;

        /* The parser set the pass and the values' operations; a
         * recirculated packet is not admitted again, whatever its ports.
         *
         * On Tofino a table follows the tables applied before it on its
         * path. So the second half of the values (split) is a branch of
         * its own beside admission and SlotState, to take the SALUs they
         * leave free in their stages (sequenced before admission, it
         * pushed admission three stages on; after the first half, 16
         * stages; with SlotState after it, 17), and an announcement,
         * whose second pass runs SlotState, adds its second half in a
         * pass of its own (below). SlotState, for an admitted datagram
         * and for an announcement's second pass (which writes the round
         * it brings), is applied after the branch on the pass, in one
         * if-chain with GroupRelay: after it, SlotState's condition
         * waited for its refusals' writes of ig_md.drop (two stages). Its
         * condition is read whole: a flag set in the branches for it
         * cost a stage. */
#ifdef INAGG_SPLIT_VALUES
        if (ig_md.pass == PASS_SECOND_HALF || ig_md.pass == PASS_LAST) {
            /* The second half of the values (accumulators.p4): a
             * second half's pass, and a result's last. */
            accumulators_second.apply(hdr, ig_md);
        } else
#endif
        {
            if (ig_md.pass == PASS_NETWORK) {
                if (ig_md.inagg == 1) {
                    rx.count(0);
                    admission.apply(hdr, ig_md, ig_intr_md, ig_prsr_md);
                }
            } else if (ig_md.pass == PASS_ANNOUNCE) {
                /* An announcement's second pass: the set's slot, the
                 * job's n and its members from harvest_h (there is no
                 * admission). Here, beside admission: in a statement of
                 * their own before it, these writes of job_table's fields
                 * made it wait a stage (Tofino 1 at K = 64 asked for 13). */
                ig_md.slot_addr = ig_md.set_index >> 1;
                ig_md.job.worker_count = hdr.harvest.mcast_grp;
#ifdef INAGG_SPLIT_VALUES
                announce_members.apply(hdr, ig_md);
#endif
            }
            if (ig_md.pass == PASS_NETWORK && ig_md.inagg == 1
                && ig_md.drop == 0 && ig_md.group == 1) {
                group_relay.apply(hdr, ig_md, ig_intr_md, ig_tm_md);
            } else if (ig_md.pass == PASS_ANNOUNCE
                       || (ig_md.pass == PASS_NETWORK && ig_md.inagg == 1 && ig_md.drop == 0)) {
                slot_state.apply(hdr, ig_md);
            }
        }

        accumulators.apply(hdr, ig_md);

        if (ig_md.pass == PASS_LAST) {
            result_delivery.apply(hdr, ig_tm_md);
            ig_md.select_queue = 1;
#ifdef INAGG_SPLIT_VALUES
        } else if (ig_md.pass == PASS_SECOND_HALF) {
            second_half_exit.apply(hdr, ig_dprsr_md, ig_tm_md);
#endif
#ifdef INAGG_ANNOUNCE
        } else if (ig_md.pass == PASS_ANNOUNCE) {
#ifdef INAGG_SPLIT_VALUES
            /* Written, but for the second half of the values: it goes
             * round once more to store them, as an absorbed contribution
             * does (SecondHalfEntry: harvest_h's result 0, dropped after
             * that pass). The recirculation port keeps the order, so a
             * packet for the set that came after the announcement finds
             * its second half stored. */
            to_recirculation(hdr, ig_tm_md, ig_md.set_index, 0, 0, 0, VALUES_STORE, 0);
#else
            /* Written: nothing leaves. */
            ig_dprsr_md.drop_ctl = 1;
#endif
#endif
        } else if (ig_md.inagg == 1) {
            if (ig_md.drop == 0 && ig_md.group == 1) {
                group_packets.count(hdr.inagg.job);
                ig_md.select_queue = 1;
#ifdef INAGG_ANNOUNCE
            } else if (ig_md.drop == 0 && ig_md.announce == 1) {
                /* Taken when its set sums that very round part-way (not
                 * empty, not complete, the round's packet id the
                 * announcement's: SlotState's XOR 0; docs/PROTOCOL.md, "A
                 * switch that lost its state"; emu/src/switch.rs,
                 * Job::announce): round again to write it, the set's slot
                 * and the job's n in harvest_h. Nothing leaves. */
                announce_verdict.apply();
#endif
            } else if (ig_md.drop == 0 && ig_md.query == 1) {
                /* Nothing changed; the asker gets the stored result when
                 * its copy was lost, else the set's status. */
                job_queries.count(hdr.inagg.job);
                if (ig_md.owed == 1 && ig_md.answered != 0) {
                    job_resent_results.count(hdr.inagg.job);
                    result_harvest.apply(hdr, ig_md, ig_intr_md, ig_tm_md);
                } else {
                    status_answer.apply(hdr, ig_md, ig_intr_md, ig_tm_md);
                    ig_md.select_queue = 1;
                }
            } else if (ig_md.drop == 0) {
                job_contributions.count(hdr.inagg.job);
                if (ig_md.round != 0) {
                    if (ig_md.retransmission == 1) {
                        job_resent_results.count(hdr.inagg.job);
                    } else {
                        job_results.count(hdr.inagg.job);
                    }
                    result_harvest.apply(hdr, ig_md, ig_intr_md, ig_tm_md);
                } else if (ig_md.retransmission == 1) {
                    job_duplicates.count(hdr.inagg.job);
                    ig_md.drop = 1;
                    ig_md.drop_reason = (bit<4>)DROP_DUPLICATE_PENDING;
                } else {
                    /* Absorbed: added to its set, nothing leaves. Not a drop.
                     * Split, its second half is added in another pass. */
#ifdef INAGG_SPLIT_VALUES
                    second_half_entry.apply(hdr, ig_md, ig_tm_md);
#else
                    ig_dprsr_md.drop_ctl = 1;
#endif
                }
            } else if (ig_md.group == 0 && ig_md.drop_reason >= (bit<4>)DROP_UNKNOWN_WORKER) {
                /* The job exists and its checks refused the packet. */
                job_dropped.count(hdr.inagg.job);
            }
            if (ig_md.drop == 1) {
                drops.count((drop_reason_t)ig_md.drop_reason);
                ig_dprsr_md.drop_ctl = 1;
            }
        } else {
            l2_forwarding.apply(hdr, ig_dprsr_md, ig_tm_md);
        }

        if (ig_md.select_queue == 1) {
            queue_select.apply(hdr, ig_tm_md);
        }
    }
}

#endif /* _INAGG_TNA_INGRESS_P4_ */
