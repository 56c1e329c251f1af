/*
 * Parser: Ethernet / IPv4 / UDP to the inagg port / inagg header / K int32
 * (docs/PROTOCOL.md, "Framing").
 *
 * Only what can be inagg traffic is parsed past IPv4: IPv4 without options,
 * not a later fragment, UDP. The payload is extracted only when the header
 * announces exactly K elements; anything else is still parsed up to the
 * header so that admission can tell malformed packets (length mismatch) from
 * wrong_elements ones. A packet shorter than what it announces stops the
 * parser with PacketTooShort; v1model does not drop it, and admission counts
 * it as malformed.
 */
#ifndef _INAGG_V1MODEL_PARSER_P4_
#define _INAGG_V1MODEL_PARSER_P4_

parser InaggParser(packet_in packet,
                   out headers_t hdr,
                   inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {

    state start {
        transition parse_ethernet;
    }

    state parse_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition select(hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (4w4, 4w5, 13w0, IP_PROTOCOL_UDP): parse_udp;
            default: accept;
        }
    }

    state parse_udp {
        packet.extract(hdr.udp);
        transition select(hdr.udp.dst_port) {
            INAGG_PORT: parse_inagg;
            default: accept;
        }
    }

    state parse_inagg {
        packet.extract(hdr.inagg);
        /* A query is the header alone; a status (never for a switch) is
         * refused by Admission unparsed. */
        transition select(hdr.inagg.kind, hdr.inagg.elements) {
            (KIND_QUERY, _): accept;
            (KIND_STATUS, _): accept;
            (_, INAGG_K): parse_payload;
            default: accept;
        }
    }

    state parse_payload {
        packet.extract(hdr.payload);
        transition accept;
    }
}

#endif /* _INAGG_V1MODEL_PARSER_P4_ */
