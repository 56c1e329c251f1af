/*
 * L2Forwarding: everything that is not inagg traffic (ARP, the workers' own
 * traffic, anything not UDP to the inagg port) is switched on its Ethernet
 * destination. The switch changes nothing in such packets.
 *
 * flood sends a copy out of every port of a multicast group the control plane
 * made for it (broadcast, e.g. ARP); the egress drops the copy that would go
 * back out of the port the packet came in on.
 */
#ifndef _INAGG_V1MODEL_FORWARDING_P4_
#define _INAGG_V1MODEL_FORWARDING_P4_

control L2Forwarding(in headers_t hdr,
                     inout metadata_t meta,
                     inout standard_metadata_t standard_metadata) {

    action forward(bit<9> port) {
        standard_metadata.egress_spec = port;
    }

    action flood(bit<16> mcast_grp) {
        standard_metadata.mcast_grp = mcast_grp;
        meta.fwd.flood = 1;
    }

    action discard() {
        mark_to_drop(standard_metadata);
    }

    table l2_forward {
        key = {
            hdr.ethernet.dst_addr : exact @name("dst_addr");
        }
        actions = {
            forward;
            flood;
            discard;
        }
        default_action = discard();
        size = INAGG_L2_TABLE_SIZE;
    }

    apply {
        if (hdr.ethernet.isValid()) {
            l2_forward.apply();
        } else {
            discard();
        }
    }
}

#endif /* _INAGG_V1MODEL_FORWARDING_P4_ */
