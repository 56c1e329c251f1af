/*
 * InaggEgress: per-copy work after the packet replication engine.
 *
 *   multicast result copy      -> ResultRewrite (receiver from egress_rid)
 *   flooded plain traffic      -> the copy for the ingress port is dropped
 *   pass 1 of a result         -> nothing (it goes out of the recirculation
 *                                 port as ingress built it)
 *
 * Counter: tx [1], results sent (every multicast copy, every resend).
 */
#ifndef _INAGG_TNA_EGRESS_P4_
#define _INAGG_TNA_EGRESS_P4_

control InaggEgress(inout egress_headers_t hdr,
                    inout egress_metadata_t eg_md,
                    in egress_intrinsic_metadata_t eg_intr_md,
                    in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
                    inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
                    inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {

    Counter<bit<64>, bit<1>>(1, CounterType_t.PACKETS_AND_BYTES) tx;

    ResultRewrite() result_rewrite;

    apply {
        if (hdr.bridged.kind == BRIDGE_RESULT_MULTICAST) {
            result_rewrite.apply(hdr, eg_md, eg_intr_md, eg_dprsr_md);
        }
        if (hdr.bridged.kind == BRIDGE_RESULT_MULTICAST || hdr.bridged.kind == BRIDGE_RESULT_UNICAST) {
            if (eg_md.copy_dropped == 0) {
                tx.count(0);
            }
        } else if (hdr.bridged.kind == BRIDGE_FLOOD
                   && eg_intr_md.egress_port == hdr.bridged.ingress_port) {
            eg_dprsr_md.drop_ctl = 1;
        }
        hdr.bridged.setInvalid();
    }
}

#endif /* _INAGG_TNA_EGRESS_P4_ */
