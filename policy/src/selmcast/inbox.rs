//! What a receiver holds of the updates multicast to it: one entry per
//! (sender, round) it was told to expect, filled chunk by chunk from group
//! datagrams, with the reports the manager needs (complete, or the chunks
//! to repair). BSP and SSP peers share it: BSP expects a round's senders
//! all at once, SSP one at a time, and may be told to forget one.
//!
//! Group datagrams carry the chunk index in the low [`CHUNK_BITS`] bits of
//! the packet id and the sender's round (mod 4096) above them, so a
//! datagram of an earlier round (a sender's group id is the same every
//! round) is never taken for this round's.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Bits of the packet id that hold the chunk index.
pub(crate) const CHUNK_BITS: u32 = 20;

/// The packet id of chunk `chunk` of a sender's round `round`.
pub(crate) fn packet_id(round: u64, chunk: usize) -> u32 {
    ((round as u32 & 0xfff) << CHUNK_BITS) | chunk as u32
}

/// Fails when an update of `values` values needs more chunks of `elements`
/// than a packet id can number.
pub(crate) fn check_chunks(values: usize, elements: u16) -> anyhow::Result<()> {
    if values.div_ceil(usize::from(elements.max(1))) >= 1 << CHUNK_BITS {
        anyhow::bail!(
            "an update of {values} values is more than 2^{CHUNK_BITS} datagrams of {elements}"
        );
    }
    Ok(())
}

/// An update as float bits in int32 datagram values, one chunk per datagram.
pub(crate) fn chunks(update: &[f32], elements: u16) -> Vec<Vec<i32>> {
    update
        .chunks(usize::from(elements))
        .map(|c| c.iter().map(|x| x.to_bits() as i32).collect())
        .collect()
}

/// One report due to the manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Due {
    pub sender: usize,
    pub round: u64,
    /// Empty: complete. Else the chunks still lacking, to be sent again.
    pub missing: Vec<u32>,
}

/// Each expected update, by the sender's group.
pub(crate) struct Inbox {
    senders: BTreeMap<u16, Incoming>,
    elements: usize,
    len: usize,
}

pub(crate) struct Incoming {
    pub sender: usize,
    pub round: u64,
    pub values: Vec<f32>,
    have: Vec<bool>,
    missing: usize,
    reported: bool,
    /// The last datagram taken or the last repair asked for: a sender is
    /// asked again only after `repair_after` with neither.
    quiet_since: Instant,
}

impl Incoming {
    /// Chunks held.
    pub fn held(&self) -> usize {
        self.have.len() - self.missing
    }

    /// Every chunk is held.
    pub fn complete(&self) -> bool {
        self.missing == 0
    }
}

impl Inbox {
    /// Nothing expected yet; updates of `len` values in chunks of `elements`.
    pub fn new(elements: u16, len: usize) -> Inbox {
        Inbox {
            senders: BTreeMap::new(),
            elements: usize::from(elements.max(1)),
            len,
        }
    }

    /// Expects `sender`'s round `round` through `group` (replacing whatever
    /// that group was expected to bring before).
    pub fn expect(&mut self, sender: usize, round: u64, group: u16) {
        let chunks = self.len.div_ceil(self.elements);
        let incoming = Incoming {
            sender,
            round,
            values: vec![0.0; self.len],
            have: vec![false; chunks],
            missing: chunks,
            reported: false,
            quiet_since: Instant::now(),
        };
        self.senders.insert(group, incoming);
    }

    /// Stops expecting what `group` brings; returns what had come of it.
    /// Stops expecting `sender`'s round `round`; returns what had come of
    /// it, if it was still expected.
    pub fn forget_update(&mut self, sender: usize, round: u64) -> Option<Incoming> {
        let group = self
            .senders
            .iter()
            .find(|(_, s)| s.sender == sender && s.round == round)
            .map(|(&g, _)| g)?;
        self.senders.remove(&group)
    }

    /// Whether any expected update is still incomplete.
    pub fn waiting(&self) -> bool {
        self.senders.values().any(|s| s.missing > 0)
    }

    /// Stores a chunk; false for anything not expected (another group or
    /// round, a duplicate, a wrong length).
    pub fn take(&mut self, group: u16, packet_id: u32, values: &[i32]) -> bool {
        let Some(s) = self.senders.get_mut(&group) else {
            return false;
        };
        let (round, chunk) = (packet_id >> CHUNK_BITS, packet_id & ((1 << CHUNK_BITS) - 1));
        if round != s.round as u32 & 0xfff {
            return false;
        }
        let c = chunk as usize;
        let start = c.saturating_mul(self.elements);
        let want = self.len.saturating_sub(start).min(self.elements);
        if c >= s.have.len() || s.have[c] || values.len() != want {
            return false;
        }
        for (x, &v) in s.values[start..start + want].iter_mut().zip(values) {
            *x = f32::from_bits(v as u32);
        }
        s.have[c] = true;
        s.missing -= 1;
        s.quiet_since = Instant::now();
        true
    }

    /// Reports due: each update once complete, and the missing chunks of
    /// each one still incomplete after `repair_after` without a datagram
    /// (and again every `repair_after`).
    pub fn reports(&mut self, repair_after: Duration) -> Vec<Due> {
        let mut out = Vec::new();
        for s in self.senders.values_mut() {
            if s.missing == 0 {
                if !s.reported {
                    s.reported = true;
                    out.push(Due {
                        sender: s.sender,
                        round: s.round,
                        missing: Vec::new(),
                    });
                }
            } else if s.quiet_since.elapsed() >= repair_after {
                s.quiet_since = Instant::now();
                let missing = (0..s.have.len() as u32)
                    .filter(|&c| !s.have[c as usize])
                    .collect();
                out.push(Due {
                    sender: s.sender,
                    round: s.round,
                    missing,
                });
            }
        }
        out
    }

    /// Every expected update.
    pub fn updates(&self) -> impl Iterator<Item = &Incoming> {
        self.senders.values()
    }

    /// Senders whose update is still incomplete.
    pub fn incomplete(&self) -> Vec<usize> {
        self.senders
            .values()
            .filter(|s| s.missing > 0)
            .map(|s| s.sender)
            .collect()
    }

    /// Everything expected, by sender.
    pub fn into_updates(self) -> BTreeMap<usize, Vec<f32>> {
        self.senders
            .into_values()
            .map(|s| (s.sender, s.values))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_each_chunk_of_the_expected_round_once() {
        let mut inbox = Inbox::new(2, 3);
        inbox.expect(4, 5, 40);
        let one = 1.5f32.to_bits() as i32;
        assert!(!inbox.take(41, packet_id(5, 0), &[one, one]), "other group");
        assert!(!inbox.take(40, packet_id(6, 0), &[one, one]), "other round");
        assert!(!inbox.take(40, packet_id(5, 0), &[one]), "short chunk");
        assert!(!inbox.take(40, packet_id(5, 2), &[one]), "no chunk 2");
        assert!(inbox.take(40, packet_id(5, 0), &[one, one]));
        assert!(!inbox.take(40, packet_id(5, 0), &[one, one]), "duplicate");
        assert_eq!(inbox.incomplete(), vec![4]);
        let due = inbox.reports(Duration::ZERO);
        assert_eq!(due[0].missing, vec![1]);
        assert!(inbox.take(40, packet_id(5, 1), &[one]));
        let due = inbox.reports(Duration::from_secs(60));
        assert_eq!(
            due,
            vec![Due {
                sender: 4,
                round: 5,
                missing: vec![]
            }]
        );
        assert!(inbox.reports(Duration::ZERO).is_empty(), "reported once");
        assert_eq!(inbox.into_updates()[&4], vec![1.5; 3]);
    }

    #[test]
    fn a_forgotten_sender_is_no_longer_filled() {
        let mut inbox = Inbox::new(2, 2);
        inbox.expect(1, 0, 7);
        let got = inbox.forget_update(1, 0).expect("was expected");
        assert_eq!(got.held(), 0);
        assert!(!inbox.take(7, packet_id(0, 0), &[0, 0]));
        assert!(inbox.reports(Duration::ZERO).is_empty());
    }

    #[test]
    fn repairs_wait_for_a_quiet_sender() {
        let mut inbox = Inbox::new(1, 2);
        inbox.expect(1, 0, 7);
        assert!(inbox.take(7, packet_id(0, 0), &[0]));
        assert!(inbox.reports(Duration::from_secs(60)).is_empty());
    }
}
