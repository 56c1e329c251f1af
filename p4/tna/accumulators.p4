/*
 * Accumulators: the K accumulators of every shadow set as K/2 ValuePair
 * instances, pair_00 (elements e00, e01), pair_02 (e02, e03), ...,
 * generated from common/elements.p4. Each pair is one register and one
 * stateful ALU; with four ALUs per stage, K = 64 takes 8 stages (p4/README.md,
 * "TNA resources").
 */
#ifndef _INAGG_TNA_ACCUMULATORS_P4_
#define _INAGG_TNA_ACCUMULATORS_P4_

#define INAGG_PAIR_DECLARE(a, b) ValuePair() pair_##a;
#define INAGG_PAIR_APPLY(a, b) \
    pair_##a.apply(hdr.payload.e##a, hdr.payload.e##b, ig_md.set_index, ig_md.values_op);

control Accumulators(inout ingress_headers_t hdr, inout ingress_metadata_t ig_md) {

    INAGG_FOR_EACH_PAIR(INAGG_PAIR_DECLARE)

    apply {
        INAGG_FOR_EACH_PAIR(INAGG_PAIR_APPLY)
    }
}

#endif /* _INAGG_TNA_ACCUMULATORS_P4_ */
