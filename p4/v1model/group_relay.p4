/*
 * GroupRelay: a group datagram (kind 3, docs/PROTOCOL.md "Multicast groups")
 * from a member of a multicast group goes, unchanged, to every other member.
 * The emulator's rule (emu/src/switch.rs, Switch::relay), in its order:
 *
 *   12 unknown_group    no group_table entry for the group id (header job)
 *    3 unknown_worker   no member_table entry for (group, ingress port,
 *                       source address, source port), or one naming another
 *                       member id than the header's worker field
 *
 * An admitted datagram touches no aggregator and no job counter. It is
 * multicast to the group's PRE group; egress (GroupRewrite) gives each copy
 * its member's destination and drops the copy for the sender. The inagg
 * header and payload are not touched: only the addresses change, the source
 * becoming the address the members send to (as for results), and the UDP
 * checksum 0 since the destination changes per copy.
 *
 * A group made by hand and every job's result group have entries here (the
 * control plane installs them with the group: p4/README.md, "Multicast and
 * replication ids"), so a job's group relays among the job's workers.
 */
#ifndef _INAGG_V1MODEL_GROUP_RELAY_P4_
#define _INAGG_V1MODEL_GROUP_RELAY_P4_

control GroupRelay(inout headers_t hdr,
                   inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {

    action set_group(bit<16> mcast_grp) {
        standard_metadata.mcast_grp = mcast_grp;
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
        meta.inagg.member = member;
    }

    /* One entry per member of each group: what identifies the sender. */
    table member_table {
        key = {
            hdr.inagg.job                  : exact @name("group");
            standard_metadata.ingress_port : exact @name("ingress_port");
            hdr.ipv4.src_addr              : exact @name("src_addr");
            hdr.udp.src_port               : exact @name("src_port");
        }
        actions = {
            set_member;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = INAGG_MEMBER_TABLE_SIZE;
    }

    action refuse(drop_reason_t reason) {
        meta.inagg.drop = 1;
        meta.inagg.drop_reason = reason;
        standard_metadata.mcast_grp = 0;
    }

    /* Addressed back the way it came, as results are (result.p4): the
     * copies come from the address the members send to. */
    action make_copy() {
        address_back(hdr);
        meta.inagg.is_group_copy = 1;
    }

    apply {
        meta.inagg.is_group_copy = 0;
        if (!group_table.apply().hit) {
            refuse(DROP_UNKNOWN_GROUP);
        } else if (!member_table.apply().hit) {
            refuse(DROP_UNKNOWN_WORKER);
        } else if (meta.inagg.member != hdr.inagg.worker) {
            refuse(DROP_UNKNOWN_WORKER);
        } else {
            make_copy();
        }
    }
}

#endif /* _INAGG_V1MODEL_GROUP_RELAY_P4_ */
