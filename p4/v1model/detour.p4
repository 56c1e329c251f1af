/*
 * Auxiliary paths (docs/PROTOCOL.md, "Auxiliary paths"; switch-api/src/detour.rs
 * and emu/src/pipeline.rs, choose_path): what a child switch needs to send a
 * partial sum round a busy link, and what a switch on the way does with it.
 *
 *   queue_depth   per (port, egress queue): the packets that were waiting
 *                 in that queue when egress last took one from it
 *                 (deq_qdepth), written by InaggEgress for every packet.
 *                 `waiting_on(port)` sums a port's 8 queues: the emulator's
 *                 "packets queued on a port, every queue", as the switch
 *                 last saw it. A queue that drains is seen empty by its
 *                 last packet, so the figure does not stick after a burst.
 *   address_to    addresses a packet to a data-plane endpoint from the
 *                 address the sender used, as every packet the switch makes
 *                 is: partial sums, detours, relayed detours.
 *   RelayDetour   a detour that a relay_table entry matched (Admission) goes
 *                 on to the entry's next hop, its inagg header and payload
 *                 unchanged.
 *
 * The sender rule itself is in SendUpstream (upstream.p4).
 */
#ifndef _INAGG_V1MODEL_DETOUR_P4_
#define _INAGG_V1MODEL_DETOUR_P4_

/* Shared by ingress (read) and egress (written): declared at the top level. */
register<bit<32>>(INAGG_PORTS * 8) queue_depth;

/* The packets waiting on `port`, every queue, as egress last saw them. */
action waiting_on(in bit<9> port, out bit<32> waiting) {
    bit<32> base = (bit<32>)port << 3;
    bit<32> q0;
    bit<32> q1;
    bit<32> q2;
    bit<32> q3;
    bit<32> q4;
    bit<32> q5;
    bit<32> q6;
    bit<32> q7;
    queue_depth.read(q0, base);
    queue_depth.read(q1, base | 1);
    queue_depth.read(q2, base | 2);
    queue_depth.read(q3, base | 3);
    queue_depth.read(q4, base | 4);
    queue_depth.read(q5, base | 5);
    queue_depth.read(q6, base | 6);
    queue_depth.read(q7, base | 7);
    waiting = q0 + q1 + q2 + q3 + q4 + q5 + q6 + q7;
}

/* Sends the packet to an endpoint, from the address and port it was sent
 * to (the switch's). TTL as for a fresh packet; UDP checksum 0, since the
 * addresses changed. */
action address_to(inout headers_t hdr,
                  inout standard_metadata_t standard_metadata,
                  in bit<48> mac,
                  in bit<32> addr,
                  in bit<16> port,
                  in bit<9>  egress_port) {
    hdr.ethernet.src_addr = hdr.ethernet.dst_addr;
    hdr.ethernet.dst_addr = mac;
    hdr.ipv4.src_addr = hdr.ipv4.dst_addr;
    hdr.ipv4.dst_addr = addr;
    hdr.ipv4.ttl = RESULT_TTL;
    hdr.udp.src_port = hdr.udp.dst_port;
    hdr.udp.dst_port = port;
    hdr.udp.checksum = 0;
    standard_metadata.egress_spec = egress_port;
}

control RelayDetour(inout headers_t hdr,
                    inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) {

    action forward() {
        address_to(hdr, standard_metadata, meta.next_hop.mac, meta.next_hop.addr,
                   meta.next_hop.port, meta.next_hop.egress_port);
        meta.inagg.is_upward = 1;
    }

    apply {
        forward();
    }
}

#endif /* _INAGG_V1MODEL_DETOUR_P4_ */
