/*
 * InaggEgress: per-copy work after the packet replication engine.
 *
 *   multicast result copy  -> ResultRewrite (receiver from the replication id)
 *   flooded plain traffic  -> the copy for the ingress port is dropped
 *
 * Counter:
 *   tx  [1]  results sent, every multicast copy and every unicast resend
 *            (emulator: tx_packets)
 */
#ifndef _INAGG_V1MODEL_EGRESS_P4_
#define _INAGG_V1MODEL_EGRESS_P4_

control InaggEgress(inout headers_t hdr,
                    inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) {

    counter(1, CounterType.packets_and_bytes) tx;

    ResultRewrite() result_rewrite;

    apply {
        if (meta.inagg.is_result == 1) {
            if (meta.inagg.multicast == 1) {
                result_rewrite.apply(hdr, meta, standard_metadata);
            }
            if (meta.inagg.copy_dropped == 0) {
                tx.count(0);
            }
        } else if (meta.fwd.flood == 1
                   && standard_metadata.egress_port == standard_metadata.ingress_port) {
            mark_to_drop(standard_metadata);
        }
    }
}

#endif /* _INAGG_V1MODEL_EGRESS_P4_ */
