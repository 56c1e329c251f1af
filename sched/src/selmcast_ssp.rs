//! SELMCAST for SSP training (Algorithm 2; docs/PAPERS.md,
//! "SELMCAST for SSP"): online receiver selection, run each time a worker
//! finishes a round and becomes ready to multicast its update while other
//! workers' multicasts (the running tasks G) are still in flight.
//!
//! Admitting sender kappa may drop receivers from running tasks (they are
//! preempted to make room) but never adds a receiver a task has dropped: a
//! receiver dropped from a task is not re-selected for that sender in the
//! same round. The returned order is also the tasks' strict priority on the
//! wire (work-conserving), which the paper requires of the transport.
//!
//! Erratum readings, named where they are followed:
//! - **Init-volume**: line 2 sets v_kappa,j to "v_i"; read v_kappa (the new
//!   task's own volume).
//! - **Order-tau-nondecreasing**: the prose says tasks are taken in
//!   non-increasing order of tau (their blocking time) but line 13 says
//!   non-decreasing; the code's order is followed: a task whose sender will
//!   be blocked anyway (large tau) is least urgent. Ties go to the task
//!   admitted first.
//! - **Pareto-uses-y**: line 32 sums v_lj x_lj where line 25 sums
//!   v_lj y_lj; the new plan y is used in both.
//! - **Load-excludes-sender**: line 16's load sums over l != j; read
//!   l != i (the other senders' load on j, to which i's volume is added).
//!
//! The L3 and L7 send costs are the BSP module's ([`Multicast`]).

use rand::seq::SliceRandom;
use rand::Rng;

use super::selmcast::Multicast;
/// The per-sender consistency rule, shared with BSP's [`super::selmcast::History`].
pub use super::selmcast::SenderHistory;

/// One sender's multicast for one of its rounds.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// v_i: the update's size, bytes.
    pub volume: f64,
    /// x_i,j: receivers still in the plan.
    pub receivers: Vec<bool>,
    /// v_i,j: bytes receiver j still lacks (meaningful where selected).
    pub remaining: Vec<f64>,
    /// tau_i: how long the sender would still wait for the SSP bound if
    /// this task finished now (0 unless it is ahead of a straggler).
    pub tau: f64,
    /// D: receivers this sender has not reached in its last k rounds.
    pub forced: Vec<bool>,
    /// c_i,j: this sender's rounds since it last reached j.
    pub since: Vec<u32>,
    /// p_i: least receivers.
    pub p: usize,
    /// Admission order, for ties.
    admitted: u64,
}

impl Task {
    /// Sender `i`'s fresh task over `n` workers: every other worker is a
    /// candidate receiver and lacks all `volume` bytes.
    pub fn new(
        n: usize,
        i: usize,
        volume: f64,
        p: usize,
        forced: Vec<bool>,
        since: Vec<u32>,
    ) -> Task {
        let receivers: Vec<bool> = (0..n).map(|j| j != i).collect();
        Task {
            volume,
            receivers,
            remaining: vec![volume; n],
            tau: 0.0,
            forced,
            since,
            p: p.min(n.saturating_sub(1)),
            admitted: 0,
        }
    }

    /// Receivers in the plan.
    pub fn receiver_list(&self) -> Vec<usize> {
        (0..self.receivers.len())
            .filter(|&j| self.receivers[j])
            .collect()
    }

    /// What the sender still sends (s_i): the largest remaining volume
    /// under L3, their sum under L7.
    fn sends(&self, mode: Multicast, y: &[bool]) -> f64 {
        let selected = (0..y.len()).filter(|&j| y[j]).map(|j| self.remaining[j]);
        match mode {
            Multicast::L3 => selected.fold(0.0, f64::max),
            Multicast::L7 => selected.sum(),
        }
    }
}

/// The controller's view of the multicasts in flight.
#[derive(Debug, Clone)]
pub struct Online {
    /// b_i^I, bytes per second.
    pub uplink: Vec<f64>,
    /// b_j^E, bytes per second.
    pub downlink: Vec<f64>,
    pub mode: Multicast,
    /// eta: a receiver that lacks less than eta v_i is kept (it already has
    /// more than 1 - eta of the update; dropping it would waste that).
    pub eta: f64,
    /// G: the running task of each sender, if any.
    pub tasks: Vec<Option<Task>>,
    admissions: u64,
}

impl Online {
    /// No task running.
    pub fn new(uplink: Vec<f64>, downlink: Vec<f64>, mode: Multicast, eta: f64) -> Online {
        let n = uplink.len();
        Online {
            uplink,
            downlink,
            mode,
            eta,
            tasks: vec![None; n],
            admissions: 0,
        }
    }

    /// Workers.
    pub fn n(&self) -> usize {
        self.uplink.len()
    }

    /// Removes sender i's task (it finished); returns it.
    pub fn finish(&mut self, i: usize) -> Option<Task> {
        self.tasks.get_mut(i)?.take()
    }

    /// The running tasks in priority order (L): tau non-decreasing
    /// (reading Order-tau-nondecreasing), ties to the earlier admission.
    pub fn order(&self) -> Vec<usize> {
        let mut l: Vec<usize> = (0..self.n()).filter(|&i| self.tasks[i].is_some()).collect();
        l.sort_by(|&a, &b| {
            let (ta, tb) = (self.task(a), self.task(b));
            ta.tau
                .total_cmp(&tb.tau)
                .then(ta.admitted.cmp(&tb.admitted))
        });
        l
    }

    fn task(&self, i: usize) -> &Task {
        self.tasks[i].as_ref().expect("running task")
    }

    fn insert(&mut self, kappa: usize, mut task: Task) {
        self.admissions += 1;
        task.admitted = self.admissions;
        task.receivers[kappa] = false;
        self.tasks[kappa] = Some(task);
    }

    /// Algorithm 2: admits sender kappa's task (from [`Task::new`]) and
    /// replans every running task; returns the priority order L.
    pub fn admit(&mut self, kappa: usize, task: Task) -> Vec<usize> {
        self.insert(kappa, task);
        let order = self.order();
        let mut y = self.keep_committed();
        let mut load = self.loads(&y);
        self.top_up(&order, &mut y, &mut load);
        self.pareto(&order, &mut y, &mut load);
        for (i, row) in y.iter().enumerate() {
            if let Some(t) = self.tasks[i].as_mut() {
                t.receivers.clone_from(row);
            }
        }
        order
    }

    /// Lines 8-12: the pairs kept whatever happens: forced, or mostly
    /// delivered already (v_ij < eta v_i).
    fn keep_committed(&self) -> Vec<Vec<bool>> {
        let n = self.n();
        let mut y = vec![vec![false; n]; n];
        for (i, t) in self.tasks.iter().enumerate() {
            let Some(t) = t else { continue };
            for j in t.receiver_list() {
                y[i][j] = t.forced[j] || t.remaining[j] < self.eta * t.volume;
            }
        }
        y
    }

    /// r_j: the bytes receiver j still lacks over the plan y.
    fn loads(&self, y: &[Vec<bool>]) -> Vec<f64> {
        let mut load = vec![0.0; self.n()];
        for (i, t) in self.tasks.iter().enumerate() {
            let Some(t) = t else { continue };
            for (j, l) in load.iter_mut().enumerate() {
                if y[i][j] {
                    *l += t.remaining[j];
                }
            }
        }
        load
    }

    /// Lines 13-20: each task in order takes its lightest-loaded current
    /// receivers up to p_i (reading Load-excludes-sender).
    fn top_up(&self, order: &[usize], y: &mut [Vec<bool>], load: &mut [f64]) {
        let n = self.n();
        for &i in order {
            let t = self.task(i);
            let have = y[i].iter().filter(|&&b| b).count();
            let want = t.p.saturating_sub(have);
            let mut free: Vec<usize> = (0..n).filter(|&j| t.receivers[j] && !y[i][j]).collect();
            let after = |j: usize| (t.remaining[j] + load[j]) / self.downlink[j];
            // Ties go to the receivers just after i, cyclically, as in BSP.
            let cyclic = |j: usize| (j + n - i - 1) % n;
            free.sort_by(|&a, &b| {
                after(a)
                    .total_cmp(&after(b))
                    .then(cyclic(a).cmp(&cyclic(b)))
            });
            for &j in free.iter().take(want) {
                y[i][j] = true;
                load[j] += t.remaining[j];
            }
        }
    }

    /// Lines 21-36: each task's own deadline t_i under the basic plan, then
    /// adds back current receivers, longest unserved first, where neither
    /// the sender's nor the receiver's time passes the task's deadline
    /// (reading Pareto-uses-y).
    fn pareto(&self, order: &[usize], y: &mut [Vec<bool>], load: &mut [f64]) {
        let n = self.n();
        let deadline: Vec<f64> = (0..n)
            .map(|i| match &self.tasks[i] {
                None => 0.0,
                Some(t) => (0..n)
                    .filter(|&j| y[i][j])
                    .map(|j| load[j] / self.downlink[j])
                    .fold(
                        t.tau.max(t.sends(self.mode, &y[i]) / self.uplink[i]),
                        f64::max,
                    ),
            })
            .collect();
        let rank: Vec<usize> = {
            let mut r = vec![usize::MAX; n];
            for (k, &i) in order.iter().enumerate() {
                r[i] = k;
            }
            r
        };
        // Longest unserved first; ties in priority order, then by receiver.
        let mut candidates: Vec<(std::cmp::Reverse<u32>, usize, usize, usize)> = Vec::new();
        for &i in order {
            let t = self.task(i);
            for j in (0..n).filter(|&j| t.receivers[j] && !y[i][j]) {
                candidates.push((std::cmp::Reverse(t.since[j]), rank[i], j, i));
            }
        }
        candidates.sort_unstable();
        let fits = |x: f64, bw: f64, t: f64| x / bw <= t * (1.0 + 1e-12);
        let mut sent: Vec<f64> = (0..n)
            .map(|i| {
                self.tasks[i]
                    .as_ref()
                    .map_or(0.0, |t| t.sends(self.mode, &y[i]))
            })
            .collect();
        for (_, _, j, i) in candidates {
            let v = self.task(i).remaining[j];
            let s = match self.mode {
                Multicast::L3 => sent[i].max(v),
                Multicast::L7 => sent[i] + v,
            };
            let r = load[j] + v;
            if fits(s, self.uplink[i], deadline[i]) && fits(r, self.downlink[j], deadline[i]) {
                y[i][j] = true;
                sent[i] = s;
                load[j] = r;
            }
        }
    }

    /// The baseline (Orpheus honouring k, for SSP): sender kappa takes its
    /// forced receivers and random others up to p; running tasks are left
    /// alone. Returns the running tasks in admission order.
    pub fn admit_random(&mut self, kappa: usize, mut task: Task, rng: &mut impl Rng) -> Vec<usize> {
        let n = self.n();
        let mut chosen: Vec<bool> = (0..n).map(|j| j != kappa && task.forced[j]).collect();
        let have = chosen.iter().filter(|&&b| b).count();
        let mut free: Vec<usize> = (0..n).filter(|&j| j != kappa && !chosen[j]).collect();
        free.shuffle(rng);
        for &j in free.iter().take(task.p.saturating_sub(have)) {
            chosen[j] = true;
        }
        task.receivers = chosen;
        self.insert(kappa, task);
        let mut l: Vec<usize> = (0..n).filter(|&i| self.tasks[i].is_some()).collect();
        l.sort_by_key(|&i| self.task(i).admitted);
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn fresh(n: usize, i: usize, p: usize) -> Task {
        Task::new(n, i, 100.0, p, vec![false; n], vec![0; n])
    }

    #[test]
    fn a_lone_task_keeps_every_receiver_the_ports_allow() {
        // Equal ports, L3: the first task's deadline is its own send time
        // over any one receiver, and adding receivers never lengthens it.
        let mut o = Online::new(vec![1.0; 6], vec![1.0; 6], Multicast::L3, 0.75);
        let l = o.admit(2, fresh(6, 2, 2));
        assert_eq!(l, vec![2]);
        assert_eq!(
            o.tasks[2].as_ref().unwrap().receiver_list(),
            vec![0, 1, 3, 4, 5]
        );
    }

    #[test]
    fn a_new_task_preempts_receivers_of_running_ones() {
        // Task 1 runs alone and takes every receiver. Task 2 arrives with
        // nothing delivered anywhere: task 1 is trimmed so that no receiver
        // carries more than one deadline (100 s) of bytes, and a receiver
        // it lost does not come back at the next admission.
        let mut o = Online::new(vec![1.0; 5], vec![1.0; 5], Multicast::L3, 0.75);
        o.admit(1, fresh(5, 1, 1));
        assert_eq!(
            o.tasks[1].as_ref().unwrap().receiver_list(),
            vec![0, 2, 3, 4]
        );
        o.admit(2, fresh(5, 2, 1));
        let (t1, t2) = (o.tasks[1].clone().unwrap(), o.tasks[2].clone().unwrap());
        assert_eq!(t1.receiver_list(), vec![0, 2, 4]);
        assert_eq!(t2.receiver_list(), vec![1, 3]);
        assert!((0..5).all(|j| !(t1.receivers[j] && t2.receivers[j])));
        o.finish(2);
        o.admit(3, fresh(5, 3, 1));
        assert!(!o.tasks[1].as_ref().unwrap().receivers[3]);
    }

    #[test]
    fn a_slow_receiver_is_left_out_when_it_would_set_the_deadline() {
        let down = vec![0.25, 1.0, 1.0, 1.0, 1.0];
        let mut o = Online::new(vec![1.0; 5], down, Multicast::L3, 0.75);
        o.admit(1, fresh(5, 1, 1));
        // Receiver 0 takes 400 s for what the others take in 100 s.
        assert_eq!(o.tasks[1].as_ref().unwrap().receiver_list(), vec![2, 3, 4]);
    }

    #[test]
    fn forced_and_mostly_delivered_receivers_are_kept_and_dropped_ones_never_return() {
        let mut o = Online::new(vec![1.0; 4], vec![1.0; 4], Multicast::L7, 0.75);
        let mut forced = vec![false; 4];
        forced[3] = true;
        o.admit(0, Task::new(4, 0, 100.0, 1, forced, vec![0; 4]));
        {
            let t0 = o.tasks[0].as_mut().unwrap();
            t0.remaining = vec![100.0, 10.0, 100.0, 100.0];
            t0.receivers = vec![false, true, false, true];
        }
        // Sender 1 arrives; 0 keeps 3 (forced) and 1 (90% delivered) and
        // never regains 2.
        o.admit(1, fresh(4, 1, 3));
        let t0 = o.tasks[0].as_ref().unwrap();
        assert!(t0.receivers[1] && t0.receivers[3] && !t0.receivers[2]);
        let t1 = o.tasks[1].as_ref().unwrap();
        assert_eq!(t1.receiver_list(), vec![0, 2, 3]);
    }

    #[test]
    fn blocked_senders_come_last_and_get_looser_deadlines() {
        let mut o = Online::new(vec![1.0; 5], vec![1.0; 5], Multicast::L3, 0.75);
        let mut blocked = fresh(5, 0, 1);
        blocked.tau = 1000.0;
        o.admit(0, blocked);
        let l = o.admit(1, fresh(5, 1, 1));
        assert_eq!(l, vec![1, 0]);
        // With a 1000 s deadline the blocked task keeps every receiver.
        assert_eq!(o.tasks[0].as_ref().unwrap().receiver_list().len(), 4);
    }

    #[test]
    fn the_random_baseline_honours_p_and_k_and_leaves_others_alone() {
        let mut o = Online::new(vec![1.0; 10], vec![1.0; 10], Multicast::L3, 0.75);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        o.admit_random(0, fresh(10, 0, 3), &mut rng);
        let before = o.tasks[0].clone();
        let mut forced = vec![false; 10];
        forced[7] = true;
        forced[8] = true;
        let t = Task::new(10, 4, 100.0, 3, forced, vec![0; 10]);
        o.admit_random(4, t, &mut rng);
        assert_eq!(o.tasks[0], before);
        let t4 = o.tasks[4].as_ref().unwrap();
        assert_eq!(t4.receiver_list().len(), 3);
        assert!(t4.receivers[7] && t4.receivers[8] && !t4.receivers[4]);
    }

    #[test]
    fn sender_history_forces_receivers_after_k_rounds() {
        let mut h = SenderHistory::new(3, 2);
        let only_1 = [false, true, false];
        h.record(0, &only_1);
        assert_eq!(h.forced(0), vec![false, false, false]);
        h.record(0, &only_1);
        assert_eq!(h.forced(0), vec![false, false, true]);
        assert_eq!(h.since(0), vec![0, 0, 2]);
        // Another sender's rounds do not count for sender 0.
        h.record(1, &[false, false, false]);
        assert_eq!(h.since(0), vec![0, 0, 2]);
    }
}
