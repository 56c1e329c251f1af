/*
 * L2Forwarding: everything that is not inagg traffic is switched on its
 * Ethernet destination, unchanged. flood replicates through a multicast group
 * the control plane made for it; egress drops the copy for the ingress port.
 */
#ifndef _INAGG_TNA_FORWARDING_P4_
#define _INAGG_TNA_FORWARDING_P4_

control L2Forwarding(inout ingress_headers_t hdr,
                     inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                     inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {

    action forward(PortId_t port) {
        ig_tm_md.ucast_egress_port = port;
    }

    action flood(MulticastGroupId_t mcast_grp) {
        ig_tm_md.mcast_grp_a = mcast_grp;
        hdr.bridged.kind = BRIDGE_FLOOD;
    }

    action discard() {
        ig_dprsr_md.drop_ctl = 1;
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

#endif /* _INAGG_TNA_FORWARDING_P4_ */
