/*
 * InaggEgress: per-copy work after the packet replication engine.
 *
 *   multicast result copy  -> ResultRewrite (receiver from the replication id)
 *   group datagram copy    -> GroupRewrite (member from the replication id;
 *                             the sender's copy is dropped)
 *   flooded plain traffic  -> the copy for the ingress port is dropped
 *
 * Every packet leaving a port also records the depth of its queue
 * (queue_depth, detour.p4): what SendUpstream's sender rule reads.
 *
 * Counter:
 *   tx            [1]               results sent, every multicast copy and
 *                                   every unicast resend, partial sums sent
 *                                   to a tree job's parent or by its
 *                                   auxiliary path, relayed detours, and
 *                                   group datagram copies (emulator:
 *                                   tx_packets)
 *   group_copies  [INAGG_MAX_JOBS]  group datagram copies sent, by group id
 *                                   (the emulator's GroupInfo copies)
 */
#ifndef _INAGG_V1MODEL_EGRESS_P4_
#define _INAGG_V1MODEL_EGRESS_P4_

control InaggEgress(inout headers_t hdr,
                    inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) {

    counter(1, CounterType.packets_and_bytes) tx;
    counter(INAGG_MAX_JOBS, CounterType.packets_and_bytes) group_copies;

    ResultRewrite() result_rewrite;
    GroupRewrite() group_rewrite;

    apply {
        queue_depth.write(((bit<32>)standard_metadata.egress_port << 3)
                          | (bit<32>)standard_metadata.priority,
                          (bit<32>)standard_metadata.deq_qdepth);
        if (meta.inagg.is_result == 1) {
            if (meta.inagg.multicast == 1) {
                result_rewrite.apply(hdr, meta, standard_metadata);
            }
            if (meta.inagg.copy_dropped == 0) {
                tx.count(0);
            }
        } else if (meta.inagg.is_upward == 1) {
            tx.count(0);
        } else if (meta.inagg.is_group_copy == 1) {
            group_rewrite.apply(hdr, meta, standard_metadata);
            if (meta.inagg.copy_dropped == 0) {
                tx.count(0);
                group_copies.count((bit<32>)hdr.inagg.job);
            }
        } else if (meta.fwd.flood == 1
                   && standard_metadata.egress_port == standard_metadata.ingress_port) {
            mark_to_drop(standard_metadata);
        }
    }
}

#endif /* _INAGG_V1MODEL_EGRESS_P4_ */
