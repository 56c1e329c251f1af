/*
 * Deparsers. Ingress: the bridged header for egress, harvest_h when a result
 * leaves for its second pass, then the packet's headers in wire order.
 * Egress: the headers egress parsed (results only; everything else passes
 * through as it came), with the IPv4 checksum recomputed for results, whose
 * TTL and destination the switch rewrote. A result's UDP checksum is 0.
 */
#ifndef _INAGG_TNA_DEPARSER_P4_
#define _INAGG_TNA_DEPARSER_P4_

control InaggIngressDeparser(packet_out pkt,
                             inout ingress_headers_t hdr,
                             in ingress_metadata_t ig_md,
                             in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    apply {
        pkt.emit(hdr.bridged);
        pkt.emit(hdr.harvest);
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.inagg);
        pkt.emit(hdr.payload);
        pkt.emit(hdr.status);
    }
}

control InaggEgressDeparser(packet_out pkt,
                            inout egress_headers_t hdr,
                            in egress_metadata_t eg_md,
                            in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {

    Checksum() ipv4_checksum;

    apply {
        if (hdr.ipv4.isValid()) {
            hdr.ipv4.hdr_checksum = ipv4_checksum.update({
                hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.total_len,
                hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset,
                hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr });
        }
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.inagg);
        pkt.emit(hdr.status);
    }
}

#endif /* _INAGG_TNA_DEPARSER_P4_ */
