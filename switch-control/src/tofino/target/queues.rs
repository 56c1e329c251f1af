//! Priority queues on Tofino (docs/PROTOCOL.md, "Egress queues"): the
//! class -> queue map is p4/tna's priority_to_queue (the packet's
//! `ig_intr_md_for_tm.qid`); that queue 7 is served first is the traffic
//! manager's doing, configured through the driver's fixed tables:
//!
//! - `tfN.tm.port.cfg` (dev_port) gives a port's port group (`pg_id`) and,
//!   for each queue id the program picks, its queue in that group
//!   (`egress_qid_queues[qid]`);
//! - `tfN.tm.queue.sched_cfg` (pg_id, pg_queue) takes the queue's strict
//!   priority level (`max_priority`, `min_priority`: "0" ... "7"), per pipe,
//!   so each entry is written to its port's pipe;
//! - `tfN.tm.counter.queue` (pg_id, pg_queue) counts drops and holds the
//!   queue's depth in cells of `tfN.tm.cfg`'s `cell_size_bytes`.
//!
//! Every worker port of a job gets strict-priority queues when the job is
//! installed, so the map means the same on every port results leave by.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use inagg_switch_api::queues::{check_queue, ClassQueue, PortStats, QueueStats, EGRESS_QUEUES};

use super::{invalid, TofinoTarget, PRIORITY_TO_QUEUE};
use crate::target::{ControlError, Result};
use crate::tofino::bfrt_info::BfrtInfo;
use crate::tofino::entry::{update, ReadEntry};
use crate::tofino::proto::bfrt_proto as bfrt;

use bfrt::update::Type::{Delete, Insert, Modify};

/// The traffic manager's tables, named for the switch's chip (`tf1.tm...`
/// on Tofino 1, `tf2.tm...` on Tofino 2).
#[derive(Debug, Clone)]
pub(super) struct TmTables {
    port_cfg: String,
    sched_cfg: String,
    counters: String,
    cfg: String,
}

impl TmTables {
    /// Finds the chip's prefix through its queue scheduler table.
    pub(super) fn resolve(info: &BfrtInfo) -> Result<TmTables> {
        const SCHED: &str = ".tm.queue.sched_cfg";
        let prefix = info
            .names()
            .find_map(|n| n.strip_suffix(SCHED))
            .ok_or_else(|| {
                info.missing(format!(
                    "no traffic-manager table tf1{SCHED} (or tf2...) among the driver's tables"
                ))
            })?
            .to_string();
        let tables = TmTables {
            port_cfg: format!("{prefix}.tm.port.cfg"),
            sched_cfg: format!("{prefix}{SCHED}"),
            counters: format!("{prefix}.tm.counter.queue"),
            cfg: format!("{prefix}.tm.cfg"),
        };
        for name in [
            &tables.port_cfg,
            &tables.sched_cfg,
            &tables.counters,
            &tables.cfg,
        ] {
            info.table(name)?;
        }
        Ok(tables)
    }
}

/// The pipe a device port is on (its bits 7 and up, Tofino 1 and 2).
fn pipe_of(dev_port: u16) -> u32 {
    u32::from(dev_port) >> 7
}

/// Where a port's queues are in the traffic manager.
struct PortQueues {
    pg_id: u64,
    /// The group queue of each of the program's queue ids 0..8.
    pg_queues: Vec<u64>,
}

impl TofinoTarget {
    /// The classes on a queue other than 0, read from priority_to_queue.
    pub(super) fn queue_map(&self) -> Result<Vec<ClassQueue>> {
        let narrow = |v: u64, what: &str| {
            u8::try_from(v).map_err(|_| {
                ControlError::Protocol(format!("{PRIORITY_TO_QUEUE}: {what} {v} read back"))
            })
        };
        let mut map = Vec::new();
        for e in self.read_all(PRIORITY_TO_QUEUE)? {
            map.push(ClassQueue {
                class: narrow(e.key("priority")?, "class")?,
                queue: narrow(e.get("queue")?, "queue")?,
            });
        }
        map.sort_by_key(|m| m.class);
        Ok(map)
    }

    /// Sends class `class` by queue `queue`: inserts, changes or (queue 0,
    /// the table's default) removes the class's entry.
    pub(super) fn map_class(&self, class: u8, queue: u8) -> Result<()> {
        check_queue(queue).map_err(ControlError::Job)?;
        let had = self.queue_map()?.iter().any(|m| m.class == class);
        let entry = self
            .info
            .entry(PRIORITY_TO_QUEUE)?
            .key("priority", u64::from(class))?;
        let what = format!("priority class {class} -> queue {queue}");
        let change = match (had, queue) {
            (false, 0) => return Ok(()),
            (true, 0) => update(Delete, entry.build()),
            (had, _) => {
                let kind = if had { Modify } else { Insert };
                let entry = entry.action("set_queue")?.set("queue", u64::from(queue))?;
                update(kind, entry.build())
            }
        };
        self.client.write(&what, vec![change])
    }

    /// Each port's queues, read from tm.port.cfg in one request.
    fn port_queues(&self, ports: &[u16]) -> Result<BTreeMap<u16, PortQueues>> {
        let name = &self.tm.port_cfg;
        let mut keys = Vec::new();
        for &port in ports {
            keys.push(self.info.entry(name)?.key("dev_port", port.into())?.build());
        }
        let table = self.info.table(name)?;
        let mut found = BTreeMap::new();
        for e in ReadEntry::of(table, self.client.read(name, keys)?) {
            let port = e.key("dev_port")? as u16;
            let count = e.get("port_queues_count")?;
            let qids = e.ints("egress_qid_queues")?;
            if count < u64::from(EGRESS_QUEUES) || qids.len() < usize::from(EGRESS_QUEUES) {
                return Err(invalid(format!(
                    "switch port {port} has {count} queues; inagg's priority classes need \
                     {EGRESS_QUEUES} (give its port group more with {}.tm.port.group)",
                    name.split('.').next().unwrap_or("tf1")
                )));
            }
            let pg_queues = qids[..usize::from(EGRESS_QUEUES)]
                .iter()
                .map(|&q| u64::from(q))
                .collect();
            found.insert(
                port,
                PortQueues {
                    pg_id: e.get("pg_id")?,
                    pg_queues,
                },
            );
        }
        match ports.iter().find(|p| !found.contains_key(p)) {
            Some(p) => Err(ControlError::Protocol(format!(
                "the switch has no {name} entry for port {p}: is it a port of this device?"
            ))),
            None => Ok(found),
        }
    }

    /// The writes that make queue q of each port strict-priority level q
    /// (queue 7 served first), each on its port's pipe.
    pub(super) fn strict_priority(&self, ports: &[u16]) -> Result<Vec<bfrt::Update>> {
        let mut updates = Vec::new();
        for (port, q) in self.port_queues(ports)? {
            for (qid, &pg_queue) in q.pg_queues.iter().enumerate() {
                let level = qid.to_string();
                let entry = self
                    .info
                    .entry(&self.tm.sched_cfg)?
                    .key("pg_id", q.pg_id)?
                    .key("pg_queue", pg_queue)?
                    .text("max_priority", &level)?
                    .text("min_priority", &level)?
                    .on(self.client.pipe(pipe_of(port)));
                updates.push(update(Modify, entry.build()));
            }
        }
        Ok(updates)
    }

    /// The queues' drops and depths on `ports` (a destination each).
    pub(super) fn port_stats(&self, ports: &[(u16, SocketAddr)]) -> Result<Vec<PortStats>> {
        if ports.is_empty() {
            return Ok(Vec::new());
        }
        let numbers: Vec<u16> = ports.iter().map(|&(p, _)| p).collect();
        let queues = self.port_queues(&numbers)?;
        let cell = self.cell_bytes()?;
        let name = &self.tm.counters;
        let table = self.info.table(name)?;
        let mut stats = Vec::new();
        for &(port, dest) in ports {
            let q = &queues[&port];
            let mut keys = Vec::new();
            for &pg_queue in &q.pg_queues {
                let key = self
                    .info
                    .entry(name)?
                    .key("pg_id", q.pg_id)?
                    .key("pg_queue", pg_queue)?
                    .on(self.client.pipe(pipe_of(port)));
                keys.push(key.build());
            }
            let read = ReadEntry::of(table, self.client.read(name, keys)?);
            let mut by_queue = BTreeMap::new();
            for e in &read {
                by_queue.insert(e.key("pg_queue")?, e);
            }
            let mut counts = Vec::new();
            for pg_queue in &q.pg_queues {
                let e = by_queue.get(pg_queue).ok_or_else(|| {
                    ControlError::Protocol(format!(
                        "the switch returned no {name} entry for port {port}'s queue {pg_queue}"
                    ))
                })?;
                let bytes = |cells: u64| usize::try_from(cells * cell).unwrap_or(usize::MAX);
                counts.push(QueueStats {
                    drops: e.get("drop_count_packets")?,
                    depth_bytes: bytes(e.get("usage_cells")?),
                    max_depth_bytes: bytes(e.get("watermark_cells")?),
                    ..QueueStats::default()
                });
            }
            stats.push(PortStats {
                port: dest,
                rate_bps: 0,
                queues: counts,
                train_bytes: 0,
                train_ns: 0,
            });
        }
        Ok(stats)
    }

    /// Bytes per buffer cell, from tm.cfg.
    fn cell_bytes(&self) -> Result<u64> {
        let name = &self.tm.cfg;
        let table = self.info.table(name)?;
        let all = self.info.entry(name)?.build();
        ReadEntry::of(table, self.client.read(name, vec![all])?)
            .first()
            .ok_or_else(|| ControlError::Protocol(format!("the switch returned no {name}")))?
            .get("cell_size_bytes")
    }
}
