//! The aggregation switch proper: job table, aggregator memory and the slot
//! state machine of docs/PROTOCOL.md ("Switch semantics"). Pure: no I/O, so
//! every transition is unit-tested here and the same code serves the UDP
//! server, benchmarks and conformance vectors.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use inagg_wire::header::newer_id;
use inagg_wire::status::{Status, QUERY_NUDGE};
use inagg_wire::{payload, Kind, Packet, Repr, HEADER_LEN};

use inagg_switch_api::counters::{Counters, DropReason, JobCounters};
use inagg_switch_api::detour::{check_relay, AuxPath, RelayInfo, RelayKey, RelaySpec};
use inagg_switch_api::job::{
    check_group, detours_unrelayed, relay_meets_no_detour, validate_job, GroupInfo, GroupSpec,
    JobError, JobInfo, JobSpec, PoolMap, SwitchInfo, Upstream,
};
pub use inagg_switch_api::job::{SwitchConfig, DEFAULT_MEMORY};
pub use inagg_switch_api::queues::{check_queue, EGRESS_QUEUES};

/// One shadow set of one slot: what a Tofino program holds in registers.
#[derive(Debug, Clone, Default)]
struct SetState {
    /// Workers that have contributed to this set's current round.
    bitmap: u64,
    /// Contributions added since the set was last first-written.
    count: u16,
    /// Workers whose values the sum holds: 1 per worker, a child switch's
    /// count for its partial sum (the result's count field).
    weight: u16,
    /// Tree jobs: the local sum went to the parent switch and the tree's
    /// result has not come back yet.
    awaiting: bool,
    /// Max-reduced block exponent.
    exponent: u8,
    /// Packet id of the round (echoed in results).
    packet_id: u32,
    /// Priority class of the round's packets (echoed in results).
    priority: u8,
    /// Members whose queries about the round, complete, were answered
    /// with its stored result: once (`.0`), twice (`.1`). A member's
    /// queries get the result twice per round at most, then a status that
    /// says so (docs/PROTOCOL.md, "The amplification bound"). Cleared with
    /// the round, by its first contribution, an announcement or the
    /// parent's result.
    answered: (u64, u64),
}

/// A job installed on the switch with its pool's memory.
#[derive(Debug)]
struct Job {
    spec: JobSpec,
    /// `pool_size * 2` shadow sets, index `slot * 2 + set`.
    sets: Vec<SetState>,
    /// Accumulators, `elements` per shadow set, same indexing.
    values: Vec<i32>,
    counters: JobCounters,
}

/// What the switch does with one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Dropped and counted under this reason.
    Drop(DropReason),
    /// Added to its slot; the slot is not complete yet.
    Absorbed,
    /// Completed its slot: the result (written to the output buffer) goes to
    /// every worker of the job. Each copy's `worker` field names its receiver.
    Multicast {
        /// The job whose workers receive it.
        job: u16,
    },
    /// A group datagram (copied verbatim to the output buffer) goes to every
    /// member of the group but its sender.
    Replicate {
        /// The group.
        group: u16,
        /// The sender's member index (it gets no copy).
        sender: u16,
    },
    /// A query's status while the set holds the asker's contribution and
    /// waits for others (docs/PROTOCOL.md, "Loss recovery"): the status
    /// (written to the output buffer) goes unchanged, the asker's id in its
    /// worker field, to the asker and to every member whose bit is clear,
    /// so that a member whose contribution was lost asks about it at once
    /// instead of at its own timer.
    Nudge {
        /// The job whose members receive it.
        job: u16,
        /// The receivers' member ids, one bit each (bit i: member i).
        members: u64,
    },
    /// A retransmission to a completed slot: the stored result (written to the
    /// output buffer) goes back to the sender only.
    Unicast {
        /// The receiver.
        to: SocketAddr,
    },
    /// A tree job's slot is complete here: its partial sum (written to the
    /// output buffer as a contribution) goes up to the parent switch, or,
    /// when the job has an auxiliary path and the egress finds the primary
    /// link busy, to the auxiliary path as a detour (kind 4; the egress
    /// decides, as only it sees the queues).
    Upstream {
        /// The job (this switch's) whose partial sum it is.
        job: u16,
        /// The parent switch's data-plane endpoint.
        to: SocketAddr,
        /// The job's auxiliary path, if any.
        aux: Option<AuxPath>,
    },
    /// A detour matched by the relay table (copied verbatim to the output
    /// buffer) goes on to the next hop.
    Forward {
        /// The next hop's data-plane endpoint.
        to: SocketAddr,
    },
}

/// One entry of the multicast group table.
#[derive(Debug, Clone)]
struct Group {
    members: Vec<SocketAddr>,
    /// The job whose results it carries; `None`: made by hand.
    job: Option<u16>,
    packets: u64,
    copies: u64,
}

impl Group {
    fn owner(&self) -> String {
        self.job
            .map_or_else(|| "made by hand".to_string(), |j| format!("job {j}"))
    }
}

/// The software switch's state.
#[derive(Debug)]
pub struct Switch {
    config: SwitchConfig,
    jobs: BTreeMap<u16, Job>,
    /// The multicast group table: jobs' groups and groups made by hand.
    groups: BTreeMap<u16, Group>,
    /// The relay table: where detours go next, and how many went.
    relays: BTreeMap<RelayKey, RelayInfo>,
    counters: Counters,
    /// Egress queue of each priority class (the P4 `priority_to_queue`
    /// table); every class starts on queue 0.
    queues: [u8; 256],
}

impl Switch {
    /// An empty switch.
    pub fn new(config: SwitchConfig) -> Switch {
        Switch {
            config,
            jobs: BTreeMap::new(),
            groups: BTreeMap::new(),
            relays: BTreeMap::new(),
            counters: Counters::default(),
            queues: [0; 256],
        }
    }

    /// Maps a priority class to an egress queue (below [`EGRESS_QUEUES`]).
    pub fn set_queue(&mut self, class: u8, queue: u8) -> Result<(), JobError> {
        check_queue(queue)?;
        self.queues[usize::from(class)] = queue;
        Ok(())
    }

    /// The egress queue of a packet of priority class `class`.
    pub fn queue_of(&self, class: u8) -> u8 {
        self.queues[usize::from(class)]
    }

    /// The egress queue of a packet of class `class` of job `job`: the
    /// job's own map first, then the switch-wide one.
    pub fn queue_for(&self, job: u16, class: u8) -> u8 {
        self.jobs
            .get(&job)
            .and_then(|j| j.spec.queues.iter().find(|cq| cq.class == class))
            .map_or_else(|| self.queue_of(class), |cq| cq.queue)
    }

    /// The classes mapped to a queue other than 0, with their queues.
    pub fn queue_map(&self) -> Vec<crate::egress::ClassQueue> {
        (0..=u8::MAX)
            .filter(|&c| self.queue_of(c) != 0)
            .map(|class| crate::egress::ClassQueue {
                class,
                queue: self.queue_of(class),
            })
            .collect()
    }

    /// Its configuration.
    pub fn config(&self) -> SwitchConfig {
        self.config
    }

    /// Installs a job after checking it against the memory and the other jobs.
    pub fn create_job(&mut self, spec: JobSpec) -> Result<(), JobError> {
        let existing: Vec<&JobSpec> = self.jobs.values().map(|j| &j.spec).collect();
        validate_job(&spec, existing, self.config)?;
        self.check_detours_unrelayed(&spec)?;
        if let Some(g) = spec.group {
            self.check_group_free(g)?;
            self.groups.insert(
                g,
                Group {
                    members: spec.workers.clone(),
                    job: Some(spec.id),
                    packets: 0,
                    copies: 0,
                },
            );
        }
        let sets = spec.pool_size as usize * 2;
        let job = Job {
            sets: vec![SetState::default(); sets],
            values: vec![0; sets * usize::from(spec.elements)],
            counters: JobCounters::default(),
            spec,
        };
        self.jobs.insert(job.spec.id, job);
        Ok(())
    }

    /// Removes a job and frees its pool and its multicast group.
    pub fn delete_job(&mut self, id: u16) -> Result<JobSpec, JobError> {
        let spec = self
            .jobs
            .remove(&id)
            .map(|j| j.spec)
            .ok_or(JobError::UnknownJob { id })?;
        if let Some(g) = spec.group {
            self.groups.remove(&g);
        }
        Ok(spec)
    }

    fn check_group_free(&self, group: u16) -> Result<(), JobError> {
        match self.groups.get(&group) {
            Some(g) => Err(JobError::GroupInUse {
                group,
                owner: g.owner(),
            }),
            None => Ok(()),
        }
    }

    /// Installs a multicast group made by hand.
    pub fn create_group(&mut self, spec: GroupSpec) -> Result<(), JobError> {
        check_group(&spec)?;
        self.check_group_free(spec.id)?;
        self.groups.insert(
            spec.id,
            Group {
                members: spec.members,
                job: None,
                packets: 0,
                copies: 0,
            },
        );
        Ok(())
    }

    /// Removes a group made by hand (a job's goes with the job).
    pub fn delete_group(&mut self, group: u16) -> Result<(), JobError> {
        match self.groups.get(&group) {
            None => Err(JobError::UnknownGroup { group }),
            Some(Group { job: Some(job), .. }) => Err(JobError::GroupOfJob { group, job: *job }),
            Some(_) => {
                self.groups.remove(&group);
                Ok(())
            }
        }
    }

    /// Every multicast group with its counters, by id.
    pub fn groups(&self) -> Vec<GroupInfo> {
        self.groups
            .iter()
            .map(|(&id, g)| GroupInfo {
                id,
                members: g.members.clone(),
                job: g.job,
                packets: g.packets,
                copies: g.copies,
            })
            .collect()
    }

    /// Installs a relay entry (docs/PROTOCOL.md, "Auxiliary paths").
    pub fn create_relay(&mut self, spec: RelaySpec) -> Result<(), JobError> {
        check_relay(&spec)?;
        let key = spec.key();
        if self.relays.contains_key(&key) {
            return Err(JobError::RelayInUse {
                key: key.to_string(),
            });
        }
        self.check_relay_meets_no_detour(&spec)?;
        self.relays.insert(key, RelayInfo { spec, packets: 0 });
        Ok(())
    }

    /// One meaning per match, from the relay's side ([`relay_meets_no_detour`]).
    fn check_relay_meets_no_detour(&self, spec: &RelaySpec) -> Result<(), JobError> {
        relay_meets_no_detour(spec, self.jobs.get(&spec.job).map(|j| &j.spec))
    }

    /// One meaning per match, from the job's side ([`detours_unrelayed`]).
    fn check_detours_unrelayed(&self, spec: &JobSpec) -> Result<(), JobError> {
        detours_unrelayed(spec, |key| self.relays.contains_key(key))
    }

    /// Removes a relay entry.
    pub fn delete_relay(&mut self, key: RelayKey) -> Result<(), JobError> {
        self.relays
            .remove(&key)
            .map(drop)
            .ok_or(JobError::UnknownRelay {
                key: key.to_string(),
            })
    }

    /// Every relay entry with its counter, by match fields.
    pub fn relays(&self) -> Vec<RelayInfo> {
        self.relays.values().cloned().collect()
    }

    /// Counts a partial sum of `job` that the egress sent as a detour.
    pub fn count_detour(&mut self, job: u16) {
        if let Some(j) = self.jobs.get_mut(&job) {
            j.counters.detours_sent += 1;
        }
    }

    /// The member endpoints of a group (for replication).
    pub fn members(&self, group: u16) -> Option<&[SocketAddr]> {
        self.groups.get(&group).map(|g| g.members.as_slice())
    }

    /// A job's spec and counters.
    pub fn job(&self, id: u16) -> Result<JobInfo, JobError> {
        self.jobs
            .get(&id)
            .map(Job::info)
            .ok_or(JobError::UnknownJob { id })
    }

    /// Every job, by id.
    pub fn jobs(&self) -> Vec<JobInfo> {
        self.jobs.values().map(Job::info).collect()
    }

    /// The worker endpoints of a job (for multicast).
    pub fn workers(&self, id: u16) -> Option<&[SocketAddr]> {
        self.jobs.get(&id).map(|j| j.spec.workers.as_slice())
    }

    /// Which slots are used by whom, and what is free.
    pub fn pools(&self) -> PoolMap {
        PoolMap::new(self.config.slots, self.jobs.values().map(|j| &j.spec))
    }

    /// Memory and limits.
    pub fn info(&self) -> SwitchInfo {
        SwitchInfo {
            slots: self.config.slots,
            max_elements: self.config.max_elements,
            fixed_elements: false,
            memory: self.config.memory,
            memory_used: self.jobs.values().map(|j| j.spec.memory()).sum(),
            jobs: self.jobs.len(),
        }
    }

    /// Global counters (per-reason drops, packets in and out).
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Mutable global counters, for the server's I/O-level counts.
    pub fn counters_mut(&mut self) -> &mut Counters {
        &mut self.counters
    }

    /// Zeroes every counter, global and per job.
    pub fn reset_counters(&mut self) {
        self.counters = Counters::default();
        for job in self.jobs.values_mut() {
            job.counters = JobCounters::default();
        }
        for group in self.groups.values_mut() {
            (group.packets, group.copies) = (0, 0);
        }
        for relay in self.relays.values_mut() {
            relay.packets = 0;
        }
    }

    /// Processes one datagram from `from`. When the action is `Multicast` or
    /// `Unicast`, `out` holds the result packet (for multicast, with worker id
    /// 0; the sender rewrites it per copy, as the P4 egress does).
    pub fn process(&mut self, data: &[u8], from: SocketAddr, out: &mut Vec<u8>) -> Action {
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += data.len() as u64;
        let action = self.process_inner(data, from, out);
        if let Action::Drop(reason) = action {
            self.counters.drop(reason);
        }
        action
    }

    fn process_inner(&mut self, data: &[u8], from: SocketAddr, out: &mut Vec<u8>) -> Action {
        let repr = match Packet::new_checked(data).and_then(|p| Repr::parse(&p)) {
            Ok(r) => r,
            Err(_) => return Action::Drop(DropReason::Malformed),
        };
        if repr.kind == Kind::Multicast {
            return self.relay(&repr, data, from, out);
        }
        if repr.kind == Kind::Result {
            return self.descend(&repr, &data[HEADER_LEN..], from, out);
        }
        if repr.kind == Kind::Detour {
            return self.detour(&repr, data, from, out);
        }
        if !matches!(repr.kind, Kind::Contribution | Kind::Query | Kind::Announce) {
            return Action::Drop(DropReason::NotContribution);
        }
        let Some(job) = self.jobs.get_mut(&repr.job) else {
            return Action::Drop(DropReason::UnknownJob);
        };
        if let Err(reason) = job.admit(&repr, from) {
            job.counters.dropped += 1;
            return Action::Drop(reason);
        }
        match repr.kind {
            Kind::Query => job.query(&repr, out),
            Kind::Announce => job.announce(&repr, &data[HEADER_LEN..]),
            _ => job.contribute(&repr, &data[HEADER_LEN..], out),
        }
    }

    /// A result coming down an aggregation tree: accepted only from the
    /// parent switch of the job whose upstream names it (any other result
    /// is not for a switch), then stored and multicast to the job's members.
    fn descend(
        &mut self,
        repr: &Repr,
        values: &[u8],
        from: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Action {
        let Some(job) = self.jobs.values_mut().find(|j| {
            j.spec
                .upstream
                .is_some_and(|u| u.switch == from && u.job == repr.job)
        }) else {
            return Action::Drop(DropReason::NotContribution);
        };
        job.take_result(repr, values, out)
    }

    /// A detour: forwarded unchanged when the relay table matches it;
    /// otherwise, at the parent, a contribution of the member it names when
    /// it comes from a relay the job lists for that member.
    fn detour(&mut self, repr: &Repr, data: &[u8], from: SocketAddr, out: &mut Vec<u8>) -> Action {
        let key = RelayKey {
            job: repr.job,
            from,
            member: repr.worker,
        };
        if let Some(relay) = self.relays.get_mut(&key) {
            relay.packets += 1;
            self.counters.relayed += 1;
            out.clear();
            out.extend_from_slice(data);
            return Action::Forward { to: relay.spec.to };
        }
        let Some(job) = self.jobs.get_mut(&repr.job) else {
            return Action::Drop(DropReason::UnknownRelay);
        };
        if !job.spec.detours.iter().any(|d| d.key(repr.job) == key) {
            job.counters.dropped += 1;
            return Action::Drop(DropReason::UnknownRelay);
        }
        if let Err(reason) = job.admit_fields(repr) {
            job.counters.dropped += 1;
            return Action::Drop(reason);
        }
        job.counters.detours_taken += 1;
        job.contribute(repr, &data[HEADER_LEN..], out)
    }

    /// A group datagram: admitted when its sender is the member it names,
    /// then copied unchanged (docs/PROTOCOL.md, "Multicast groups").
    fn relay(&mut self, repr: &Repr, data: &[u8], from: SocketAddr, out: &mut Vec<u8>) -> Action {
        let Some(group) = self.groups.get_mut(&repr.job) else {
            return Action::Drop(DropReason::UnknownGroup);
        };
        if group.members.get(usize::from(repr.worker)) != Some(&from) {
            return Action::Drop(DropReason::UnknownWorker);
        }
        group.packets += 1;
        group.copies += group.members.len() as u64 - 1;
        out.clear();
        out.extend_from_slice(data);
        Action::Replicate {
            group: repr.job,
            sender: repr.worker,
        }
    }
}

impl Job {
    fn info(&self) -> JobInfo {
        JobInfo {
            spec: self.spec.clone(),
            counters: self.counters.clone(),
        }
    }

    /// The checks a P4 job table and range check make before any register is
    /// touched: sender known, slot inside the pool, K and generation right.
    fn admit(&self, repr: &Repr, from: SocketAddr) -> Result<(), DropReason> {
        let worker = usize::from(repr.worker);
        if self.spec.workers.get(worker) != Some(&from) {
            return Err(DropReason::UnknownWorker);
        }
        self.admit_fields(repr)
    }

    /// The checks after the sender's: slot inside the pool, K and
    /// generation right.
    fn admit_fields(&self, repr: &Repr) -> Result<(), DropReason> {
        if u32::from(repr.slot) >= self.spec.pool_size {
            return Err(DropReason::SlotOutOfPool);
        }
        if repr.elements != self.spec.elements {
            return Err(DropReason::WrongElements);
        }
        if repr.generation != self.spec.generation {
            return Err(DropReason::StaleGeneration);
        }
        Ok(())
    }

    /// The slot state machine (docs/PROTOCOL.md, "Slot state machine"),
    /// for a contribution already admitted from member `repr.worker`.
    fn contribute(&mut self, repr: &Repr, values: &[u8], out: &mut Vec<u8>) -> Action {
        let index = usize::from(repr.slot) * 2 + usize::from(repr.set);
        let other = index ^ 1;
        let bit = 1u64 << repr.worker;
        let n = self.spec.workers.len() as u16;
        let k = usize::from(self.spec.elements);
        let acc = &mut self.values[index * k..(index + 1) * k];
        let set = &mut self.sets[index];
        self.counters.contributions += 1;
        let detours = !self.spec.detours.is_empty();
        let strict = detours || data_rules(set, repr);
        if strict && superseded(set, repr, n) {
            // The round the set sums is older than this contribution's: a
            // late copy started it (see `superseded`). It is forgotten, and
            // this contribution starts its own round.
            set.bitmap = 0;
        }
        if set.bitmap & bit != 0 {
            if set.count == n && set.awaiting {
                // The result is still on its way down: ask the parent again
                // (it resends a stored result, or completes the round now).
                let up = self.spec.upstream.expect("only tree jobs await");
                self.counters.upstream_resent += 1;
                emit_upstream(repr, set, acc, up, out);
                return self.upstream_action(up);
            }
            if set.count == n {
                // To the member's own endpoint: a detour's sender is a relay.
                self.counters.resent_results += 1;
                emit_result(repr, set, acc, out);
                let to = self.spec.workers[usize::from(repr.worker)];
                return Action::Unicast { to };
            }
            self.counters.duplicates += 1;
            return Action::Drop(DropReason::DuplicatePending);
        }
        if left_behind(set, n) && newer_id(repr.packet_id, set.packet_id) {
            // A round newer than the complete one the set holds, which
            // some members have not left: in order, a member sends round
            // r + 2 to a set only after every member sent round r + 1,
            // each leaving round r's set; so those bits are no honest
            // member's, and nobody needs the stored result. Both sets can
            // be left so (replays or forgers on every member's endpoint,
            // each set complete with the bits of members now in the other)
            // and every contribution would then be a late copy to one set
            // or a retransmission to the other: the slot would be wedged
            // for every later session. A newer round frees it.
            self.counters.taken_over += 1;
            set.bitmap = 0;
        }
        if left_behind(set, n) || (strict && out_of_order(set, repr, n)) {
            self.counters.dropped += 1;
            return Action::Drop(DropReason::StaleRound);
        }
        if set.bitmap == 0 {
            // First contribution of a round: overwrite, no clearing needed.
            payload::read_i32s(values, acc);
            *set = SetState {
                bitmap: bit,
                count: 1,
                weight: weight(repr),
                awaiting: false,
                exponent: repr.exponent,
                packet_id: repr.packet_id,
                priority: repr.priority,
                answered: (0, 0),
            };
        } else {
            payload::add_i32s(acc, values);
            set.bitmap |= bit;
            set.count += 1;
            set.weight = set.weight.saturating_add(weight(repr));
            set.exponent = set.exponent.max(repr.exponent);
        }
        // Moving on to this set frees the worker's place in the other one.
        // In a round not yet complete there, the place goes from the count
        // too: a set's count is the distinct members whose bits it holds,
        // so a round completes only with every member's bit set. (Counted
        // once per contribution, a member going back and forth between the
        // sets counted twice: three endpoints of a four-member job
        // completed both sets without the fourth, and every later round
        // of every session was dropped as `stale_round`.) The values it
        // added stay, and so does its weight: should the round complete,
        // its result's count shows the extra weight and no worker takes it.
        let o = &mut self.sets[other];
        if o.bitmap & bit != 0 {
            o.bitmap &= !bit;
            if o.count < n {
                o.count -= 1;
            }
        }
        let set = &mut self.sets[index];
        if set.count < n {
            return Action::Absorbed;
        }
        let acc = acc_of(&self.values, index, k);
        match self.spec.upstream {
            Some(up) => {
                set.awaiting = true;
                self.counters.upstream += 1;
                emit_upstream(repr, set, acc, up, out);
                self.upstream_action(up)
            }
            None => {
                self.counters.results += 1;
                emit_result(repr, set, acc, out);
                Action::Multicast { job: self.spec.id }
            }
        }
    }

    /// A member re-announces a round's result it holds (docs/PROTOCOL.md,
    /// "A switch that lost its state"). Only a set summing that very round
    /// part-way takes it: some member resent the round into it since the
    /// switch lost it, so that member is behind the announcer and nobody
    /// is ahead of it. A set whose round is complete (the switch did not
    /// lose it), that sums another round, or that is empty (nobody waits
    /// for the round here: the announcer may be the one behind, its
    /// previous round long left by every member) ignores it. The set takes
    /// the result as its round's, complete, with the bits of every member
    /// that has not moved on to the other set: their resends and queries
    /// then bring it back to them, as for any lost result. Jobs of a tree
    /// or with detours take none (their rounds complete above).
    fn announce(&mut self, repr: &Repr, values: &[u8]) -> Action {
        let index = usize::from(repr.slot) * 2 + usize::from(repr.set);
        let n = self.spec.workers.len() as u16;
        let set = &self.sets[index];
        let tree = self.spec.upstream.is_some()
            || !self.spec.detours.is_empty()
            || self.spec.child_switches != 0;
        let waiting = set.count < n && set.bitmap != 0 && set.packet_id == repr.packet_id;
        if tree || !waiting {
            self.counters.announcements_ignored += 1;
            return Action::Absorbed;
        }
        let moved_on = self.sets[index ^ 1].bitmap | (1u64 << repr.worker);
        let k = usize::from(self.spec.elements);
        payload::read_i32s(values, &mut self.values[index * k..(index + 1) * k]);
        self.sets[index] = SetState {
            bitmap: all_members(n) & !moved_on,
            count: n,
            weight: repr.count,
            awaiting: false,
            exponent: repr.exponent,
            packet_id: repr.packet_id,
            priority: repr.priority,
            answered: (0, 0),
        };
        self.counters.announcements += 1;
        Action::Absorbed
    }

    /// A member's query (docs/PROTOCOL.md, "Loss recovery"), admitted as a
    /// contribution would be. What goes back to the member's endpoint is
    /// the set's stored result when the round is complete with the member
    /// in it (its copy of the result was lost: answered as a
    /// retransmission would be, without the values crossing the path),
    /// twice per member and round at most; else the set's status, flagged
    /// [`ANSWERED`](inagg_wire::status::ANSWERED) when the result went for
    /// two of the member's queries already. A query is 24 bytes and a result up to K * 4
    /// more: answered every time, a forger on the path could turn a flood
    /// of small queries into one of results towards a member ("The
    /// amplification bound"). Twice, not once: the answer to a member's
    /// query is lost as often as any datagram, and its next query then
    /// brings the result at once rather than a status and a resend.
    fn query(&mut self, repr: &Repr, out: &mut Vec<u8>) -> Action {
        let index = usize::from(repr.slot) * 2 + usize::from(repr.set);
        let set = &mut self.sets[index];
        let n = self.spec.workers.len() as u16;
        let to = self.spec.workers[usize::from(repr.worker)];
        let asker = 1u64 << repr.worker;
        self.counters.queries += 1;
        // The member's contribution is in the round when its bit is set,
        // or when the round is a data round with the query's packet id: a
        // held-back copy of the member's handshake, summed into the other
        // set, took its bit out of this round's bitmap, but not its values
        // out of the sum (docs/PROTOCOL.md, "Loss recovery").
        let in_it =
            set.bitmap & asker != 0 || (set.packet_id == repr.packet_id && set.weight == set.count);
        let owed = in_it && set.count == n && !set.awaiting;
        if owed && set.answered.1 & asker == 0 {
            set.answered.1 |= set.answered.0 & asker;
            set.answered.0 |= asker;
            self.counters.resent_results += 1;
            let k = usize::from(self.spec.elements);
            emit_result(repr, set, acc_of(&self.values, index, k), out);
            return Action::Unicast { to };
        }
        let status = Repr {
            kind: Kind::Status,
            generation: self.spec.generation,
            exponent: 0,
            count: set.count,
            ..*repr
        };
        out.clear();
        out.resize(status.buffer_len(), 0);
        status.emit(&mut Packet::new_unchecked(&mut out[..]));
        Status {
            bitmap: set.bitmap,
            members: n,
            answered: owed,
        }
        .emit(&mut out[HEADER_LEN..]);
        if repr.count == QUERY_NUDGE && set.bitmap & asker != 0 && set.count < n {
            return Action::Nudge {
                job: self.spec.id,
                members: (all_members(n) & !set.bitmap & !self.spec.child_switches) | asker,
            };
        }
        Action::Unicast { to }
    }

    fn upstream_action(&self, up: Upstream) -> Action {
        Action::Upstream {
            job: self.spec.id,
            to: up.switch,
            aux: up.aux,
        }
    }

    /// The parent's result for a set whose partial sum went up: it replaces
    /// the partial sum (so a worker's retransmission is answered with it)
    /// and is multicast to this job's members. Anything else (a slot or K
    /// of another job, a set not waiting, another round's packet id) is a
    /// late or duplicated copy and is dropped.
    fn take_result(&mut self, repr: &Repr, values: &[u8], out: &mut Vec<u8>) -> Action {
        if u32::from(repr.slot) >= self.spec.pool_size || repr.elements != self.spec.elements {
            self.counters.dropped += 1;
            return Action::Drop(DropReason::UnexpectedResult);
        }
        if repr.generation != self.spec.generation {
            self.counters.dropped += 1;
            return Action::Drop(DropReason::StaleGeneration);
        }
        let index = usize::from(repr.slot) * 2 + usize::from(repr.set);
        let k = usize::from(self.spec.elements);
        let set = &mut self.sets[index];
        if !set.awaiting || set.packet_id != repr.packet_id {
            self.counters.dropped += 1;
            return Action::Drop(DropReason::UnexpectedResult);
        }
        let acc = &mut self.values[index * k..(index + 1) * k];
        payload::read_i32s(values, acc);
        set.awaiting = false;
        set.answered = (0, 0);
        set.exponent = repr.exponent;
        set.weight = repr.count;
        self.counters.results += 1;
        let local = Repr {
            job: self.spec.id,
            ..*repr
        };
        emit_result(&local, set, acc, out);
        Action::Multicast { job: self.spec.id }
    }
}

/// Whether a contribution from a member whose bit is clear in `set` is a
/// late copy of the complete round the set holds, at any job
/// (docs/PROTOCOL.md, "Slot state machine", late copies): a new round
/// starts in a set only once every member has left it, so while some have
/// not, a member that left sends nothing there but a copy that its next
/// round overtook. Added, it would corrupt the stored result that the
/// others may still ask for, and take the member's place in the round it
/// moved on to: the job hangs.
fn left_behind(set: &SetState, n: u16) -> bool {
    set.count == n && set.bitmap != 0
}

/// Whether a contribution from a member whose bit is clear in `set`, and
/// not [`left_behind`], is a late copy of an earlier round at a job that
/// takes detours (docs/PROTOCOL.md, "Auxiliary paths"). A member's packets
/// stop arriving in order once some take a detour, so a copy may come
/// later still than one round: it would start a bogus round that round
/// r+2 is then added to, or join a round it is not of. Two more cases,
/// each impossible in order:
/// - the set is empty and its last round had this packet id (rounds r and
///   r + 2 of a slot have different ids);
/// - the set is summing a round with another packet id.
fn out_of_order(set: &SetState, repr: &Repr, n: u16) -> bool {
    if set.count == n {
        set.packet_id == repr.packet_id
    } else {
        another_round(set, repr, n)
    }
}

/// Whether `set` is summing a round other than `repr`'s: part-way, with
/// another packet id.
fn another_round(set: &SetState, repr: &Repr, n: u16) -> bool {
    set.count < n && set.bitmap != 0 && set.packet_id != repr.packet_id
}

/// Whether the rules for packets out of order (superseded rounds, another
/// round's copies and the last round's dropped) hold for `repr` at any
/// job: a worker's data (count field 0) meeting a set whose round is data
/// too (every contribution in it weighs 1; docs/PROTOCOL.md, "Slot state
/// machine", the data rules). A copy of round r - 2 that reordering or
/// duplication brings late, once the set sums round r, was added to it:
/// the sum failed its check, and the member whose copy it was could be
/// left a round behind the others for good. A copy of round r - 1 that
/// finds its set left by every member started a round there, and took its
/// sender's bit out of the set holding round r's result, which the sender
/// may still need. (Data ids are the session's own: "Sessions", packet
/// ids.)
///
/// Handshakes (count 2) are summed into whatever round is there, as
/// always: the session handshake relies on it to drain an earlier
/// session's state, and a member whose data a round refuses
/// (an id the members disagree on, after replays) spoils it with one.
fn data_rules(set: &SetState, repr: &Repr) -> bool {
    repr.count == 0 && set.weight == set.count
}

/// Whether `set`, part-way through a round, sums an older round than
/// `repr`'s at a job that takes detours (docs/PROTOCOL.md, "Auxiliary
/// paths", superseded rounds). In order this cannot happen: a member
/// sends round r + 2 to a set only after round r + 1 completed, which
/// needed round r complete first. But a copy held seconds in a slow
/// link's queue can arrive rounds late, find the set complete and left
/// by every member, and start a bogus round there (a set every member
/// left takes any new packet id: a new session's ids start again at 0).
/// Every later round would then be dropped as another round's, and the
/// job would hang; so a newer round takes the set over.
///
/// Packet ids are compared as serial numbers (RFC 1982): `repr`'s is newer
/// when it lies less than 2^31 ahead, which the agents' `epoch << 16 |
/// slot` ids of one slot keep for 2^15 epochs.
fn superseded(set: &SetState, repr: &Repr, n: u16) -> bool {
    set.bitmap != 0 && set.count < n && newer_id(repr.packet_id, set.packet_id)
}

/// One bit for each of a job's `n` members (at most 64).
fn all_members(n: u16) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// What a contribution weighs in the result's count: a worker sends 0 and
/// counts once; a child switch sends the workers its partial sum holds.
fn weight(repr: &Repr) -> u16 {
    repr.count.max(1)
}

/// Writes a tree job's partial sum as a contribution to the parent's job.
fn emit_upstream(request: &Repr, set: &SetState, acc: &[i32], up: Upstream, out: &mut Vec<u8>) {
    let repr = Repr {
        kind: Kind::Contribution,
        job: up.job,
        worker: up.member,
        count: set.weight,
        exponent: set.exponent,
        packet_id: set.packet_id,
        priority: set.priority,
        ..*request
    };
    write_packet(&repr, acc, out);
}

fn acc_of(values: &[i32], index: usize, k: usize) -> &[i32] {
    &values[index * k..(index + 1) * k]
}

/// Writes the result packet of a complete set into `out`.
fn emit_result(request: &Repr, set: &SetState, acc: &[i32], out: &mut Vec<u8>) {
    let repr = Repr {
        kind: Kind::Result,
        count: set.weight,
        exponent: set.exponent,
        packet_id: set.packet_id,
        priority: set.priority,
        ..*request
    };
    write_packet(&repr, acc, out);
}

/// A header and its int32 payload, into `out`.
fn write_packet(repr: &Repr, acc: &[i32], out: &mut Vec<u8>) {
    out.clear();
    out.resize(repr.buffer_len(), 0);
    let mut packet = Packet::new_unchecked(&mut out[..]);
    repr.emit(&mut packet);
    payload::write_i32s(packet.payload_mut(), acc);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn a_queue_the_ports_lack_is_refused_naming_those_they_have() {
        let mut sw = empty_switch();
        sw.set_queue(5, EGRESS_QUEUES - 1).unwrap();
        let e = sw.set_queue(5, EGRESS_QUEUES).unwrap_err().to_string();
        assert_eq!(e, "queue 8 does not exist: ports have queues 0 to 7");
        assert_eq!(sw.queue_of(5), EGRESS_QUEUES - 1);
    }

    /// Job 1: three workers at ports 1000..1003, pool [10, 14), K = 2.
    fn switch() -> Switch {
        let mut sw = empty_switch();
        sw.create_job(spec(vec![addr(1000), addr(1001), addr(1002)], 10, None))
            .unwrap();
        sw
    }

    /// Job 1 with `workers`, a pool of 4 slots at `pool_base`, K = 2.
    fn spec(workers: Vec<SocketAddr>, pool_base: u32, upstream: Option<Upstream>) -> JobSpec {
        JobSpec {
            child_switches: 0,
            detours: Vec::new(),
            id: 1,
            workers,
            pool_base,
            pool_size: 4,
            elements: 2,
            generation: 0,
            queues: Vec::new(),
            group: None,
            upstream,
        }
    }

    fn packet(worker: u16, slot: u16, set: u8, exponent: u8, values: [i32; 2]) -> Vec<u8> {
        let repr = Repr {
            exponent,
            ..Repr::contribution(1, slot, set, worker, 2, 100 + u32::from(slot))
        };
        encode(&repr, &values)
    }

    /// A packet with `repr`'s header and `values` as its payload.
    fn encode(repr: &Repr, values: &[i32]) -> Vec<u8> {
        let mut buf = vec![0; repr.buffer_len()];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        repr.emit(&mut p);
        payload::write_i32s(p.payload_mut(), values);
        buf
    }

    fn send(
        sw: &mut Switch,
        worker: u16,
        slot: u16,
        set: u8,
        values: [i32; 2],
        out: &mut Vec<u8>,
    ) -> Action {
        sw.process(
            &packet(worker, slot, set, 0, values),
            addr(1000 + worker),
            out,
        )
    }

    fn result(out: &[u8]) -> (Repr, [i32; 2]) {
        let p = Packet::new_checked(out).unwrap();
        (Repr::parse(&p).unwrap(), [p.element(0), p.element(1)])
    }

    #[test]
    fn n_workers_complete_a_slot_and_multicast() {
        let mut sw = switch();
        let mut out = Vec::new();
        assert_eq!(send(&mut sw, 0, 1, 0, [1, 2], &mut out), Action::Absorbed);
        assert_eq!(send(&mut sw, 1, 1, 0, [10, 20], &mut out), Action::Absorbed);
        assert_eq!(
            send(&mut sw, 2, 1, 0, [100, -200], &mut out),
            Action::Multicast { job: 1 }
        );
        let (repr, values) = result(&out);
        assert_eq!(values, [111, -178]);
        assert_eq!(
            (repr.kind, repr.count, repr.slot, repr.set, repr.packet_id),
            (Kind::Result, 3, 1, 0, 101)
        );
        assert_eq!(sw.job(1).unwrap().counters.results, 1);
    }

    #[test]
    fn duplicate_before_completion_is_dropped_and_not_added() {
        let mut sw = switch();
        let mut out = Vec::new();
        send(&mut sw, 0, 0, 0, [1, 1], &mut out);
        assert_eq!(
            send(&mut sw, 0, 0, 0, [1, 1], &mut out),
            Action::Drop(DropReason::DuplicatePending)
        );
        send(&mut sw, 1, 0, 0, [1, 1], &mut out);
        assert_eq!(
            send(&mut sw, 2, 0, 0, [1, 1], &mut out),
            Action::Multicast { job: 1 }
        );
        assert_eq!(result(&out).1, [3, 3]);
        assert_eq!(sw.counters().dropped(DropReason::DuplicatePending), 1);
    }

    /// Worker `worker`'s query for `slot`/`set` and the status it gets.
    /// A query that asks for nudges ([`QUERY_NUDGE`]), as workers with few
    /// slots in flight send.
    fn query(sw: &mut Switch, worker: u16, slot: u16, set: u8) -> (Action, Repr, Status) {
        let repr = Repr {
            kind: Kind::Query,
            count: QUERY_NUDGE,
            ..Repr::contribution(1, slot, set, worker, 2, 7)
        };
        let mut out = Vec::new();
        let action = sw.process(&repr.to_bytes(), addr(1000 + worker), &mut out);
        let p = Packet::new_checked(&out[..]).unwrap();
        (
            action,
            Repr::parse(&p).unwrap(),
            Status::parse(p.payload()).unwrap(),
        )
    }

    /// Three endpoints of a four-member job, going back and forth between
    /// a slot's sets, complete neither: a set's count is its distinct
    /// members, so a round needs the fourth. The honest members' rounds
    /// then complete in both sets (the slot is not wedged).
    #[test]
    fn members_going_back_and_forth_count_once_and_wedge_nothing() {
        let mut sw = empty_switch();
        let members: Vec<SocketAddr> = (0..4).map(|w| addr(1000 + w)).collect();
        sw.create_job(spec(members, 0, None)).unwrap();
        let mut out = Vec::new();
        let mut send = |sw: &mut Switch, w: u16, set: u8, id: u32| {
            let bytes = encode(&Repr::contribution(1, 0, set, w, 2, id), &[1, 2]);
            sw.process(&bytes, addr(1000 + w), &mut out)
        };
        for (w, set) in [
            (0, 0),
            (1, 0),
            (2, 0),
            (0, 1),
            (0, 0),
            (1, 1),
            (2, 1),
            (1, 0),
            (2, 0),
            (0, 1),
        ] {
            let action = send(&mut sw, w, set, 9);
            assert!(
                !matches!(action, Action::Multicast { .. }),
                "worker {w} to set {set} completed a round without worker 3"
            );
        }
        // Every member's next round, in each set in turn (newer ids: an
        // older data round meeting a data round part-way is a late copy).
        for (set, id) in [(1u8, 10u32), (0, 11), (1, 12)] {
            let actions: Vec<Action> = (0..4).map(|w| send(&mut sw, w, set, id)).collect();
            assert_eq!(
                actions.last(),
                Some(&Action::Multicast { job: 1 }),
                "set {set}: {actions:?}"
            );
        }
    }

    /// A restart empties the sets while workers are a round apart: one has
    /// round 7's result and went on to round 8, the others lost it. The
    /// one that holds it announces it; the set takes it with the bits of
    /// those that have not moved on, and their resends bring it back, so
    /// round 8 completes. A set whose round is complete, that sums another
    /// round, or that nobody has resent the round into, ignores an
    /// announcement.
    #[test]
    fn a_round_lost_in_a_restart_is_announced_by_a_worker_that_holds_it() {
        let mut sw = switch();
        let mut out = Vec::new();
        let send = |sw: &mut Switch, out: &mut Vec<u8>, repr: Repr, values: &[i32]| {
            let from = addr(1000 + repr.worker);
            sw.process(&encode(&repr, values), from, out)
        };
        let round = |set, w, id| Repr::contribution(1, 0, set, w, 2, id);
        for w in 0..3 {
            send(&mut sw, &mut out, round(0, w, 7), &[w as i32 + 1, 10]);
        }
        let held = Repr {
            kind: Kind::Announce,
            count: 3,
            ..round(0, 0, 7)
        };
        let action = send(&mut sw, &mut out, held, &[99, 99]);
        assert_eq!(action, Action::Absorbed);
        assert_eq!(
            sw.job(1).unwrap().counters.announcements_ignored,
            1,
            "complete"
        );
        // The restart.
        let spec = sw.delete_job(1).unwrap();
        sw.create_job(spec).unwrap();
        // Announced before anyone resent round 7: nobody waits for it here.
        send(&mut sw, &mut out, held, &[6, 30]);
        assert_eq!(
            sw.job(1).unwrap().counters.announcements_ignored,
            1,
            "empty"
        );
        send(&mut sw, &mut out, round(1, 0, 8), &[1, 1]);
        send(&mut sw, &mut out, round(1, 1, 8), &[1, 1]);
        // Worker 2 resends round 7: alone in the emptied set.
        assert_eq!(
            send(&mut sw, &mut out, round(0, 2, 7), &[3, 10]),
            Action::Absorbed
        );
        // A late announcement of another round is ignored...
        let late = Repr {
            kind: Kind::Announce,
            count: 3,
            ..round(0, 1, 5)
        };
        send(&mut sw, &mut out, late, &[0, 0]);
        assert_eq!(sw.job(1).unwrap().counters.announcements_ignored, 2);
        // ...worker 0 announces round 7's result, and worker 2's resend
        // brings it back.
        let announce = Repr {
            kind: Kind::Announce,
            count: 3,
            ..round(0, 0, 7)
        };
        assert_eq!(
            send(&mut sw, &mut out, announce, &[6, 30]),
            Action::Absorbed
        );
        assert_eq!(sw.job(1).unwrap().counters.announcements, 1);
        let action = send(&mut sw, &mut out, round(0, 2, 7), &[3, 10]);
        assert_eq!(action, Action::Unicast { to: addr(1002) });
        let result = Repr::parse(&Packet::new_checked(&out[..]).unwrap()).unwrap();
        assert_eq!(
            (result.kind, result.count, result.packet_id),
            (Kind::Result, 3, 7)
        );
        let mut want = [0u8; 8];
        payload::write_i32s(&mut want, &[6, 30]);
        assert_eq!(&out[HEADER_LEN..], &want[..]);
        // Workers 0 and 1 moved on: their bits stay clear in set 0 (a
        // probe, a copy of round 7: were worker 1's bit set, the stored
        // result would come back).
        let action = send(&mut sw, &mut out, round(0, 1, 7), &[0, 0]);
        assert_eq!(action, Action::Drop(DropReason::StaleRound));
        // Round 8 completes with worker 2.
        let action = send(&mut sw, &mut out, round(1, 2, 8), &[1, 1]);
        assert_eq!(action, Action::Multicast { job: 1 });
    }

    /// A query answers who holds a place in the set, to the asker alone,
    /// and changes nothing: the round completes as if it had not come.
    #[test]
    fn a_query_is_answered_with_the_sets_status_and_changes_nothing() {
        let mut sw = switch();
        let mut out = Vec::new();
        let (action, repr, status) = query(&mut sw, 1, 2, 0);
        assert_eq!(action, Action::Unicast { to: addr(1001) });
        assert_eq!(
            (repr.kind, repr.count, repr.packet_id),
            (Kind::Status, 0, 7)
        );
        assert_eq!((status.bitmap, status.members), (0, 3));
        send(&mut sw, 0, 2, 0, [1, 1], &mut out);
        send(&mut sw, 2, 2, 0, [4, 4], &mut out);
        let (action, repr, status) = query(&mut sw, 0, 2, 0);
        // The set holds the asker's: the status goes to the member it
        // waits for as well, naming the asker.
        assert_eq!(
            action,
            Action::Nudge {
                job: 1,
                members: 0b011
            }
        );
        assert_eq!((repr.worker, repr.slot, repr.set, repr.count), (0, 2, 0, 2));
        assert_eq!(status.missing().collect::<Vec<_>>(), [1]);
        assert!(status.holds(0));
        // The missing member's own query goes to it alone.
        let (action, repr, _) = query(&mut sw, 1, 2, 0);
        assert_eq!(action, Action::Unicast { to: addr(1001) });
        assert_eq!(repr.worker, 1);
        // A query that does not ask for nudges (count 0) is answered to
        // the asker alone.
        let q = Repr {
            kind: Kind::Query,
            ..Repr::contribution(1, 2, 0, 0, 2, 7)
        };
        assert_eq!(
            sw.process(&q.to_bytes(), addr(1000), &mut out),
            Action::Unicast { to: addr(1000) }
        );
        assert_eq!(
            send(&mut sw, 1, 2, 0, [2, 2], &mut out),
            Action::Multicast { job: 1 }
        );
        assert_eq!(result(&out).1, [7, 7]);
        // Complete, with the asker in it: its result was lost, and the
        // stored result is the answer.
        let q = Repr {
            kind: Kind::Query,
            ..Repr::contribution(1, 2, 0, 2, 2, 7)
        };
        out.clear();
        assert_eq!(
            sw.process(&q.to_bytes(), addr(1002), &mut out),
            Action::Unicast { to: addr(1002) }
        );
        let (repr, values) = result(&out);
        assert_eq!(
            (repr.kind, repr.count, repr.worker, values),
            (Kind::Result, 3, 2, [7, 7])
        );
        assert_eq!(sw.job(1).unwrap().counters.queries, 5);
        assert_eq!(sw.job(1).unwrap().counters.resent_results, 1);
        // A member that moved on to the other set gets the status: its bit
        // is clear there.
        send(&mut sw, 2, 2, 1, [1, 1], &mut out);
        let (_, repr, status) = query(&mut sw, 2, 2, 0);
        assert_eq!(
            (repr.kind, repr.count, status.bitmap),
            (Kind::Status, 3, 0b011)
        );
    }

    /// The stored result goes for a member's queries twice per round at
    /// most: later queries get a status flagged `answered` (36 bytes, not
    /// the result), a resend of the contribution still brings the result
    /// back, and the set's next round answers queries with its result
    /// again.
    #[test]
    fn queries_bring_back_the_stored_result_twice_per_round() {
        let mut sw = switch();
        let mut out = Vec::new();
        for w in 0..3 {
            send(&mut sw, w, 2, 0, [1, 2], &mut out);
        }
        // Worker `w`'s query about round `id` in set 0 of slot 2.
        let ask = |sw: &mut Switch, out: &mut Vec<u8>, w: u16, id: u32| {
            let q = Repr {
                kind: Kind::Query,
                ..Repr::contribution(1, 2, 0, w, 2, id)
            };
            out.clear();
            let action = sw.process(&q.to_bytes(), addr(1000 + w), out);
            assert_eq!(action, Action::Unicast { to: addr(1000 + w) });
            Repr::parse(&Packet::new_checked(&out[..]).unwrap()).unwrap()
        };
        for _ in 0..2 {
            assert_eq!(ask(&mut sw, &mut out, 0, 102).kind, Kind::Result);
            assert_eq!(result(&out).1, [3, 6]);
        }
        for _ in 0..100 {
            assert_eq!(ask(&mut sw, &mut out, 0, 102).kind, Kind::Status);
            assert_eq!(out.len(), HEADER_LEN + inagg_wire::status::STATUS_LEN);
            let status = Status::parse(&out[HEADER_LEN..]).unwrap();
            assert!(status.answered && status.holds(0) && status.missing().count() == 0);
        }
        // Each member apart: worker 2's first query still gets the result.
        assert_eq!(ask(&mut sw, &mut out, 2, 102).kind, Kind::Result);
        // A resend of the contribution is as large as the result: it
        // brings the result back every time.
        assert_eq!(
            send(&mut sw, 0, 2, 0, [1, 2], &mut out),
            Action::Unicast { to: addr(1000) }
        );
        assert_eq!(result(&out).1, [3, 6]);
        assert_eq!(sw.job(1).unwrap().counters.resent_results, 4);
        // The set's next round (every member went on to set 1, then came
        // back) is answered afresh.
        for w in 0..3 {
            send(&mut sw, w, 2, 1, [0, 0], &mut out);
        }
        let next = 102 + (2 << 16);
        for w in 0..3 {
            let r = Repr::contribution(1, 2, 0, w, 2, next);
            sw.process(&encode(&r, &[5, 5]), addr(1000 + w), &mut out);
        }
        for _ in 0..2 {
            assert_eq!(ask(&mut sw, &mut out, 0, next).kind, Kind::Result);
            assert_eq!(result(&out).1, [15, 15]);
        }
        assert_eq!(ask(&mut sw, &mut out, 0, next).kind, Kind::Status);
    }

    /// The status goes to every member a set of 64 waits for: the bitmap's
    /// last bit is a member too.
    #[test]
    fn a_status_reaches_every_missing_member_of_sixty_four() {
        let mut sw = empty_switch();
        let workers = (0..64).map(|i| addr(1000 + i)).collect();
        sw.create_job(spec(workers, 10, None)).unwrap();
        let mut out = Vec::new();
        send(&mut sw, 63, 2, 0, [1, 1], &mut out);
        let (action, _, status) = query(&mut sw, 63, 2, 0);
        assert_eq!(
            action,
            Action::Nudge {
                job: 1,
                members: u64::MAX
            }
        );
        assert_eq!(status.missing().count(), 63);
        send(&mut sw, 0, 2, 0, [1, 1], &mut out);
        let (action, _, _) = query(&mut sw, 0, 2, 0);
        assert_eq!(
            action,
            Action::Nudge {
                job: 1,
                members: !(1u64 << 63)
            }
        );
    }

    /// A tree's child switch is a member that takes results, not statuses:
    /// a switch does not query.
    #[test]
    fn a_status_skips_child_switches() {
        let mut sw = empty_switch();
        let mut job = spec(vec![addr(1000), addr(1001), addr(1002)], 10, None);
        job.child_switches = 0b100;
        sw.create_job(job).unwrap();
        let mut out = Vec::new();
        send(&mut sw, 0, 2, 0, [1, 1], &mut out);
        let (action, _, status) = query(&mut sw, 0, 2, 0);
        assert_eq!(
            action,
            Action::Nudge {
                job: 1,
                members: 0b011
            }
        );
        assert_eq!(status.missing().collect::<Vec<_>>(), [1, 2]);
    }

    /// A query is admitted as a contribution is: a stranger's, or one for a
    /// slot outside the pool, is dropped under the same reasons.
    #[test]
    fn a_query_is_admitted_as_a_contribution_is() {
        let mut sw = switch();
        let mut out = Vec::new();
        let q = Repr {
            kind: Kind::Query,
            ..Repr::contribution(1, 9, 0, 0, 2, 7)
        };
        assert_eq!(
            sw.process(&q.to_bytes(), addr(1000), &mut out),
            Action::Drop(DropReason::SlotOutOfPool)
        );
        let q = Repr { slot: 0, ..q };
        assert_eq!(
            sw.process(&q.to_bytes(), addr(999), &mut out),
            Action::Drop(DropReason::UnknownWorker)
        );
        // A query with a payload is malformed.
        let mut long = q.to_bytes().to_vec();
        long.extend_from_slice(&[0; 8]);
        assert_eq!(
            sw.process(&long, addr(1000), &mut out),
            Action::Drop(DropReason::Malformed)
        );
    }

    /// Seen in CI, at ten per cent loss with duplication and reordering: a
    /// worker's last contribution of round 0 completed it, and the
    /// duplicate of that packet, held back one place by the reorder fault,
    /// arrived right after the same worker's round 1.
    #[test]
    fn a_copy_overtaken_by_its_workers_next_round_is_dropped() {
        let mut sw = switch();
        let mut out = Vec::new();
        send(&mut sw, 1, 1, 0, [10, 10], &mut out);
        send(&mut sw, 2, 1, 0, [100, 100], &mut out);
        assert_eq!(
            send(&mut sw, 0, 1, 0, [1, 1], &mut out),
            Action::Multicast { job: 1 }
        );
        assert_eq!(send(&mut sw, 0, 1, 1, [2, 2], &mut out), Action::Absorbed);
        assert_eq!(
            send(&mut sw, 0, 1, 0, [1, 1], &mut out),
            Action::Drop(DropReason::StaleRound)
        );
        // Worker 1 lost round 0's result: the stored one is intact.
        out.clear();
        assert_eq!(
            send(&mut sw, 1, 1, 0, [10, 10], &mut out),
            Action::Unicast { to: addr(1001) }
        );
        assert_eq!(result(&out).1, [111, 111]);
        // Round 1 still holds worker 0: its retransmission is a duplicate.
        assert_eq!(
            send(&mut sw, 0, 1, 1, [2, 2], &mut out),
            Action::Drop(DropReason::DuplicatePending)
        );
        send(&mut sw, 1, 1, 1, [20, 20], &mut out);
        out.clear();
        assert_eq!(
            send(&mut sw, 2, 1, 1, [200, 200], &mut out),
            Action::Multicast { job: 1 }
        );
        assert_eq!(result(&out).1, [222, 222]);
        assert_eq!(sw.counters().dropped(DropReason::StaleRound), 1);
    }

    /// A complete round that members left behind is taken over by a newer
    /// round (its packet id ahead in serial order), never by a copy of its
    /// own: both sets left so, by replays on every member's endpoint, would
    /// otherwise wedge the slot for good.
    #[test]
    fn a_newer_round_takes_over_a_round_left_behind() {
        let mut sw = switch();
        let mut out = Vec::new();
        let send = |sw: &mut Switch, out: &mut Vec<u8>, set, w: u16, id, v: i32| {
            let repr = Repr::contribution(1, 0, set, w, 2, id);
            sw.process(&encode(&repr, &[v, v]), addr(1000 + w), out)
        };
        for w in 0..3 {
            send(&mut sw, &mut out, 0, w, 7, 1);
        }
        // Worker 0 moves on; set 0's round stays complete, held by 1 and 2.
        assert_eq!(send(&mut sw, &mut out, 1, 0, 8, 1), Action::Absorbed);
        let stale = send(&mut sw, &mut out, 0, 0, 7, 1);
        assert_eq!(stale, Action::Drop(DropReason::StaleRound));
        let older = send(&mut sw, &mut out, 0, 0, 6, 1);
        assert_eq!(older, Action::Drop(DropReason::StaleRound));
        assert_eq!(sw.job(1).unwrap().counters.taken_over, 0);
        // A newer round takes the set: only its own values are summed.
        assert_eq!(send(&mut sw, &mut out, 0, 0, 9, 100), Action::Absorbed);
        assert_eq!(sw.job(1).unwrap().counters.taken_over, 1);
        send(&mut sw, &mut out, 0, 1, 9, 20);
        let done = send(&mut sw, &mut out, 0, 2, 9, 3);
        assert_eq!(done, Action::Multicast { job: 1 });
        let (repr, values) = result(&out);
        assert_eq!((repr.packet_id, values), (9, [123, 123]));
    }

    #[test]
    fn duplicate_after_completion_resends_result_to_sender_only() {
        let mut sw = switch();
        let mut out = Vec::new();
        for w in 0..3 {
            send(&mut sw, w, 2, 1, [5, 6], &mut out);
        }
        out.clear();
        assert_eq!(
            send(&mut sw, 1, 2, 1, [5, 6], &mut out),
            Action::Unicast { to: addr(1001) }
        );
        let (repr, values) = result(&out);
        assert_eq!((values, repr.count, repr.set), ([15, 18], 3, 1));
        assert_eq!(sw.job(1).unwrap().counters.resent_results, 1);
    }

    #[test]
    fn shadow_set_reuse_overwrites_the_old_round() {
        let mut sw = switch();
        let mut out = Vec::new();
        // Round 0 in set 0, round 1 in set 1, round 2 back in set 0, each
        // under its own packet id (epoch r).
        for (r, set, v) in [(0u32, 0u8, 7), (1, 1, 8), (2, 0, 9)] {
            for w in 0..3 {
                let repr = Repr::contribution(1, 3, set, w, 2, r << 16 | 3);
                sw.process(&encode(&repr, &[v, -v]), addr(1000 + w), &mut out);
            }
            assert_eq!(result(&out).1, [3 * v, -3 * v], "set {set}");
        }
    }

    #[test]
    fn a_lagging_worker_still_gets_its_result_while_others_move_on() {
        let mut sw = switch();
        let mut out = Vec::new();
        for w in 0..3 {
            send(&mut sw, w, 0, 0, [1, 0], &mut out);
        }
        // Workers 0 and 1 go on to set 1; worker 2 lost its result.
        send(&mut sw, 0, 0, 1, [2, 0], &mut out);
        send(&mut sw, 1, 0, 1, [2, 0], &mut out);
        assert_eq!(
            send(&mut sw, 2, 0, 0, [1, 0], &mut out),
            Action::Unicast { to: addr(1002) }
        );
        assert_eq!(result(&out).1, [3, 0]);
        assert_eq!(
            send(&mut sw, 2, 0, 1, [2, 0], &mut out),
            Action::Multicast { job: 1 }
        );
        assert_eq!(result(&out).1, [6, 0]);
    }

    #[test]
    fn exponent_is_max_reduced() {
        let mut sw = switch();
        let mut out = Vec::new();
        for (w, e) in [(0u16, 120u8), (1, 140), (2, 130)] {
            sw.process(&packet(w, 0, 0, e, [0, 0]), addr(1000 + w), &mut out);
        }
        assert_eq!(result(&out).0.exponent, 140);
    }

    #[test]
    fn addition_wraps_like_a_32_bit_register() {
        let mut sw = switch();
        let mut out = Vec::new();
        send(&mut sw, 0, 0, 0, [i32::MAX, i32::MIN], &mut out);
        send(&mut sw, 1, 0, 0, [1, -1], &mut out);
        send(&mut sw, 2, 0, 0, [0, 0], &mut out);
        assert_eq!(result(&out).1, [i32::MIN, i32::MAX]);
    }

    #[test]
    fn bad_packets_are_dropped_by_reason_and_change_nothing() {
        let mut sw = switch();
        let mut out = Vec::new();
        let good = packet(0, 0, 0, 0, [1, 1]);
        let cases: Vec<(Vec<u8>, SocketAddr, DropReason)> = vec![
            (good[..10].to_vec(), addr(1000), DropReason::Malformed),
            (
                {
                    let mut b = good.clone();
                    b[1] = 2;
                    b
                },
                addr(1000),
                DropReason::NotContribution,
            ),
            (
                {
                    let mut b = good.clone();
                    b[5] = 9;
                    b
                },
                addr(1000),
                DropReason::UnknownJob,
            ),
            (good.clone(), addr(999), DropReason::UnknownWorker),
            (
                {
                    let mut b = good.clone();
                    b[9] = 5;
                    b
                },
                addr(1000),
                DropReason::UnknownWorker,
            ),
            (
                {
                    let mut b = good.clone();
                    b[7] = 4;
                    b
                },
                addr(1000),
                DropReason::SlotOutOfPool,
            ),
            (
                {
                    let mut b = good.clone();
                    b[11] = 1;
                    b
                },
                addr(1000),
                DropReason::StaleGeneration,
            ),
            (
                {
                    let mut b = good[..28].to_vec();
                    b[17] = 1;
                    b
                },
                addr(1000),
                DropReason::WrongElements,
            ),
        ];
        for (bytes, from, reason) in cases {
            assert_eq!(
                sw.process(&bytes, from, &mut out),
                Action::Drop(reason),
                "{reason:?}"
            );
        }
        for reason in [
            DropReason::Malformed,
            DropReason::NotContribution,
            DropReason::UnknownJob,
            DropReason::SlotOutOfPool,
            DropReason::StaleGeneration,
            DropReason::WrongElements,
        ] {
            assert_eq!(sw.counters().dropped(reason), 1, "{reason:?}");
        }
        assert_eq!(sw.job(1).unwrap().counters.dropped, 5);
        assert_eq!(sw.counters().dropped(DropReason::UnknownWorker), 2);
        // Nothing was absorbed: a full round still sums exactly the good values.
        for w in 0..3 {
            send(&mut sw, w, 0, 0, [1, 1], &mut out);
        }
        assert_eq!(result(&out).1, [3, 3]);
    }

    #[test]
    fn two_jobs_with_disjoint_pools_are_independent() {
        let mut sw = switch();
        sw.create_job(JobSpec {
            child_switches: 0,
            detours: Vec::new(),
            upstream: None,
            id: 2,
            workers: vec![addr(2000), addr(2001)],
            pool_base: 14,
            pool_size: 4,
            elements: 2,
            generation: 0,
            queues: Vec::new(),
            group: None,
        })
        .unwrap();
        let mut out = Vec::new();
        send(&mut sw, 0, 0, 0, [1, 1], &mut out);
        let mut p = packet(0, 0, 0, 0, [50, 50]);
        p[5] = 2;
        assert_eq!(sw.process(&p, addr(2000), &mut out), Action::Absorbed);
        p[9] = 1;
        assert_eq!(
            sw.process(&p, addr(2001), &mut out),
            Action::Multicast { job: 2 }
        );
        assert_eq!(result(&out).1, [100, 100]);
        send(&mut sw, 1, 0, 0, [1, 1], &mut out);
        send(&mut sw, 2, 0, 0, [1, 1], &mut out);
        assert_eq!(result(&out).1, [3, 3]);
    }

    /// A group datagram of group `group` from member `member`.
    fn group_packet(group: u16, member: u16, values: [i32; 2]) -> Vec<u8> {
        let repr = Repr {
            kind: Kind::Multicast,
            ..Repr::contribution(group, 0, 0, member, 2, 77)
        };
        encode(&repr, &values)
    }

    #[test]
    fn a_group_datagram_is_copied_unchanged_to_the_other_members() {
        let mut sw = switch();
        let members = vec![addr(2000), addr(2001), addr(2002)];
        sw.create_group(GroupSpec { id: 9, members }).unwrap();
        let mut out = Vec::new();
        let bytes = group_packet(9, 1, [5, -5]);
        assert_eq!(
            sw.process(&bytes, addr(2001), &mut out),
            Action::Replicate {
                group: 9,
                sender: 1
            }
        );
        assert_eq!(out, bytes);
        let g = &sw.groups()[0];
        assert_eq!((g.packets, g.copies, g.job), (1, 2, None));
        // Aggregation state is untouched: job 1 saw nothing.
        assert_eq!(sw.job(1).unwrap().counters.contributions, 0);
    }

    #[test]
    fn group_datagrams_from_strangers_or_to_unknown_groups_are_dropped() {
        let mut sw = switch();
        sw.create_group(GroupSpec {
            id: 9,
            members: vec![addr(2000), addr(2001)],
        })
        .unwrap();
        let mut out = Vec::new();
        // Member 1's id from member 0's endpoint, and an id out of range.
        for (member, from) in [(1, addr(2000)), (5, addr(2000))] {
            assert_eq!(
                sw.process(&group_packet(9, member, [1, 1]), from, &mut out),
                Action::Drop(DropReason::UnknownWorker)
            );
        }
        assert_eq!(
            sw.process(&group_packet(8, 0, [1, 1]), addr(2000), &mut out),
            Action::Drop(DropReason::UnknownGroup)
        );
        assert_eq!(sw.counters().dropped(DropReason::UnknownGroup), 1);
        assert_eq!(sw.counters().dropped(DropReason::UnknownWorker), 2);
        assert_eq!(sw.groups()[0].packets, 0);
    }

    #[test]
    fn a_jobs_group_comes_and_goes_with_the_job_and_ids_never_clash() {
        let mut sw = switch();
        let spec = |id: u16, group: u16| JobSpec {
            child_switches: 0,
            detours: Vec::new(),
            upstream: None,
            id,
            workers: vec![addr(3000), addr(3001)],
            pool_base: 30,
            pool_size: 2,
            elements: 2,
            generation: 0,
            queues: Vec::new(),
            group: Some(group),
        };
        sw.create_job(spec(2, 5)).unwrap();
        assert_eq!(sw.groups()[0].job, Some(2));
        assert_eq!(sw.groups()[0].members, vec![addr(3000), addr(3001)]);
        let hand = GroupSpec {
            id: 5,
            members: vec![addr(1)],
        };
        assert_eq!(
            sw.create_group(hand.clone()).unwrap_err().to_string(),
            "multicast group 5 is in use (job 2); pick another id or delete it first"
        );
        assert_eq!(
            sw.delete_group(5),
            Err(JobError::GroupOfJob { group: 5, job: 2 })
        );
        sw.delete_job(2).unwrap();
        assert!(sw.groups().is_empty());
        sw.create_group(hand).unwrap();
        assert!(matches!(
            sw.create_job(spec(2, 5)),
            Err(JobError::GroupInUse { group: 5, .. })
        ));
        assert!(sw.job(2).is_err(), "a refused job is not half-installed");
        assert_eq!(sw.create_job(spec(2, 0)), Err(JobError::GroupZero));
        sw.delete_group(5).unwrap();
        assert_eq!(sw.delete_group(5), Err(JobError::UnknownGroup { group: 5 }));
    }

    #[test]
    fn a_jobs_group_relays_group_datagrams_among_its_workers() {
        let mut sw = switch();
        let workers = vec![addr(3000), addr(3001)];
        sw.create_job(JobSpec {
            child_switches: 0,
            detours: Vec::new(),
            upstream: None,
            id: 2,
            workers,
            pool_base: 30,
            pool_size: 2,
            elements: 2,
            generation: 0,
            queues: Vec::new(),
            group: Some(5),
        })
        .unwrap();
        let mut out = Vec::new();
        assert_eq!(
            sw.process(&group_packet(5, 1, [4, 4]), addr(3001), &mut out),
            Action::Replicate {
                group: 5,
                sender: 1
            }
        );
        assert_eq!(sw.members(5), Some(&[addr(3000), addr(3001)][..]));
    }

    #[test]
    fn bad_groups_are_refused() {
        let mut sw = switch();
        let bad = |members: Vec<SocketAddr>| GroupSpec { id: 3, members };
        assert!(matches!(
            sw.create_group(bad(Vec::new())),
            Err(JobError::BadMembers { count: 0, .. })
        ));
        assert!(matches!(
            sw.create_group(bad(vec![addr(1), addr(1)])),
            Err(JobError::DuplicateMember { .. })
        ));
        assert_eq!(
            sw.create_group(GroupSpec {
                id: 0,
                members: vec![addr(1)]
            }),
            Err(JobError::GroupZero)
        );
    }

    /// A leaf of a tree: job 1 with workers 1000 and 1001, its partial sums
    /// going to job 5 of the parent switch at port 2000 as member 1.
    fn leaf() -> Switch {
        let mut sw = empty_switch();
        let up = Upstream {
            aux: None,
            switch: addr(2000),
            job: 5,
            member: 1,
        };
        sw.create_job(spec(vec![addr(1000), addr(1001)], 0, Some(up)))
            .unwrap();
        sw
    }

    /// The parent's result for job 5, slot 1, set 0, round id 101.
    fn from_parent(count: u16, packet_id: u32, values: [i32; 2]) -> Vec<u8> {
        let repr = Repr {
            kind: Kind::Result,
            count,
            exponent: 130,
            ..Repr::contribution(5, 1, 0, 1, 2, packet_id)
        };
        encode(&repr, &values)
    }

    /// Both leaf workers contribute to slot 1, set 0 ([1, 2] and [10, 20]):
    /// the sum [11, 22] goes up.
    fn complete_at_leaf(sw: &mut Switch, out: &mut Vec<u8>) {
        send(sw, 0, 1, 0, [1, 2], out);
        send(sw, 1, 1, 0, [10, 20], out);
    }

    #[test]
    fn a_leaf_sends_its_complete_sum_up_as_one_weighted_contribution() {
        let mut sw = leaf();
        let mut out = Vec::new();
        assert_eq!(send(&mut sw, 0, 1, 0, [1, 2], &mut out), Action::Absorbed);
        assert_eq!(
            send(&mut sw, 1, 1, 0, [10, -20], &mut out),
            Action::Upstream {
                job: 1,
                to: addr(2000),
                aux: None
            }
        );
        let p = Packet::new_checked(&out[..]).unwrap();
        let up = Repr::parse(&p).unwrap();
        assert_eq!(up.kind, Kind::Contribution);
        assert_eq!((up.job, up.worker, up.slot, up.set), (5, 1, 1, 0));
        assert_eq!((up.count, up.packet_id), (2, 101));
        assert_eq!([p.element(0), p.element(1)], [11, -18]);
        assert_eq!(sw.job(1).unwrap().counters.upstream, 1);
        // Nothing went to the workers: no result yet.
        assert_eq!(sw.job(1).unwrap().counters.results, 0);
    }

    #[test]
    fn a_retransmission_while_the_tree_result_is_away_asks_the_parent_again() {
        let mut sw = leaf();
        let mut out = Vec::new();
        complete_at_leaf(&mut sw, &mut out);
        assert_eq!(
            send(&mut sw, 0, 1, 0, [1, 2], &mut out),
            Action::Upstream {
                job: 1,
                to: addr(2000),
                aux: None
            }
        );
        let p = Packet::new_checked(&out[..]).unwrap();
        assert_eq!(
            [p.element(0), p.element(1)],
            [11, 22],
            "the same sum, not added twice"
        );
        assert_eq!(sw.job(1).unwrap().counters.upstream_resent, 1);
    }

    #[test]
    fn the_parents_result_is_multicast_down_and_kept_for_retransmissions() {
        let mut sw = leaf();
        let mut out = Vec::new();
        complete_at_leaf(&mut sw, &mut out);
        assert_eq!(
            sw.process(&from_parent(5, 101, [111, 222]), addr(2000), &mut out),
            Action::Multicast { job: 1 }
        );
        let (r, v) = result(&out);
        assert_eq!(
            (r.kind, r.job, r.count, r.exponent),
            (Kind::Result, 1, 5, 130)
        );
        assert_eq!(v, [111, 222]);
        // A worker that lost it gets the tree's result, not the leaf's sum.
        assert_eq!(
            send(&mut sw, 1, 1, 0, [10, 20], &mut out),
            Action::Unicast { to: addr(1001) }
        );
        assert_eq!(result(&out), (Repr { worker: 1, ..r }, [111, 222]));
        // A second copy from the parent is not taken again.
        assert_eq!(
            sw.process(&from_parent(5, 101, [111, 222]), addr(2000), &mut out),
            Action::Drop(DropReason::UnexpectedResult)
        );
        assert_eq!(sw.job(1).unwrap().counters.results, 1);
    }

    #[test]
    fn results_from_strangers_or_for_other_rounds_are_dropped() {
        let mut sw = leaf();
        let mut out = Vec::new();
        // Not waiting yet.
        assert_eq!(
            sw.process(&from_parent(2, 101, [1, 1]), addr(2000), &mut out),
            Action::Drop(DropReason::UnexpectedResult)
        );
        complete_at_leaf(&mut sw, &mut out);
        // From someone who is not the parent: a result is not for a switch.
        assert_eq!(
            sw.process(&from_parent(2, 101, [1, 1]), addr(2001), &mut out),
            Action::Drop(DropReason::NotContribution)
        );
        // Another round's id.
        assert_eq!(
            sw.process(&from_parent(2, 99, [1, 1]), addr(2000), &mut out),
            Action::Drop(DropReason::UnexpectedResult)
        );
        assert_eq!(sw.counters().dropped(DropReason::UnexpectedResult), 2);
        // The set still waits for the right one.
        assert_eq!(
            sw.process(&from_parent(2, 101, [7, 7]), addr(2000), &mut out),
            Action::Multicast { job: 1 }
        );
    }

    #[test]
    fn a_parent_counts_a_child_switch_by_the_workers_it_holds() {
        let mut sw = switch();
        let mut out = Vec::new();
        let weighted = |worker: u16, count: u16| {
            let mut p = packet(worker, 0, 0, 0, [1, 1]);
            Packet::new_unchecked(&mut p[..]).set_count(count);
            p
        };
        sw.process(&weighted(0, 4), addr(1000), &mut out);
        sw.process(&weighted(1, 0), addr(1001), &mut out);
        assert_eq!(
            sw.process(&weighted(2, 2), addr(1002), &mut out),
            Action::Multicast { job: 1 }
        );
        assert_eq!(result(&out).0.count, 7);
    }

    /// `packet`'s contribution rewritten as a detour (kind 4).
    fn detour_packet(worker: u16, slot: u16, values: [i32; 2]) -> Vec<u8> {
        let mut p = packet(worker, slot, 0, 0, values);
        Packet::new_unchecked(&mut p[..]).set_kind(Kind::Detour);
        p
    }

    #[test]
    fn a_relay_forwards_matching_detours_unchanged_and_drops_the_rest() {
        let mut sw = switch();
        let relay = RelaySpec {
            job: 1,
            from: addr(3000),
            member: 2,
            to: addr(4000),
        };
        sw.create_relay(relay).unwrap();
        let err = sw.create_relay(relay).unwrap_err();
        assert!(err.to_string().contains("already installed"), "{err}");
        let mut out = Vec::new();
        let d = detour_packet(2, 1, [5, 6]);
        assert_eq!(
            sw.process(&d, addr(3000), &mut out),
            Action::Forward { to: addr(4000) }
        );
        assert_eq!(out, d, "forwarded byte for byte");
        // Job 1 is installed here too, yet the detour touched none of it.
        assert_eq!(sw.job(1).unwrap().counters.contributions, 0);
        // Another member, another sender: no entry, and job 1 lists no
        // detours, so both are dropped.
        let other = detour_packet(1, 1, [5, 6]);
        assert_eq!(
            sw.process(&other, addr(3000), &mut out),
            Action::Drop(DropReason::UnknownRelay)
        );
        assert_eq!(
            sw.process(&d, addr(3001), &mut out),
            Action::Drop(DropReason::UnknownRelay)
        );
        assert_eq!(sw.counters().relayed, 1);
        assert_eq!(sw.counters().dropped(DropReason::UnknownRelay), 2);
        assert_eq!(sw.relays()[0].packets, 1);
        sw.delete_relay(relay.key()).unwrap();
        let err = sw.delete_relay(relay.key()).unwrap_err();
        assert!(err.to_string().contains("no relay job 1 member 2"), "{err}");
    }

    fn empty_switch() -> Switch {
        Switch::new(SwitchConfig {
            slots: 64,
            max_elements: 64,
            ..SwitchConfig::default()
        })
    }

    /// Job 1 (three workers) taking member 2's detours from 3000.
    fn detour_job() -> JobSpec {
        let mut job = spec(vec![addr(1000), addr(1001), addr(1002)], 10, None);
        job.detours = vec![inagg_switch_api::detour::Detour {
            member: 2,
            relay: addr(3000),
        }];
        job
    }

    /// One meaning per match, from both sides: a relay entry under the
    /// fields a job takes detours by is refused, and so is a job whose
    /// detours an installed entry would carry on; other fields pass.
    #[test]
    fn a_relay_entry_and_a_detour_on_the_same_fields_are_refused() {
        let (mut sw, mut job) = (empty_switch(), detour_job());
        sw.create_job(job.clone()).unwrap();
        let mut relay = RelaySpec {
            job: 1,
            from: addr(3000),
            member: 2,
            to: addr(4000),
        };
        let err = sw.create_relay(relay).unwrap_err();
        assert_eq!(
            err.to_string(),
            "relay job 1 member 2 from 127.0.0.1:3000: job 1 here takes member 2's detours \
             from 127.0.0.1:3000; the entry would carry them past it"
        );
        assert!(sw.relays().is_empty());
        relay.member = 1;
        sw.create_relay(relay).unwrap();
        // Now from the job's side: member 1 from the same relay.
        sw.delete_job(1).unwrap();
        job.detours[0].member = 1;
        let err = sw.create_job(job.clone()).unwrap_err();
        assert!(
            err.to_string()
                .contains("member 1's detours from 127.0.0.1:3000 would be carried on"),
            "{err}"
        );
        assert!(sw.job(1).is_err());
        job.detours[0].member = 2;
        sw.create_job(job).unwrap();
    }

    #[test]
    fn a_parent_takes_a_listed_detour_as_its_members_contribution() {
        let (mut sw, job) = (empty_switch(), detour_job());
        sw.create_job(job).unwrap();
        let mut out = Vec::new();
        send(&mut sw, 0, 1, 0, [1, 2], &mut out);
        send(&mut sw, 1, 1, 0, [10, 20], &mut out);
        // Member 2's partial sum the long way round, from its relay.
        let d = detour_packet(2, 1, [100, 200]);
        assert_eq!(
            sw.process(&d, addr(3000), &mut out),
            Action::Multicast { job: 1 }
        );
        assert_eq!(result(&out).1, [111, 222]);
        // Again (the member retransmitted): the stored result goes to the
        // member's own endpoint, not back to the relay.
        assert_eq!(
            sw.process(&d, addr(3000), &mut out),
            Action::Unicast { to: addr(1002) }
        );
        // From a switch that is not member 2's relay, or naming member 1.
        assert_eq!(
            sw.process(&d, addr(3001), &mut out),
            Action::Drop(DropReason::UnknownRelay)
        );
        assert_eq!(
            sw.process(&detour_packet(1, 1, [0, 0]), addr(3000), &mut out),
            Action::Drop(DropReason::UnknownRelay)
        );
        // A detour still passes the job's other checks.
        let mut stale = detour_packet(2, 2, [0, 0]);
        Packet::new_unchecked(&mut stale[..]).set_generation(9);
        assert_eq!(
            sw.process(&stale, addr(3000), &mut out),
            Action::Drop(DropReason::StaleGeneration)
        );
        let c = sw.job(1).unwrap().counters;
        assert_eq!((c.detours_taken, c.dropped), (2, 3));
    }

    /// A switch with job 1: two workers, member 1's detours from 3000.
    fn pair_taking_detours() -> Switch {
        let mut sw = empty_switch();
        let mut job = spec(vec![addr(1000), addr(1001)], 0, None);
        job.detours = vec![inagg_switch_api::detour::Detour {
            member: 1,
            relay: addr(3000),
        }];
        sw.create_job(job).unwrap();
        sw
    }

    #[test]
    fn a_job_taking_detours_drops_late_copies_of_finished_rounds() {
        let mut sw = pair_taking_detours();
        let mut out = Vec::new();
        let with_id = |worker: u16, set: u8, id: u32, v: i32| {
            let repr = Repr::contribution(1, 0, set, worker, 2, id);
            encode(&repr, &[v, v])
        };
        let mut run = |p: Vec<u8>, from: u16| sw.process(&p, addr(from), &mut out);
        // Round 0 (id 10) in set 0, complete; member 0 moves on to round 1.
        run(with_id(0, 0, 10, 1), 1000);
        assert_eq!(
            run(with_id(1, 0, 10, 2), 1001),
            Action::Multicast { job: 1 }
        );
        assert_eq!(run(with_id(0, 1, 11, 1), 1000), Action::Absorbed);
        // A late copy of member 0's round 0: the set still holds member 1.
        assert_eq!(
            run(with_id(0, 0, 10, 1), 1000),
            Action::Drop(DropReason::StaleRound)
        );
        // Member 1 moves on too (set 0 empties); round 1 completes.
        assert_eq!(
            run(with_id(1, 1, 11, 2), 1001),
            Action::Multicast { job: 1 }
        );
        // A late round-0 copy now would start a bogus round in set 0.
        assert_eq!(
            run(with_id(1, 0, 10, 2), 1001),
            Action::Drop(DropReason::StaleRound)
        );
        // Round 2 starts there; a copy with another id cannot join it.
        assert_eq!(run(with_id(0, 0, 12, 5), 1000), Action::Absorbed);
        assert_eq!(
            run(with_id(1, 0, 10, 2), 1001),
            Action::Drop(DropReason::StaleRound)
        );
        assert_eq!(
            run(with_id(1, 0, 12, 6), 1001),
            Action::Multicast { job: 1 }
        );
        assert_eq!(result(&out).1, [11, 11]);
        assert_eq!(sw.counters().dropped(DropReason::StaleRound), 3);
    }

    /// A copy rounds late (seconds in a slow link's queue) finds its set
    /// complete and left by every member, with a newer id than its own,
    /// and starts a round there. The job's next round in that set takes
    /// it over instead of being dropped as another round's: the job goes
    /// on, with exact sums. An older copy still cannot join it.
    #[test]
    fn a_newer_round_takes_over_one_a_late_copy_started() {
        let mut sw = pair_taking_detours();
        let mut out = Vec::new();
        let id = |epoch: u32| epoch << 16;
        let with_id = |worker: u16, epoch: u32, v: i32| {
            let repr = Repr::contribution(1, 0, (epoch & 1) as u8, worker, 2, id(epoch));
            encode(&repr, &[v, v])
        };
        let mut run = |p: Vec<u8>, from: u16| sw.process(&p, addr(from), &mut out);
        // Rounds at epochs 2, 3, 4 and 5, each complete; every member has
        // left set 0 (epoch 4's round) for set 1.
        for epoch in 2..6 {
            run(with_id(0, epoch, 1), 1000);
            assert_eq!(
                run(with_id(1, epoch, 2), 1001),
                Action::Multicast { job: 1 }
            );
        }
        // Member 1's copy of epoch 2, late by three rounds: a round starts.
        assert_eq!(run(with_id(1, 2, 100), 1001), Action::Absorbed);
        // Epoch 6 is newer: member 1's own contribution takes the set over
        // (its bit, set by the late copy, is no retransmission of it).
        assert_eq!(run(with_id(1, 6, 20), 1001), Action::Absorbed);
        // A copy older than the round now summed is dropped.
        assert_eq!(
            run(with_id(0, 4, 1000), 1000),
            Action::Drop(DropReason::StaleRound)
        );
        assert_eq!(run(with_id(0, 6, 10), 1000), Action::Multicast { job: 1 });
        let (repr, values) = result(&out);
        assert_eq!((values, repr.packet_id, repr.count), ([30, 30], id(6), 2));
    }

    #[test]
    fn a_leaf_with_an_auxiliary_path_hands_it_to_the_egress() {
        let mut sw = empty_switch();
        let aux = AuxPath {
            via: addr(3000),
            busy_bound: 2,
            queue_length: 1,
        };
        let up = Upstream {
            switch: addr(2000),
            job: 5,
            member: 1,
            aux: Some(aux),
        };
        sw.create_job(spec(vec![addr(1000)], 0, Some(up))).unwrap();
        let mut out = Vec::new();
        assert_eq!(
            send(&mut sw, 0, 0, 0, [1, 1], &mut out),
            Action::Upstream {
                job: 1,
                to: addr(2000),
                aux: Some(aux)
            }
        );
    }

    #[test]
    fn bad_upstreams_are_refused() {
        let mut sw = Switch::new(SwitchConfig::default());
        let spec = |switch: SocketAddr, member: u16| {
            let up = Upstream {
                aux: None,
                switch,
                job: 1,
                member,
            };
            spec(vec![addr(1000)], 0, Some(up))
        };
        let err = sw.create_job(spec(addr(2000), 64)).unwrap_err();
        assert!(err.to_string().contains("member id 64"), "{err}");
        let err = sw.create_job(spec(addr(1000), 0)).unwrap_err();
        assert!(
            err.to_string().contains("also one of the job's workers"),
            "{err}"
        );
        assert!(sw.create_job(spec(addr(2000), 63)).is_ok());
        // A second job taking the same parent job's results from the same
        // switch: the results could not tell which of the two they are for.
        let mut second = spec(addr(2000), 62);
        second.id = 2;
        second.pool_base = 4;
        let err = sw.create_job(second.clone()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "job 2: upstream job 1 already takes job 1's results from {}; \
                 one job per parent job",
                addr(2000)
            )
        );
        second.upstream.as_mut().unwrap().job = 7;
        assert!(sw.create_job(second).is_ok());
    }
}
