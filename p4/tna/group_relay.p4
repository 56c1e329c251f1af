/*
 * GroupRelay: a group datagram (kind 3, docs/PROTOCOL.md "Multicast groups")
 * from a member of a multicast group goes, unchanged, to every other member,
 * as in p4/v1model/group_relay.p4 and the emulator (emu/src/switch.rs,
 * Switch::relay), with the same checks in the same order:
 *
 *   12 unknown_group    no group_table entry for the group id (header job)
 *    3 unknown_worker   no member_table entry for (group, ingress port,
 *                       source address, source port), or one naming another
 *                       member id than the header's worker field
 *
 * An admitted datagram touches no register and takes one pass: it is
 * addressed back the way it came (the copies come from the address the
 * members send to, as results do), multicast to the group's PRE group
 * (mcast_grp_a), and egress (GroupRewrite) gives each copy its member's
 * destination from the replication id and drops the sender's copy, named
 * in the bridged header.
 *
 * A group made by hand and every job's result group have entries here (the
 * control plane installs them with the group: p4/README.md, "Loading on
 * Tofino"), so a job's group relays among the job's workers.
 */
#ifndef _INAGG_TNA_GROUP_RELAY_P4_
#define _INAGG_TNA_GROUP_RELAY_P4_

control GroupRelay(inout ingress_headers_t hdr,
                   inout ingress_metadata_t ig_md,
                   in ingress_intrinsic_metadata_t ig_intr_md,
                   inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {

    /* The group's PRE group, from group_table. */
    bit<16> pre_group = 0;

    action set_group(bit<16> mcast_grp) {
        pre_group = mcast_grp;
    }

    /* One entry per group: group id -> its PRE group. A miss is
     * unknown_group. */
    table group_table {
        key = {
            hdr.inagg.job : exact @name("group");
        }
        actions = {
            set_group;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = INAGG_GROUP_TABLE_SIZE;
    }

    action set_member(bit<16> member) {
        ig_md.member = member;
    }

    /* One entry per member of each group: what identifies the sender. */
    table member_table {
        key = {
            hdr.inagg.job           : exact @name("group");
            ig_intr_md.ingress_port : exact @name("ingress_port");
            hdr.ipv4.src_addr       : exact @name("src_addr");
            hdr.udp.src_port        : exact @name("src_port");
        }
        actions = {
            set_member;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = INAGG_MEMBER_TABLE_SIZE;
    }

    action refuse(drop_reason_t reason) {
        ig_md.drop = 1;
        ig_md.drop_reason = (bit<4>)reason;
    }

    action make_copies() {
        address_back(hdr);
        ig_tm_md.mcast_grp_a = pre_group;
        hdr.bridged.kind = BRIDGE_GROUP_COPY;
        hdr.bridged.member = hdr.inagg.worker;
    }

    apply {
        if (!group_table.apply().hit) {
            refuse(DROP_UNKNOWN_GROUP);
        } else if (!member_table.apply().hit) {
            refuse(DROP_UNKNOWN_WORKER);
        } else if (ig_md.member != hdr.inagg.worker) {
            refuse(DROP_UNKNOWN_WORKER);
        } else {
            make_copies();
        }
    }
}

#endif /* _INAGG_TNA_GROUP_RELAY_P4_ */
