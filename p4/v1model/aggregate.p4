/*
 * Aggregate: the slot state machine of docs/PROTOCOL.md ("Switch state",
 * "Slot state machine", "Integer arithmetic"); emu/src/switch.rs,
 * Job::contribute, is its executable form.
 *
 * Every per-set register has INAGG_SETS = 2 * INAGG_SLOTS entries, indexed by
 *     here  = (pool_base + slot) * 2 + set      (the addressed shadow set)
 *     there = here ^ 1                          (the other set of the slot)
 * and holds, per set: the K accumulators (acc_00 ...), the worker bitmap, the
 * contributor count, the weight (workers the sum holds: the result's count),
 * whether a tree job's partial sum is away at its parent, the max exponent,
 * the round's packet id and priority, and the incarnation of the job that
 * last wrote the set.
 *
 * For an admitted contribution from worker w (bit = 1 << w), n workers,
 * weighing c = max(count field, 1) (a child switch of a tree sends the
 * workers its partial sum holds; a worker 0):
 *
 *   strict = the job takes detours, or a worker's data (count field 0)
 *   meets a set whose round is data too (weight[here] == count[here])
 *   strict, bitmap[here] != 0, count[here] < n, and the packet id newer
 *   than id[here]?  (a superseded round)
 *     yes: the set reads as empty: bitmap[here] = 0 for what follows
 *   bitmap[here] has bit set?   (a retransmission)
 *     yes: nothing changes; complete = (count[here] == n):
 *            complete, away -> the partial sum goes up again (tree jobs)
 *            complete       -> the stored result goes back to w alone (resend)
 *            else           -> dropped, duplicate_pending
 *     no:  count[here] == n, bitmap[here] != 0 and the packet id newer than
 *          id[here]?  (a round left behind, taken over)
 *            yes: the set reads as empty: bitmap[here] = 0 for what follows
 *          count[here] == n and bitmap[here] != 0 (a late copy), or,
 *          strict, count[here] == n and id[here] == packet id, or
 *          bitmap[here] != 0 and id[here] != packet id?
 *            yes: nothing changes; dropped, stale_round
 *     no:  bitmap[here] == 0 (first of a round)?
 *            yes: acc = values, exponent = e, count = 1, weight = c, id,
 *                 priority stored, answered_once = answered_twice = 0
 *            no:  acc += values (wrapping), exponent = max, count += 1,
 *                 weight += c (saturating)
 *          bitmap[here] |= bit; bitmap[there] &= ~bit (and, if that bit
 *          was set and count[there] < n, count[there] -= 1)
 *          complete = (count == n):
 *            a tree job (meta.upstream.valid): away = 1, and the partial sum
 *              goes up to the parent as one contribution, count = weight
 *            else: the result goes to every worker, count = weight
 *          else the contribution is absorbed
 *
 * A result from a tree job's parent (meta.inagg.from_parent, admitted by
 * Admission) goes to take_result instead:
 *
 *   away[here] == 1 and id[here] == the result's packet id?
 *     yes: acc = its values, exponent = its exponent, weight = its count,
 *          away = 0, answered_once = answered_twice = 0; multicast to every member as this job's result
 *     no:  nothing changes; dropped, unexpected_result
 *
 * A query from worker w (docs/PROTOCOL.md, "Loss recovery"; emu/src/switch.rs,
 * Job::query) goes to query_slot, which changes nothing but the answered
 * bitmaps:
 *
 *   bitmap[here] has bit set (or the set holds a data round, weight[here]
 *   == count[here], with the query's packet id), count[here] == n, not
 *   away, and answered_twice[here] has bit clear?
 *     yes: the stored result goes back to w alone (w's copy was lost), as
 *          for a retransmission (meta.inagg.stored_result);
 *          answered_twice[here] |= answered_once[here] & bit,
 *          answered_once[here] |= bit: twice per member and round at most
 *          (PROTOCOL.md, "The amplification bound")
 *     no:  the set's status goes back to w: bitmap[here] and n in the
 *          status block, STATUS_ANSWERED in its flags when the round is
 *          complete with w and answered_twice[here] has its bit (w resends),
 *          count[here] in the header's count; when the
 *          query asks for nudges (its count QUERY_NUDGE) and w's bit is
 *          set (count < n), also to the members whose bits are clear,
 *          but not to child switches (meta.inagg.nudge and not_nudged;
 *          StatusAnswer)
 *
 * The late copy (PROTOCOL.md, "Slot state machine", "Late copies"): set s
 * holds a complete round that some members have not left, and w's bit is
 * clear. w left it, so this is a copy of w's contribution that w's next
 * round overtook; added, it would corrupt the stored result and clear w's
 * bit in the round w moved on to. emu/src/switch.rs, left_behind. A copy
 * carries the round's packet id or an older one; a packet whose id is
 * newer cannot be one (in order, round r + 2 reaches a set only after every
 * member left round r there): it takes the set over and starts its round.
 *
 * A job that takes detours (job_table's `detours`; PROTOCOL.md, "Auxiliary
 * paths", stale rounds) no longer sees each member's packets in order, so
 * two more cases with w's bit clear are late copies too: the set holds a
 * complete round every member has left and the packet carries that round's
 * id, or the set is summing a round with another, older id. A copy rounds
 * late can still find its set complete and left with a newer id, and start
 * a round there; the next round's packets, newer, take the set over.
 *
 * The packet's header and payload leave the action holding the set's state
 * after the update (weight in count, max exponent, round id and priority,
 * the sums), so that ResultDispatch or SendUpstream only has to turn it
 * around.
 *
 * Atomicity. The read-modify-write of one packet must not interleave with
 * another's. It is written as one action, wrapped in @atomic: bmv2 ignores
 * the annotation but locks every register an action touches for the whole
 * action, so one action is the unit that is atomic on bmv2; other v1model
 * targets honour @atomic. That is also why the action has no `if`: p4c's
 * bmv2 back end accepts only conditionals it can turn into `?:`, so every
 * register is read, its new value chosen with `?:`, and written back (the
 * same value when nothing changes).
 *
 * Incarnation. The emulator starts a job on zeroed memory; a switch's
 * registers keep whatever an earlier job left in the pool, and bmv2's
 * P4Runtime server cannot write registers to clear them. So each set records
 * the incarnation of the job that last wrote it, and a set written under
 * another incarnation reads as empty (bitmap 0). The control plane gives
 * every installation of a job a new incarnation (job_table's `incarnation`
 * parameter), which makes a re-created job start on clean slots exactly as
 * in the emulator.
 */
#ifndef _INAGG_V1MODEL_AGGREGATE_P4_
#define _INAGG_V1MODEL_AGGREGATE_P4_

/* One accumulator register per element. */
#define INAGG_ACCUMULATOR_REGISTER(n) register<bit<32>>(INAGG_SETS) acc_##n;

/*
 * One element of the update: `sum` is the accumulator after this packet,
 * written back and left in the payload. On a retransmission (or a late copy,
 * which is dropped) it is the stored value (the result to resend); on the
 * first contribution of a round it is the packet's value; otherwise the
 * wrapping sum.
 */
#define INAGG_ACCUMULATE(n)                                                  \
    acc_##n.read(sum, here);                                                 \
    sum = keep ? sum : (first ? hdr.payload.e##n : sum + hdr.payload.e##n); \
    acc_##n.write(here, sum);                                                \
    hdr.payload.e##n = sum;

/* One element of a query's answer: the stored sum, read and left in the
 * payload (a status drops the payload again). */
#define INAGG_READ_RESULT(n)                                                 \
    acc_##n.read(sum, here);                                                 \
    hdr.payload.e##n = sum;

/* One element of a parent's result: stored in place of the partial sum when
 * the set waits for it, else the register is written back unchanged. */
#define INAGG_STORE_RESULT(n)                                                \
    acc_##n.read(sum, here);                                                 \
    acc_##n.write(here, take ? hdr.payload.e##n : sum);

control Aggregate(inout headers_t hdr, inout metadata_t meta) {

    register<bit<32>>(INAGG_SETS) incarnation;
    register<bit<64>>(INAGG_SETS) bitmap;
    register<bit<16>>(INAGG_SETS) contributors;
    register<bit<8>>(INAGG_SETS)  max_exponent;
    register<bit<32>>(INAGG_SETS) round_packet_id;
    register<bit<8>>(INAGG_SETS)  round_priority;
    register<bit<16>>(INAGG_SETS) weight;
    register<bit<1>>(INAGG_SETS)  away;
    /* Members whose queries a complete round's stored result answered,
     * once and twice. */
    register<bit<64>>(INAGG_SETS) answered_once;
    register<bit<64>>(INAGG_SETS) answered_twice;
    INAGG_FOR_EACH_ELEMENT(INAGG_ACCUMULATOR_REGISTER)

    /* The set this packet addresses, and the other set of its slot. */
    action set_indices(out bit<32> here, out bit<32> there) {
        here = ((meta.job.pool_base + (bit<32>)hdr.inagg.slot) << 1)
               | (bit<32>)(hdr.inagg.flags & FLAG_SET);
        there = here ^ 32w1;
    }

    action update_slot() {
        bit<32> here;
        bit<32> there;
        set_indices(here, there);
        /* bmv2 takes shift amounts of at most 8 bits. Admission passed only
         * a worker id its job's worker_table names, and the control plane
         * installs ids below 64, so the narrowing loses nothing. */
        bit<64> me = 64w1 << (bit<8>)hdr.inagg.worker;

        bit<32> incarnation_here;
        bit<32> incarnation_there;
        bit<64> bitmap_here;
        bit<64> bitmap_there;
        bit<16> count_here;
        bit<16> count_there;
        bit<8>  exponent_here;
        bit<32> packet_id_here;
        bit<8>  priority_here;
        bit<16> weight_here;
        bit<1>  away_here;
        incarnation.read(incarnation_here, here);
        incarnation.read(incarnation_there, there);
        bitmap.read(bitmap_here, here);
        bitmap.read(bitmap_there, there);
        contributors.read(count_here, here);
        contributors.read(count_there, there);
        max_exponent.read(exponent_here, here);
        round_packet_id.read(packet_id_here, here);
        round_priority.read(priority_here, here);
        weight.read(weight_here, here);
        away.read(away_here, here);

        /* A set last written by another installation of a job is empty. */
        bit<64> live_here = (incarnation_here == meta.job.incarnation) ? bitmap_here : 64w0;
        bit<64> live_there = (incarnation_there == meta.job.incarnation) ? bitmap_there : 64w0;
        bit<1> away_live = (incarnation_here == meta.job.incarnation) ? away_here : 1w0;

        /* At a job that takes detours, a round part-way that is older than
         * this packet's was started by a copy rounds late: it is superseded,
         * and the set reads as empty (emu/src/switch.rs, superseded). Packet
         * ids compare as serial numbers: newer when less than 2^31 ahead. */
        bit<32> ahead = hdr.inagg.packet_id - packet_id_here;
        bool newer = ahead != 32w0 && ahead[31:31] == 1w0;
        /* A worker's data meeting a set that sums data (every contribution
         * weighing 1): a copy of an earlier round is dropped, a newer round
         * supersedes, at every job (emu/src/switch.rs, data_rules; PROTOCOL.md,
         * "Slot state machine", the data rules). Handshakes (count 2) are
         * never dropped so. */
        bool data = hdr.inagg.count == 16w0 && weight_here == count_here;
        bool strict = meta.job.detours == 1 || data;
        bool superseded = strict && live_here != 64w0
                          && count_here != meta.job.worker_count && newer;
        /* A complete round that w left and others have not, and a newer
         * packet id: in order, no member can still need that round, so a
         * newer round takes the set over (emu/src/switch.rs, taken over).
         * Both sets left so would wedge the slot for good. */
        bool taken_over = live_here != 64w0 && (live_here & me) == 64w0
                          && count_here == meta.job.worker_count && newer;
        bit<64> held_here = (superseded || taken_over) ? 64w0 : live_here;

        bool seen = (held_here & me) != 64w0;   /* a retransmission */
        bool first = held_here == 64w0;         /* first of a round (never seen) */
        /* A late copy: w left this set's complete round, others have not. */
        bool left_behind = !seen && !first && count_here == meta.job.worker_count;
        /* At a job that takes detours, also a copy of the last round after
         * every member left it, or of another round than the one summed
         * (emu/src/switch.rs, out_of_order). */
        bool again = incarnation_here == meta.job.incarnation
                     && count_here == meta.job.worker_count
                     && packet_id_here == hdr.inagg.packet_id;
        bool other_round = !first && count_here != meta.job.worker_count
                           && packet_id_here != hdr.inagg.packet_id;
        bool out_of_order = !seen && strict && (again || other_round);
        bool late = left_behind || out_of_order;
        bool keep = seen || late;               /* no register changes */

        bit<16> count_now = keep ? count_here : (first ? 16w1 : count_here + 16w1);
        bit<8> exponent_now = keep ? exponent_here
                            : ((first || hdr.inagg.exponent > exponent_here) ? hdr.inagg.exponent
                                                                             : exponent_here);
        bit<32> packet_id_now = first ? hdr.inagg.packet_id : packet_id_here;
        bit<8> priority_now = first ? hdr.inagg.priority : priority_here;
        bit<16> c = (hdr.inagg.count == 0) ? 16w1 : hdr.inagg.count;
        bit<16> added = weight_here + c;
        bit<16> weight_now = keep ? weight_here
                           : (first ? c : ((added < weight_here) ? 16w0xffff : added));
        bool complete = count_now == meta.job.worker_count && !late;
        /* A tree job's complete partial sum goes up and stays away until
         * the parent's result replaces it. */
        bit<1> away_now = keep ? away_live
                        : ((complete && meta.upstream.valid == 1) ? 1w1 : 1w0);

        /* A retransmission or a late copy writes back what it read: no
         * change anywhere, the other set included. */
        incarnation.write(here, keep ? incarnation_here : meta.job.incarnation);
        incarnation.write(there, keep ? incarnation_there : meta.job.incarnation);
        bitmap.write(here, keep ? bitmap_here : (held_here | me));
        bitmap.write(there, keep ? bitmap_there : (live_there & ~me));
        /* Counts are distinct members: moving on from a round not complete
         * there gives the member's place back to that set's count too
         * (emu/src/switch.rs, contribute). */
        bool gives_back = !keep && (live_there & me) != 64w0
                          && count_there != meta.job.worker_count;
        /* The other set is stamped with this install's incarnation below:
         * a set another install last wrote reads as empty from then on,
         * its count included (else a data copy met its old round's count
         * and id as this job's last round: the data rules). */
        bit<16> count_there_live = (incarnation_there == meta.job.incarnation) ? count_there : 16w0;
        contributors.write(there, keep ? count_there
                                       : (gives_back ? count_there - 16w1 : count_there_live));
        contributors.write(here, count_now);
        max_exponent.write(here, exponent_now);
        round_packet_id.write(here, packet_id_now);
        round_priority.write(here, priority_now);
        weight.write(here, weight_now);
        away.write(here, away_now);
        /* A new round in the set: no member's query answered yet. */
        bit<64> once_here;
        bit<64> twice_here;
        answered_once.read(once_here, here);
        answered_twice.read(twice_here, here);
        answered_once.write(here, (first && !keep) ? 64w0 : once_here);
        answered_twice.write(here, (first && !keep) ? 64w0 : twice_here);

        bit<32> sum;
        INAGG_FOR_EACH_ELEMENT(INAGG_ACCUMULATE)

        hdr.inagg.count = weight_now;
        hdr.inagg.exponent = exponent_now;
        hdr.inagg.packet_id = packet_id_now;
        hdr.inagg.priority = priority_now;
        meta.inagg.retransmission = seen ? 1w1 : 1w0;
        meta.inagg.late = late ? 1w1 : 1w0;
        meta.inagg.complete = complete ? 1w1 : 1w0;
        meta.inagg.away = away_live;
    }

    /* A parent's result (emu/src/switch.rs, Job::take_result): stored when
     * the set's partial sum is away with the same packet id. The header
     * leaves with the round's priority, as every result of the round. */
    action take_result() {
        bit<32> here;
        bit<32> there;
        set_indices(here, there);

        bit<32> incarnation_here;
        bit<1>  away_here;
        bit<32> packet_id_here;
        bit<8>  exponent_here;
        bit<16> weight_here;
        bit<8>  priority_here;
        incarnation.read(incarnation_here, here);
        away.read(away_here, here);
        round_packet_id.read(packet_id_here, here);
        max_exponent.read(exponent_here, here);
        weight.read(weight_here, here);
        round_priority.read(priority_here, here);

        bool take = incarnation_here == meta.job.incarnation && away_here == 1
                    && packet_id_here == hdr.inagg.packet_id;
        away.write(here, take ? 1w0 : away_here);
        bit<64> once_here;
        bit<64> twice_here;
        answered_once.read(once_here, here);
        answered_twice.read(twice_here, here);
        answered_once.write(here, take ? 64w0 : once_here);
        answered_twice.write(here, take ? 64w0 : twice_here);
        max_exponent.write(here, take ? hdr.inagg.exponent : exponent_here);
        weight.write(here, take ? hdr.inagg.count : weight_here);

        bit<32> sum;
        INAGG_FOR_EACH_ELEMENT(INAGG_STORE_RESULT)

        hdr.inagg.priority = priority_here;
        meta.inagg.unexpected = take ? 1w0 : 1w1;
        meta.inagg.retransmission = 0;
        meta.inagg.complete = take ? 1w1 : 1w0;
    }

    /* A query: reads the set and writes only the answered bitmaps. Both
     * answers are made here, in one action so that they read one state (see
     * Atomicity); the ingress keeps the payload for the stored result, the
     * status block otherwise. */
    action query_slot() {
        bit<32> here;
        bit<32> there;
        set_indices(here, there);
        bit<64> me = 64w1 << (bit<8>)hdr.inagg.worker;

        bit<32> incarnation_here;
        bit<64> bitmap_here;
        bit<16> count_here;
        bit<8>  exponent_here;
        bit<32> packet_id_here;
        bit<8>  priority_here;
        bit<16> weight_here;
        bit<1>  away_here;
        bit<64> once_here;
        bit<64> twice_here;
        incarnation.read(incarnation_here, here);
        bitmap.read(bitmap_here, here);
        contributors.read(count_here, here);
        max_exponent.read(exponent_here, here);
        round_packet_id.read(packet_id_here, here);
        round_priority.read(priority_here, here);
        weight.read(weight_here, here);
        away.read(away_here, here);
        answered_once.read(once_here, here);
        answered_twice.read(twice_here, here);

        bool live = incarnation_here == meta.job.incarnation;
        bit<64> live_here = live ? bitmap_here : 64w0;
        bit<16> count_live = live ? count_here : 16w0;
        /* w's values are in the round when its bit is set, or when the
         * round is a data round (every contribution weighing 1) with the
         * query's packet id: a held-back copy of w's handshake, summed into
         * the other set, took w's bit out of this one but not its values
         * out of the sum (PROTOCOL.md, "Loss recovery"). */
        bool in_it = (live_here & me) != 64w0
                     || (live && packet_id_here == hdr.inagg.packet_id && weight_here == count_here);
        bool owed = in_it && count_live == meta.job.worker_count
                    && !(live && away_here == 1);
        /* Twice per member and round at most: a later query gets the
         * status, flagged (PROTOCOL.md, "The amplification bound"). */
        bool again = (twice_here & me) != 64w0;
        bool stored = owed && !again;
        answered_once.write(here, stored ? (once_here | me) : once_here);
        answered_twice.write(here, stored ? (twice_here | (once_here & me)) : twice_here);

        hdr.payload.setValid();
        bit<32> sum;
        INAGG_FOR_EACH_ELEMENT(INAGG_READ_RESULT)
        hdr.status.setValid();
        hdr.status.bitmap = live_here;
        hdr.status.members = meta.job.worker_count;
        hdr.status.flags = (owed && again) ? STATUS_ANSWERED : 16w0;

        /* Read before the count becomes the answer's: 1 asks for nudges. */
        meta.inagg.nudge = (hdr.inagg.count == QUERY_NUDGE && (live_here & me) != 64w0
                            && count_live < meta.job.worker_count) ? 1w1 : 1w0;
        meta.inagg.not_nudged = live_here | meta.job.child_switches;
        hdr.inagg.count = stored ? weight_here : count_live;
        hdr.inagg.exponent = stored ? exponent_here : 8w0;
        hdr.inagg.packet_id = stored ? packet_id_here : hdr.inagg.packet_id;
        hdr.inagg.priority = stored ? priority_here : hdr.inagg.priority;
        meta.inagg.stored_result = stored ? 1w1 : 1w0;
        meta.inagg.retransmission = 0;
        meta.inagg.late = 0;
        meta.inagg.complete = 0;
    }

    /* A member's announcement of a round's result it holds (kind 7;
     * docs/PROTOCOL.md, "A switch that lost its state"; emu/src/switch.rs,
     * Job::announce). Only a set summing that very round part-way takes
     * it (some member resent the round since the switch lost it): the
     * round becomes complete with the announced sum, weight and exponent,
     * and the bits of every member that has not moved on to the other set
     * (their resends and queries bring it back to them). A complete set,
     * one summing another round or an empty one, and any set of a tree or
     * detour job, ignore it. Nothing leaves the switch either way. */
    action announce_slot() {
        bit<32> here;
        bit<32> there;
        set_indices(here, there);
        bit<64> me = 64w1 << (bit<8>)hdr.inagg.worker;

        bit<32> incarnation_here;
        bit<32> incarnation_there;
        bit<64> bitmap_here;
        bit<64> bitmap_there;
        bit<16> count_here;
        bit<32> packet_id_here;
        bit<8>  exponent_here;
        bit<8>  priority_here;
        bit<16> weight_here;
        bit<64> once_here;
        bit<64> twice_here;
        incarnation.read(incarnation_here, here);
        incarnation.read(incarnation_there, there);
        bitmap.read(bitmap_here, here);
        bitmap.read(bitmap_there, there);
        contributors.read(count_here, here);
        round_packet_id.read(packet_id_here, here);
        max_exponent.read(exponent_here, here);
        round_priority.read(priority_here, here);
        weight.read(weight_here, here);
        answered_once.read(once_here, here);
        answered_twice.read(twice_here, here);

        bool live = incarnation_here == meta.job.incarnation;
        bit<64> live_there = (incarnation_there == meta.job.incarnation) ? bitmap_there : 64w0;
        bool tree = meta.upstream.valid == 1 || meta.job.detours == 1
                    || meta.job.child_switches != 64w0;
        bool waiting = live && bitmap_here != 64w0
                       && count_here != meta.job.worker_count
                       && packet_id_here == hdr.inagg.packet_id;
        bool take = waiting && !tree;
        /* Every member: the low n bits (n = 64 wraps to all of them). */
        bit<64> members = (64w1 << (bit<8>)meta.job.worker_count) - 64w1;
        bit<64> moved_on = live_there | me;

        bitmap.write(here, take ? (members & ~moved_on) : bitmap_here);
        contributors.write(here, take ? meta.job.worker_count : count_here);
        weight.write(here, take ? hdr.inagg.count : weight_here);
        max_exponent.write(here, take ? hdr.inagg.exponent : exponent_here);
        round_priority.write(here, take ? hdr.inagg.priority : priority_here);
        answered_once.write(here, take ? 64w0 : once_here);
        answered_twice.write(here, take ? 64w0 : twice_here);

        bit<32> sum;
        INAGG_FOR_EACH_ELEMENT(INAGG_STORE_RESULT)

        meta.inagg.retransmission = 0;
        meta.inagg.late = 0;
        meta.inagg.complete = 0;
    }

    apply {
        if (hdr.inagg.kind == KIND_QUERY) {
            @atomic {
                query_slot();
            }
        } else if (hdr.inagg.kind == KIND_ANNOUNCE) {
            @atomic {
                announce_slot();
            }
        } else if (meta.inagg.from_parent == 1) {
            @atomic {
                take_result();
            }
        } else {
            @atomic {
                update_slot();
            }
        }
    }
}

#endif /* _INAGG_V1MODEL_AGGREGATE_P4_ */
