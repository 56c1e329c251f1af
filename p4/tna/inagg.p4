/* -*- P4_16 -*- */
/*
 * inagg in-network aggregation, Tofino Native Architecture (K = 64: Tofino 1
 * with -DINAGG_SPLIT_VALUES, the values in two passes; Tofino 2 in one,
 * compiled with --arch t2na). Implements docs/PROTOCOL.md, like
 * p4/v1model; emu/ is the reference behaviour. This file only includes,
 * instantiates and wires; each control is in its own file. p4/README.md has
 * the resources it uses and the control-plane interface.
 *
 * Compile-time settings (common/config.p4, plus):
 *   INAGG_RECIRC_PORT  the recirculation port results take for their second
 *                      pass, in the pipe of the job's workers (default 68:
 *                      pipe 0's on Tofino 1)
 *   INAGG_MAX_JOBS     per-job counter entries (default 1024 here)
 *   bf-p4c --std p4-16 --target tofino --arch tna -o build/tna \
 *       --bf-rt-schema build/tna/bf-rt.json p4/tna/inagg.p4
 * or p4/build.sh.
 */
#include <core.p4>
#include <tna.p4>

#ifndef INAGG_MAX_JOBS
#define INAGG_MAX_JOBS 1024
#endif
#ifndef INAGG_RECIRC_PORT
#define INAGG_RECIRC_PORT 68
#endif

#include "../common/config.p4"
/* Announcements (kind 7, docs/PROTOCOL.md "A switch that lost its state")
 * take a second pass that runs SlotState again (and with the values in
 * two passes, Tofino 1 at K = 64, a third for the second half of the
 * values): taken on every target (p4/README.md, "Differences from the
 * emulator"). */
#ifndef INAGG_ANNOUNCE
#define INAGG_ANNOUNCE
#endif
#if INAGG_SLOTS > 32768
#error "p4/tna indexes a set in 16 bits: INAGG_SLOTS (SLOTS) must be at most 32768"
#endif
#include "../common/elements.p4"
#include "../common/protocol.p4"
#include "../common/headers.p4"

#include "types.p4"
#include "parser.p4"
#include "admission.p4"
#include "slot_state.p4"
#include "value_pair.p4"
#include "accumulators.p4"
#include "result.p4"
#include "group_relay.p4"
#include "queue_select.p4"
#include "forwarding.p4"
#include "ingress.p4"
#include "result_rewrite.p4"
#include "status_rewrite.p4"
#include "group_rewrite.p4"
#include "egress.p4"
#include "deparser.p4"

Pipeline(
    InaggIngressParser(),
    InaggIngress(),
    InaggIngressDeparser(),
    InaggEgressParser(),
    InaggEgress(),
    InaggEgressDeparser()
) pipe;

Switch(pipe) main;
