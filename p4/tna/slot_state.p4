/*
 * SlotState: the per-set control state of docs/PROTOCOL.md "Slot state
 * machine" on Tofino: worker bitmaps (with the update that frees the
 * worker's place in the other set), completion, max exponent, the round's
 * packet id and priority. Accumulators (accumulators.p4) does the values.
 * emu/src/switch.rs, Job::contribute, is the reference.
 *
 * Registers. Each is one stateful ALU in one stage, accessed once per packet
 * through one of its RegisterActions; the actions are the state machine. A
 * RegisterAction is an atomic read-modify-write in hardware (what @atomic
 * asks for on v1model), and the stages see packets in order, so no two
 * packets' updates of a set interleave.
 *
 *   bitmap_lo, bitmap_hi  [INAGG_SLOTS] pair<set0, set1> of bit<32>, index
 *       pool_base + slot. Workers 0..31 in _lo, 32..63 in _hi: a pair
 *       register is 64 bits, so the two sets of a 64-worker bitmap take two
 *       registers. A contribution to set s ORs the worker's bit into s and
 *       clears it in the other set in the same ALU operation, returning s's
 *       half as it was (join_set0_* / join_set1_*). Both halves are
 *       updated; the half without the worker gets mask 0, which changes
 *       nothing and returns that half, so "first of a round" (the whole set
 *       empty) and "retransmission" (the worker's bit set) are known after
 *       this one stage. On a retransmission the update is a no-op too: a
 *       worker's bit is never set in both sets (joining one clears the other),
 *       so it is already set in s and clear in the other.
 *   rounds  [INAGG_SETS] pair<weight, complete> of bit<16>, index
 *       set_index: the set's weight (the sum of its contributions'
 *       max(count, 1): n for a round of data, 2n for one of session
 *       handshakes, docs/PROTOCOL.md "Sessions") and whether it is
 *       complete. Complete is not counted but seen: the join whose bit
 *       fills the bitmap with every member's (its halves equal the other
 *       members' bits, `others_*`) completes the set, so counts are
 *       distinct members (docs/PROTOCOL.md, "Slot state machine"). Read
 *       as ig_md.round: the weight (a result's count) if complete, else 0.
 *   answers  [INAGG_SETS * 16] bit<8>: the amplification bound (below).
 *   max_exponent  [INAGG_SETS] bit<16> (exponents are 0..255; 16 bits keep
 *       the ALU's comparison clear of sign questions)
 *   round_packet_id  [INAGG_SETS] bit<32>
 *   round_priority   [INAGG_SETS] bit<8>
 *
 * A query (docs/PROTOCOL.md, "Loss recovery") and an announcement's
 * first pass join with no bit (worker_mask gives them none), which reads
 * the set's halves and changes nothing; that leaves each bitmap register's
 * other two RegisterActions (of the four Tofino allows) for an
 * announcement's second pass (announce_set0_* / announce_set1_*).
 *
 * round_classifier turns the two bitmap halves into the transition, a
 * ternary table whose entries are compiled in (nothing to install), the
 * first match winning:
 *   an announcement (first pass)     -> announce_read   (reads only)
 *   the worker's bit set in its half -> retransmission  (a query too: the
 *                                       stored result, if complete)
 *   a query                          -> query_read      (reads only)
 *   both halves 0                    -> start_round     (first of a round)
 *   otherwise                        -> join_round
 * and round_update, in the next stage, drives `rounds` from it (the
 * other registers by if-chains). An announcement's second pass skips the
 * classifier: the parser set its values_op (store).
 *
 * Two passes. Tofino 1's stateful ALU returns one 32-bit value per packet,
 * so a pair register of two elements can give back only one of them: the
 * odd element. A result therefore takes a second pass through the
 * recirculation port (ResultHarvest / ResultDelivery, result.p4) that reads
 * the even elements; contributions that do not complete a set take one pass.
 */
#ifndef _INAGG_TNA_SLOT_STATE_P4_
#define _INAGG_TNA_SLOT_STATE_P4_

struct bitmap_pair_t {
    bit<32> set0;
    bit<32> set1;
}

/* The bitmap update of a contribution to set `mine` of a slot, for one
 * half: returns `mine` as it was, sets the worker's bit in it and clears the
 * bit in `other`. */
#define INAGG_BITMAP_JOIN(half, mine, other)                                        \
    RegisterAction<bitmap_pair_t, bit<16>, bit<32>>(bitmap_##half) join_##mine##_##half = { \
        void apply(inout bitmap_pair_t value, out bit<32> before) {                  \
            before = value.mine;                                                     \
            value.mine = value.mine | ig_md.mask_##half;                             \
            value.other = value.other & ~ig_md.mask_##half;                          \
        }                                                                            \
    };

/* An announcement taken (its second pass): set `mine` holds every member
 * that has not moved on to `other` and is not the announcer
 * (INAGG_ANNOUNCED); returns `mine` as it was. (A query reads with a join
 * of no bit.) */
#define INAGG_BITMAP_ANNOUNCE(half, mine, other)                                    \
    RegisterAction<bitmap_pair_t, bit<16>, bit<32>>(bitmap_##half) announce_##mine##_##half = { \
        void apply(inout bitmap_pair_t value, out bit<32> before) {                  \
            before = value.mine;                                                     \
            value.mine = INAGG_ANNOUNCED(half) & ~value.other;                       \
        }                                                                            \
    };

/* The members but the announcer, in an announcement's second pass. With
 * INAGG_SPLIT_VALUES, mask_*, which AnnounceMembers computes beside
 * admission: the joins read mask_*, and read from others_*, which
 * SlotState writes a stage after mask_*, these actions held every action
 * of the register, the joins too, a stage later (Tofino 1 at K = 64 then
 * needed 13 stages). Else others_*, from SlotState's own tables (Tofino
 * 2, whose placement of the register failed the other way). */
#ifdef INAGG_SPLIT_VALUES
#define INAGG_ANNOUNCED(half) ig_md.mask_##half
#else
#define INAGG_ANNOUNCED(half) ig_md.others_##half
#endif

/* round_classifier entries: worker w's bit set in its half of the set. */
#define INAGG_RETRANSMISSION_LO(w) \
    (w, (32w1 << w) &&& (32w1 << w), _, _, _) : retransmission();
#define INAGG_RETRANSMISSION_HI(w) \
    (w, _, (32w1 << (w - 32)) &&& (32w1 << (w - 32)), _, _) : retransmission();

/* worker_mask entries: worker w's bit in the bitmap halves. */
#define INAGG_MASK_LO(w) (w, 0, 0) : set_worker_mask(32w1 << w, 32w0);
#define INAGG_MASK_HI(w) (w, 0, 0) : set_worker_mask(32w0, 32w1 << (w - 32));

/* member_masks entries: a job of w + 1 members, their bits in the halves. */
#define INAGG_MEMBERS_LO(w) \
    (w + 1) : set_members(32w0xffffffff >> (31 - w), 32w0, (w == 0) ? 16w1 : 16w0);
#define INAGG_MEMBERS_HI(w) \
    (w + 1) : set_members(32w0xffffffff, 32w0xffffffff >> (63 - w), 16w0);

#if defined(INAGG_ANNOUNCE) && defined(INAGG_SPLIT_VALUES)
/* AnnounceMembers' entries: the announcer's bit, and a job of w + 1
 * members' bits, in the bitmap halves (as worker_mask's and
 * member_masks'). */
#define INAGG_ANNOUNCER_LO(w) (w) : set_announcer(32w1 << w, 32w0);
#define INAGG_ANNOUNCER_HI(w) (w) : set_announcer(32w0, 32w1 << (w - 32));
#define INAGG_ANNOUNCED_LO(w) \
    (w + 1) : set_announced(32w0xffffffff >> (31 - w), 32w0);
#define INAGG_ANNOUNCED_HI(w) \
    (w + 1) : set_announced(32w0xffffffff, 32w0xffffffff >> (63 - w));

/*
 * AnnounceMembers: an announcement's second pass (no admission) finds
 * here, as SlotState's worker_mask and member_masks would (the same
 * entries, so the same values), the announcer's bit and the job's
 * members, from the header and harvest_h (the job's n), and leaves the
 * members but the announcer in mask_*, which announce_set* read. Nothing
 * else reads mask_* or others_* in that pass (round_classifier, whose
 * join_round reads others_*, is not applied). InaggIngress applies it
 * beside admission, so that announce_set* wait for nothing the joins do
 * not: computed in SlotState, after its masks and their AND, the members
 * came a stage later, and Tofino 1 at K = 64 needed 13 stages.
 */
control AnnounceMembers(in ingress_headers_t hdr, inout ingress_metadata_t ig_md) {

    action set_announcer(bit<32> lo, bit<32> hi) {
        ig_md.mask_lo = lo;
        ig_md.mask_hi = hi;
    }

    table announcer_mask {
        key = {
            hdr.inagg.worker : exact @name("worker");
        }
        actions = {
            set_announcer;
        }
        const default_action = set_announcer(0, 0);
        const entries = {
            INAGG_WORKERS_0_31(INAGG_ANNOUNCER_LO)
            INAGG_WORKERS_32_63(INAGG_ANNOUNCER_HI)
        }
        size = INAGG_MAX_WORKERS;
    }

    action set_announced(bit<32> lo, bit<32> hi) {
        ig_md.others_lo = lo;
        ig_md.others_hi = hi;
    }

    table announced_members {
        key = {
            hdr.harvest.mcast_grp : exact @name("worker_count");
        }
        actions = {
            set_announced;
        }
        const default_action = set_announced(0, 0);
        const entries = {
            INAGG_WORKERS_0_31(INAGG_ANNOUNCED_LO)
            INAGG_WORKERS_32_63(INAGG_ANNOUNCED_HI)
        }
        size = INAGG_MAX_WORKERS;
    }

    apply {
        announcer_mask.apply();
        announced_members.apply();
        ig_md.mask_lo = ig_md.others_lo & ~ig_md.mask_lo;
        ig_md.mask_hi = ig_md.others_hi & ~ig_md.mask_hi;
    }
}
#endif


struct round_t {
    bit<16> weight;     /* the sum of its contributions' weights */
    bit<16> complete;   /* 1 once every member's bit was set */
}

control SlotState(inout ingress_headers_t hdr, inout ingress_metadata_t ig_md) {

    Register<bitmap_pair_t, bit<16>>(INAGG_SLOTS, {0, 0}) bitmap_lo;
    Register<bitmap_pair_t, bit<16>>(INAGG_SLOTS, {0, 0}) bitmap_hi;
    INAGG_BITMAP_JOIN(lo, set0, set1)
    INAGG_BITMAP_JOIN(lo, set1, set0)
    INAGG_BITMAP_JOIN(hi, set0, set1)
    INAGG_BITMAP_JOIN(hi, set1, set0)
#ifdef INAGG_ANNOUNCE
    INAGG_BITMAP_ANNOUNCE(lo, set0, set1)
    INAGG_BITMAP_ANNOUNCE(lo, set1, set0)
    INAGG_BITMAP_ANNOUNCE(hi, set0, set1)
    INAGG_BITMAP_ANNOUNCE(hi, set1, set0)
#endif

    /* The set's round, and what the rest of the pipeline needs of it in
     * 16 bits (ig_md.round): its weight once it is complete (a result's
     * count; never 0), else 0. A join adds its weight (ig_md.weight); the
     * one that sets the last member's bit (round_update) also completes
     * it; a job of one member completes at its first. A join that finds
     * the set complete, a late copy, changes nothing here and answers 0:
     * nothing leaves. (Its values are added: the sums' stages run beside
     * these, p4/README.md, "Differences from the emulator".) */
    Register<round_t, bit<16>>(INAGG_SETS, {0, 0}) rounds;
    RegisterAction<round_t, bit<16>, bit<16>>(rounds) round_begin = {
        void apply(inout round_t value, out bit<16> round) {
            value.weight = ig_md.weight;
            value.complete = ig_md.solo;
            if (ig_md.solo == 1) {
                round = value.weight;
            } else {
                round = 0;
            }
        }
    };
    RegisterAction<round_t, bit<16>, bit<16>>(rounds) round_add = {
        void apply(inout round_t value, out bit<16> round) {
            if (value.complete == 0) {
                value.weight = value.weight + ig_md.weight;
            }
            round = 0;
        }
    };
    RegisterAction<round_t, bit<16>, bit<16>>(rounds) round_finish = {
        void apply(inout round_t value, out bit<16> round) {
            if (value.complete != 0) {
                round = 0;
            } else {
                value.weight = value.weight + ig_md.weight;
                value.complete = 1;
                round = value.weight;
            }
        }
    };
    RegisterAction<round_t, bit<16>, bit<16>>(rounds) round_look = {
        void apply(inout round_t value, out bit<16> round) {
            if (value.complete != 0) {
                round = value.weight;
            } else {
                round = 0;
            }
        }
    };

    Register<bit<16>, bit<16>>(INAGG_SETS, 0) max_exponent;
    RegisterAction<bit<16>, bit<16>, bit<16>>(max_exponent) exponent_store = {
        void apply(inout bit<16> value, out bit<16> result) {
            value = ig_md.exponent;
            result = value;
        }
    };
    RegisterAction<bit<16>, bit<16>, bit<16>>(max_exponent) exponent_max = {
        void apply(inout bit<16> value, out bit<16> result) {
            if (ig_md.exponent > value) {
                value = ig_md.exponent;
            }
            result = value;
        }
    };
    RegisterAction<bit<16>, bit<16>, bit<16>>(max_exponent) exponent_read = {
        void apply(inout bit<16> value, out bit<16> result) {
            result = value;
        }
    };

    Register<bit<32>, bit<16>>(INAGG_SETS, 0) round_packet_id;
    RegisterAction<bit<32>, bit<16>, bit<32>>(round_packet_id) packet_id_store = {
        void apply(inout bit<32> value, out bit<32> result) {
            value = hdr.inagg.packet_id;
            result = value;
        }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(round_packet_id) packet_id_read = {
        void apply(inout bit<32> value, out bit<32> result) {
            result = value;
        }
    };

    Register<bit<8>, bit<16>>(INAGG_SETS, 0) round_priority;
    RegisterAction<bit<8>, bit<16>, bit<8>>(round_priority) priority_store = {
        void apply(inout bit<8> value, out bit<8> result) {
            value = hdr.inagg.priority;
            result = value;
        }
    };
    RegisterAction<bit<8>, bit<16>, bit<8>>(round_priority) priority_read = {
        void apply(inout bit<8> value, out bit<8> result) {
            result = value;
        }
    };

    /* The amplification bound (docs/PROTOCOL.md): the stored result
     * answers a member's queries about a round twice at most, then a
     * status flagged ANSWERED. One byte per set and four members (w, w +
     * 16, w + 32, w + 48): the round and member it counts for (bits 19..16
     * of the round's packet id, which step by one a round, and bits 5..4
     * of the member's id) and the answers, 1 or 2. A byte for another
     * round or member counts from 1 again, so nothing is cleared when a
     * round starts. So a member finds its third query answered with the
     * flag, and resends its contribution instead, whose resend brings the
     * result; a forger alternating the queries of two owed members that
     * share a byte gets each answered (to the member owed it). Two rounds
     * 16 apart of one set count together. INAGG_SETS * 16 bytes: 17 SRAM
     * blocks of one stage at SLOTS = 8192. */
    Register<bit<8>, bit<32>>(INAGG_SETS * 16, 0) answers;
    RegisterAction<bit<8>, bit<32>, bit<8>>(answers) answer_query = {
        void apply(inout bit<8> value, out bit<8> answered) {
            if (value == hdr.inagg.packet_id[19:16] ++ hdr.inagg.worker[5:4] ++ 2w1) {
                value = hdr.inagg.packet_id[19:16] ++ hdr.inagg.worker[5:4] ++ 2w2;
                answered = value;
            } else if (value != hdr.inagg.packet_id[19:16] ++ hdr.inagg.worker[5:4] ++ 2w2) {
                value = hdr.inagg.packet_id[19:16] ++ hdr.inagg.worker[5:4] ++ 2w1;
                answered = value;
            } else {
                answered = 0;
            }
        }
    };
    Hash<bit<32>>(HashAlgorithm_t.IDENTITY) answer_index_hash;

    /* (pool_base + slot) * 2 + set, as the concatenation it is. */
    Hash<bit<16>>(HashAlgorithm_t.IDENTITY) set_index_hash;

    action set_worker_mask(bit<32> lo, bit<32> hi) {
        ig_md.mask_lo = lo;
        ig_md.mask_hi = hi;
    }

    /* The worker's bit in the two bitmap halves (a shift by a run-time
     * amount is not an action ALU operation on Tofino). Compiled in. */
    table worker_mask {
        key = {
            hdr.inagg.worker : exact @name("worker");
            ig_md.query      : exact @name("query");
            ig_md.announce   : exact @name("announce");
        }
        actions = {
            set_worker_mask;
        }
        const default_action = set_worker_mask(0, 0);
        const entries = {
            INAGG_WORKERS_0_31(INAGG_MASK_LO)
            INAGG_WORKERS_32_63(INAGG_MASK_HI)
        }
        size = INAGG_MAX_WORKERS;
    }

    /* The job's members in the two bitmap halves, and whether it is one
     * member alone. Compiled in, one entry per member count. */
    action set_members(bit<32> lo, bit<32> hi, bit<16> solo) {
        ig_md.others_lo = lo;
        ig_md.others_hi = hi;
        ig_md.solo = solo;
    }

    table member_masks {
        key = {
            ig_md.job.worker_count : exact @name("worker_count");
        }
        actions = {
            set_members;
        }
        const default_action = set_members(0, 0, 0);
        const entries = {
            INAGG_WORKERS_0_31(INAGG_MEMBERS_LO)
            INAGG_WORKERS_32_63(INAGG_MEMBERS_HI)
        }
        size = INAGG_MAX_WORKERS;
    }

    /* round_classifier's actions name the transition by what it does to
     * the sums (values_op: store, add, or a read); the four control
     * registers are driven below, each by its own if-chain on it: Tofino
     * lets an action run at most one stateful ALU at a given address, so
     * one action cannot update the four registers of a set. */

    /* First of a round: overwrite (docs/PROTOCOL.md: acc = values, exp = e,
     * count = 1, id = packet id). */
    action start_round() {
        ig_md.retransmission = 0;
        ig_md.values_op = VALUES_STORE;
    }

    /* A further contribution: add, max-reduce, count; the result echoes the
     * round's packet id and priority. */
    action join_round() {
        ig_md.retransmission = 0;
        ig_md.values_op = VALUES_ADD;
        /* Zero in both halves: this join sets the last member's bit.
         * (Nothing reads a join's bitmap halves after this.) */
        ig_md.before_lo = ig_md.before_lo ^ ig_md.others_lo;
        ig_md.before_hi = ig_md.before_hi ^ ig_md.others_hi;
    }

    /* The worker's bit is already set: nothing changes; the stored result is
     * read in case the set is complete. */
    action retransmission() {
        ig_md.retransmission = 1;
        ig_md.values_op = VALUES_READ_ODD;
    }

    /* An announcement's first pass: reads, for whether its set takes it. */
    action announce_read() {
        ig_md.retransmission = 0;
        ig_md.values_op = VALUES_NONE;
    }

    /* A query whose worker's bit is clear: the round is read for its
     * status (which echoes the query's own id and priority, kept in
     * query_packet_id and query_priority), and the sums in case it is the
     * asker's after all (`answers`); nothing is written. */
    action query_read() {
        ig_md.retransmission = 0;
        ig_md.values_op = VALUES_READ_ODD;
    }

    action round_start() {
        ig_md.round = round_begin.execute(ig_md.set_index);
    }

    action round_count() {
        ig_md.round = round_add.execute(ig_md.set_index);
    }

    action round_complete() {
        ig_md.round = round_finish.execute(ig_md.set_index);
    }

    action round_read() {
        ig_md.round = round_look.execute(ig_md.set_index);
    }

    /* Drives `rounds` from round_classifier's choice; a join completes
     * the set when its halves, XORed with the other members' bits
     * (join_round), are 0 in both. A table, so that the 72-bit condition
     * and the stateful ALU it chooses sit in one stage. Compiled in. */
    table round_update {
        key = {
            ig_md.values_op : ternary @name("values_op");
            ig_md.before_lo : ternary @name("unheld_lo");
            ig_md.before_hi : ternary @name("unheld_hi");
        }
        actions = {
            round_start;
            round_count;
            round_complete;
            round_read;
            @defaultonly NoAction;
        }
        /* Every packet matches an entry (the last reads); a default
         * action cannot address a stateful ALU. */
        const default_action = NoAction();
        const entries = {
            (VALUES_STORE, _, _) : round_start();
            (VALUES_ADD, 0, 0)   : round_complete();
            (VALUES_ADD, _, _)   : round_count();
            (_, _, _)            : round_read();
        }
        size = 4;
    }

    table round_classifier {
        key = {
            hdr.inagg.worker : ternary @name("worker");
            ig_md.before_lo  : ternary @name("before_lo");
            ig_md.before_hi  : ternary @name("before_hi");
            ig_md.query      : ternary @name("query");
            ig_md.announce   : ternary @name("announce");
        }
        actions = {
            start_round;
            join_round;
            retransmission;
            query_read;
            announce_read;
        }
        const default_action = join_round();
        const entries = {
            (_, _, _, _, 1) : announce_read();
            INAGG_WORKERS_0_31(INAGG_RETRANSMISSION_LO)
            INAGG_WORKERS_32_63(INAGG_RETRANSMISSION_HI)
            (_, _, _, 1, _) : query_read();
            (_, 0, 0, _, _) : start_round();
        }
        size = 3 + INAGG_MAX_WORKERS;
    }

    apply {
#ifndef INAGG_SPLIT_VALUES
        worker_mask.apply();
        member_masks.apply();
        /* The other members' bits: the set completes with this join when
         * it holds exactly those (counts are distinct members). */
        ig_md.others_lo = ig_md.others_lo & ~ig_md.mask_lo;
        ig_md.others_hi = ig_md.others_hi & ~ig_md.mask_hi;
        if (ig_md.pass == PASS_ANNOUNCE) {
            /* The announced round is complete (round_begin). */
            ig_md.solo = 1;
        }
#endif
        /* A contribution weighs max(count, 1): a worker's data 1, its
         * session handshake 2. */
        if (hdr.inagg.count == 0) {
            ig_md.weight = 1;
        } else {
            ig_md.weight = hdr.inagg.count;
        }
        ig_md.exponent = (bit<16>)hdr.inagg.exponent;

        /* A query's status echoes its own packet id and priority, which
         * the round's may overwrite below. */
        ig_md.query_packet_id = hdr.inagg.packet_id;
        ig_md.query_priority = hdr.inagg.priority;
        if (ig_md.query == 1) {
            /* Room for the stored result's odd sums (result.p4). */
            hdr.payload.setValid();
        }
        /* A query and an announcement's first pass join with no bit
         * (worker_mask): they read. */
#ifdef INAGG_ANNOUNCE
        if (ig_md.pass == PASS_ANNOUNCE) {
#ifdef INAGG_SPLIT_VALUES
            /* AnnounceMembers left the members but the announcer in
             * mask_*. The announced round is complete (round_begin). */
            ig_md.solo = 1;
#endif
            if ((hdr.inagg.flags & FLAG_SET) == 0) {
                ig_md.before_lo = announce_set0_lo.execute(ig_md.slot_addr);
                ig_md.before_hi = announce_set0_hi.execute(ig_md.slot_addr);
            } else {
                ig_md.before_lo = announce_set1_lo.execute(ig_md.slot_addr);
                ig_md.before_hi = announce_set1_hi.execute(ig_md.slot_addr);
            }
        } else
#endif
        {
#ifdef INAGG_SPLIT_VALUES
            /* Here, beside announce_set* (AnnounceMembers). */
            worker_mask.apply();
            member_masks.apply();
            /* The other members' bits: the set completes with this join
             * when it holds exactly those (counts are distinct members). */
            ig_md.others_lo = ig_md.others_lo & ~ig_md.mask_lo;
            ig_md.others_hi = ig_md.others_hi & ~ig_md.mask_hi;
#endif
            if ((hdr.inagg.flags & FLAG_SET) == 0) {
                ig_md.before_lo = join_set0_lo.execute(ig_md.slot_addr);
                ig_md.before_hi = join_set0_hi.execute(ig_md.slot_addr);
            } else {
                ig_md.before_lo = join_set1_lo.execute(ig_md.slot_addr);
                ig_md.before_hi = join_set1_hi.execute(ig_md.slot_addr);
            }
        }
        ig_md.set_index = set_index_hash.get({ ig_md.slot_addr[14:0], hdr.inagg.flags[0:0] });

        if (ig_md.pass != PASS_ANNOUNCE) {
            round_classifier.apply();
        }

        round_update.apply();

        if (ig_md.values_op == VALUES_STORE) {
            ig_md.exponent = exponent_store.execute(ig_md.set_index);
        } else if (ig_md.values_op == VALUES_ADD) {
            ig_md.exponent = exponent_max.execute(ig_md.set_index);
        } else {
            ig_md.exponent = exponent_read.execute(ig_md.set_index);
        }
        if (ig_md.values_op == VALUES_STORE) {
            hdr.inagg.packet_id = packet_id_store.execute(ig_md.set_index);
            hdr.inagg.priority = priority_store.execute(ig_md.set_index);
        } else {
            hdr.inagg.packet_id = packet_id_read.execute(ig_md.set_index);
            hdr.inagg.priority = priority_read.execute(ig_md.set_index);
        }

        /* A query the stored result owes (after the reads above: the
         * header holds the round's packet id now): the asker's bit is
         * set, or the round is a complete data round (weight n) with the
         * query's packet id, whose bit a held-back copy of its handshake
         * took out (docs/PROTOCOL.md, "Loss recovery"). `answers` says
         * whether it is the result or, past two, the status flagged
         * ANSWERED. It counts a query about a complete data round before
         * the ids are compared (beside it, a stage sooner): one with
         * another id is counted though not owed, and the asker's owed
         * queries about that round, if any, get the flag one answer
         * sooner. */
        /* 0 when the ids are equal; make_status XORs the round's back out
         * for the status's own id (a 32-bit comparison of two fields is
         * more than a gateway reads). */
        ig_md.query_packet_id = ig_md.query_packet_id ^ hdr.inagg.packet_id;
        if (ig_md.query == 1 && ig_md.round != 0) {
            if (ig_md.retransmission == 1 || ig_md.round == ig_md.job.worker_count) {
                ig_md.answered = answer_query.execute(
                    answer_index_hash.get({ ig_md.set_index[14:0], hdr.inagg.worker[3:0] }));
            }
            if (ig_md.retransmission == 1) {
                ig_md.owed = 1;
            } else if (ig_md.round == ig_md.job.worker_count) {
                if (ig_md.query_packet_id == 0) {
                    ig_md.owed = 1;
                }
            }
        }
    }
}

#endif /* _INAGG_TNA_SLOT_STATE_P4_ */
