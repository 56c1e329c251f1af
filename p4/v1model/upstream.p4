/*
 * SendUpstream: a tree job's complete partial sum leaves for its parent
 * switch as one contribution (docs/PROTOCOL.md, "Aggregation trees";
 * emu/src/switch.rs, emit_upstream). Aggregate has already put the set's
 * weight (in count), max exponent, round packet id and priority, and sums
 * into the packet; here it becomes member `meta.upstream.member`'s
 * contribution to the parent's job, addressed to the parent's data-plane
 * endpoint from the address the workers send to, out of the port towards
 * the parent. Generation and slot are unchanged: the switches of one tree
 * share them.
 *
 * Used for the first send (the set completes here) and for every resend (a
 * worker's retransmission finds the partial sum still away).
 */
#ifndef _INAGG_V1MODEL_UPSTREAM_P4_
#define _INAGG_V1MODEL_UPSTREAM_P4_

control SendUpstream(inout headers_t hdr,
                     inout metadata_t meta,
                     inout standard_metadata_t standard_metadata) {

    action send_up() {
        hdr.inagg.kind = KIND_CONTRIBUTION;
        hdr.inagg.job = meta.upstream.job;
        hdr.inagg.worker = meta.upstream.member;

        hdr.ethernet.src_addr = hdr.ethernet.dst_addr;
        hdr.ethernet.dst_addr = meta.upstream.mac;
        hdr.ipv4.src_addr = hdr.ipv4.dst_addr;
        hdr.ipv4.dst_addr = meta.upstream.addr;
        hdr.ipv4.ttl = RESULT_TTL;
        hdr.udp.src_port = hdr.udp.dst_port;
        hdr.udp.dst_port = meta.upstream.port;
        hdr.udp.checksum = 0;

        standard_metadata.egress_spec = meta.upstream.egress_port;
        meta.inagg.is_upward = 1;
    }

    apply {
        send_up();
    }
}

#endif /* _INAGG_V1MODEL_UPSTREAM_P4_ */
