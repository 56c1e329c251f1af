/*
 * Deparser: the headers in wire order (docs/PROTOCOL.md, "Framing"). Invalid
 * headers are skipped, so plain traffic goes out as it came in.
 */
#ifndef _INAGG_V1MODEL_DEPARSER_P4_
#define _INAGG_V1MODEL_DEPARSER_P4_

control InaggDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.inagg);
        packet.emit(hdr.payload);
        packet.emit(hdr.status);
    }
}

#endif /* _INAGG_V1MODEL_DEPARSER_P4_ */
