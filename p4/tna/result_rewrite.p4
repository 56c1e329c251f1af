/*
 * ResultRewrite (egress): one multicast result copy per replica of the job's
 * group; the control plane makes each replica's replication id (the PRE L1
 * node's rid) the worker id. result_receivers, keyed on (job, egress_rid),
 * gives the copy its receiver's Ethernet, IPv4 and UDP destination and
 * writes the receiver's id into the header's worker field (docs/PROTOCOL.md,
 * the result's "receiving worker's id"). A copy without an entry is dropped.
 */
#ifndef _INAGG_TNA_RESULT_REWRITE_P4_
#define _INAGG_TNA_RESULT_REWRITE_P4_

control ResultRewrite(inout egress_headers_t hdr,
                      inout egress_metadata_t eg_md,
                      in egress_intrinsic_metadata_t eg_intr_md,
                      inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {

    action set_receiver(bit<48> dst_mac, bit<32> dst_addr, bit<16> dst_port) {
        hdr.ethernet.dst_addr = dst_mac;
        hdr.ipv4.dst_addr = dst_addr;
        hdr.udp.dst_port = dst_port;
        hdr.inagg.worker = eg_intr_md.egress_rid;
    }

    action drop_copy() {
        eg_md.copy_dropped = 1;
        eg_dprsr_md.drop_ctl = 1;
    }

    table result_receivers {
        key = {
            hdr.inagg.job         : exact @name("job");
            eg_intr_md.egress_rid : exact @name("rid");
        }
        actions = {
            set_receiver;
            @defaultonly drop_copy;
        }
        const default_action = drop_copy();
        size = INAGG_WORKER_TABLE_SIZE;
    }

    apply {
        result_receivers.apply();
    }
}

#endif /* _INAGG_TNA_RESULT_REWRITE_P4_ */
