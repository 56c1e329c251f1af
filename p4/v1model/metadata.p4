/*
 * The v1model program's header stack and metadata. The header types are the
 * shared ones (common/headers.p4).
 */
#ifndef _INAGG_V1MODEL_METADATA_P4_
#define _INAGG_V1MODEL_METADATA_P4_

struct headers_t {
    ethernet_h ethernet;
    ipv4_h     ipv4;
    udp_h      udp;
    inagg_h    inagg;
    payload_h  payload;
    status_h   status;     /* made by the switch: a query's answer */
}

/* What job_table installs for the packet's job (docs/PROTOCOL.md, "Switch
 * state": a job owns the pool [pool_base, pool_base + pool_size)). */
struct job_md_t {
    bit<16> worker_count;   /* n */
    bit<32> pool_base;
    bit<32> pool_size;
    bit<16> elements;       /* K */
    bit<16> generation;
    bit<16> mcast_grp;      /* PRE group holding one replica per worker */
    bit<32> incarnation;    /* changes every time the job is installed */
    bit<1>  known;          /* job_table has the job */
    bit<1>  detours;        /* the job takes detours: packets may come out of order */
    bit<64> child_switches; /* members that are switches: no status copies (one bit each) */
}

/* What upstream_table installs for a tree job (docs/PROTOCOL.md,
 * "Aggregation trees"): where its complete partial sums go. */
struct upstream_md_t {
    bit<1>  valid;          /* the job has a parent switch */
    bit<16> job;            /* the parent's job for this tree */
    bit<16> member;         /* this switch's member id in it */
    bit<48> mac;            /* the parent's data-plane endpoint */
    bit<32> addr;
    bit<16> port;
    bit<9>  egress_port;    /* the switch port towards it */
    /* The auxiliary path, when aux == 1 (docs/PROTOCOL.md, "Auxiliary
     * paths"): its first switch, and NetStorm's two bounds. */
    bit<1>  aux;
    bit<48> via_mac;
    bit<32> via_addr;
    bit<16> via_port;
    bit<9>  via_egress_port;
    bit<16> busy_bound;     /* PRIMARY_BUSY_BOUND */
    bit<16> queue_length;   /* AUXILIARY_QUEUE_LENGTH */
}

/* A data-plane endpoint the packet is sent to: a relay entry's next hop, or
 * the member a detour names (a resend goes to the member, not the relay). */
struct endpoint_md_t {
    bit<48> mac;
    bit<32> addr;
    bit<16> port;
    bit<9>  egress_port;
}

/* The aggregation path's decisions, ingress to egress. */
struct inagg_md_t {
    bit<16>       worker;          /* worker id installed for the sender's endpoint */
    bit<1>        drop;            /* dropped and counted under drop_reason */
    drop_reason_t drop_reason;
    bit<1>        retransmission;  /* the worker's bit was already set in the set */
    bit<1>        complete;        /* the set holds n contributions */
    bit<1>        late;            /* a late copy of a complete round: stale_round */
    bit<1>        is_result;       /* leaves the switch as a result */
    bit<1>        multicast;       /* ... to every worker: egress rewrites each copy */
    bit<1>        copy_dropped;    /* egress: no endpoint for this copy's replication id */
    bit<1>        group;           /* a group datagram (kind 3): GroupRelay, not a job */
    bit<16>       member;          /* group datagram: member id installed for the sender */
    bit<1>        is_group_copy;   /* leaves the switch as a group datagram's copy */
    bit<1>        from_parent;     /* a result from the job's parent switch (trees) */
    bit<1>        away;            /* the set's partial sum is at the parent */
    bit<1>        unexpected;      /* a parent's result no set waits for */
    bit<1>        is_upward;       /* leaves as a partial sum: to the parent, by a detour, or relayed */
    bit<1>        relay;           /* a detour a relay entry matched: forwarded unchanged */
    bit<16>       relay_index;     /* ... the entry's relay_packets cell */
    bit<1>        detour;          /* a detour taken as its member's contribution */
    bit<1>        detour_sent;     /* a partial sum sent by the auxiliary path */
    bit<1>        stored_result;   /* a query answered with the set's stored result */
    bit<1>        nudge;           /* a query's status also goes to the members the set waits for */
    bit<64>       not_nudged;      /* ... but not to these: the set holds theirs, or they are switches */
}

/* Plain forwarding. */
struct forward_md_t {
    bit<1> flood;                  /* replicated by l2_forward's flood action */
}

struct metadata_t {
    job_md_t      job;
    upstream_md_t upstream;
    endpoint_md_t next_hop;     /* relay entry: where the detour goes on to */
    endpoint_md_t member_endpoint;  /* detour: the member's own endpoint */
    inagg_md_t    inagg;
    forward_md_t  fwd;
}

#endif /* _INAGG_V1MODEL_METADATA_P4_ */
