/*
 * GroupRewrite (egress): the packet replication engine makes one copy of a
 * group datagram per replica of its group, each with the replica's egress
 * port and replication id, which the control plane makes the member id.
 * group_receivers, keyed on (group, replication id), gives each copy its
 * member's Ethernet, IPv4 and UDP destination; the copy for the sender (its
 * member id in the bridged header) is dropped, as is a copy without an
 * entry. The inagg header and payload are not touched. As in
 * p4/v1model/group_rewrite.p4.
 */
#ifndef _INAGG_TNA_GROUP_REWRITE_P4_
#define _INAGG_TNA_GROUP_REWRITE_P4_

control GroupRewrite(inout egress_headers_t hdr,
                     inout egress_metadata_t eg_md,
                     in egress_intrinsic_metadata_t eg_intr_md,
                     inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {

    action set_member_address(bit<48> dst_mac, bit<32> dst_addr, bit<16> dst_port) {
        hdr.ethernet.dst_addr = dst_mac;
        hdr.ipv4.dst_addr = dst_addr;
        hdr.udp.dst_port = dst_port;
    }

    action drop_copy() {
        eg_md.copy_dropped = 1;
        eg_dprsr_md.drop_ctl = 1;
    }

    table group_receivers {
        key = {
            hdr.inagg.job         : exact @name("group");
            eg_intr_md.egress_rid : exact @name("rid");
        }
        actions = {
            set_member_address;
            @defaultonly drop_copy;
        }
        const default_action = drop_copy();
        size = INAGG_MEMBER_TABLE_SIZE;
    }

    apply {
        if (eg_intr_md.egress_rid == hdr.bridged.member) {
            drop_copy();
        } else {
            group_receivers.apply();
        }
    }
}

#endif /* _INAGG_TNA_GROUP_REWRITE_P4_ */
