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
 * Pool addresses are 16 bits, as the header's slot is: an ALU operation
 * takes its operands at the width of its result.
 */
#ifndef _INAGG_TNA_ADMISSION_P4_
#define _INAGG_TNA_ADMISSION_P4_

/* well_formed's entries, per kind: valid, no parser error, checksum right,
 * version 1, reserved flags and fields 0, the IPv4 payload at least the UDP
 * datagram (total length - UDP length in 20 .. 0x7fff: below, short or
 * wrapped), and the UDP length 32 + the kind's payload: 4 * elements (4 *
 * elements - UDP length = -32, the hash unit's 4 * elements being an
 * operand a subtraction takes first only)
 * (elements below 0x4000, so that 4 * elements fits the 16 bits it is
 * computed in), or none for a query, 12 for a status. */
#define INAGG_WELL_FORMED_HEAD(kind) \
    true, 0 &&& 0xffff, false, INAGG_VERSION, kind, 0 &&& FLAGS_RESERVED, 0, 0
#define INAGG_WELL_FORMED_DATA(kind)                                              \
    (INAGG_WELL_FORMED_HEAD(kind), 0 &&& 0xc000, _,                              \
     (bit<16>)(16w0 - (bit<16>)(UDP_BYTES + INAGG_HEADER_BYTES)), 20 .. 0x7fff) : accept_header();
#define INAGG_WELL_FORMED_BARE(kind, bytes)                                       \
    (INAGG_WELL_FORMED_HEAD(kind), _,                                            \
     (bit<16>)(UDP_BYTES + INAGG_HEADER_BYTES + bytes), _, 20 .. 0x7fff) : accept_header();

control Admission(inout ingress_headers_t hdr,
                  inout ingress_metadata_t ig_md,
                  in ingress_intrinsic_metadata_t ig_intr_md,
                  in ingress_intrinsic_metadata_from_parser_t ig_prsr_md) {

    action set_job(bit<16> worker_count,
                   bit<16> pool_base,
                   bit<16> pool_size,
                   bit<16> elements,
                   bit<16> generation,
                   bit<16> mcast_grp) {
        ig_md.job.worker_count = worker_count;
        ig_md.job.last = worker_count - 1;
        ig_md.job.elements = elements;
        ig_md.job.generation = generation;
        ig_md.job.mcast_grp = mcast_grp;
        ig_md.slot_addr = pool_base + hdr.inagg.slot;
        ig_md.slot_room = pool_size |-| hdr.inagg.slot;
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
        ig_md.drop_reason = (bit<4>)reason;
    }

    /* Length rules: UDP length = 8 + 24 + the kind's payload (4 * elements;
     * a query none, a status 12), and the IPv4 payload holds the whole
     * datagram. One action of one-operation fields (4 * elements comes
     * from the hash unit, which an ALU operation takes as an operand), then
     * one ternary table checks every field rule at once: each entry is a
     * kind a switch takes, and a packet no entry matches is malformed. */
    Hash<bit<16>>(HashAlgorithm_t.IDENTITY) times_four;

    action measure() {
        ig_md.payload_less_len = times_four.get({ hdr.inagg.elements[13:0], 2w0 }) - hdr.udp.length;
        ig_md.ip_udp_gap = hdr.ipv4.total_len - hdr.udp.length;
    }

    table lengths {
        actions = {
            measure;
        }
        const default_action = measure();
        size = 1;
    }

    action accept_header() {
        ig_md.malformed = 0;
    }

    action reject_header() {
        ig_md.malformed = 1;
    }

    table well_formed {
        key = {
            hdr.inagg.isValid()    : exact @name("inagg_valid");
            ig_prsr_md.parser_err  : ternary @name("parser_err");
            ig_md.checksum_error   : exact @name("checksum_error");
            hdr.inagg.version      : exact @name("version");
            hdr.inagg.kind         : exact @name("kind");
            hdr.inagg.flags        : ternary @name("flags");
            hdr.inagg.reserved0    : exact @name("reserved0");
            hdr.inagg.reserved1    : exact @name("reserved1");
            hdr.inagg.elements     : ternary @name("elements");
            hdr.udp.length         : ternary @name("udp_length");
            ig_md.payload_less_len : ternary @name("payload_less_len");
            ig_md.ip_udp_gap       : range @name("ip_udp_gap");
        }
        actions = {
            accept_header;
            reject_header;
        }
        const default_action = reject_header();
        const entries = {
            INAGG_WELL_FORMED_DATA(KIND_CONTRIBUTION)
            INAGG_WELL_FORMED_DATA(KIND_RESULT)
            INAGG_WELL_FORMED_DATA(KIND_GROUP)
#ifdef INAGG_ANNOUNCE
            INAGG_WELL_FORMED_DATA(KIND_ANNOUNCE)
#endif
            INAGG_WELL_FORMED_BARE(KIND_QUERY, 0)
            INAGG_WELL_FORMED_BARE(KIND_STATUS, STATUS_BYTES)
        }
        size = 6;
    }

    apply {
        /* The job and the sender are looked up at once, whatever the checks
         * before them in "Admission" find (their keys are header fields):
         * looked up only once those passed, they came stages later. */
        bool job_known = job_table.apply().hit;
        bool worker_known = worker_table.apply().hit;
        lengths.apply();
        well_formed.apply();

        if (ig_md.malformed == 1) {
            refuse(DROP_MALFORMED);
        } else if (hdr.inagg.kind == KIND_GROUP) {
            /* A well-formed group datagram: GroupRelay's business. */
            ig_md.group = 1;
        } else if (hdr.inagg.kind != KIND_CONTRIBUTION && ig_md.query == 0
                   && ig_md.announce == 0) {
            refuse(DROP_NOT_CONTRIBUTION);
        } else if (!job_known) {
            refuse(DROP_UNKNOWN_JOB);
        } else if (!worker_known) {
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
