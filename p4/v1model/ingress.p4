/*
 * InaggIngress: wires the ingress controls together and owns the counters.
 *
 *   UDP to the inagg port:  Admission -> Aggregate -> ResultDispatch +
 *                           QueueSelect, or a drop counted by reason
 *   ... a tree job's set:   Admission -> Aggregate -> SendUpstream +
 *                           QueueSelect (the partial sum to the parent)
 *   ... a parent's result:  Admission -> Aggregate -> ResultDispatch +
 *                           QueueSelect (down to the job's members)
 *   ... a group datagram:   Admission -> GroupRelay + QueueSelect
 *   ... a relayed detour:   Admission (relay_table) -> RelayDetour +
 *                           QueueSelect (on to the next hop, unchanged)
 *   ... a detour taken:     as a contribution, from the member it names
 *   ... a query:            Admission -> Aggregate (reads only) ->
 *                           ResultDispatch (the stored result) or
 *                           StatusAnswer, + QueueSelect, to the asker
 *                           (and the members its set waits for)
 *   anything else:          L2Forwarding
 *
 * The branches only decide; ResultDispatch, SendUpstream, RelayDetour and
 * QueueSelect are applied once each, at the end, so that no table is
 * applied twice.
 *
 * Counters (all packets_and_bytes; the emulator's are packets, and bytes
 * here are whole frames):
 *   rx                   [1]               inagg packets reaching the switch
 *                                          logic (emulator: rx_packets)
 *   drops                [16]              by drop reason, common/protocol.p4
 *   job_contributions    [INAGG_MAX_JOBS]  admitted contributions, by job id
 *   job_results          [INAGG_MAX_JOBS]  results multicast (sets completed
 *                                          at a root or alone; parents'
 *                                          results taken at a tree job)
 *   job_resent_results   [INAGG_MAX_JOBS]  stored results unicast again
 *                                          (for a retransmission or a query)
 *   job_queries          [INAGG_MAX_JOBS]  queries admitted
 *   job_duplicates       [INAGG_MAX_JOBS]  retransmissions to incomplete sets
 *   job_dropped          [INAGG_MAX_JOBS]  dropped by the job's checks
 *                                          (unknown_worker .. stale_generation),
 *                                          late copies (stale_round) and
 *                                          parents' results no set waits for
 *                                          (unexpected_result)
 *   job_upstream         [INAGG_MAX_JOBS]  partial sums sent to the parent
 *   job_upstream_resent  [INAGG_MAX_JOBS]  ... sent again on a retransmission
 *   job_detours_sent     [INAGG_MAX_JOBS]  ... of those, sent by the auxiliary
 *                                          path
 *   job_detours_taken    [INAGG_MAX_JOBS]  detours admitted as a member's
 *                                          contribution
 *   relayed              [1]               detours forwarded by relay entries
 *   relay_packets        [INAGG_RELAY_TABLE_SIZE]
 *                                          ... by entry (relay_to's index)
 *   group_packets        [INAGG_MAX_JOBS]  group datagrams admitted, by group
 *                                          id (copies: InaggEgress)
 * They are the emulator's Counters and JobCounters (switch-api/src/counters.rs),
 * its groups' `packets` (GroupInfo) and its relay entries' `packets`
 * (RelayInfo).
 */
#ifndef _INAGG_V1MODEL_INGRESS_P4_
#define _INAGG_V1MODEL_INGRESS_P4_

control InaggIngress(inout headers_t hdr,
                     inout metadata_t meta,
                     inout standard_metadata_t standard_metadata) {

    counter(1, CounterType.packets_and_bytes) rx;
    counter(INAGG_DROP_REASONS, CounterType.packets_and_bytes) drops;
    counter(INAGG_MAX_JOBS, CounterType.packets_and_bytes) job_contributions;
    counter(INAGG_MAX_JOBS, CounterType.packets_and_bytes) job_results;
    counter(INAGG_MAX_JOBS, CounterType.packets_and_bytes) job_resent_results;
    counter(INAGG_MAX_JOBS, CounterType.packets_and_bytes) job_queries;
    counter(INAGG_MAX_JOBS, CounterType.packets_and_bytes) job_duplicates;
    counter(INAGG_MAX_JOBS, CounterType.packets_and_bytes) job_dropped;
    counter(INAGG_MAX_JOBS, CounterType.packets_and_bytes) job_upstream;
    counter(INAGG_MAX_JOBS, CounterType.packets_and_bytes) job_upstream_resent;
    counter(INAGG_MAX_JOBS, CounterType.packets_and_bytes) job_detours_sent;
    counter(INAGG_MAX_JOBS, CounterType.packets_and_bytes) job_detours_taken;
    counter(1, CounterType.packets_and_bytes) relayed;
    counter(INAGG_RELAY_TABLE_SIZE, CounterType.packets_and_bytes) relay_packets;
    counter(INAGG_MAX_JOBS, CounterType.packets_and_bytes) group_packets;

    Admission() admission;
    Aggregate() aggregate;
    ResultDispatch() result_dispatch;
    StatusAnswer() status_answer;
    SendUpstream() send_upstream;
    RelayDetour() relay_detour;
    GroupRelay() group_relay;
    QueueSelect() queue_select;
    L2Forwarding() l2_forwarding;

    /* Where an aggregation packet goes, decided by the branches below. */
    bit<1> to_workers;          /* a result: ResultDispatch */
    bit<1> to_parent;           /* a partial sum: SendUpstream */
    bit<1> to_asker;            /* a query's status: StatusAnswer */

    action refuse(drop_reason_t reason) {
        meta.inagg.drop = 1;
        meta.inagg.drop_reason = reason;
    }

    apply {
        to_workers = 0;
        to_parent = 0;
        to_asker = 0;
        bit<16> local_job = 0;    /* the job, before SendUpstream renames it */
        if (hdr.udp.isValid() && hdr.udp.dst_port == INAGG_PORT) {
            rx.count(0);
            admission.apply(hdr, meta, standard_metadata);
            local_job = hdr.inagg.job;
            if (meta.inagg.drop == 0 && meta.inagg.relay == 1) {
                relayed.count(0);
                relay_packets.count((bit<32>)meta.inagg.relay_index);
            } else if (meta.inagg.drop == 0 && meta.inagg.group == 1) {
                group_relay.apply(hdr, meta, standard_metadata);
                if (meta.inagg.drop == 0) {
                    group_packets.count((bit<32>)hdr.inagg.job);
                }
            } else if (meta.inagg.drop == 0) {
                if (meta.inagg.detour == 1) {
                    job_detours_taken.count((bit<32>)hdr.inagg.job);
                }
                aggregate.apply(hdr, meta);
                if (hdr.inagg.kind == KIND_QUERY) {
                    /* Nothing changed; the asker gets the stored result
                     * when its copy was lost, else the set's status. */
                    job_queries.count((bit<32>)hdr.inagg.job);
                    if (meta.inagg.stored_result == 1) {
                        job_resent_results.count((bit<32>)hdr.inagg.job);
                        meta.inagg.retransmission = 1;
                        to_workers = 1;
                    } else {
                        to_asker = 1;
                    }
                } else if (hdr.inagg.kind == KIND_ANNOUNCE) {
                    /* Taken into a set summing its round part-way, or
                     * ignored: nothing leaves either way (the emulator
                     * counts which; this program does not). */
                    mark_to_drop(standard_metadata);
                } else if (meta.inagg.from_parent == 1) {
                    /* A parent's result: taken, or no set waits for it. */
                    if (meta.inagg.unexpected == 1) {
                        job_dropped.count((bit<32>)hdr.inagg.job);
                        refuse(DROP_UNEXPECTED_RESULT);
                    } else {
                        job_results.count((bit<32>)hdr.inagg.job);
                        to_workers = 1;
                    }
                } else {
                    job_contributions.count((bit<32>)hdr.inagg.job);
                    if (meta.inagg.late == 1) {
                        /* Counted as the emulator does: a contribution of
                         * the job, and a drop by its checks. */
                        job_dropped.count((bit<32>)hdr.inagg.job);
                        refuse(DROP_STALE_ROUND);
                    } else if (meta.inagg.complete == 1 && meta.inagg.retransmission == 1) {
                        if (meta.inagg.away == 1) {
                            /* The tree's result is still on its way down:
                             * ask the parent again. */
                            job_upstream_resent.count((bit<32>)hdr.inagg.job);
                            to_parent = 1;
                        } else {
                            job_resent_results.count((bit<32>)hdr.inagg.job);
                            to_workers = 1;
                        }
                    } else if (meta.inagg.complete == 1) {
                        if (meta.upstream.valid == 1) {
                            job_upstream.count((bit<32>)hdr.inagg.job);
                            to_parent = 1;
                        } else {
                            job_results.count((bit<32>)hdr.inagg.job);
                            to_workers = 1;
                        }
                    } else if (meta.inagg.retransmission == 1) {
                        job_duplicates.count((bit<32>)hdr.inagg.job);
                        refuse(DROP_DUPLICATE_PENDING);
                    } else {
                        /* Absorbed: added to its set, nothing leaves. Not a
                         * drop. */
                        mark_to_drop(standard_metadata);
                    }
                }
            } else if (meta.job.known == 1) {
                /* The job exists and its checks refused the packet. */
                job_dropped.count((bit<32>)hdr.inagg.job);
            }
            if (to_workers == 1) {
                result_dispatch.apply(hdr, meta, standard_metadata);
            } else if (to_asker == 1) {
                status_answer.apply(hdr, meta, standard_metadata);
            } else if (to_parent == 1) {
                send_upstream.apply(hdr, meta, standard_metadata);
                if (meta.inagg.detour_sent == 1) {
                    job_detours_sent.count((bit<32>)local_job);
                }
            } else if (meta.inagg.drop == 0 && meta.inagg.relay == 1) {
                relay_detour.apply(hdr, meta, standard_metadata);
            }
            if (meta.inagg.drop == 1) {
                drops.count((bit<32>)meta.inagg.drop_reason);
                mark_to_drop(standard_metadata);
            } else if (to_workers == 1 || to_parent == 1 || to_asker == 1 || meta.inagg.group == 1
                       || meta.inagg.relay == 1) {
                queue_select.apply(hdr, standard_metadata);
            }
        } else {
            l2_forwarding.apply(hdr, meta, standard_metadata);
        }
    }
}

#endif /* _INAGG_V1MODEL_INGRESS_P4_ */
