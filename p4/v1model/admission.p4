/*
 * Admission: the checks of docs/PROTOCOL.md "Admission (before any register
 * is touched)", in its order, which is the emulator's (emu/src/switch.rs,
 * Switch::process_inner and Job::admit). The first that fails sets
 * meta.inagg.drop and the reason; InaggIngress counts and drops.
 *
 *   1 malformed          parser or IPv4 checksum error, version, kind code,
 *                        reserved bits, UDP length != 32 + the kind's payload
 *                        (4 * elements; a query none, a status 12), or a
 *                        frame shorter than its lengths announce
 *     (a well-formed group datagram, kind 3, stops here: meta.inagg.group,
 *      and GroupRelay makes its own checks)
 *   2 not_contribution   a status, or a result unless parent_table names a
 *                        job whose parent sent it (aggregation trees, below)
 *   3 unknown_job        no job_table entry for the job id
 *   4 unknown_worker     no worker_table entry for (job, ingress port, source
 *                        address, source port), or one naming another worker
 *   5 slot_out_of_pool   slot >= the job's pool size
 *   6 wrong_elements     elements != the job's K (or != the compiled K)
 *
 * A query (kind 5; docs/PROTOCOL.md, "Loss recovery") is admitted as a
 * contribution is, by 3-7: it names the job, its worker, the slot and the
 * set, K and the generation, and carries no payload.
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
 * which says where the job's partial sums go (meta.upstream), and by which
 * auxiliary path when the primary is busy.
 *
 * A detour (kind 4; docs/PROTOCOL.md, "Auxiliary paths"; emu/src/switch.rs,
 * Switch::detour) is looked up in relay_table first, keyed on its job id,
 * the previous hop's endpoint and the member id it carries: a hit forwards
 * it unchanged (meta.inagg.relay; InaggIngress and RelayDetour), and no job
 * is looked at, so a switch that is itself in the tree relays detours of a
 * job id it also has. Otherwise, instead of 4:
 *    14 unknown_relay    no job_table entry, or no detour_table entry for
 *                        (job, the sender's endpoint, the member id named):
 *                        the job does not take this member's detours from
 *                        this switch
 * then 5-7 as for any contribution; detour_table's entry also gives the
 * member's own endpoint, where a resend of the stored result goes.
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
                   bit<32> incarnation,
                   bit<1>  detours,
                   bit<64> child_switches) {
        meta.job.worker_count = worker_count;
        meta.job.pool_base = pool_base;
        meta.job.pool_size = pool_size;
        meta.job.elements = elements;
        meta.job.generation = generation;
        meta.job.mcast_grp = mcast_grp;
        meta.job.incarnation = incarnation;
        meta.job.detours = detours;
        meta.job.child_switches = child_switches;
        meta.job.known = 1;
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
                        bit<9>  egress_port,
                        bit<1>  aux,
                        bit<48> via_mac,
                        bit<32> via_addr,
                        bit<16> via_port,
                        bit<9>  via_egress_port,
                        bit<16> busy_bound,
                        bit<16> queue_length) {
        meta.upstream.valid = 1;
        meta.upstream.job = parent_job;
        meta.upstream.member = member;
        meta.upstream.mac = parent_mac;
        meta.upstream.addr = parent_addr;
        meta.upstream.port = parent_port;
        meta.upstream.egress_port = egress_port;
        meta.upstream.aux = aux;
        meta.upstream.via_mac = via_mac;
        meta.upstream.via_addr = via_addr;
        meta.upstream.via_port = via_port;
        meta.upstream.via_egress_port = via_egress_port;
        meta.upstream.busy_bound = busy_bound;
        meta.upstream.queue_length = queue_length;
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

    action relay_to(bit<16> index,
                    bit<48> next_mac,
                    bit<32> next_addr,
                    bit<16> next_port,
                    bit<9>  egress_port) {
        meta.inagg.relay = 1;
        meta.inagg.relay_index = index;
        meta.next_hop.mac = next_mac;
        meta.next_hop.addr = next_addr;
        meta.next_hop.port = next_port;
        meta.next_hop.egress_port = egress_port;
    }

    /* One entry per relay entry (`inagg ctl relay create`): detours of a
     * job carrying a member id, from the previous hop, go on to the next
     * hop. `index` is the entry's cell of the relay_packets counter. */
    table relay_table {
        key = {
            hdr.inagg.job                  : exact @name("job");
            standard_metadata.ingress_port : exact @name("ingress_port");
            hdr.ipv4.src_addr              : exact @name("src_addr");
            hdr.udp.src_port               : exact @name("src_port");
            hdr.inagg.worker               : exact @name("member");
        }
        actions = {
            relay_to;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = INAGG_RELAY_TABLE_SIZE;
    }

    action take_detour(bit<48> member_mac,
                       bit<32> member_addr,
                       bit<16> member_port,
                       bit<9>  egress_port) {
        meta.inagg.detour = 1;
        meta.inagg.worker = hdr.inagg.worker;
        meta.member_endpoint.mac = member_mac;
        meta.member_endpoint.addr = member_addr;
        meta.member_endpoint.port = member_port;
        meta.member_endpoint.egress_port = egress_port;
    }

    /* One entry per detour a job lists (`--detour MEMBER=RELAY`): the
     * member's detours arrive from the last switch of its auxiliary path.
     * The member's own endpoint is where a resend goes. */
    table detour_table {
        key = {
            hdr.inagg.job                  : exact @name("job");
            standard_metadata.ingress_port : exact @name("ingress_port");
            hdr.ipv4.src_addr              : exact @name("src_addr");
            hdr.udp.src_port               : exact @name("src_port");
            hdr.inagg.worker               : exact @name("member");
        }
        actions = {
            take_detour;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = INAGG_RELAY_TABLE_SIZE;
    }

    action refuse(drop_reason_t reason) {
        meta.inagg.drop = 1;
        meta.inagg.drop_reason = reason;
    }

    apply {
        /* What follows the header, by kind (wire::Kind::payload_len). */
        bit<32> payload_bytes = (hdr.inagg.kind == KIND_QUERY) ? 32w0
                              : ((hdr.inagg.kind == KIND_STATUS) ? STATUS_BYTES
                                 : ((bit<32>)hdr.inagg.elements << 2));
        meta.inagg.drop = 0;
        meta.inagg.group = 0;
        meta.inagg.from_parent = 0;
        meta.inagg.relay = 0;
        meta.inagg.detour = 0;
        meta.job.known = 0;
        meta.job.detours = 0;
        meta.upstream.valid = 0;
        meta.upstream.aux = 0;
        if (!hdr.inagg.isValid()
            || standard_metadata.parser_error != error.NoError
            || standard_metadata.checksum_error == 1
            || hdr.inagg.version != INAGG_VERSION
            || (hdr.inagg.kind != KIND_CONTRIBUTION && hdr.inagg.kind != KIND_RESULT
                && hdr.inagg.kind != KIND_GROUP && hdr.inagg.kind != KIND_DETOUR
                && hdr.inagg.kind != KIND_QUERY && hdr.inagg.kind != KIND_STATUS
                && hdr.inagg.kind != KIND_ANNOUNCE)
            || (hdr.inagg.flags & FLAGS_RESERVED) != 0
            || hdr.inagg.reserved0 != 0
            || hdr.inagg.reserved1 != 0
            || (bit<32>)hdr.udp.length != UDP_BYTES + INAGG_HEADER_BYTES + payload_bytes
            || (bit<32>)hdr.ipv4.total_len < IPV4_BYTES + (bit<32>)hdr.udp.length
            || standard_metadata.packet_length < ETHERNET_BYTES + (bit<32>)hdr.ipv4.total_len) {
            refuse(DROP_MALFORMED);
        } else if (hdr.inagg.kind == KIND_GROUP) {
            meta.inagg.group = 1;
        } else {
            if (hdr.inagg.kind == KIND_RESULT) {
                parent_table.apply();
            } else if (hdr.inagg.kind == KIND_DETOUR) {
                relay_table.apply();
            }
            /* Each table is applied on one path only (p4c's bmv2 back end
             * refuses a table applied twice). */
            if (meta.inagg.relay == 1) {
                /* Forwarded unchanged; no job is looked at. */
            } else if (hdr.inagg.kind == KIND_STATUS
                       || (hdr.inagg.kind == KIND_RESULT && meta.inagg.from_parent == 0)) {
                refuse(DROP_NOT_CONTRIBUTION);
            } else if (!job_table.apply().hit) {
                refuse(meta.inagg.from_parent == 1 ? DROP_NOT_CONTRIBUTION
                       : (hdr.inagg.kind == KIND_DETOUR ? DROP_UNKNOWN_RELAY : DROP_UNKNOWN_JOB));
            } else if (meta.inagg.from_parent == 1) {
                if ((bit<32>)hdr.inagg.slot >= meta.job.pool_size
                    || hdr.inagg.elements != meta.job.elements || !hdr.payload.isValid()) {
                    refuse(DROP_UNEXPECTED_RESULT);
                } else if (hdr.inagg.generation != meta.job.generation) {
                    refuse(DROP_STALE_GENERATION);
                }
            } else {
                /* The sender: the member a detour names, if the job takes
                 * that member's detours from this sender; else a worker. */
                bool known;
                if (hdr.inagg.kind == KIND_DETOUR) {
                    known = detour_table.apply().hit;
                } else {
                    known = worker_table.apply().hit;
                }
                if (!known) {
                    refuse(hdr.inagg.kind == KIND_DETOUR ? DROP_UNKNOWN_RELAY : DROP_UNKNOWN_WORKER);
                } else if (meta.inagg.worker != hdr.inagg.worker) {
                    refuse(DROP_UNKNOWN_WORKER);
                } else if ((bit<32>)hdr.inagg.slot >= meta.job.pool_size) {
                    refuse(DROP_SLOT_OUT_OF_POOL);
                } else if (hdr.inagg.elements != meta.job.elements
                           || (hdr.inagg.kind != KIND_QUERY && !hdr.payload.isValid())) {
                    refuse(DROP_WRONG_ELEMENTS);
                } else if (hdr.inagg.generation != meta.job.generation) {
                    refuse(DROP_STALE_GENERATION);
                }
            }
            if (meta.inagg.drop == 0 && meta.inagg.relay == 0) {
                upstream_table.apply();
            }
        }
    }
}

#endif /* _INAGG_V1MODEL_ADMISSION_P4_ */
