//! Auxiliary paths (NetStorm's detours, docs/PROTOCOL.md "Auxiliary
//! paths"): what a child switch, the switches on a detour and the parent
//! are given, and the checks each must pass.
//!
//! A tree job's partial sums normally go straight up to the parent switch.
//! When that link is busy, a child given an [`AuxPath`] sends some of them
//! the long way round as detours (kind 4); each switch on the way forwards
//! them unchanged by a [`RelaySpec`], never aggregating them (so a slow
//! detour never holds up a sum it is not part of), and the parent admits
//! them for the member they name when they come from a relay its job lists
//! ([`Detour`]).

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::error::JobError;

/// PRIMARY_BUSY_BOUND of NetStorm's Table II.
pub const DEFAULT_BUSY_BOUND: u16 = 2;
/// AUXILIARY_QUEUE_LENGTH of NetStorm's Table II.
pub const DEFAULT_QUEUE_LENGTH: u16 = 1;

/// A tree job's auxiliary path to its parent (with `JobSpec.upstream`).
///
/// The sender's rule is the paper's, with the egress queues standing for
/// the chunks in flight: a partial sum goes up the primary link unless
/// more than `busy_bound` packets wait on that port; it then goes to `via`
/// as a detour if fewer than `queue_length` wait on that port, and up the
/// primary anyway if not. Only paced ports (a line rate) have queues, so
/// without one every partial sum takes the primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuxPath {
    /// The first switch of the detour (its data-plane endpoint).
    pub via: SocketAddr,
    /// PRIMARY_BUSY_BOUND: packets waiting on the primary port beyond
    /// which it counts as busy.
    #[serde(default = "default_busy_bound")]
    pub busy_bound: u16,
    /// AUXILIARY_QUEUE_LENGTH: the detour is used while fewer packets
    /// than this wait on its port.
    #[serde(default = "default_queue_length")]
    pub queue_length: u16,
}

fn default_busy_bound() -> u16 {
    DEFAULT_BUSY_BOUND
}

fn default_queue_length() -> u16 {
    DEFAULT_QUEUE_LENGTH
}

impl std::str::FromStr for AuxPath {
    type Err = String;

    /// `VIA[/BUSY_BOUND/QUEUE_LENGTH]`, as the CLI takes it:
    /// `10.0.0.3:47000/2/5`; the bounds default to Table II's (2, 1).
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!("{s:?} is not VIA[/BUSY_BOUND/QUEUE_LENGTH] (for example 10.0.0.3:47000/2/1)")
        };
        let parts: Vec<&str> = s.split('/').map(str::trim).collect();
        let via = parts[0].parse().map_err(|_| bad())?;
        let (busy_bound, queue_length) = match parts[1..] {
            [] => (DEFAULT_BUSY_BOUND, DEFAULT_QUEUE_LENGTH),
            [b, q] => (b.parse().map_err(|_| bad())?, q.parse().map_err(|_| bad())?),
            _ => return Err(bad()),
        };
        Ok(AuxPath {
            via,
            busy_bound,
            queue_length,
        })
    }
}

impl std::fmt::Display for AuxPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.via, self.busy_bound, self.queue_length)
    }
}

/// At a parent: member `member`'s partial sums may also arrive as detours
/// from the switch at `relay` (the detour's last hop).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Detour {
    /// The member (a child switch) the detours carry.
    pub member: u16,
    /// The data-plane endpoint they arrive from.
    pub relay: SocketAddr,
}

impl Detour {
    /// The fields job `job`'s detours for this member arrive under: what a
    /// relay entry at the same switch must never match (docs/PROTOCOL.md,
    /// "One meaning per match").
    pub fn key(&self, job: u16) -> RelayKey {
        RelayKey {
            job,
            from: self.relay,
            member: self.member,
        }
    }
}

impl std::str::FromStr for Detour {
    type Err = String;

    /// `MEMBER=RELAY`, as the CLI takes it: `3=10.0.0.4:47000`.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not MEMBER=RELAY (for example 3=10.0.0.4:47000)");
        let (member, relay) = s.split_once('=').ok_or_else(bad)?;
        Ok(Detour {
            member: member.trim().parse().map_err(|_| bad())?,
            relay: relay.trim().parse().map_err(|_| bad())?,
        })
    }
}

impl std::fmt::Display for Detour {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.member, self.relay)
    }
}

/// A relay-table entry of a switch on a detour: detours naming `job` and
/// member `member` that arrive from `from` go on, unchanged, to `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelaySpec {
    /// The job id the detours carry (the parent's).
    pub job: u16,
    /// The previous hop's data-plane endpoint.
    pub from: SocketAddr,
    /// The member id the detours carry (the child's, at the parent).
    pub member: u16,
    /// The next hop's data-plane endpoint (the parent, or the next relay).
    pub to: SocketAddr,
}

impl RelaySpec {
    /// What a detour is matched on.
    pub fn key(&self) -> RelayKey {
        RelayKey {
            job: self.job,
            from: self.from,
            member: self.member,
        }
    }
}

/// The match fields of a relay entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RelayKey {
    /// The detours' job id.
    pub job: u16,
    /// The previous hop.
    pub from: SocketAddr,
    /// The detours' member id.
    pub member: u16,
}

impl std::fmt::Display for RelayKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "job {} member {} from {}",
            self.job, self.member, self.from
        )
    }
}

/// A relay entry as the switch reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayInfo {
    /// What was installed.
    pub spec: RelaySpec,
    /// Detours forwarded by it.
    pub packets: u64,
}

/// Checks a relay entry on its own (keys in use are the switch's check).
pub fn check_relay(spec: &RelaySpec) -> Result<(), JobError> {
    let bad = |reason: String| {
        Err(JobError::BadRelay {
            key: spec.key().to_string(),
            reason,
        })
    };
    if spec.to == spec.from {
        return bad(format!("it would send detours back to {}", spec.from));
    }
    if usize::from(spec.member) >= inagg_wire::MAX_WORKERS {
        return bad(format!(
            "member id {} is beyond the {} bitmap bits a parent has",
            spec.member,
            inagg_wire::MAX_WORKERS
        ));
    }
    Ok(())
}

/// Checks a job's detours: the members they name exist, none twice.
pub fn check_detours(id: u16, workers: &[SocketAddr], detours: &[Detour]) -> Result<(), JobError> {
    let bad = |reason: String| Err(JobError::BadDetour { id, reason });
    for (i, d) in detours.iter().enumerate() {
        let Some(member) = workers.get(usize::from(d.member)) else {
            return bad(format!(
                "detours for member {}, but the job has {} members",
                d.member,
                workers.len()
            ));
        };
        if *member == d.relay {
            return bad(format!(
                "member {}'s relay {} is the member itself",
                d.member, d.relay
            ));
        }
        if detours[..i].contains(d) {
            return bad(format!("{d} is listed twice"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{check_aux_path, Upstream};

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn command_line_forms_parse_and_print_back() {
        let aux: AuxPath = "10.0.0.3:47000".parse().unwrap();
        assert_eq!((aux.busy_bound, aux.queue_length), (2, 1));
        let aux: AuxPath = "10.0.0.3:47000/4/5".parse().unwrap();
        assert_eq!(aux.to_string(), "10.0.0.3:47000/4/5");
        assert!("10.0.0.3:47000/4".parse::<AuxPath>().is_err());
        assert!("nowhere/1/1".parse::<AuxPath>().is_err());
        let d: Detour = "3=10.0.0.4:47000".parse().unwrap();
        assert_eq!(d.to_string(), "3=10.0.0.4:47000");
        let err = "3:10.0.0.4".parse::<Detour>().unwrap_err();
        assert!(err.contains("MEMBER=RELAY"), "{err}");
    }

    #[test]
    fn bad_relays_and_detours_are_refused_with_the_reason() {
        let a = addr("10.0.0.1:1");
        let b = addr("10.0.0.2:1");
        let loop_back = RelaySpec {
            job: 1,
            from: a,
            member: 0,
            to: a,
        };
        let err = check_relay(&loop_back).unwrap_err().to_string();
        assert!(err.contains("back to 10.0.0.1:1"), "{err}");
        let wide = RelaySpec {
            member: 64,
            to: b,
            ..loop_back
        };
        assert!(check_relay(&wide).unwrap_err().to_string().contains("64"));

        let workers = [a, b];
        let d = |member, relay| Detour { member, relay };
        let ok = [d(1, addr("10.0.0.9:1"))];
        assert_eq!(check_detours(5, &workers, &ok), Ok(()));
        let err = check_detours(5, &workers, &[d(2, a)]).unwrap_err();
        assert!(err.to_string().contains("the job has 2 members"), "{err}");
        let err = check_detours(5, &workers, &[d(1, b)]).unwrap_err();
        assert!(err.to_string().contains("the member itself"), "{err}");
        let err = check_detours(5, &workers, &[ok[0], ok[0]]).unwrap_err();
        assert!(err.to_string().contains("twice"), "{err}");
        let parent = addr("10.0.0.7:1");
        let up = |via, queue_length| Upstream {
            switch: parent,
            job: 1,
            member: 0,
            aux: Some(AuxPath {
                via,
                busy_bound: 2,
                queue_length,
            }),
        };
        let err = check_aux_path(5, &up(parent, 1));
        assert!(err.unwrap_err().to_string().contains("parent"));
        let err = check_aux_path(5, &up(b, 0));
        assert!(err.unwrap_err().to_string().contains("length of 0"));
        assert_eq!(check_aux_path(5, &up(b, 1)), Ok(()));
    }
}
