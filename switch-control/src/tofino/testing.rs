//! Test support: bf-rt.json of p4/tna as bf-p4c writes it, and the
//! driver's fixed multicast and traffic-manager tables, for tests that run
//! where neither bf-p4c nor bf_switchd is installed.
//!
//! Names, widths and sizes are written out here from p4/README.md
//! ("Control-plane interface") and the driver's documented `$pre` tables,
//! deliberately not taken from [`names`](super::target::names), so
//! resolving this description checks the control plane's names against
//! the documentation; [`shape`] compares it with the compiler's own
//! output where `p4/build.sh tna` has run. Ids are made up (the compiler's
//! change from build to build): the control plane must resolve them.

use serde_json::{json, Value};

/// An exact key or data field of `width` bits.
fn bytes(id: u32, name: &str, width: u32) -> Value {
    json!({"id": id, "name": name, "repeated": false, "mandatory": true,
           "match_type": "Exact", "type": {"type": "bytes", "width": width}})
}

fn action(id: u32, name: &str, params: &[(&str, u32)]) -> Value {
    let data: Vec<Value> = params
        .iter()
        .enumerate()
        .map(|(i, (n, w))| bytes(i as u32 + 1, n, *w))
        .collect();
    json!({"id": id, "name": name, "action_scope": "TableAndDefault", "data": data})
}

fn table(id: u32, name: &str, size: u64, keys: &[(&str, u32)], actions: Vec<Value>) -> Value {
    let key: Vec<Value> = keys
        .iter()
        .enumerate()
        .map(|(i, (n, w))| bytes(i as u32 + 1, n, *w))
        .collect();
    json!({"name": name, "id": id, "table_type": "MatchAction_Direct", "size": size,
           "key": key, "action_specs": actions, "data": []})
}

fn indexed(id: u32, name: &str, kind: &str, size: u64, data: Vec<Value>) -> Value {
    let index = if kind == "Register" {
        "$REGISTER_INDEX"
    } else {
        "$COUNTER_INDEX"
    };
    json!({"name": name, "id": id, "table_type": kind, "size": size,
           "key": [{"id": 65556, "name": index, "match_type": "Exact", "type": {"type": "uint32"}}],
           "action_specs": [], "data": data})
}

fn singleton(id: u32, name: &str, ty: Value, repeated: bool) -> Value {
    json!({"mandatory": false, "read_only": false,
           "singleton": {"id": id, "name": name, "repeated": repeated, "type": ty}})
}

fn counter(id: u32, name: &str, size: u64) -> Value {
    let spec = |i, n| singleton(i, n, json!({"type": "uint64", "default_value": 0}), false);
    indexed(
        id,
        name,
        "Counter",
        size,
        vec![
            spec(65553, "$COUNTER_SPEC_BYTES"),
            spec(65554, "$COUNTER_SPEC_PKTS"),
        ],
    )
}

/// A register of pairs `(a, b)` of `width` bits, as bf-p4c describes one.
fn pair_register(id: u32, name: &str, size: u64, cells: [&str; 2], width: u32) -> Value {
    let short = name.trim_start_matches("pipe.");
    let data = cells
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let ty = json!({"type": "bytes", "width": width});
            singleton(i as u32 + 1, &format!("{short}.{c}"), ty, false)
        })
        .collect();
    indexed(id, name, "Register", size, data)
}

/// bf-rt.json of p4/tna built with `-DINAGG_K=k -DINAGG_SLOTS=slots`: the
/// tables the control plane uses.
pub fn tna_bfrt_json(k: u16, slots: u32) -> String {
    let slots = u64::from(slots);
    let mut tables = vec![
        table(
            1001,
            "pipe.InaggIngress.admission.job_table",
            1024,
            &[("job", 16)],
            vec![
                action(
                    2001,
                    "InaggIngress.admission.set_job",
                    &[
                        ("worker_count", 16),
                        ("pool_base", 16),
                        ("pool_size", 16),
                        ("elements", 16),
                        ("generation", 16),
                        ("mcast_grp", 16),
                    ],
                ),
                action(2002, "NoAction", &[]),
            ],
        ),
        table(
            1002,
            "pipe.InaggIngress.admission.worker_table",
            8192,
            &[
                ("job", 16),
                ("ingress_port", 9),
                ("src_addr", 32),
                ("src_port", 16),
            ],
            vec![
                action(2003, "InaggIngress.admission.set_worker", &[("worker", 16)]),
                action(2002, "NoAction", &[]),
            ],
        ),
        table(
            1003,
            "pipe.InaggEgress.result_rewrite.result_receivers",
            8192,
            &[("job", 16), ("rid", 16)],
            vec![
                action(
                    2004,
                    "InaggEgress.result_rewrite.set_receiver",
                    &[("dst_mac", 48), ("dst_addr", 32), ("dst_port", 16)],
                ),
                action(2005, "InaggEgress.result_rewrite.drop_copy", &[]),
            ],
        ),
        table(
            1005,
            "pipe.InaggIngress.group_relay.group_table",
            1024,
            &[("group", 16)],
            vec![
                action(
                    2007,
                    "InaggIngress.group_relay.set_group",
                    &[("mcast_grp", 16)],
                ),
                action(2002, "NoAction", &[]),
            ],
        ),
        table(
            1006,
            "pipe.InaggIngress.group_relay.member_table",
            8192,
            &[
                ("group", 16),
                ("ingress_port", 9),
                ("src_addr", 32),
                ("src_port", 16),
            ],
            vec![
                action(
                    2008,
                    "InaggIngress.group_relay.set_member",
                    &[("member", 16)],
                ),
                action(2002, "NoAction", &[]),
            ],
        ),
        table(
            1007,
            "pipe.InaggEgress.group_rewrite.group_receivers",
            8192,
            &[("group", 16), ("rid", 16)],
            vec![
                action(
                    2009,
                    "InaggEgress.group_rewrite.set_member_address",
                    &[("dst_mac", 48), ("dst_addr", 32), ("dst_port", 16)],
                ),
                action(2010, "InaggEgress.group_rewrite.drop_copy", &[]),
            ],
        ),
        counter(3004, "pipe.InaggIngress.group_packets", 1024),
        counter(3005, "pipe.InaggEgress.group_copies", 1024),
        table(
            1004,
            "pipe.InaggIngress.queue_select.priority_to_queue",
            256,
            &[("priority", 8)],
            vec![action(
                2006,
                "InaggIngress.queue_select.set_queue",
                &[("queue", 5)],
            )],
        ),
        counter(3001, "pipe.InaggIngress.rx", 1),
        counter(3002, "pipe.InaggIngress.drops", 16),
        counter(3003, "pipe.InaggEgress.tx", 1),
    ];
    for (i, name) in [
        "contributions",
        "results",
        "resent_results",
        "duplicates",
        "dropped",
        "queries",
    ]
    .iter()
    .enumerate()
    {
        tables.push(counter(
            3010 + i as u32,
            &format!("pipe.InaggIngress.job_{name}"),
            1024,
        ));
    }
    for (i, half) in ["lo", "hi"].iter().enumerate() {
        let name = format!("pipe.InaggIngress.slot_state.bitmap_{half}");
        tables.push(pair_register(
            4001 + i as u32,
            &name,
            slots,
            ["set0", "set1"],
            32,
        ));
    }
    tables.push(pair_register(
        4003,
        "pipe.InaggIngress.slot_state.rounds",
        slots * 2,
        ["weight", "complete"],
        16,
    ));
    for pair in 0..k / 2 {
        let name = format!(
            "pipe.InaggIngress.accumulators.pair_{:02x}.values",
            pair * 2
        );
        tables.push(pair_register(
            4100 + u32::from(pair),
            &name,
            slots * 2,
            ["even", "odd"],
            32,
        ));
    }
    json!({"schema_version": "1.0.0", "tables": tables, "learn_filters": []}).to_string()
}

/// The driver's `$pre.node` and `$pre.mgid`, and the Tofino 1 traffic
/// manager's tables the target uses (`tf1.tm.port.cfg`,
/// `tf1.tm.queue.sched_cfg`, `tf1.tm.counter.queue`, `tf1.tm.cfg`), as
/// bf_switchd serves them in `non_p4_config`.
pub fn fixed_bfrt_json() -> String {
    let uint = |bits: u32| json!({"type": format!("uint{bits}")});
    let key = |name: &str, bits: u32| json!([{"id": 1, "name": name, "match_type": "Exact", "type": uint(bits)}]);
    let queue_key = json!([
        {"id": 1, "name": "pg_id", "match_type": "Exact", "type": uint(8)},
        {"id": 2, "name": "pg_queue", "match_type": "Exact", "type": uint(8)}
    ]);
    let levels: Vec<String> = std::iter::once("LOW".to_string())
        .chain((0..8).map(|l: u8| l.to_string()))
        .chain(std::iter::once("HIGH".to_string()))
        .collect();
    let level = json!({"type": "string", "choices": levels});
    json!({"tables": [
        {"name": "tf1.tm.port.cfg", "id": 4278517776u32, "table_type": "TmPortCfg", "size": 288,
         "key": key("dev_port", 32),
         "data": [singleton(1, "pg_id", uint(8), false),
                  singleton(2, "pg_port_nr", uint(8), false),
                  singleton(3, "port_queues_count", uint(8), false),
                  singleton(4, "ingress_qid_map", uint(8), true),
                  singleton(5, "egress_qid_queues", uint(8), true)]},
        {"name": "tf1.tm.queue.sched_cfg", "id": 4278517797u32, "table_type": "TmQueueSchedCfg",
         "size": 2304, "key": queue_key,
         "data": [singleton(2, "min_rate_enable", json!({"type": "bool"}), false),
                  singleton(1, "min_priority", level.clone(), false),
                  singleton(5, "max_rate_enable", json!({"type": "bool"}), false),
                  singleton(4, "max_priority", level, false),
                  singleton(3, "dwrr_weight", uint(16), false)]},
        {"name": "tf1.tm.counter.queue", "id": 4278517827u32, "table_type": "TmCounterQueue",
         "size": 576, "key": queue_key,
         "data": [singleton(1, "drop_count_packets", uint(64), false),
                  singleton(2, "usage_cells", uint(64), false),
                  singleton(3, "watermark_cells", uint(64), false)]},
        {"name": "tf1.tm.cfg", "id": 4278517841u32, "table_type": "TmCfg", "size": 1, "key": [],
         "data": [singleton(1, "timestamp_shift_bits", uint(8), false),
                  singleton(2, "cell_size_bytes", uint(32), false),
                  singleton(3, "total_cells", uint(32), false)]},
        {"name": "$pre.mgid", "id": 4278321153u32, "table_type": "PreMgid", "size": 65536,
         "key": key("$MGID", 16),
         "data": [singleton(1, "$MULTICAST_NODE_ID", uint(32), true),
                  singleton(2, "$MULTICAST_NODE_L1_XID_VALID", json!({"type": "bool"}), true),
                  singleton(3, "$MULTICAST_NODE_L1_XID", uint(16), true)]},
        {"name": "$pre.node", "id": 4278321154u32, "table_type": "PreNode", "size": 4096 * 16,
         "key": key("$MULTICAST_NODE_ID", 32),
         "data": [singleton(1, "$MULTICAST_RID", uint(16), false),
                  singleton(2, "$MULTICAST_LAG_ID", uint(8), true),
                  singleton(3, "$DEV_PORT", uint(32), true)]}
    ]})
    .to_string()
}

/// A description's shape without its ids: (table, kind, size, keys with
/// widths, actions with parameters and widths, data fields), for every
/// table of `names`, to compare a stand-in with the compiler's output.
pub fn shape(info: &super::BfrtInfo, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|&n| match info.table(n) {
            Err(e) => format!("{n}: {e}"),
            Ok(t) => {
                let field = |f: &super::bfrt_info::Field| format!("{}/{}", f.name, f.width);
                let actions: Vec<String> = t
                    .actions()
                    .iter()
                    .map(|a| {
                        format!(
                            "{}({})",
                            a.name,
                            a.params().iter().map(field).collect::<Vec<_>>().join(",")
                        )
                    })
                    .collect();
                let keys: Vec<String> = t.keys().iter().map(field).collect();
                let data: Vec<String> = t.data_fields().iter().map(field).collect();
                format!(
                    "{n} {} {} {keys:?} {actions:?} {data:?}",
                    t.table_type, t.size
                )
            }
        })
        .collect()
}
