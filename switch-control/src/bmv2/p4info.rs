//! P4Info: loading it, and resolving the names the control plane uses to the
//! ids p4c assigned.
//!
//! Every name is in [`names`], as p4/README.md ("Control-plane interface")
//! gives them; [`Schema::resolve`] looks each one up once, checks its kind
//! (exact match, an action the table lists), and keeps its id and bitwidth.
//! A missing or different name is an error naming it, so a P4Info from
//! another program or an older inagg is refused before anything is written.

use std::path::Path;

use prost::Message;

use super::proto::p4::config::v1 as cfg;
use crate::target::{ControlError, Result};

pub use cfg::P4Info;

/// The P4Info names of the objects the control plane touches, exactly as
/// p4/README.md lists them (the v1model program's `@name`s).
pub mod names {
    /// Per job: job id -> set_job.
    pub const JOB_TABLE: &str = "InaggIngress.admission.job_table";
    /// job_table's action.
    pub const SET_JOB: &str = "InaggIngress.admission.set_job";
    /// Per worker: (job, ingress port, source address, source port) -> set_worker.
    pub const WORKER_TABLE: &str = "InaggIngress.admission.worker_table";
    /// worker_table's action.
    pub const SET_WORKER: &str = "InaggIngress.admission.set_worker";
    /// Per worker, in egress: (job, replication id) -> set_receiver.
    pub const RESULT_RECEIVERS: &str = "InaggEgress.result_rewrite.result_receivers";
    /// result_receivers' action.
    pub const SET_RECEIVER: &str = "InaggEgress.result_rewrite.set_receiver";
    /// Per multicast group (a job's or one made by hand): group id -> set_group.
    pub const GROUP_TABLE: &str = "InaggIngress.group_relay.group_table";
    /// group_table's action.
    pub const SET_GROUP: &str = "InaggIngress.group_relay.set_group";
    /// Per member: (group, ingress port, source address, source port) -> set_member.
    pub const MEMBER_TABLE: &str = "InaggIngress.group_relay.member_table";
    /// member_table's action.
    pub const SET_MEMBER: &str = "InaggIngress.group_relay.set_member";
    /// Per member, in egress: (group, replication id) -> set_member_address.
    pub const GROUP_RECEIVERS: &str = "InaggEgress.group_rewrite.group_receivers";
    /// group_receivers' action.
    pub const SET_MEMBER_ADDRESS: &str = "InaggEgress.group_rewrite.set_member_address";
    /// Per tree job: (parent job, ingress port, source address, source
    /// port) -> from_parent.
    pub const PARENT_TABLE: &str = "InaggIngress.admission.parent_table";
    /// parent_table's action.
    pub const FROM_PARENT: &str = "InaggIngress.admission.from_parent";
    /// Per tree job: job id -> set_upstream.
    pub const UPSTREAM_TABLE: &str = "InaggIngress.admission.upstream_table";
    /// upstream_table's action.
    pub const SET_UPSTREAM: &str = "InaggIngress.admission.set_upstream";
    /// Per relay entry: (job, ingress port, source address, source port,
    /// member) -> relay_to.
    pub const RELAY_TABLE: &str = "InaggIngress.admission.relay_table";
    /// relay_table's action.
    pub const RELAY_TO: &str = "InaggIngress.admission.relay_to";
    /// Per detour a job lists: (job, ingress port, source address, source
    /// port, member) -> take_detour.
    pub const DETOUR_TABLE: &str = "InaggIngress.admission.detour_table";
    /// detour_table's action.
    pub const TAKE_DETOUR: &str = "InaggIngress.admission.take_detour";
    /// Priority class -> egress queue (docs/PROTOCOL.md, "Egress queues").
    pub const PRIORITY_TO_QUEUE: &str = "InaggIngress.queue_select.priority_to_queue";
    /// priority_to_queue's action.
    pub const SET_QUEUE: &str = "InaggIngress.queue_select.set_queue";

    /// Match fields.
    pub mod key {
        /// The job id (job_table, worker_table, result_receivers).
        pub const JOB: &str = "job";
        /// worker_table: the bmv2 ingress port.
        pub const INGRESS_PORT: &str = "ingress_port";
        /// worker_table: IPv4 source address.
        pub const SRC_ADDR: &str = "src_addr";
        /// worker_table: UDP source port.
        pub const SRC_PORT: &str = "src_port";
        /// result_receivers, group_receivers: the replication id (= worker
        /// or member id).
        pub const RID: &str = "rid";
        /// The group id (group_table, member_table, group_receivers).
        pub const GROUP: &str = "group";
        /// parent_table: the parent's job id, as its results carry it.
        pub const PARENT_JOB: &str = "parent_job";
        /// relay_table, detour_table: the member id a detour carries.
        pub const MEMBER: &str = "member";
        /// priority_to_queue's key: the header's priority class.
        pub const PRIORITY: &str = "priority";
    }

    /// Action parameters.
    pub mod param {
        /// set_job: n.
        pub const WORKER_COUNT: &str = "worker_count";
        /// set_job: first slot.
        pub const POOL_BASE: &str = "pool_base";
        /// set_job: slots.
        pub const POOL_SIZE: &str = "pool_size";
        /// set_job: K.
        pub const ELEMENTS: &str = "elements";
        /// set_job: membership generation.
        pub const GENERATION: &str = "generation";
        /// set_job: multicast group (job id + 1).
        pub const MCAST_GRP: &str = "mcast_grp";
        /// set_job: the install's incarnation.
        pub const INCARNATION: &str = "incarnation";
        /// set_worker: worker id.
        pub const WORKER: &str = "worker";
        /// set_receiver: the worker's MAC.
        pub const DST_MAC: &str = "dst_mac";
        /// set_receiver: the worker's IPv4 address.
        pub const DST_ADDR: &str = "dst_addr";
        /// set_receiver: the worker's UDP port.
        pub const DST_PORT: &str = "dst_port";
        /// set_member: member id; set_upstream: this switch's member id in
        /// the parent's job.
        pub const MEMBER: &str = "member";
        /// from_parent: the local job the parent's result is for.
        pub const JOB: &str = "job";
        /// set_upstream: the parent's job id.
        pub const PARENT_JOB: &str = "parent_job";
        /// set_upstream: the parent's data-plane MAC.
        pub const PARENT_MAC: &str = "parent_mac";
        /// set_upstream: the parent's data-plane IPv4 address.
        pub const PARENT_ADDR: &str = "parent_addr";
        /// set_upstream: the parent's data-plane UDP port.
        pub const PARENT_PORT: &str = "parent_port";
        /// set_upstream, relay_to, take_detour: the switch port the packet
        /// leaves by.
        pub const EGRESS_PORT: &str = "egress_port";
        /// set_job: the job takes detours (1) or not (0).
        pub const DETOURS: &str = "detours";
        /// set_job: the members that are switches, one bit each.
        pub const CHILD_SWITCHES: &str = "child_switches";
        /// set_upstream: the job has an auxiliary path (1) or not (0).
        pub const AUX: &str = "aux";
        /// set_upstream: the auxiliary path's first switch's MAC.
        pub const VIA_MAC: &str = "via_mac";
        /// set_upstream: ... its IPv4 address.
        pub const VIA_ADDR: &str = "via_addr";
        /// set_upstream: ... its UDP port.
        pub const VIA_PORT: &str = "via_port";
        /// set_upstream: the switch port towards it.
        pub const VIA_EGRESS_PORT: &str = "via_egress_port";
        /// set_upstream: PRIMARY_BUSY_BOUND.
        pub const BUSY_BOUND: &str = "busy_bound";
        /// set_upstream: AUXILIARY_QUEUE_LENGTH.
        pub const QUEUE_LENGTH: &str = "queue_length";
        /// relay_to: the entry's relay_packets cell.
        pub const INDEX: &str = "index";
        /// relay_to's endpoint parameters' prefix: next_mac, next_addr,
        /// next_port (the next hop).
        pub const NEXT: &str = "next";
        /// take_detour's: member_mac, member_addr, member_port (the
        /// member's own endpoint).
        pub const MEMBER_ENDPOINT: &str = "member";
        /// set_queue's egress queue.
        pub const QUEUE: &str = "queue";
    }

    /// inagg packets reaching the switch logic, index 0.
    pub const RX: &str = "InaggIngress.rx";
    /// Drops by reason, indexed like `DropReason::ALL`.
    pub const DROPS: &str = "InaggIngress.drops";
    /// Per job id: admitted contributions.
    pub const JOB_CONTRIBUTIONS: &str = "InaggIngress.job_contributions";
    /// Per job id: sets completed.
    pub const JOB_RESULTS: &str = "InaggIngress.job_results";
    /// Per job id: results resent by unicast.
    pub const JOB_RESENT_RESULTS: &str = "InaggIngress.job_resent_results";
    /// Per job id: queries admitted (docs/PROTOCOL.md, "Loss recovery").
    pub const JOB_QUERIES: &str = "InaggIngress.job_queries";
    /// Per job id: retransmissions to incomplete sets.
    pub const JOB_DUPLICATES: &str = "InaggIngress.job_duplicates";
    /// Per job id: packets dropped by the job's checks.
    pub const JOB_DROPPED: &str = "InaggIngress.job_dropped";
    /// Per job id: partial sums sent to the parent switch.
    pub const JOB_UPSTREAM: &str = "InaggIngress.job_upstream";
    /// Per job id: partial sums sent to the parent again.
    pub const JOB_UPSTREAM_RESENT: &str = "InaggIngress.job_upstream_resent";
    /// Per job id: partial sums sent by the auxiliary path.
    pub const JOB_DETOURS_SENT: &str = "InaggIngress.job_detours_sent";
    /// Per job id: detours admitted as a member's contribution.
    pub const JOB_DETOURS_TAKEN: &str = "InaggIngress.job_detours_taken";
    /// Detours forwarded by relay entries, index 0.
    pub const RELAYED: &str = "InaggIngress.relayed";
    /// ... by relay entry (relay_to's `index`).
    pub const RELAY_PACKETS: &str = "InaggIngress.relay_packets";
    /// Results and group datagram copies sent, index 0.
    pub const TX: &str = "InaggEgress.tx";
    /// Per group id: group datagrams admitted.
    pub const GROUP_PACKETS: &str = "InaggIngress.group_packets";
    /// Per group id: copies of them sent.
    pub const GROUP_COPIES: &str = "InaggEgress.group_copies";

    /// Worker bitmap per shadow set: 2 * SLOTS cells.
    pub const BITMAP: &str = "InaggIngress.aggregate.bitmap";
    /// The accumulator registers, one per element: `acc_00` ... (K of them).
    pub const ACCUMULATOR_PREFIX: &str = "InaggIngress.aggregate.acc_";
}

/// Reads a binary P4Info (p4c's `--p4runtime-files x.p4info.bin`).
pub fn load(path: &Path) -> Result<P4Info> {
    let err = |message: String| ControlError::Config {
        path: path.display().to_string(),
        message,
    };
    let bytes = crate::files::read_limited(path, crate::files::PROGRAM_LIMIT)
        .map_err(|e| err(format!("cannot read: {e}")))?;
    if looks_like_text(&bytes) {
        return Err(err(
            "this is a text P4Info; pass the binary one (inagg.p4info.bin, written by p4/build.sh \
             beside inagg.p4info.txt)"
                .into(),
        ));
    }
    let info =
        P4Info::decode(bytes.as_slice()).map_err(|e| err(format!("not a binary P4Info: {e}")))?;
    if info.tables.is_empty() && info.actions.is_empty() {
        return Err(err(
            "not a binary P4Info: it has no tables and no actions".into()
        ));
    }
    Ok(info)
}

/// Protobuf text format (`pkg_info {`, `# comment`, `tables {`) rather than
/// the binary encoding.
fn looks_like_text(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(256)];
    !head.is_empty()
        && head
            .iter()
            .all(|&b| b.is_ascii_graphic() || b.is_ascii_whitespace())
        && (head.starts_with(b"pkg_info") || head.starts_with(b"#") || head.starts_with(b"tables"))
}

/// A match field or an action parameter: its id and width in bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// Match field id or parameter id.
    pub id: u32,
    /// Width in bits.
    pub bitwidth: u32,
}

/// `InaggIngress.admission.job_table`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobTable {
    /// Table id.
    pub id: u32,
    /// Entries it holds at most.
    pub size: i64,
    /// Key `job`.
    pub job: Field,
    /// Action `set_job`.
    pub set_job: SetJob,
}

/// `InaggIngress.admission.set_job`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetJob {
    /// Action id.
    pub id: u32,
    /// n.
    pub worker_count: Field,
    /// First slot.
    pub pool_base: Field,
    /// Slots.
    pub pool_size: Field,
    /// K.
    pub elements: Field,
    /// Membership generation.
    pub generation: Field,
    /// Multicast group.
    pub mcast_grp: Field,
    /// Incarnation.
    pub incarnation: Field,
    /// Whether the job takes detours.
    pub detours: Field,
    /// The members that are switches.
    pub child_switches: Field,
}

/// `InaggIngress.admission.worker_table`, and
/// `InaggIngress.group_relay.member_table`, which has its shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerTable {
    /// Table id.
    pub id: u32,
    /// Entries it holds at most.
    pub size: i64,
    /// Key `job` (worker_table) or `group` (member_table): who the
    /// endpoint belongs to.
    pub job: Field,
    /// Key `ingress_port`.
    pub ingress_port: Field,
    /// Key `src_addr`.
    pub src_addr: Field,
    /// Key `src_port`.
    pub src_port: Field,
    /// Action `set_worker`.
    pub set_worker: SetWorker,
}

/// `InaggIngress.admission.set_worker` (and `group_relay.set_member`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetWorker {
    /// Action id.
    pub id: u32,
    /// Worker (or member) id.
    pub worker: Field,
}

/// `InaggEgress.result_rewrite.result_receivers`, and
/// `InaggEgress.group_rewrite.group_receivers`, which has its shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultReceivers {
    /// Table id.
    pub id: u32,
    /// Entries it holds at most.
    pub size: i64,
    /// Key `job` (result_receivers) or `group` (group_receivers).
    pub job: Field,
    /// Key `rid`.
    pub rid: Field,
    /// Action `set_receiver`.
    pub set_receiver: SetReceiver,
}

/// `InaggEgress.result_rewrite.set_receiver` (and
/// `group_rewrite.set_member_address`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetReceiver {
    /// Action id.
    pub id: u32,
    /// MAC.
    pub dst_mac: Field,
    /// IPv4 address.
    pub dst_addr: Field,
    /// UDP port.
    pub dst_port: Field,
}

/// `InaggIngress.group_relay.group_table`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupTable {
    /// Table id.
    pub id: u32,
    /// Entries it holds at most.
    pub size: i64,
    /// Key `group`.
    pub group: Field,
    /// Action `set_group`: its id.
    pub set_group: u32,
    /// set_group's `mcast_grp`: the PRE group.
    pub mcast_grp: Field,
}

/// `InaggIngress.admission.upstream_table`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTable {
    /// Table id.
    pub id: u32,
    /// Entries it holds at most.
    pub size: i64,
    /// Key `job`.
    pub job: Field,
    /// Action `set_upstream`.
    pub set_upstream: SetUpstream,
}

/// `InaggIngress.admission.set_upstream`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetUpstream {
    /// Action id.
    pub id: u32,
    /// The parent's job id.
    pub parent_job: Field,
    /// This switch's member id in it.
    pub member: Field,
    /// The parent's MAC.
    pub parent_mac: Field,
    /// The parent's IPv4 address.
    pub parent_addr: Field,
    /// The parent's UDP port.
    pub parent_port: Field,
    /// The switch port towards the parent.
    pub egress_port: Field,
    /// Whether there is an auxiliary path.
    pub aux: Field,
    /// Its first switch: MAC, IPv4 address, UDP port, the port towards it.
    pub via_mac: Field,
    /// See `via_mac`.
    pub via_addr: Field,
    /// See `via_mac`.
    pub via_port: Field,
    /// See `via_mac`.
    pub via_egress_port: Field,
    /// PRIMARY_BUSY_BOUND.
    pub busy_bound: Field,
    /// AUXILIARY_QUEUE_LENGTH.
    pub queue_length: Field,
}

/// `InaggIngress.admission.relay_table` and `detour_table`: keyed on (job,
/// ingress port, source address, source port, member id); the action names
/// an endpoint (the next hop, or the member's own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HopTable {
    /// Table id.
    pub id: u32,
    /// Entries it holds at most.
    pub size: i64,
    /// Key `job`.
    pub job: Field,
    /// Key `ingress_port`.
    pub ingress_port: Field,
    /// Key `src_addr`.
    pub src_addr: Field,
    /// Key `src_port`.
    pub src_port: Field,
    /// Key `member`.
    pub member: Field,
    /// Action `relay_to` or `take_detour`.
    pub action: HopAction,
}

/// `relay_to` (PREFIX next) and `take_detour` (PREFIX member).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HopAction {
    /// Action id.
    pub id: u32,
    /// relay_to's `index`, its relay_packets cell; none for take_detour.
    pub index: Option<Field>,
    /// `PREFIX_mac`.
    pub mac: Field,
    /// `PREFIX_addr`.
    pub addr: Field,
    /// `PREFIX_port`.
    pub port: Field,
    /// `egress_port`.
    pub egress_port: Field,
}

/// `InaggIngress.queue_select.priority_to_queue`: class -> queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueTable {
    /// Table id.
    pub id: u32,
    /// Key `priority`.
    pub priority: Field,
    /// Action `set_queue`: its id.
    pub set_queue: u32,
    /// set_queue's `queue`.
    pub queue: Field,
}

/// An indexed counter array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counter {
    /// Counter id.
    pub id: u32,
    /// Cells.
    pub size: i64,
}

/// The counters of p4/README.md, "Counters".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counters {
    /// `InaggIngress.rx`.
    pub rx: Counter,
    /// `InaggIngress.drops`.
    pub drops: Counter,
    /// `InaggIngress.job_contributions`.
    pub job_contributions: Counter,
    /// `InaggIngress.job_results`.
    pub job_results: Counter,
    /// `InaggIngress.job_resent_results`.
    pub job_resent_results: Counter,
    /// `InaggIngress.job_duplicates`.
    pub job_duplicates: Counter,
    /// `InaggIngress.job_dropped`.
    pub job_dropped: Counter,
    /// `InaggIngress.job_upstream`.
    pub job_upstream: Counter,
    /// `InaggIngress.job_upstream_resent`.
    pub job_upstream_resent: Counter,
    /// `InaggIngress.job_detours_sent`.
    pub job_detours_sent: Counter,
    /// `InaggIngress.job_detours_taken`.
    pub job_detours_taken: Counter,
    /// `InaggIngress.job_queries`.
    pub job_queries: Counter,
    /// `InaggIngress.relayed`.
    pub relayed: Counter,
    /// `InaggIngress.relay_packets`.
    pub relay_packets: Counter,
    /// `InaggEgress.tx`.
    pub tx: Counter,
    /// `InaggIngress.group_packets`.
    pub group_packets: Counter,
    /// `InaggEgress.group_copies`.
    pub group_copies: Counter,
}

impl Counters {
    /// The per-job counters, in `JobCounters` field order.
    pub fn per_job(&self) -> [Counter; 10] {
        [
            self.job_contributions,
            self.job_results,
            self.job_resent_results,
            self.job_duplicates,
            self.job_dropped,
            self.job_upstream,
            self.job_upstream_resent,
            self.job_detours_sent,
            self.job_detours_taken,
            self.job_queries,
        ]
    }
}

/// Everything the control plane needs from a P4Info, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    /// Jobs.
    pub job_table: JobTable,
    /// Workers (ingress).
    pub worker_table: WorkerTable,
    /// Receivers of multicast copies (egress).
    pub result_receivers: ResultReceivers,
    /// Groups that relay group datagrams.
    pub group_table: GroupTable,
    /// Their members (ingress).
    pub member_table: WorkerTable,
    /// Receivers of group datagram copies (egress).
    pub group_receivers: ResultReceivers,
    /// Tree jobs' parents, as their results arrive: (parent job, ingress
    /// port, address, UDP port) -> the local job (worker_table's shape).
    pub parent_table: WorkerTable,
    /// Tree jobs' parents, as their partial sums leave.
    pub upstream_table: UpstreamTable,
    /// Relay entries: detours forwarded to the next hop.
    pub relay_table: HopTable,
    /// Jobs' detours: taken as a member's contribution.
    pub detour_table: HopTable,
    /// Priority class -> egress queue.
    pub priority_to_queue: QueueTable,
    /// Counters.
    pub counters: Counters,
    /// Compiled SLOTS: the size of the bitmap register / 2.
    pub slots: u32,
    /// Compiled K: the number of accumulator registers.
    pub elements: u16,
}

impl Schema {
    /// Resolves every name of [`names`] in `info`. `source` says where the
    /// P4Info came from, for errors.
    pub fn resolve(info: &P4Info, source: &str) -> Result<Schema> {
        let l = Lookup { info, source };
        use names::{key, param};

        let t = l.table(names::JOB_TABLE)?;
        let a = l.action(t, names::SET_JOB)?;
        let job_table = JobTable {
            id: l.table_id(t),
            size: t.size,
            job: l.exact(t, key::JOB)?,
            set_job: SetJob {
                id: l.action_id(a),
                worker_count: l.param(a, param::WORKER_COUNT)?,
                pool_base: l.param(a, param::POOL_BASE)?,
                pool_size: l.param(a, param::POOL_SIZE)?,
                elements: l.param(a, param::ELEMENTS)?,
                generation: l.param(a, param::GENERATION)?,
                mcast_grp: l.param(a, param::MCAST_GRP)?,
                incarnation: l.param(a, param::INCARNATION)?,
                detours: l.param(a, param::DETOURS)?,
                child_switches: l.param(a, param::CHILD_SWITCHES)?,
            },
        };

        let worker_table = l.endpoint_table(
            names::WORKER_TABLE,
            key::JOB,
            names::SET_WORKER,
            param::WORKER,
        )?;
        let result_receivers =
            l.receivers_table(names::RESULT_RECEIVERS, key::JOB, names::SET_RECEIVER)?;

        let t = l.table(names::GROUP_TABLE)?;
        let a = l.action(t, names::SET_GROUP)?;
        let group_table = GroupTable {
            id: l.table_id(t),
            size: t.size,
            group: l.exact(t, key::GROUP)?,
            set_group: l.action_id(a),
            mcast_grp: l.param(a, param::MCAST_GRP)?,
        };
        let member_table = l.endpoint_table(
            names::MEMBER_TABLE,
            key::GROUP,
            names::SET_MEMBER,
            param::MEMBER,
        )?;
        let group_receivers = l.receivers_table(
            names::GROUP_RECEIVERS,
            key::GROUP,
            names::SET_MEMBER_ADDRESS,
        )?;

        let parent_table = l.endpoint_table(
            names::PARENT_TABLE,
            key::PARENT_JOB,
            names::FROM_PARENT,
            param::JOB,
        )?;
        let t = l.table(names::UPSTREAM_TABLE)?;
        let a = l.action(t, names::SET_UPSTREAM)?;
        let upstream_table = UpstreamTable {
            id: l.table_id(t),
            size: t.size,
            job: l.exact(t, key::JOB)?,
            set_upstream: SetUpstream {
                id: l.action_id(a),
                parent_job: l.param(a, param::PARENT_JOB)?,
                member: l.param(a, param::MEMBER)?,
                parent_mac: l.param(a, param::PARENT_MAC)?,
                parent_addr: l.param(a, param::PARENT_ADDR)?,
                parent_port: l.param(a, param::PARENT_PORT)?,
                egress_port: l.param(a, param::EGRESS_PORT)?,
                aux: l.param(a, param::AUX)?,
                via_mac: l.param(a, param::VIA_MAC)?,
                via_addr: l.param(a, param::VIA_ADDR)?,
                via_port: l.param(a, param::VIA_PORT)?,
                via_egress_port: l.param(a, param::VIA_EGRESS_PORT)?,
                busy_bound: l.param(a, param::BUSY_BOUND)?,
                queue_length: l.param(a, param::QUEUE_LENGTH)?,
            },
        };
        let relay_table = l.hop_table(names::RELAY_TABLE, names::RELAY_TO, param::NEXT, true)?;
        let detour_table = l.hop_table(
            names::DETOUR_TABLE,
            names::TAKE_DETOUR,
            param::MEMBER_ENDPOINT,
            false,
        )?;

        let t = l.table(names::PRIORITY_TO_QUEUE)?;
        let a = l.action(t, names::SET_QUEUE)?;
        let priority_to_queue = QueueTable {
            id: l.table_id(t),
            priority: l.exact(t, key::PRIORITY)?,
            set_queue: l.action_id(a),
            queue: l.param(a, param::QUEUE)?,
        };

        let counters = Counters {
            rx: l.counter(names::RX)?,
            drops: l.counter(names::DROPS)?,
            job_contributions: l.counter(names::JOB_CONTRIBUTIONS)?,
            job_results: l.counter(names::JOB_RESULTS)?,
            job_resent_results: l.counter(names::JOB_RESENT_RESULTS)?,
            job_duplicates: l.counter(names::JOB_DUPLICATES)?,
            job_dropped: l.counter(names::JOB_DROPPED)?,
            job_upstream: l.counter(names::JOB_UPSTREAM)?,
            job_upstream_resent: l.counter(names::JOB_UPSTREAM_RESENT)?,
            job_detours_sent: l.counter(names::JOB_DETOURS_SENT)?,
            job_detours_taken: l.counter(names::JOB_DETOURS_TAKEN)?,
            job_queries: l.counter(names::JOB_QUERIES)?,
            relayed: l.counter(names::RELAYED)?,
            relay_packets: l.counter(names::RELAY_PACKETS)?,
            tx: l.counter(names::TX)?,
            group_packets: l.counter(names::GROUP_PACKETS)?,
            group_copies: l.counter(names::GROUP_COPIES)?,
        };

        let bitmap = info
            .registers
            .iter()
            .find(|r| name_of(r.preamble.as_ref()) == names::BITMAP)
            .ok_or_else(|| l.error(format!("register {} not in P4Info", names::BITMAP)))?;
        let slots = u32::try_from(bitmap.size / 2)
            .ok()
            .filter(|&s| s > 0 && bitmap.size % 2 == 0)
            .ok_or_else(|| {
                l.error(format!(
                    "register {} has {} cells; expected 2 per slot",
                    names::BITMAP,
                    bitmap.size
                ))
            })?;
        let accumulators = info
            .registers
            .iter()
            .filter(|r| name_of(r.preamble.as_ref()).starts_with(names::ACCUMULATOR_PREFIX))
            .count();
        let elements = u16::try_from(accumulators)
            .ok()
            .filter(|&k| k > 0)
            .ok_or_else(|| {
                l.error(format!(
                    "{accumulators} registers named {}*: cannot tell K",
                    names::ACCUMULATOR_PREFIX
                ))
            })?;

        Ok(Schema {
            job_table,
            worker_table,
            result_receivers,
            group_table,
            member_table,
            group_receivers,
            parent_table,
            upstream_table,
            relay_table,
            detour_table,
            priority_to_queue,
            counters,
            slots,
            elements,
        })
    }
}

fn name_of(p: Option<&cfg::Preamble>) -> &str {
    p.map_or("", |p| p.name.as_str())
}

fn id_of(p: Option<&cfg::Preamble>) -> u32 {
    p.map_or(0, |p| p.id)
}

/// Name lookups with errors that say what is missing and where from.
struct Lookup<'a> {
    info: &'a P4Info,
    source: &'a str,
}

impl Lookup<'_> {
    fn error(&self, message: String) -> ControlError {
        ControlError::P4Info {
            source_name: self.source.to_string(),
            message,
        }
    }

    fn table(&self, name: &str) -> Result<&cfg::Table> {
        self.info
            .tables
            .iter()
            .find(|t| name_of(t.preamble.as_ref()) == name)
            .ok_or_else(|| {
                self.error(format!(
                    "table {name} not in P4Info; is the pipeline inagg's p4/v1model?"
                ))
            })
    }

    /// A table keyed on (owner, ingress port, source address, source port)
    /// whose action gives the endpoint's id: worker_table, member_table.
    fn endpoint_table(
        &self,
        table: &str,
        owner: &str,
        action: &str,
        id_param: &str,
    ) -> Result<WorkerTable> {
        use names::key;
        let t = self.table(table)?;
        let a = self.action(t, action)?;
        Ok(WorkerTable {
            id: self.table_id(t),
            size: t.size,
            job: self.exact(t, owner)?,
            ingress_port: self.exact(t, key::INGRESS_PORT)?,
            src_addr: self.exact(t, key::SRC_ADDR)?,
            src_port: self.exact(t, key::SRC_PORT)?,
            set_worker: SetWorker {
                id: self.action_id(a),
                worker: self.param(a, id_param)?,
            },
        })
    }

    /// relay_table or detour_table: keyed on (job, port, address, UDP port,
    /// member); the action's endpoint parameters are `PREFIX_mac`,
    /// `PREFIX_addr`, `PREFIX_port` and `egress_port`, and relay_to's also
    /// `index`.
    fn hop_table(
        &self,
        table: &str,
        action: &str,
        prefix: &str,
        indexed: bool,
    ) -> Result<HopTable> {
        use names::{key, param};
        let t = self.table(table)?;
        let a = self.action(t, action)?;
        let p = |suffix: &str| self.param(a, &format!("{prefix}_{suffix}"));
        Ok(HopTable {
            id: self.table_id(t),
            size: t.size,
            job: self.exact(t, key::JOB)?,
            ingress_port: self.exact(t, key::INGRESS_PORT)?,
            src_addr: self.exact(t, key::SRC_ADDR)?,
            src_port: self.exact(t, key::SRC_PORT)?,
            member: self.exact(t, key::MEMBER)?,
            action: HopAction {
                id: self.action_id(a),
                index: if indexed {
                    Some(self.param(a, param::INDEX)?)
                } else {
                    None
                },
                mac: p("mac")?,
                addr: p("addr")?,
                port: p("port")?,
                egress_port: self.param(a, param::EGRESS_PORT)?,
            },
        })
    }

    /// An egress table keyed on (owner, replication id) whose action gives
    /// the copy's destination: result_receivers, group_receivers.
    fn receivers_table(&self, table: &str, owner: &str, action: &str) -> Result<ResultReceivers> {
        use names::{key, param};
        let t = self.table(table)?;
        let a = self.action(t, action)?;
        Ok(ResultReceivers {
            id: self.table_id(t),
            size: t.size,
            job: self.exact(t, owner)?,
            rid: self.exact(t, key::RID)?,
            set_receiver: SetReceiver {
                id: self.action_id(a),
                dst_mac: self.param(a, param::DST_MAC)?,
                dst_addr: self.param(a, param::DST_ADDR)?,
                dst_port: self.param(a, param::DST_PORT)?,
            },
        })
    }

    fn table_id(&self, t: &cfg::Table) -> u32 {
        id_of(t.preamble.as_ref())
    }

    fn action_id(&self, a: &cfg::Action) -> u32 {
        id_of(a.preamble.as_ref())
    }

    fn exact(&self, t: &cfg::Table, name: &str) -> Result<Field> {
        let table = name_of(t.preamble.as_ref());
        let f = t
            .match_fields
            .iter()
            .find(|f| f.name == name)
            .ok_or_else(|| self.error(format!("table {table} has no match field {name}")))?;
        let exact = cfg::match_field::MatchType::Exact as i32;
        if f.r#match != Some(cfg::match_field::Match::MatchType(exact)) {
            return Err(self.error(format!(
                "match field {name} of table {table} is not an exact match"
            )));
        }
        self.width(f.bitwidth, &format!("match field {name} of table {table}"))
            .map(|bitwidth| Field { id: f.id, bitwidth })
    }

    fn action(&self, t: &cfg::Table, name: &str) -> Result<&cfg::Action> {
        let a = self
            .info
            .actions
            .iter()
            .find(|a| name_of(a.preamble.as_ref()) == name)
            .ok_or_else(|| self.error(format!("action {name} not in P4Info")))?;
        let id = id_of(a.preamble.as_ref());
        if !t.action_refs.iter().any(|r| r.id == id) {
            return Err(self.error(format!(
                "table {} does not list action {name}",
                name_of(t.preamble.as_ref())
            )));
        }
        Ok(a)
    }

    fn param(&self, a: &cfg::Action, name: &str) -> Result<Field> {
        let action = name_of(a.preamble.as_ref());
        let p = a
            .params
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| self.error(format!("action {action} has no parameter {name}")))?;
        self.width(p.bitwidth, &format!("parameter {name} of action {action}"))
            .map(|bitwidth| Field { id: p.id, bitwidth })
    }

    fn width(&self, bitwidth: i32, what: &str) -> Result<u32> {
        u32::try_from(bitwidth)
            .ok()
            .filter(|w| (1..=64).contains(w))
            .ok_or_else(|| {
                self.error(format!(
                    "{what} is {bitwidth} bits wide; the control plane handles 1 to 64"
                ))
            })
    }

    fn counter(&self, name: &str) -> Result<Counter> {
        let c = self
            .info
            .counters
            .iter()
            .find(|c| name_of(c.preamble.as_ref()) == name)
            .ok_or_else(|| self.error(format!("counter {name} not in P4Info")))?;
        if c.size < 1 {
            return Err(self.error(format!("counter {name} has {} cells", c.size)));
        }
        Ok(Counter {
            id: id_of(c.preamble.as_ref()),
            size: c.size,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bmv2::testing::v1model_p4info;

    fn resolve(info: &P4Info) -> Result<Schema> {
        Schema::resolve(info, "test.p4info.bin")
    }

    #[test]
    fn resolves_the_v1model_program() {
        let info = v1model_p4info(64, 8192);
        let s = resolve(&info).unwrap();
        assert_eq!((s.slots, s.elements), (8192, 64));
        let by_name = |name: &str| {
            info.tables
                .iter()
                .find(|t| t.preamble.as_ref().unwrap().name == name)
                .unwrap()
                .clone()
        };
        let jt = by_name("InaggIngress.admission.job_table");
        assert_eq!(s.job_table.id, jt.preamble.unwrap().id);
        assert_eq!(s.job_table.job.id, jt.match_fields[0].id);
        assert_eq!(s.job_table.job.bitwidth, 16);
        assert_eq!(s.worker_table.ingress_port.bitwidth, 9);
        assert_eq!(s.worker_table.src_addr.bitwidth, 32);
        assert_eq!(s.result_receivers.set_receiver.dst_mac.bitwidth, 48);
        assert_eq!(s.job_table.set_job.incarnation.bitwidth, 32);
        assert_eq!(s.counters.drops.size, 16);
        assert_eq!((s.job_table.size, s.worker_table.size), (1024, 8192));
        assert_eq!(s.counters.job_results.size, 65_536);
        // Ids are p4c's: the kind in the top byte.
        assert_eq!(s.job_table.id >> 24, 0x02);
        assert_eq!(s.job_table.set_job.id >> 24, 0x01);
        assert_eq!(s.counters.tx.id >> 24, 0x12);
        let small = resolve(&v1model_p4info(32, 1024)).unwrap();
        assert_eq!((small.slots, small.elements), (1024, 32));
    }

    fn edit(f: impl FnOnce(&mut P4Info)) -> String {
        let mut info = v1model_p4info(64, 8192);
        f(&mut info);
        resolve(&info).unwrap_err().to_string()
    }

    fn table<'a>(info: &'a mut P4Info, name: &str) -> &'a mut cfg::Table {
        info.tables
            .iter_mut()
            .find(|t| t.preamble.as_ref().unwrap().name == name)
            .unwrap()
    }

    fn action<'a>(info: &'a mut P4Info, name: &str) -> &'a mut cfg::Action {
        info.actions
            .iter_mut()
            .find(|a| a.preamble.as_ref().unwrap().name == name)
            .unwrap()
    }

    #[test]
    fn missing_names_are_errors_that_name_them() {
        let msg = edit(|i| {
            i.tables
                .retain(|t| !t.preamble.as_ref().unwrap().name.ends_with("job_table"))
        });
        assert_eq!(
            msg,
            "table InaggIngress.admission.job_table not in P4Info; is the pipeline inagg's \
             p4/v1model? (P4Info from test.p4info.bin)"
        );
        let msg = edit(|i| {
            table(i, "InaggIngress.admission.worker_table")
                .match_fields
                .retain(|f| f.name != "src_port")
        });
        assert!(
            msg.starts_with(
                "table InaggIngress.admission.worker_table has no match field src_port"
            ),
            "{msg}"
        );
        let msg = edit(|i| {
            action(i, "InaggIngress.admission.set_job")
                .params
                .retain(|p| p.name != "incarnation")
        });
        assert!(
            msg.starts_with("action InaggIngress.admission.set_job has no parameter incarnation"),
            "{msg}"
        );
        let msg = edit(|i| {
            i.actions
                .retain(|a| !a.preamble.as_ref().unwrap().name.ends_with("set_receiver"))
        });
        assert!(
            msg.starts_with("action InaggEgress.result_rewrite.set_receiver not in P4Info"),
            "{msg}"
        );
        let msg = edit(|i| {
            i.counters
                .retain(|c| c.preamble.as_ref().unwrap().name != "InaggEgress.tx")
        });
        assert!(
            msg.starts_with("counter InaggEgress.tx not in P4Info"),
            "{msg}"
        );
        let msg = edit(|i| {
            i.registers
                .retain(|r| !r.preamble.as_ref().unwrap().name.contains(".acc_"))
        });
        assert!(
            msg.contains("registers named InaggIngress.aggregate.acc_*"),
            "{msg}"
        );
        let msg = edit(|i| {
            i.registers
                .retain(|r| !r.preamble.as_ref().unwrap().name.ends_with(".bitmap"))
        });
        assert!(
            msg.starts_with("register InaggIngress.aggregate.bitmap not in P4Info"),
            "{msg}"
        );
    }

    #[test]
    fn wrong_kinds_are_errors() {
        let msg = edit(|i| {
            let t = table(i, "InaggIngress.admission.job_table");
            t.match_fields[0].r#match = Some(cfg::match_field::Match::MatchType(
                cfg::match_field::MatchType::Ternary as i32,
            ));
        });
        assert!(
            msg.contains(
                "match field job of table InaggIngress.admission.job_table is not an exact match"
            ),
            "{msg}"
        );
        let msg = edit(|i| {
            table(i, "InaggIngress.admission.job_table")
                .action_refs
                .clear()
        });
        assert!(
            msg.starts_with(
                "table InaggIngress.admission.job_table does not list action InaggIngress.admission.set_job"
            ),
            "{msg}"
        );
        let msg = edit(|i| {
            action(i, "InaggEgress.result_rewrite.set_receiver").params[0].bitwidth = 128;
        });
        assert!(msg.contains("is 128 bits wide"), "{msg}");
    }

    #[test]
    fn loads_binary_and_refuses_text_and_junk() {
        let dir = std::env::temp_dir().join(format!("inagg-p4info-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bin = dir.join("inagg.p4info.bin");
        let info = v1model_p4info(64, 8192);
        std::fs::write(&bin, info.encode_to_vec()).unwrap();
        assert_eq!(load(&bin).unwrap(), info);

        let txt = dir.join("inagg.p4info.txt");
        std::fs::write(&txt, "pkg_info {\n  arch: \"v1model\"\n}\ntables {\n").unwrap();
        let msg = load(&txt).unwrap_err().to_string();
        assert!(
            msg.contains("text P4Info") && msg.contains("inagg.p4info.bin"),
            "{msg}"
        );

        let junk = dir.join("junk.bin");
        std::fs::write(&junk, [0xff, 0xff, 0xff]).unwrap();
        let msg = load(&junk).unwrap_err().to_string();
        assert!(msg.contains("not a binary P4Info"), "{msg}");

        let msg = load(&dir.join("missing.bin")).unwrap_err().to_string();
        assert!(msg.contains("missing.bin: cannot read"), "{msg}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The names here are the ones p4/README.md documents and the v1model
    /// sources declare.
    #[test]
    fn names_match_the_p4_docs_and_sources() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../p4");
        let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
        let mut sources = String::new();
        for f in std::fs::read_dir(format!("{root}/v1model")).unwrap() {
            sources += &std::fs::read_to_string(f.unwrap().path()).unwrap();
        }
        use names::{key, param};
        for name in [
            names::JOB_TABLE,
            names::SET_JOB,
            names::WORKER_TABLE,
            names::SET_WORKER,
            names::RESULT_RECEIVERS,
            names::SET_RECEIVER,
            names::RX,
            names::DROPS,
            names::JOB_CONTRIBUTIONS,
            names::JOB_RESULTS,
            names::JOB_RESENT_RESULTS,
            names::JOB_QUERIES,
            names::JOB_DUPLICATES,
            names::JOB_DROPPED,
            names::JOB_UPSTREAM,
            names::JOB_UPSTREAM_RESENT,
            names::TX,
            names::PARENT_TABLE,
            names::FROM_PARENT,
            names::UPSTREAM_TABLE,
            names::SET_UPSTREAM,
        ] {
            assert!(
                readme.contains(&format!("`{name}`")),
                "{name} not in p4/README.md"
            );
            let local = name.rsplit('.').next().unwrap();
            assert!(sources.contains(local), "{local} not in p4/v1model");
        }
        for k in [
            key::JOB,
            key::INGRESS_PORT,
            key::SRC_ADDR,
            key::SRC_PORT,
            key::RID,
            key::PARENT_JOB,
        ] {
            assert!(sources.contains(&format!("@name(\"{k}\")")), "key {k}");
        }
        for p in [
            param::WORKER_COUNT,
            param::POOL_BASE,
            param::POOL_SIZE,
            param::ELEMENTS,
            param::GENERATION,
            param::MCAST_GRP,
            param::INCARNATION,
            param::DETOURS,
            param::CHILD_SWITCHES,
            param::WORKER,
            param::DST_MAC,
            param::DST_ADDR,
            param::DST_PORT,
            param::PARENT_JOB,
            param::PARENT_MAC,
            param::PARENT_ADDR,
            param::PARENT_PORT,
            param::EGRESS_PORT,
        ] {
            assert!(
                readme.contains(&format!("`{p}`")),
                "param {p} not in p4/README.md"
            );
        }
        assert!(readme.contains("`InaggIngress.aggregate.bitmap`"));
        assert!(readme.contains("`InaggIngress.aggregate.acc_*`"));
    }
}
