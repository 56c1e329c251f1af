/*
 * Admission: the checks of docs/PROTOCOL.md "Admission (before any register
 * is touched)", in its order, which is the emulator's (emu/src/switch.rs).
 * The first that fails sets ig_md.drop and the reason; InaggIngress counts
 * and drops. Same tables, keys and order as p4/v1model/admission.p4, except
 * that job_table has no `incarnation` parameter (the Tofino control plane
 * clears a pool's bitmaps through BFRuntime instead, p4/README.md), and that
 * there are no tree or detour tables (a result is not_contribution, a
 * detour, kind 4, malformed). A query (kind 5) is admitted as a
 * contribution is; a status (kind 6) is not_contribution. A well-formed group datagram (kind 3) stops
 * here with ig_md.group set; GroupRelay makes its own checks.
 *
 * Tofino's ALUs do one operation per field per stage, so the arithmetic is
 * written one operation per statement, and comparisons against the pool size
 * use a saturating subtraction (slot_room = 0 means outside the pool).
 */
#ifndef _INAGG_TNA_ADMISSION_P4_
#define _INAGG_TNA_ADMISSION_P4_

control Admission(inout ingress_headers_t hdr,
                  inout ingress_metadata_t ig_md,
                  in ingress_intrinsic_metadata_t ig_intr_md,
                  in ingress_intrinsic_metadata_from_parser_t ig_prsr_md) {

    action set_job(bit<16> worker_count,
                   bit<32> pool_base,
                   bit<32> pool_size,
                   bit<16> elements,
                   bit<16> generation,
                   bit<16> mcast_grp) {
        ig_md.job.worker_count = worker_count;
        ig_md.job.elements = elements;
        ig_md.job.generation = generation;
        ig_md.job.mcast_grp = mcast_grp;
        ig_md.slot_addr = pool_base + (bit<32>)hdr.inagg.slot;
        ig_md.slot_room = pool_size |-| (bit<32>)hdr.inagg.slot;
    }

    /* One entry per installed job. A miss is unknown_job. */
    table job_table {
        key = {
            hdr.inagg.job : exact @name("job");
        }
        actions = {
            set_job;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = INAGG_JOB_TABLE_SIZE;
    }

    action set_worker(bit<16> worker) {
        ig_md.worker = worker;
    }

    /* One entry per worker of each job. A miss, or a hit naming another
     * worker id than the header's, is unknown_worker. */
    table worker_table {
        key = {
            hdr.inagg.job           : exact @name("job");
            ig_intr_md.ingress_port : exact @name("ingress_port");
            hdr.ipv4.src_addr       : exact @name("src_addr");
            hdr.udp.src_port        : exact @name("src_port");
        }
        actions = {
            set_worker;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = INAGG_WORKER_TABLE_SIZE;
    }

    action refuse(drop_reason_t reason) {
        ig_md.drop = 1;
        ig_md.drop_reason = reason;
    }

    apply {
        /* Length rules: UDP length = 8 + 24 + the kind's payload (4 *
         * elements; a query none, a status 12), and the IPv4 payload holds
         * the whole datagram. */
        ig_md.query = 0;
        if (hdr.inagg.kind == KIND_QUERY) {
            ig_md.query = 1;
            ig_md.udp_expected = 0;
        } else if (hdr.inagg.kind == KIND_STATUS) {
            ig_md.udp_expected = STATUS_BYTES;
        } else {
            ig_md.udp_expected = (bit<32>)hdr.inagg.elements << 2;
        }
        ig_md.udp_expected = ig_md.udp_expected + (UDP_BYTES + INAGG_HEADER_BYTES);
        ig_md.ip_payload = hdr.ipv4.total_len |-| 16w20;
        ig_md.udp_excess = hdr.udp.length |-| ig_md.ip_payload;

        if (!hdr.inagg.isValid()
            || ig_prsr_md.parser_err != 0
            || ig_md.checksum_error
            || hdr.inagg.version != INAGG_VERSION
            || (hdr.inagg.kind != KIND_CONTRIBUTION && hdr.inagg.kind != KIND_RESULT
                && hdr.inagg.kind != KIND_GROUP && hdr.inagg.kind != KIND_QUERY
                && hdr.inagg.kind != KIND_STATUS)
            || (hdr.inagg.flags & FLAGS_RESERVED) != 0
            || hdr.inagg.reserved0 != 0
            || hdr.inagg.reserved1 != 0
            || (bit<32>)hdr.udp.length != ig_md.udp_expected
            || ig_md.udp_excess != 0) {
            refuse(DROP_MALFORMED);
        } else if (hdr.inagg.kind == KIND_GROUP) {
            /* A well-formed group datagram: GroupRelay's business. */
            ig_md.group = 1;
        } else if (hdr.inagg.kind != KIND_CONTRIBUTION && ig_md.query == 0) {
            refuse(DROP_NOT_CONTRIBUTION);
        } else if (!job_table.apply().hit) {
            refuse(DROP_UNKNOWN_JOB);
        } else if (!worker_table.apply().hit) {
            refuse(DROP_UNKNOWN_WORKER);
        } else if (ig_md.worker != hdr.inagg.worker) {
            refuse(DROP_UNKNOWN_WORKER);
        } else if (ig_md.slot_room == 0) {
            refuse(DROP_SLOT_OUT_OF_POOL);
        } else if (hdr.inagg.elements != ig_md.job.elements
                   || (ig_md.query == 0 && !hdr.payload.isValid())) {
            refuse(DROP_WRONG_ELEMENTS);
        } else if (hdr.inagg.generation != ig_md.job.generation) {
            refuse(DROP_STALE_GENERATION);
        }
    }
}

#endif /* _INAGG_TNA_ADMISSION_P4_ */
