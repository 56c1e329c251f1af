/*
 * ResultRewrite (egress): the packet replication engine makes one copy of a
 * multicast result per replica of the job's group, each with the replica's
 * egress port and replication id. The control plane makes the replication id
 * the worker id, so result_receivers, keyed on (job, replication id), gives
 * each copy its receiver's Ethernet, IPv4 and UDP destination and writes the
 * receiver's id into the header's worker field (docs/PROTOCOL.md: "the
 * receiving worker's id (each multicast copy is rewritten per receiver, as
 * the P4 egress does from the replication id)"). A copy without an entry is
 * dropped.
 *
 * A status multicast by StatusAnswer goes only to the asker (its worker
 * field) and to the members whose bits its bitmap leaves clear, child
 * switches excepted (Aggregate's not_nudged); the other copies are
 * dropped, and the kept ones still name the asker
 * (docs/PROTOCOL.md, "Loss recovery").
 */
#ifndef _INAGG_V1MODEL_RESULT_REWRITE_P4_
#define _INAGG_V1MODEL_RESULT_REWRITE_P4_

control ResultRewrite(inout headers_t hdr,
                      inout metadata_t meta,
                      inout standard_metadata_t standard_metadata) {

    action set_receiver(bit<48> dst_mac, bit<32> dst_addr, bit<16> dst_port) {
        hdr.ethernet.dst_addr = dst_mac;
        hdr.ipv4.dst_addr = dst_addr;
        hdr.udp.dst_port = dst_port;
        hdr.inagg.worker = standard_metadata.egress_rid;
    }

    action drop_copy() {
        meta.inagg.copy_dropped = 1;
        mark_to_drop(standard_metadata);
    }

    table result_receivers {
        key = {
            hdr.inagg.job                : exact @name("job");
            standard_metadata.egress_rid : exact @name("rid");
        }
        actions = {
            set_receiver;
            @defaultonly drop_copy;
        }
        const default_action = drop_copy();
        size = INAGG_WORKER_TABLE_SIZE;
    }

    apply {
        bit<16> asker = hdr.inagg.worker;
        bit<64> receiver = 64w1 << (bit<8>)standard_metadata.egress_rid;
        if (hdr.status.isValid() && standard_metadata.egress_rid != asker
            && (meta.inagg.not_nudged & receiver) != 64w0) {
            drop_copy();
        } else {
            result_receivers.apply();
            if (hdr.status.isValid()) {
                hdr.inagg.worker = asker;
            }
        }
    }
}

#endif /* _INAGG_V1MODEL_RESULT_REWRITE_P4_ */
