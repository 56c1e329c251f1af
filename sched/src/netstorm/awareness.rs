//! NetStorm's passive throughput estimation (docs/PAPERS.md,
//! "NetStorm: network awareness"): what the scheduler knows of each overlay
//! link, renewed from the traffic the trees themselves send.
//!
//! The paper's receiver times the model's own chunks: over PROBE_CHUNK_NUM
//! chunks of at least PROBE_CHUNK_SIZE it computes B = sum s_i / sum
//! (t_recv - t_send) and reports (sender, receiver, B) to the scheduler when
//! B differs from what the scheduler knows by more than REPORT_RATE. Only
//! links that carry traffic are ever measured (the avalanche effect); the
//! others keep the first guess.
//!
//! Readings (each is what [`LinkRates`] does):
//! - **Probe-volume**: PROBE_CHUNK_NUM chunks of PROBE_CHUNK_SIZE become one
//!   volume, [`Probing::probe_bits`]: samples of one direction are summed
//!   until that much has crossed it, then give one estimate. A sample is
//!   whatever the caller can time: a chunk, a train of packets that left a
//!   port back to back (the live stack), a phase's bytes over the time the
//!   link carried them (the simulator).
//! - **Busy-time**: the denominator is the time those bytes took to cross
//!   back to back (the live stack's train counters; in the simulator, the
//!   time the link was full), not the sum of each chunk's own transfer
//!   time (which counts a chunk's wait behind earlier chunks of the same
//!   train as transfer time, and so reads a pipelined link as slower than
//!   it is).
//! - **Slower-direction**: an edge's weight is its latency plus a chunk
//!   over the slower of its two directions, since a tree crosses each edge
//!   up in the push and down in the pull.

use super::{Edge, Graph};

/// The estimator's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probing {
    /// Bits that must cross a direction, summed over samples, before it
    /// gives an estimate (PROBE_CHUNK_SIZE x PROBE_CHUNK_NUM, reading
    /// Probe-volume).
    pub probe_bits: f64,
    /// REPORT_RATE: the relative change an estimate must show to replace
    /// the known rate.
    pub report_rate: f64,
}

/// A new estimate of one direction of a link, as applied.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// The sending site.
    pub from: usize,
    /// The receiving site.
    pub to: usize,
    /// The measured rate, bit/s.
    pub rate_bps: f64,
}

/// Samples of one direction not yet turned into an estimate.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Pending {
    bits: f64,
    seconds: f64,
}

/// One overlay link as the scheduler knows it.
#[derive(Debug, Clone, PartialEq)]
struct KnownLink {
    a: usize,
    b: usize,
    /// Seconds, given with the overlay (not measured).
    latency: f64,
    /// Known rates, bit/s: a to b, then b to a.
    rate: [f64; 2],
    pending: [Pending; 2],
}

/// The overlay's links and their known rates, renewed by [`LinkRates::sample`].
#[derive(Debug, Clone, PartialEq)]
pub struct LinkRates {
    nodes: usize,
    probing: Probing,
    links: Vec<KnownLink>,
}

impl LinkRates {
    /// An overlay of `nodes` sites and its links `(a, b, latency s)`, every
    /// direction first guessed at `nominal_bps`.
    pub fn new(
        nodes: usize,
        links: &[(usize, usize, f64)],
        nominal_bps: f64,
        probing: Probing,
    ) -> Result<LinkRates, String> {
        if !(nominal_bps.is_finite() && nominal_bps > 0.0) {
            return Err(format!(
                "the nominal rate must be positive, not {nominal_bps}"
            ));
        }
        if !(probing.probe_bits.is_finite() && probing.probe_bits > 0.0) {
            return Err(format!(
                "the probe volume must be positive, not {} bits",
                probing.probe_bits
            ));
        }
        if !(probing.report_rate.is_finite() && probing.report_rate >= 0.0) {
            return Err(format!(
                "REPORT_RATE must be a fraction of 0 or more, not {}",
                probing.report_rate
            ));
        }
        for &(a, b, latency) in links {
            if a >= nodes || b >= nodes || a == b {
                return Err(format!(
                    "link {a}-{b} is not between two of the {nodes} sites"
                ));
            }
            if !(latency.is_finite() && latency >= 0.0) {
                return Err(format!("link {a}-{b}: latency {latency} s"));
            }
        }
        let links = links
            .iter()
            .map(|&(a, b, latency)| KnownLink {
                a,
                b,
                latency,
                rate: [nominal_bps; 2],
                pending: [Pending::default(); 2],
            })
            .collect();
        Ok(LinkRates {
            nodes,
            probing,
            links,
        })
    }

    /// The known rate from `from` to `to`, bit/s (`None`: no such link).
    pub fn rate(&self, from: usize, to: usize) -> Option<f64> {
        let (link, way) = self.direction(from, to)?;
        Some(self.links[link].rate[way])
    }

    /// The link from `from` to `to` and which way it is crossed (0: a to b).
    fn direction(&self, from: usize, to: usize) -> Option<(usize, usize)> {
        self.links.iter().enumerate().find_map(|(i, l)| match () {
            _ if (l.a, l.b) == (from, to) => Some((i, 0)),
            _ if (l.b, l.a) == (from, to) => Some((i, 1)),
            _ => None,
        })
    }

    /// `bits` crossed from `from` to `to` in `seconds` of busy time
    /// (reading Busy-time). Once the direction's samples since its last
    /// estimate reach the probe volume they give one; it is returned, and
    /// replaces the known rate, if it differs from it by more than
    /// REPORT_RATE. Samples of a pair that is not a link, or that carried
    /// nothing or took no time, are ignored.
    pub fn sample(&mut self, from: usize, to: usize, bits: f64, seconds: f64) -> Option<Estimate> {
        let (link, way) = self.direction(from, to)?;
        if !(bits.is_finite() && seconds.is_finite() && bits > 0.0 && seconds > 0.0) {
            return None;
        }
        let threshold = self.probing.report_rate;
        let probe_bits = self.probing.probe_bits;
        let l = &mut self.links[link];
        let pending = &mut l.pending[way];
        pending.bits += bits;
        pending.seconds += seconds;
        if pending.bits < probe_bits {
            return None;
        }
        let rate = pending.bits / pending.seconds;
        *pending = Pending::default();
        let known = &mut l.rate[way];
        if (rate - *known).abs() <= threshold * *known {
            return None;
        }
        *known = rate;
        Some(Estimate {
            from,
            to,
            rate_bps: rate,
        })
    }

    /// The overlay as the policy sees it: each edge weighs a chunk of
    /// `chunk_bits` over its slower direction plus its latency (reading
    /// Slower-direction).
    pub fn graph(&self, chunk_bits: f64) -> Graph {
        Graph {
            nodes: self.nodes,
            edges: self
                .links
                .iter()
                .map(|l| Edge {
                    a: l.a,
                    b: l.b,
                    weight: l.latency + chunk_bits / l.rate[0].min(l.rate[1]),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MBIT: f64 = 1e6;

    /// A path 0-1-2, 100 Mbit/s first guess, 8 kbit probes, 10%.
    fn path() -> LinkRates {
        let probing = Probing {
            probe_bits: 8000.0,
            report_rate: 0.1,
        };
        LinkRates::new(3, &[(0, 1, 0.0), (1, 2, 0.001)], 100.0 * MBIT, probing).unwrap()
    }

    #[test]
    fn samples_add_up_to_the_probe_volume_then_give_one_estimate() {
        let mut r = path();
        // 4000 bits in 0.4 ms: not enough probe yet.
        assert_eq!(r.sample(0, 1, 4000.0, 0.0004), None);
        assert_eq!(r.rate(0, 1), Some(100.0 * MBIT));
        // 16000 more in 1.6 ms: 20000 bits in 2 ms, 10 Mbit/s, 0 to 1 only.
        let got = r.sample(0, 1, 16000.0, 0.0016);
        assert_eq!(
            got,
            Some(Estimate {
                from: 0,
                to: 1,
                rate_bps: 10.0 * MBIT
            })
        );
        assert_eq!(r.rate(0, 1), Some(10.0 * MBIT));
        assert_eq!(r.rate(1, 0), Some(100.0 * MBIT));
        // The next estimate counts only what came after: 8000 bits in
        // 0.1 ms, 80 Mbit/s.
        assert!(r.sample(0, 1, 8000.0, 0.0001).is_some());
        assert_eq!(r.rate(0, 1), Some(80.0 * MBIT));
        // A change within REPORT_RATE (10%) is not reported, and the
        // samples it came from are spent all the same.
        assert_eq!(r.sample(0, 1, 8000.0, 0.000108), None);
        assert_eq!(r.rate(0, 1), Some(80.0 * MBIT));
        assert_eq!(
            r.sample(0, 1, 8000.0, 0.0002),
            Some(Estimate {
                from: 0,
                to: 1,
                rate_bps: 40.0 * MBIT
            })
        );
    }

    #[test]
    fn samples_of_no_link_or_of_nothing_are_ignored() {
        let mut r = path();
        assert_eq!(r.sample(0, 2, 1e9, 1.0), None, "0-2 is not a link");
        assert_eq!(r.rate(0, 2), None);
        assert_eq!(r.sample(1, 2, 1e9, 0.0), None);
        assert_eq!(r.sample(1, 2, 0.0, 1.0), None);
        assert_eq!(r.sample(1, 2, f64::NAN, 1.0), None);
        assert_eq!(r.rate(1, 2), Some(100.0 * MBIT));
        assert_eq!(r, path(), "nothing was kept pending");
    }

    #[test]
    fn an_edge_weighs_a_chunk_over_its_slower_direction_plus_latency() {
        let mut r = path();
        r.sample(2, 1, 10_000.0, 0.001);
        let g = r.graph(1e6);
        // 1 Mbit chunk: 0.01 s at 100 Mbit/s; 1-2 runs 10 Mbit/s one way.
        assert_eq!(g.weight(0, 1), Some(0.01));
        assert_eq!(g.weight(1, 2), Some(0.001 + 0.1));
    }

    #[test]
    fn bad_overlays_and_knobs_are_refused() {
        let p = Probing {
            probe_bits: 1.0,
            report_rate: 0.1,
        };
        let err = |r: Result<LinkRates, String>| r.unwrap_err();
        assert!(err(LinkRates::new(2, &[(0, 2, 0.0)], 1e6, p)).contains("0-2"));
        assert!(err(LinkRates::new(2, &[(1, 1, 0.0)], 1e6, p)).contains("1-1"));
        assert!(err(LinkRates::new(2, &[(0, 1, -1.0)], 1e6, p)).contains("latency"));
        assert!(err(LinkRates::new(2, &[(0, 1, 0.0)], 0.0, p)).contains("nominal"));
        let nan = Probing {
            report_rate: f64::NAN,
            ..p
        };
        assert!(err(LinkRates::new(2, &[(0, 1, 0.0)], 1e6, nan)).contains("REPORT_RATE"));
        let none = Probing {
            probe_bits: 0.0,
            ..p
        };
        assert!(err(LinkRates::new(2, &[(0, 1, 0.0)], 1e6, none)).contains("probe volume"));
    }
}
