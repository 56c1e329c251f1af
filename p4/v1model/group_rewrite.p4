/*
 * GroupRewrite (egress): one copy of an admitted group datagram per replica
 * of its group's PRE group. The control plane makes the replication id the
 * member id, so group_receivers, keyed on (group, replication id), gives
 * each copy its member's Ethernet, IPv4 and UDP destination. The copy whose
 * replication id is the sender's member id is dropped: a group datagram
 * goes to every member but its sender. The header's worker field keeps the
 * sender's id (unlike a result's, which names its receiver). A copy without
 * an entry is dropped.
 */
#ifndef _INAGG_V1MODEL_GROUP_REWRITE_P4_
#define _INAGG_V1MODEL_GROUP_REWRITE_P4_

control GroupRewrite(inout headers_t hdr,
                     inout metadata_t meta,
                     inout standard_metadata_t standard_metadata) {

    action set_member_address(bit<48> dst_mac, bit<32> dst_addr, bit<16> dst_port) {
        hdr.ethernet.dst_addr = dst_mac;
        hdr.ipv4.dst_addr = dst_addr;
        hdr.udp.dst_port = dst_port;
    }

    action drop_copy() {
        meta.inagg.copy_dropped = 1;
        mark_to_drop(standard_metadata);
    }

    table group_receivers {
        key = {
            hdr.inagg.job                : exact @name("group");
            standard_metadata.egress_rid : exact @name("rid");
        }
        actions = {
            set_member_address;
            @defaultonly drop_copy;
        }
        const default_action = drop_copy();
        size = INAGG_MEMBER_TABLE_SIZE;
    }

    apply {
        if (standard_metadata.egress_rid == hdr.inagg.worker) {
            drop_copy();
        } else {
            group_receivers.apply();
        }
    }
}

#endif /* _INAGG_V1MODEL_GROUP_REWRITE_P4_ */
