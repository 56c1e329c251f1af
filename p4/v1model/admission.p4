/*
 * Admission: the checks of docs/PROTOCOL.md "Admission (before any register
 * is touched)", in its order, which is the emulator's (emu/src/switch.rs,
 * Switch::process_inner and Job::admit). The first that fails sets
 * meta.inagg.drop and the reason; InaggIngress counts and drops.
 *
 *   1 malformed          parser or IPv4 checksum error, version, kind code,
 *                        reserved bits, UDP length != 32 + 4 * elements, or a
 *                        frame shorter than its lengths announce
 *     (a well-formed group datagram, kind 3, stops here: meta.inagg.group,
 *      and GroupRelay makes its own checks)
 *   2 not_contribution   a result, unless parent_table names a job whose
 *                        parent sent it (aggregation trees, below)
 *   3 unknown_job        no job_table entry for the job id
 *   4 unknown_worker     no worker_table entry for (job, ingress port, source
 *                        address, source port), or one naming another worker
 *   5 slot_out_of_pool   slot >= the job's pool size
 *   6 wrong_elements     elements != the job's K (or != the compiled K)
 *   7 stale_generation   generation != the job's
 *
 * A result from a tree job's parent (docs/PROTOCOL.md, "Aggregation trees";
 * emu/src/switch.rs, Switch::descend and Job::take_result): parent_table,
 * keyed on the sender's endpoint and the parent's job id, names the local
 * job and rewrites the header's job id to it (the result goes down as that
 * job's). Then, instead of 4-7:
 *     unexpected_result  slot >= the job's pool size, or elements != K
 *     stale_generation   generation != the job's
 * (no worker check: the result carries this switch's member id in the
 * parent's job). Whether a set waits for it is Aggregate's business.
 *
 * Every admitted packet of a job with a parent also hits upstream_table,
 * which says where the job's partial sums go (meta.upstream).
 *
 * The control plane installs, per job, one job_table entry and one
 * worker_table entry per worker (p4/README.md, "Control-plane interface").
 * Keying worker_table on the job id as well lets one endpoint be a worker of
 * several jobs, as the emulator allows, and matches the emulator's rule
 * "workers[header.worker] == sender" exactly: endpoints are unique within a
 * job.
 */
#ifndef _INAGG_V1MODEL_ADMISSION_P4_
#define _INAGG_V1MODEL_ADMISSION_P4_

control Admission(inout headers_t hdr,
                  inout metadata_t meta,
                  in standard_metadata_t standard_metadata) {

    action set_job(bit<16> worker_count,
                   bit<32> pool_base,
                   bit<32> pool_size,
                   bit<16> elements,
                   bit<16> generation,
                   bit<16> mcast_grp,
                   bit<32> incarnation) {
        meta.job.worker_count = worker_count;
        meta.job.pool_base = pool_base;
        meta.job.pool_size = pool_size;
        meta.job.elements = elements;
        meta.job.generation = generation;
        meta.job.mcast_grp = mcast_grp;
        meta.job.incarnation = incarnation;
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
        meta.inagg.worker = worker;
    }

    /* One entry per worker of each job: what identifies the sender. A miss,
     * or a hit naming another worker id than the header's, is
     * unknown_worker. */
    table worker_table {
        key = {
            hdr.inagg.job                 : exact @name("job");
            standard_metadata.ingress_port : exact @name("ingress_port");
            hdr.ipv4.src_addr             : exact @name("src_addr");
            hdr.udp.src_port              : exact @name("src_port");
        }
        actions = {
            set_worker;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = INAGG_WORKER_TABLE_SIZE;
    }

    action from_parent(bit<16> job) {
        meta.inagg.from_parent = 1;
        hdr.inagg.job = job;
    }

    /* One entry per tree job: its parent's endpoint and the parent's job
     * id. A hit is a result coming down the tree to `job`. */
    table parent_table {
        key = {
            hdr.inagg.job                  : exact @name("parent_job");
            standard_metadata.ingress_port : exact @name("ingress_port");
            hdr.ipv4.src_addr              : exact @name("src_addr");
            hdr.udp.src_port               : exact @name("src_port");
        }
        actions = {
            from_parent;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = INAGG_JOB_TABLE_SIZE;
    }

    action set_upstream(bit<16> parent_job,
                        bit<16> member,
                        bit<48> parent_mac,
                        bit<32> parent_addr,
                        bit<16> parent_port,
                        bit<9>  egress_port) {
        meta.upstream.valid = 1;
        meta.upstream.job = parent_job;
        meta.upstream.member = member;
        meta.upstream.mac = parent_mac;
        meta.upstream.addr = parent_addr;
        meta.upstream.port = parent_port;
        meta.upstream.egress_port = egress_port;
    }

    /* One entry per tree job (keyed on its own id): where its partial sums
     * go. A miss: the job is a root or alone, and multicasts its results. */
    table upstream_table {
        key = {
            hdr.inagg.job : exact @name("job");
        }
        actions = {
            set_upstream;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = INAGG_JOB_TABLE_SIZE;
    }

    action refuse(drop_reason_t reason) {
        meta.inagg.drop = 1;
        meta.inagg.drop_reason = reason;
    }

    apply {
        meta.inagg.drop = 0;
        meta.inagg.group = 0;
        meta.inagg.from_parent = 0;
        meta.upstream.valid = 0;
        if (!hdr.inagg.isValid()
            || standard_metadata.parser_error != error.NoError
            || standard_metadata.checksum_error == 1
            || hdr.inagg.version != INAGG_VERSION
            || (hdr.inagg.kind != KIND_CONTRIBUTION && hdr.inagg.kind != KIND_RESULT
                && hdr.inagg.kind != KIND_GROUP)
            || (hdr.inagg.flags & FLAGS_RESERVED) != 0
            || hdr.inagg.reserved0 != 0
            || hdr.inagg.reserved1 != 0
            || (bit<32>)hdr.udp.length
                   != UDP_BYTES + INAGG_HEADER_BYTES + ((bit<32>)hdr.inagg.elements << 2)
            || (bit<32>)hdr.ipv4.total_len < IPV4_BYTES + (bit<32>)hdr.udp.length
            || standard_metadata.packet_length < ETHERNET_BYTES + (bit<32>)hdr.ipv4.total_len) {
            refuse(DROP_MALFORMED);
        } else if (hdr.inagg.kind == KIND_GROUP) {
            meta.inagg.group = 1;
        } else {
            if (hdr.inagg.kind == KIND_RESULT) {
                parent_table.apply();
            }
            /* Each table is applied on one path only (p4c's bmv2 back end
             * refuses a table applied twice). */
            if (hdr.inagg.kind == KIND_RESULT && meta.inagg.from_parent == 0) {
                refuse(DROP_NOT_CONTRIBUTION);
            } else if (!job_table.apply().hit) {
                refuse(meta.inagg.from_parent == 1 ? DROP_NOT_CONTRIBUTION : DROP_UNKNOWN_JOB);
            } else if (meta.inagg.from_parent == 1) {
                if ((bit<32>)hdr.inagg.slot >= meta.job.pool_size
                    || hdr.inagg.elements != meta.job.elements || !hdr.payload.isValid()) {
                    refuse(DROP_UNEXPECTED_RESULT);
                } else if (hdr.inagg.generation != meta.job.generation) {
                    refuse(DROP_STALE_GENERATION);
                }
            } else if (!worker_table.apply().hit) {
                refuse(DROP_UNKNOWN_WORKER);
            } else if (meta.inagg.worker != hdr.inagg.worker) {
                refuse(DROP_UNKNOWN_WORKER);
            } else if ((bit<32>)hdr.inagg.slot >= meta.job.pool_size) {
                refuse(DROP_SLOT_OUT_OF_POOL);
            } else if (hdr.inagg.elements != meta.job.elements || !hdr.payload.isValid()) {
                refuse(DROP_WRONG_ELEMENTS);
            } else if (hdr.inagg.generation != meta.job.generation) {
                refuse(DROP_STALE_GENERATION);
            }
            if (meta.inagg.drop == 0) {
                upstream_table.apply();
            }
        }
    }
}

#endif /* _INAGG_V1MODEL_ADMISSION_P4_ */
