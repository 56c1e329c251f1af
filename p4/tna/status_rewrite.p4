/*
 * StatusRewrite (egress): a query's status multicast by StatusAnswer (a
 * nudge; docs/PROTOCOL.md, "Loss recovery") goes to the asker and to the
 * members whose bits its bitmap leaves clear, the members the round waits
 * for. held_members drops every other copy: one constant entry per member
 * id, matching that member's bit in the bitmap's halves (a 64-bit shift by
 * a variable amount is not a Tofino operation; a ternary match is). The
 * asker's copy, whose bit is set, skips the table. ResultRewrite then gives
 * each kept copy its receiver's address, and InaggEgress puts the asker's
 * id back in the worker field. As p4/v1model/result_rewrite.p4 does in one
 * step; a Tofino job has no child switches (the target refuses them).
 */
#ifndef _INAGG_TNA_STATUS_REWRITE_P4_
#define _INAGG_TNA_STATUS_REWRITE_P4_

/* held_members entries: member w's bit set in its half of the bitmap. */
#define INAGG_HELD_LO(w) \
    (w, _, (32w1 << w) &&& (32w1 << w)) : drop_copy();
#define INAGG_HELD_HI(w) \
    (w, (32w1 << (w - 32)) &&& (32w1 << (w - 32)), _) : drop_copy();

control StatusRewrite(inout egress_headers_t hdr,
                      inout egress_metadata_t eg_md,
                      in egress_intrinsic_metadata_t eg_intr_md,
                      inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {

    action drop_copy() {
        eg_md.copy_dropped = 1;
        eg_dprsr_md.drop_ctl = 1;
    }

    action keep_copy() {
    }

    table held_members {
        key = {
            eg_intr_md.egress_rid     : ternary @name("rid");
            hdr.status.bitmap[63:32]  : ternary @name("held_hi");
            hdr.status.bitmap[31:0]   : ternary @name("held_lo");
        }
        actions = {
            drop_copy;
            keep_copy;
        }
        const default_action = keep_copy();
        const entries = {
            INAGG_WORKERS_0_31(INAGG_HELD_LO)
            INAGG_WORKERS_32_63(INAGG_HELD_HI)
        }
        size = INAGG_MAX_WORKERS;
    }

    apply {
        if (eg_intr_md.egress_rid != hdr.inagg.worker) {
            held_members.apply();
        }
    }
}

#endif /* _INAGG_TNA_STATUS_REWRITE_P4_ */
