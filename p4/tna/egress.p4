/*
 * InaggEgress: per-copy work after the packet replication engine.
 *
 *   multicast result copy      -> ResultRewrite (receiver from egress_rid)
 *   multicast status copy      -> StatusRewrite (only the asker and the
 *                                 members the round waits for), then
 *                                 ResultRewrite, the asker's id kept
 *   group datagram copy        -> GroupRewrite (member from egress_rid; the
 *                                 sender's copy is dropped)
 *   flooded plain traffic      -> the copy for the ingress port is dropped
 *   pass 1 of a result         -> nothing (it goes out of the recirculation
 *                                 port as ingress built it)
 *
 * Counters: tx [1], results sent (every multicast copy, every resend) and
 * group datagram copies; group_copies [INAGG_MAX_JOBS], the copies by
 * group id (the emulator's GroupInfo copies).
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
    Counter<bit<64>, bit<16>>(INAGG_MAX_JOBS, CounterType_t.PACKETS_AND_BYTES) group_copies;

    ResultRewrite() result_rewrite;
    StatusRewrite() status_rewrite;
    GroupRewrite() group_rewrite;

    apply {
        /* ResultRewrite writes the receiver's id; a status copy keeps the
         * asker's. result_receivers is applied at one place for results
         * and status copies both: bf-p4c refuses a table applied in two
         * ("the next-table information cannot correctly propagate"). */
        bit<16> asker = hdr.inagg.worker;
        if (hdr.bridged.kind == BRIDGE_STATUS_MULTICAST) {
            status_rewrite.apply(hdr, eg_md, eg_intr_md, eg_dprsr_md);
        }
        if (hdr.bridged.kind == BRIDGE_RESULT_MULTICAST
            || (hdr.bridged.kind == BRIDGE_STATUS_MULTICAST && eg_md.copy_dropped == 0)) {
            result_rewrite.apply(hdr, eg_md, eg_intr_md, eg_dprsr_md);
        }
        if (hdr.bridged.kind == BRIDGE_STATUS_MULTICAST) {
            hdr.inagg.worker = asker;
        }
        if (hdr.bridged.kind == BRIDGE_RESULT_MULTICAST || hdr.bridged.kind == BRIDGE_RESULT_UNICAST
            || hdr.bridged.kind == BRIDGE_STATUS_MULTICAST) {
            if (eg_md.copy_dropped == 0) {
                tx.count(0);
            }
        } else if (hdr.bridged.kind == BRIDGE_GROUP_COPY) {
            group_rewrite.apply(hdr, eg_md, eg_intr_md, eg_dprsr_md);
            if (eg_md.copy_dropped == 0) {
                tx.count(0);
                group_copies.count(hdr.inagg.job);
            }
        } else if (hdr.bridged.kind == BRIDGE_FLOOD
                   && eg_intr_md.egress_port == hdr.bridged.ingress_port) {
            eg_dprsr_md.drop_ctl = 1;
        }
        hdr.bridged.setInvalid();
    }
}

#endif /* _INAGG_TNA_EGRESS_P4_ */
