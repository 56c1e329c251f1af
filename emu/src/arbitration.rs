//! Which control connection may change the switch: P4Runtime's client
//! arbitration (its "Client Arbitration and Controller Replication"
//! section), as bmv2 does it, on the emulator's control endpoint.
//!
//! A controller claims the switch with an election id when it connects
//! (`Request::Arbitrate`). Of the connected claimants the highest id is the
//! primary, and while any connection holds a claim only the primary may
//! change what a controller keeps in step (jobs, groups, relays, the
//! priority map, the faults: `Request::managed`). Without this a second controller
//! started by mistake against the same switch, with its own state, would
//! remove every job of the first at its first reconcile.
//!
//! Two departures from P4Runtime, both for the emulator's standalone use:
//! a connection that never claims may still read, and may change the
//! switch while nobody holds a claim (`inagg ctl` straight to an emulator,
//! tests, benchmarks); and a claim that would not be primary is refused and
//! not kept as a backup (the client tries again later, as inagg's
//! controller does at every reconcile), so a claim is either primary or
//! was primary until a higher one came.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use inagg_switch_api::ApiError;

/// A control connection, numbered by the server.
pub type ConnId = u64;

/// The claims of the open control connections.
#[derive(Debug, Default)]
pub struct Arbitration {
    claims: BTreeMap<ConnId, Claim>,
    next: ConnId,
}

#[derive(Debug, Clone, Copy)]
struct Claim {
    election_id: u64,
    peer: SocketAddr,
}

impl Arbitration {
    /// Numbers a new connection.
    pub fn open(&mut self) -> ConnId {
        self.next += 1;
        self.next
    }

    /// Forgets a closed connection's claim: the next highest (if any) is
    /// primary again.
    pub fn close(&mut self, conn: ConnId) {
        if self.claims.remove(&conn).is_some() {
            match self.primary() {
                Some(c) => tracing::info!(
                    "a controller's connection closed; the primary is the one connected from {}",
                    c.peer
                ),
                None => tracing::info!("the primary controller's connection closed"),
            }
        }
    }

    /// `conn`, connected from `peer`, claims the switch with
    /// `election_id`. Refused when another connection holds the same id or
    /// a higher one.
    pub fn claim(
        &mut self,
        conn: ConnId,
        election_id: u64,
        peer: SocketAddr,
    ) -> Result<(), ApiError> {
        if election_id == 0 {
            return Err(ApiError::Invalid {
                message: "election id 0: a controller claims with 1 or more".into(),
            });
        }
        let rival = self
            .claims
            .iter()
            .filter(|&(&c, claim)| c != conn && claim.election_id >= election_id)
            .max_by_key(|(_, claim)| claim.election_id);
        if let Some((_, rival)) = rival {
            return Err(ApiError::NotPrimary {
                ours: Some(election_id),
                primary: rival.election_id,
                peer: rival.peer,
            });
        }
        self.claims.insert(conn, Claim { election_id, peer });
        tracing::info!(
            "the controller connected from {peer} is primary (election id {election_id})"
        );
        Ok(())
    }

    /// Whether `conn` may change what a controller keeps in step: it is
    /// the primary, or nobody holds a claim.
    pub fn may_change(&self, conn: ConnId) -> Result<(), ApiError> {
        let Some(primary) = self.primary() else {
            return Ok(());
        };
        if self.claims.get(&conn).map(|c| c.election_id) == Some(primary.election_id) {
            return Ok(());
        }
        Err(ApiError::NotPrimary {
            ours: self.claims.get(&conn).map(|c| c.election_id),
            primary: primary.election_id,
            peer: primary.peer,
        })
    }

    fn primary(&self) -> Option<Claim> {
        self.claims.values().copied().max_by_key(|c| c.election_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn the_highest_claim_is_primary_and_only_it_changes_the_switch() {
        let mut a = Arbitration::default();
        let (first, second, reader) = (a.open(), a.open(), a.open());
        // Nobody claims: anyone may change the switch.
        assert!(a.may_change(reader).is_ok());
        a.claim(first, 1, peer(1)).unwrap();
        assert!(a.may_change(first).is_ok());
        let e = a.may_change(reader).unwrap_err();
        assert_eq!(
            e,
            ApiError::NotPrimary {
                ours: None,
                primary: 1,
                peer: peer(1)
            }
        );
        // The same id from another connection is refused, and so is a lower one.
        let same = a.claim(second, 1, peer(2)).unwrap_err();
        assert!(
            matches!(same, ApiError::NotPrimary { primary: 1, .. }),
            "{same}"
        );
        assert!(a.may_change(second).is_err());
        // A higher one takes over; the first may no longer change anything,
        // until the higher one leaves.
        a.claim(second, 5, peer(2)).unwrap();
        assert!(a.may_change(second).is_ok());
        let e = a.may_change(first).unwrap_err();
        assert_eq!(
            e,
            ApiError::NotPrimary {
                ours: Some(1),
                primary: 5,
                peer: peer(2)
            }
        );
        a.close(second);
        assert!(a.may_change(first).is_ok());
        a.close(first);
        assert!(a.may_change(reader).is_ok());
        assert!(matches!(
            a.claim(reader, 0, peer(3)),
            Err(ApiError::Invalid { .. })
        ));
    }

    #[test]
    fn the_refusal_says_who_is_primary_and_what_to_do() {
        let e = ApiError::NotPrimary {
            ours: None,
            primary: 1,
            peer: peer(9),
        };
        assert_eq!(
            e.to_string(),
            "another controller manages this switch: the one connected from 127.0.0.1:9, with \
             election id 1; change the switch through it (ctl --controller), stop it, or claim \
             with a higher --election-id"
        );
    }
}
