/*
 * IPv4 header checksum: verified on arrival (a bad one makes an inagg packet
 * malformed, docs/PROTOCOL.md "Admission" 1), recomputed for everything the
 * switch addresses itself (results, partial sums to a parent, group
 * datagram copies): it rewrites their addresses and TTL. The UDP checksum of a result is 0 (none), set by
 * ResultDispatch: the switch changes the payload and IPv4 allows it.
 */
#ifndef _INAGG_V1MODEL_CHECKSUM_P4_
#define _INAGG_V1MODEL_CHECKSUM_P4_

control InaggVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        verify_checksum(
            hdr.ipv4.isValid() && hdr.ipv4.ihl == 5,
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset,
              hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum,
            HashAlgorithm.csum16);
    }
}

control InaggComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(
            (meta.inagg.is_result == 1 || meta.inagg.is_group_copy == 1
             || meta.inagg.is_upward == 1) && hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset,
              hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum,
            HashAlgorithm.csum16);
    }
}

#endif /* _INAGG_V1MODEL_CHECKSUM_P4_ */
