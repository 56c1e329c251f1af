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
 *
 * A job with an auxiliary path (upstream_table's `aux`) applies NetStorm's
 * sender rule first (docs/PROTOCOL.md, "Auxiliary paths"; emu/src/pipeline.rs,
 * choose_path), with the egress queues standing for the chunks in flight:
 *
 *   waiting(port to parent) > busy_bound and waiting(port to via) < queue_length ?
 *     yes: kind = 4 (a detour), to the auxiliary path's first switch
 *          (meta.inagg.detour_sent: counted as job_detours_sent)
 *     no:  a contribution (kind 1) to the parent
 *
 * `waiting` is what egress last saw on the port (detour.p4, waiting_on).
 */
#ifndef _INAGG_V1MODEL_UPSTREAM_P4_
#define _INAGG_V1MODEL_UPSTREAM_P4_

control SendUpstream(inout headers_t hdr,
                     inout metadata_t meta,
                     inout standard_metadata_t standard_metadata) {

    /* What the partial sum is, whichever way it goes. */
    action as_member() {
        hdr.inagg.job = meta.upstream.job;
        hdr.inagg.worker = meta.upstream.member;
        meta.inagg.is_upward = 1;
    }

    action send_up() {
        as_member();
        hdr.inagg.kind = KIND_CONTRIBUTION;
        address_to(hdr, standard_metadata, meta.upstream.mac, meta.upstream.addr,
                   meta.upstream.port, meta.upstream.egress_port);
    }

    action send_detour() {
        as_member();
        hdr.inagg.kind = KIND_DETOUR;
        address_to(hdr, standard_metadata, meta.upstream.via_mac, meta.upstream.via_addr,
                   meta.upstream.via_port, meta.upstream.via_egress_port);
        meta.inagg.detour_sent = 1;
    }

    apply {
        meta.inagg.detour_sent = 0;
        bit<32> primary = 0;
        bit<32> via = 0;
        if (meta.upstream.aux == 1) {
            waiting_on(meta.upstream.egress_port, primary);
            waiting_on(meta.upstream.via_egress_port, via);
        }
        if (meta.upstream.aux == 1
            && primary > (bit<32>)meta.upstream.busy_bound
            && via < (bit<32>)meta.upstream.queue_length) {
            send_detour();
        } else {
            send_up();
        }
    }
}

#endif /* _INAGG_V1MODEL_UPSTREAM_P4_ */
