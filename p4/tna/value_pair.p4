/*
 * ValuePair: two neighbouring accumulators of one shadow set, elements 2i
 * and 2i+1, in one Tofino pair register (docs/PROTOCOL.md, "Switch state":
 * K int32 accumulators per set; "Integer arithmetic": 32-bit wrapping adds,
 * which is what the register ALU does). Accumulators instantiates K/2 of
 * them. Index: set_index = (pool_base + slot) * 2 + set.
 *
 *   VALUES_STORE      first of a round: both elements written; the odd one
 *                     read back (unchanged)
 *   VALUES_ADD        both added; the odd sum read back into the packet
 *   VALUES_READ_ODD   retransmission: the stored odd element read back
 *   VALUES_READ_EVEN  second pass of a result: the stored even element read
 *                     back (slot_state.p4, "Two passes")
 *   VALUES_NONE       nothing
 */
#ifndef _INAGG_TNA_VALUE_PAIR_P4_
#define _INAGG_TNA_VALUE_PAIR_P4_

struct value_pair_t {
    bit<32> even;
    bit<32> odd;
}

control ValuePair(inout bit<32> even_element,
                  inout bit<32> odd_element,
                  in bit<16> set_index,
                  in bit<8> values_op) {

    Register<value_pair_t, bit<16>>(INAGG_SETS) values;

    RegisterAction<value_pair_t, bit<16>, bit<32>>(values) store = {
        void apply(inout value_pair_t value, out bit<32> odd) {
            value.even = even_element;
            value.odd = odd_element;
            odd = value.odd;
        }
    };

    RegisterAction<value_pair_t, bit<16>, bit<32>>(values) add = {
        void apply(inout value_pair_t value, out bit<32> odd) {
            value.even = value.even + even_element;
            value.odd = value.odd + odd_element;
            odd = value.odd;
        }
    };

    RegisterAction<value_pair_t, bit<16>, bit<32>>(values) read_odd = {
        void apply(inout value_pair_t value, out bit<32> odd) {
            odd = value.odd;
        }
    };

    RegisterAction<value_pair_t, bit<16>, bit<32>>(values) read_even = {
        void apply(inout value_pair_t value, out bit<32> even) {
            even = value.even;
        }
    };

    action do_store() {
        odd_element = store.execute(set_index);
    }

    action do_add() {
        odd_element = add.execute(set_index);
    }

    action do_read_odd() {
        odd_element = read_odd.execute(set_index);
    }

    action do_read_even() {
        even_element = read_even.execute(set_index);
    }

    /* One table per pair, its action chosen by values_op: a stage has 16
     * logical tables, and an if-chain made one per branch (64 for K = 32,
     * which pushed the pairs four stages past their SALUs). */
    table pair_op {
        key = {
            values_op : exact @name("values_op");
        }
        actions = {
            do_store;
            do_add;
            do_read_odd;
            do_read_even;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        const entries = {
            VALUES_STORE : do_store();
            VALUES_ADD : do_add();
            VALUES_READ_ODD : do_read_odd();
            VALUES_READ_EVEN : do_read_even();
        }
        size = 4;
    }

    apply {
        pair_op.apply();
    }
}

#endif /* _INAGG_TNA_VALUE_PAIR_P4_ */
