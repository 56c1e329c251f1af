//! The faults a simulated run may inject, and the mixes `--faults` names.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// Packets lost, with a probability per direction (up to 30%).
    Loss,
    /// Packets delivered twice.
    Duplicate,
    /// Packets held back past later ones.
    Reorder,
    /// Delays that vary per packet.
    Jitter,
    /// A worker whose events are handled late, in bursts (a busy host).
    Starve,
    /// A worker that stops for a while and comes back.
    Pause,
    /// Forged datagrams of every kind from member endpoints and strangers.
    Forge,
    /// Earlier sessions' datagrams replayed from their members' endpoints.
    Replay,
    /// The switch restarts: its state wiped, the job installed again after
    /// a delay.
    Restart,
    /// A worker crashes mid all-reduce; every worker then starts a new
    /// session.
    Crash,
}

impl Fault {
    /// Every fault, in the order of `--faults all`.
    pub const ALL: [Fault; 10] = [
        Fault::Loss,
        Fault::Duplicate,
        Fault::Reorder,
        Fault::Jitter,
        Fault::Starve,
        Fault::Pause,
        Fault::Forge,
        Fault::Replay,
        Fault::Restart,
        Fault::Crash,
    ];

    /// The name `--faults` takes.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Loss => "loss",
            Fault::Duplicate => "dup",
            Fault::Reorder => "reorder",
            Fault::Jitter => "jitter",
            Fault::Starve => "starve",
            Fault::Pause => "pause",
            Fault::Forge => "forge",
            Fault::Replay => "replay",
            Fault::Restart => "restart",
            Fault::Crash => "crash",
        }
    }

    /// Whether the fault may fail the all-reduce under way: forgers and
    /// replays on member endpoints can stall a round, a crashed worker's
    /// peers wait for it in vain. A restart of the switch may not: the
    /// workers hold what it lost, and the all-reduce must resume.
    pub fn may_stall(self) -> bool {
        matches!(self, Fault::Forge | Fault::Replay | Fault::Crash)
    }
}

/// A set of faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Faults(u16);

impl Faults {
    /// No fault.
    pub const NONE: Faults = Faults(0);

    /// Whether `f` is in the set.
    pub fn has(self, f: Fault) -> bool {
        self.0 & (1 << f as u16) != 0
    }

    /// The set with `f`.
    pub fn with(self, f: Fault) -> Faults {
        Faults(self.0 | (1 << f as u16))
    }

    /// Every fault.
    pub fn all() -> Faults {
        Fault::ALL.iter().fold(Faults::NONE, |s, &f| s.with(f))
    }

    /// Parses `loss,dup,forge` (or `all`, or `none`).
    pub fn parse(text: &str) -> Result<Faults, String> {
        let mut set = Faults::NONE;
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            set =
                match name {
                    "all" => Faults::all(),
                    "none" => set,
                    _ => set.with(*Fault::ALL.iter().find(|f| f.name() == name).ok_or_else(
                        || {
                            let names: Vec<&str> = Fault::ALL.iter().map(|f| f.name()).collect();
                            format!(
                                "unknown fault {name:?}: expected {} or all",
                                names.join(", ")
                            )
                        },
                    )?),
                };
        }
        Ok(set)
    }

    /// A seed's own mix drawn from the set: each fault in it with
    /// probability one half, so that across seeds every combination runs
    /// (one fault alone, several together, none).
    pub fn draw(self, rng: &mut ChaCha8Rng) -> Faults {
        Fault::ALL
            .iter()
            .filter(|&&f| self.has(f))
            .fold(Faults::NONE, |s, &f| {
                if rng.random_bool(0.5) {
                    s.with(f)
                } else {
                    s
                }
            })
    }

    /// Whether any fault in the set may stall a session ([`Fault::may_stall`]).
    pub fn may_stall(self) -> bool {
        Fault::ALL.iter().any(|&f| self.has(f) && f.may_stall())
    }
}

impl std::fmt::Display for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = Fault::ALL
            .iter()
            .filter(|&&x| self.has(x))
            .map(|x| x.name())
            .collect();
        if names.is_empty() {
            write!(f, "none")
        } else {
            write!(f, "{}", names.join(","))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_print_back() {
        let s = Faults::parse("loss, forge,restart").unwrap();
        assert!(s.has(Fault::Loss) && s.has(Fault::Forge) && s.has(Fault::Restart));
        assert!(!s.has(Fault::Crash));
        assert_eq!(s.to_string(), "loss,forge,restart");
        assert_eq!(Faults::parse("all").unwrap(), Faults::all());
        assert_eq!(Faults::parse("none").unwrap(), Faults::NONE);
        let e = Faults::parse("loss,flood").unwrap_err();
        assert!(e.contains("unknown fault \"flood\""), "{e}");
    }
}
