//! dSyncPS: local synchronisation every round at each worker's primary
//! server, global synchronisation among servers every T local rounds, and
//! servers and workers joining and leaving mid-training (docs/PAPERS.md,
//! "dSyncPS", which rebuilds the global-sync protocol the paper describes
//! only in prose).
//!
//! - [`GlobalSync`]: the status table and the advance/defer rule for a
//!   server that joins while global syncs are under way.
//! - [`Eviction`]: a worker scoring below V_tau for N_tau rounds in a row is
//!   evicted.
//! - [`should_switch`]: the worker-initiated load balancing rule (switch
//!   primary server when a candidate's load x RTT is 20% lower).

use std::collections::BTreeMap;

/// A server's row in the status table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Row {
    /// Local aggregations since this server's last global sync.
    local: u32,
    ready: bool,
    /// Joined and has not yet done its first global sync.
    new: bool,
}

/// What a server joining mid-training is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    /// No global sync is running: it takes part in the next one, which is
    /// deferred by one iteration so it can be counted in.
    Deferred { sync: u64 },
    /// A global sync is running (or just finished without it): the next
    /// one is advanced to the next iteration so the newcomer catches up.
    Advanced { sync: u64 },
}

/// The global-sync status table.
#[derive(Debug, Clone)]
pub struct GlobalSync {
    t: u32,
    rows: BTreeMap<u32, Row>,
    /// Global syncs completed.
    pub done: u64,
    running: bool,
    /// The next sync is due after this many local rounds (T, or 1 when
    /// advanced).
    due: u32,
}

impl GlobalSync {
    /// Servers `ids`, a global sync every `t` local aggregations.
    pub fn new(t: u32, ids: impl IntoIterator<Item = u32>) -> GlobalSync {
        let rows = ids
            .into_iter()
            .map(|id| {
                (
                    id,
                    Row {
                        local: 0,
                        ready: false,
                        new: false,
                    },
                )
            })
            .collect();
        GlobalSync {
            t: t.max(1),
            rows,
            done: 0,
            running: false,
            due: t.max(1),
        }
    }

    /// Servers in the table.
    pub fn servers(&self) -> Vec<u32> {
        self.rows.keys().copied().collect()
    }

    /// Server `id` finished a local aggregation. Returns true when it must
    /// now write its parameters and mark itself ready (SRV_SYNC to peers).
    pub fn local_done(&mut self, id: u32) -> bool {
        let due = self.due;
        let Some(row) = self.rows.get_mut(&id) else {
            return false;
        };
        row.local += 1;
        if !row.ready && (row.local >= due || row.new) {
            row.ready = true;
            self.running = true;
        }
        row.ready
    }

    /// Whether every server is ready: one of them aggregates globally.
    pub fn all_ready(&self) -> bool {
        !self.rows.is_empty() && self.rows.values().all(|r| r.ready)
    }

    /// The global aggregation finished: every server fetched the new base.
    pub fn finish(&mut self) {
        for r in self.rows.values_mut() {
            *r = Row {
                local: 0,
                ready: false,
                new: false,
            };
        }
        self.done += 1;
        self.running = false;
        self.due = self.t;
    }

    /// A server joins (the advance/defer rule).
    pub fn join(&mut self, id: u32) -> Join {
        let sync = self.done + 1;
        self.rows.insert(
            id,
            Row {
                local: 0,
                ready: false,
                new: true,
            },
        );
        if self.running {
            // Sync `sync` is running without it: sync + 1 comes at the next
            // iteration.
            self.due = 1;
            Join::Advanced { sync: sync + 1 }
        } else {
            Join::Deferred { sync }
        }
    }

    /// A server leaves (or its heartbeat timed out): it is no longer waited
    /// for.
    pub fn leave(&mut self, id: u32) {
        self.rows.remove(&id);
    }
}

/// The eviction rule: N_tau low scores in a row.
#[derive(Debug, Clone, Default)]
pub struct Eviction {
    streak: BTreeMap<u32, u32>,
}

impl Eviction {
    /// Worker `id` scored `score` against threshold `v_tau`. Returns
    /// (send its update, evict it).
    pub fn score(&mut self, id: u32, score: f64, v_tau: f64, n_tau: u32) -> (bool, bool) {
        let s = self.streak.entry(id).or_insert(0);
        if score >= v_tau {
            *s = 0;
            (true, false)
        } else {
            *s += 1;
            (false, *s >= n_tau)
        }
    }
}

/// The load balancing rule: switch when the candidate's load x RTT is at
/// least 20% lower than the current server's (hysteresis against flapping).
pub fn should_switch(current: f64, candidate: f64) -> bool {
    candidate < 0.8 * current
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_sync_every_t_and_joins() {
        let mut g = GlobalSync::new(3, [0, 1]);
        for _ in 0..2 {
            assert!(!g.local_done(0) && !g.local_done(1));
        }
        assert!(g.local_done(0));
        assert!(!g.all_ready());
        // Server 2 joins while sync 1 is running: sync 2 is advanced.
        assert_eq!(g.join(2), Join::Advanced { sync: 2 });
        assert!(g.local_done(1));
        assert!(g.local_done(2), "a new server is ready at once");
        assert!(g.all_ready());
        g.finish();
        assert_eq!(g.done, 1);
        // T = 3 again after the sync.
        assert!(!g.local_done(0));
        // A join between syncs is deferred into the next one.
        let mut h = GlobalSync::new(3, [0]);
        assert_eq!(h.join(1), Join::Deferred { sync: 1 });
        h.leave(1);
        assert_eq!(h.servers(), vec![0]);
    }

    #[test]
    fn eviction_and_switching() {
        let mut e = Eviction::default();
        for i in 0..9 {
            assert_eq!(e.score(7, 0.1, 0.5, 10), (false, false), "round {i}");
        }
        assert_eq!(e.score(7, 0.1, 0.5, 10), (false, true));
        assert_eq!(e.score(8, 0.9, 0.5, 10), (true, false));
        assert!(should_switch(10.0, 7.9));
        assert!(!should_switch(10.0, 8.5));
    }
}
