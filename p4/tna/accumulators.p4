/*
 * Accumulators: the K accumulators of every shadow set as K/2 ValuePair
 * instances, pair_00 (elements e00, e01), pair_02 (e02, e03), ...,
 * generated from common/elements.p4. Each pair is one register and one
 * stateful ALU; with four ALUs per stage, K = 64 takes 8 stages (p4/README.md,
 * "TNA resources").
 *
 * INAGG_SPLIT_VALUES (K = 64 on Tofino 1, whose 12 stages hold admission,
 * the slot state and 8 pairs after it, not 32): the pairs of elements
 * 00..0f take the packet's first pass, with the operation SlotState chose
 * (values_op); those of 10..3f take a second pass through the recirculation
 * port, with the same operation (harvest_h's values_op). Depending on
 * nothing the first pass computes, the second half's tables can sit in
 * the stages admission and SlotState use. A result's last pass reads the
 * even sums of both halves. So a contribution takes two passes and a
 * result three (and a taken announcement three: ingress.p4).
 */
#ifndef _INAGG_TNA_ACCUMULATORS_P4_
#define _INAGG_TNA_ACCUMULATORS_P4_

#define INAGG_PAIR_DECLARE(a, b) ValuePair() pair_##a;
#define INAGG_PAIR_APPLY(a, b) \
    pair_##a.apply(hdr.payload.e##a, hdr.payload.e##b, ig_md.set_index, ig_md.values_op);

/* The second half is indexed by harvest_h's set_index, not ig_md's, which
 * SlotState computes in the first pass: read from the parsed header, it
 * makes these tables wait for nothing. Its operation is harvest_h's
 * values_op too: these tables run only in the passes that parsed it (a
 * second half's, whose operation it is, and a result's last, where it is
 * VALUES_READ_EVEN), so a metadata copy the parser made of it would only
 * take PHV (Tofino 1 at K = 64 with announcements ran short by it). */
#define INAGG_PAIR_APPLY_SECOND(a, b) \
    pair_##a.apply(hdr.payload.e##a, hdr.payload.e##b, hdr.harvest.set_index, hdr.harvest.values_op);

#if defined(INAGG_SPLIT_VALUES) && INAGG_K != 64
#error "INAGG_SPLIT_VALUES splits K = 64 into two passes of 32 elements"
#endif

#ifndef INAGG_SPLIT_VALUES
control Accumulators(inout ingress_headers_t hdr, inout ingress_metadata_t ig_md) {

    INAGG_FOR_EACH_PAIR(INAGG_PAIR_DECLARE)

    apply {
        INAGG_FOR_EACH_PAIR(INAGG_PAIR_APPLY)
    }
}
#else
/* The first half, after SlotState. */
control Accumulators(inout ingress_headers_t hdr, inout ingress_metadata_t ig_md) {

    INAGG_PAIRS_FIRST_HALF_64(INAGG_PAIR_DECLARE)

    apply {
        INAGG_PAIRS_FIRST_HALF_64(INAGG_PAIR_APPLY)
    }
}

/* The second half, applied in InaggIngress beside admission and SlotState
 * (passes after the first), in the stages they leave free of stateful
 * ALUs. */
control AccumulatorsSecond(inout ingress_headers_t hdr, inout ingress_metadata_t ig_md) {

    INAGG_PAIRS_SECOND_HALF_64(INAGG_PAIR_DECLARE)

    apply {
        INAGG_PAIRS_SECOND_HALF_64(INAGG_PAIR_APPLY_SECOND)
    }
}
#endif

#endif /* _INAGG_TNA_ACCUMULATORS_P4_ */
