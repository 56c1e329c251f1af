/* -*- P4_16 -*- */
/*
 * inagg in-network aggregation, v1model architecture (bmv2 simple_switch and
 * simple_switch_grpc). Implements docs/PROTOCOL.md; emu/ is the reference
 * behaviour. This file only includes, instantiates and wires; each control is
 * in its own file. p4/README.md lists the control-plane interface (tables,
 * actions, registers, counters, multicast and queue conventions).
 *
 * Compile-time settings (common/config.p4): INAGG_K (K, elements per packet,
 * default 64), INAGG_SLOTS (SLOTS, default 8192), INAGG_UDP_PORT (47000).
 *   p4c-bm2-ss --std p4-16 -o inagg.json \
 *       --p4runtime-files inagg.p4info.txt p4/v1model/inagg.p4
 * or p4/build.sh.
 */
#include <core.p4>
#include <v1model.p4>

#include "../common/config.p4"
#include "../common/elements.p4"
#include "../common/protocol.p4"
#include "../common/headers.p4"

#include "metadata.p4"
#include "parser.p4"
#include "checksum.p4"
#include "admission.p4"
#include "aggregate.p4"
#include "result.p4"
#include "detour.p4"
#include "upstream.p4"
#include "group_relay.p4"
#include "queue_select.p4"
#include "forwarding.p4"
#include "ingress.p4"
#include "result_rewrite.p4"
#include "group_rewrite.p4"
#include "egress.p4"
#include "deparser.p4"

V1Switch(
    InaggParser(),
    InaggVerifyChecksum(),
    InaggIngress(),
    InaggEgress(),
    InaggComputeChecksum(),
    InaggDeparser()
) main;
