//! The audit: every change asked of the controller (a job created or
//! deleted, a worker registered, a group, a priority entry, a tenant),
//! who asked (the operator or a tenant, by credential), from where, when,
//! and whether it was done or why not. Kept in the database beside the
//! jobs, the newest [`MAX_EVENTS`] entries, numbered across restarts, so
//! that `inagg ctl events` answers "who deleted my job" after the fact.
//! A tenant reads its own entries only.

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use inagg_controller_api::{Caller, Event, MAX_EVENTS};

use crate::store::{Store, StoreError};

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The audit's next number.
#[derive(Debug)]
pub struct Audit {
    next: u64,
}

impl Audit {
    /// Carries on from the entries in `store`.
    pub fn load(store: &Store) -> Result<Audit, StoreError> {
        Ok(Audit {
            next: store.last_event()? + 1,
        })
    }

    /// Records that `caller` at `peer` asked for `what`, and its outcome.
    pub fn record(
        &mut self,
        store: &Store,
        (caller, peer): (&Caller, SocketAddr),
        what: String,
        refused: Option<String>,
    ) -> Result<Event, StoreError> {
        let event = Event {
            seq: self.next,
            at_ms: now_ms(),
            caller: caller.clone(),
            peer,
            what,
            refused,
        };
        store.append_event(event.seq, &event, u64::from(MAX_EVENTS))?;
        self.next += 1;
        Ok(event)
    }

    /// The last `last` entries `caller` may read (the operator every one,
    /// a tenant its own), oldest first.
    pub fn read(store: &Store, caller: &Caller, last: u32) -> Result<Vec<Event>, StoreError> {
        let last = last.min(MAX_EVENTS) as usize;
        store.events(last, |e: &Event| match caller {
            Caller::Operator => true,
            tenant => &e.caller == tenant,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_numbered_across_restarts_kept_bounded_and_read_by_their_tenant() {
        let path = std::env::temp_dir().join(format!("inagg-audit-{}.redb", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let peer: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let a = Caller::Tenant { name: "a".into() };
        {
            let store = Store::open(&path).unwrap();
            let mut audit = Audit::load(&store).unwrap();
            let e = audit
                .record(
                    &store,
                    (&Caller::Operator, peer),
                    "create tenant".into(),
                    None,
                )
                .unwrap();
            assert_eq!(e.seq, 1);
            audit
                .record(
                    &store,
                    (&a, peer),
                    "delete job \"x\"".into(),
                    Some("no".into()),
                )
                .unwrap();
        }
        let store = Store::open(&path).unwrap();
        let mut audit = Audit::load(&store).unwrap();
        let e = audit
            .record(&store, (&a, peer), "create job \"y\"".into(), None)
            .unwrap();
        assert_eq!(e.seq, 3, "numbered on from the stored entries");
        let all = Audit::read(&store, &Caller::Operator, 10).unwrap();
        assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
        let mine = Audit::read(&store, &a, 1).unwrap();
        assert_eq!(mine.len(), 1);
        assert_eq!(mine[0].what, "create job \"y\"");
        let other = Audit::read(&store, &Caller::Tenant { name: "b".into() }, 10).unwrap();
        assert!(other.is_empty());
        // The table keeps the newest `keep`: with 3 kept, entry 1 goes
        // when 4 comes.
        let fourth = Event { seq: 4, ..e };
        store.append_event(4, &fourth, 3).unwrap();
        let kept = Audit::read(&store, &Caller::Operator, 10).unwrap();
        assert_eq!(kept.iter().map(|e| e.seq).collect::<Vec<_>>(), [2, 3, 4]);
        drop(store);
        let _ = std::fs::remove_file(&path);
    }
}
