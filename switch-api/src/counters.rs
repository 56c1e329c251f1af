//! What the switch counts: packets in and out, drops by reason, and per-job
//! aggregation activity. Serialisable so the control plane can show them.

use serde::{Deserialize, Serialize};

/// Why the switch dropped a packet. Every drop is counted under one reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// Not a valid inagg packet (length, version, kind code, reserved bits).
    Malformed,
    /// A valid packet that a switch does not accept (a result).
    NotContribution,
    /// No job with the packet's job id is installed.
    UnknownJob,
    /// The sender is not the worker (or group member) the packet names, or
    /// the id is out of range.
    UnknownWorker,
    /// The slot index is outside the job's pool.
    SlotOutOfPool,
    /// The element count differs from the job's K.
    WrongElements,
    /// The membership generation differs from the job's.
    StaleGeneration,
    /// A retransmission to a slot that is not complete yet (normal under loss).
    DuplicatePending,
    /// Dropped by the fault injector on the way in.
    InjectedIngress,
    /// Dropped by the fault injector on the way out (one per copy).
    InjectedEgress,
    /// A copy the raw-Ethernet (DPDK) backend cannot send: the worker's
    /// Ethernet address is not learned yet (it has sent nothing, answered
    /// no ARP), or the frame exceeds the port's MTU.
    Undeliverable,
    /// A copy tail-dropped by a full egress queue (ports with a line rate).
    QueueFull,
    /// A multicast datagram naming a group that is not installed.
    UnknownGroup,
    /// A result from a tree job's parent switch that no set waits for (a
    /// duplicate, a late copy of an earlier round, a slot or K that is not
    /// the job's).
    UnexpectedResult,
    /// A detour (kind 4) that no relay entry matches and no job admits
    /// from its sender for the member it names.
    UnknownRelay,
    /// A late copy of a round that already completed, from a member that
    /// has moved on (its next round overtook the copy) while others have
    /// not. At a job that takes detours also a copy of another round than
    /// the one its set is summing, or one that would start a bogus round.
    StaleRound,
}

impl DropReason {
    /// Every reason, in counter order.
    pub const ALL: [DropReason; 16] = [
        DropReason::Malformed,
        DropReason::NotContribution,
        DropReason::UnknownJob,
        DropReason::UnknownWorker,
        DropReason::SlotOutOfPool,
        DropReason::WrongElements,
        DropReason::StaleGeneration,
        DropReason::DuplicatePending,
        DropReason::InjectedIngress,
        DropReason::InjectedEgress,
        DropReason::Undeliverable,
        DropReason::QueueFull,
        DropReason::UnknownGroup,
        DropReason::UnexpectedResult,
        DropReason::UnknownRelay,
        DropReason::StaleRound,
    ];

    /// The snake_case name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed",
            DropReason::NotContribution => "not_contribution",
            DropReason::UnknownJob => "unknown_job",
            DropReason::UnknownWorker => "unknown_worker",
            DropReason::SlotOutOfPool => "slot_out_of_pool",
            DropReason::WrongElements => "wrong_elements",
            DropReason::StaleGeneration => "stale_generation",
            DropReason::DuplicatePending => "duplicate_pending",
            DropReason::InjectedIngress => "injected_ingress",
            DropReason::InjectedEgress => "injected_egress",
            DropReason::Undeliverable => "undeliverable",
            DropReason::QueueFull => "queue_full",
            DropReason::UnknownGroup => "unknown_group",
            DropReason::UnexpectedResult => "unexpected_result",
            DropReason::UnknownRelay => "unknown_relay",
            DropReason::StaleRound => "stale_round",
        }
    }
}

/// Switch-wide counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Datagrams that reached the switch logic.
    pub rx_packets: u64,
    /// Bytes of those datagrams.
    pub rx_bytes: u64,
    /// Datagrams sent (every multicast copy counts).
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Drops, indexed like [`DropReason::ALL`].
    pub drops: [u64; 16],
    /// Packets the fault injector duplicated.
    pub injected_duplicates: u64,
    /// Packets the fault injector reordered.
    pub injected_reorders: u64,
    /// Detours forwarded by the relay table.
    #[serde(default)]
    pub relayed: u64,
    /// Addresses the raw-Ethernet (DPDK) backend did not learn: its
    /// neighbour table was full and the switch had not asked for them
    /// (frames from many spoofed sources cannot push its workers out).
    #[serde(default)]
    pub neighbours_refused: u64,
    /// Of the injected drops, those of queries and statuses (docs/PROTOCOL.md,
    /// "Loss recovery"): they carry no values, so no retransmission of data
    /// is owed for them.
    #[serde(default)]
    pub injected_query_drops: u64,
    /// Of the injected drops, contributions dropped on the way in: each is
    /// owed exactly one retransmission by a worker that recovers by query
    /// (a lost result's copy is asked for, not sent for), so the
    /// retransmissions beyond these were spurious.
    #[serde(default)]
    pub injected_contribution_drops: u64,
}

impl Counters {
    /// Counts one drop.
    pub fn drop(&mut self, reason: DropReason) {
        self.drops[reason as usize] += 1;
    }

    /// Drops counted under `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops[reason as usize]
    }
}

/// Per-job counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobCounters {
    /// Contributions that passed the job's checks.
    pub contributions: u64,
    /// Slots completed (results multicast).
    pub results: u64,
    /// Stored results sent again to a worker that retransmitted.
    pub resent_results: u64,
    /// Retransmissions to a slot not yet complete (dropped).
    pub duplicates: u64,
    /// Tree jobs: partial sums sent up to the parent switch.
    #[serde(default)]
    pub upstream: u64,
    /// Tree jobs: partial sums sent up again because a member retransmitted
    /// while the tree's result was still on its way down.
    #[serde(default)]
    pub upstream_resent: u64,
    /// Tree jobs: partial sums (first sends and resends) that went up the
    /// auxiliary path as detours because the primary link was busy.
    #[serde(default)]
    pub detours_sent: u64,
    /// Contributions of members that arrived as detours.
    #[serde(default)]
    pub detours_taken: u64,
    /// Members' queries answered with a status (docs/PROTOCOL.md, "Loss
    /// recovery").
    #[serde(default)]
    pub queries: u64,
    /// Rounds' results re-announced by members and taken by a set that had
    /// lost its round (docs/PROTOCOL.md, "A switch that lost its state").
    #[serde(default)]
    pub announcements: u64,
    /// Announcements a set did not take: its round complete (the switch
    /// had not lost it) or another round under way there.
    #[serde(default)]
    pub announcements_ignored: u64,
    /// Complete rounds that members had left behind, taken over by a
    /// newer round (docs/PROTOCOL.md, "Slot state machine").
    #[serde(default)]
    pub taken_over: u64,
    /// Packets naming this job dropped by its checks (worker, slot, K, generation).
    pub dropped: u64,
}
