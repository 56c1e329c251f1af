//! What the controller knows of one aggregator: its role and address, its
//! memory and the K it takes once reached, the jobs it held at the last
//! sync, the installs it refused, whether it is up. The book reads it to
//! place jobs; `link` fills it in from the aggregator.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use inagg_switch_api::JobSpec;

use crate::alloc::SlotAllocator;
use inagg_controller_api::{JobDecl, SiteStatus};

/// What the controller knows of one aggregator (the switch, or a host
/// emulator serving as fallback); its connection is `link::Link`'s.
pub struct Site {
    /// "switch" or "fallback".
    pub role: &'static str,
    /// Its control address (the key of fallback placements).
    pub control: SocketAddr,
    /// Connected: the controller holds a working connection to it.
    pub up: bool,
    /// Its memory, once reached.
    pub alloc: Option<SlotAllocator>,
    /// Where its data plane listens, once reached.
    pub data_addr: Option<SocketAddr>,
    /// Where workers reach its data plane, as the operator gave it: for a
    /// target that does not say (a P4 switch takes inagg's UDP port at any
    /// address routed through it), or to override what it says.
    pub data_given: Option<SocketAddr>,
    /// The largest K it takes, once reached, and whether that is the only
    /// K it takes (a P4 program's is fixed when it is compiled).
    pub elements: Option<(u16, bool)>,
    /// Bytes of aggregator values its pools may take together (an
    /// emulator's budget; unlimited for a P4 switch, whose slots are fixed).
    pub memory: u64,
    /// Jobs it refused to install, by id: the session (generation) it
    /// refused and its reason. Kept while the job is placed here, so that
    /// a new session's workers see why the last one did not run; cleared
    /// when an install is taken.
    pub refusals: BTreeMap<u16, (u16, String)>,
    /// The jobs the target held after the last sync, by id. A worker is
    /// admitted only to a job its aggregator holds: one whose every rank
    /// has registered is not yet installed while its aggregator is down.
    pub held: BTreeMap<u16, JobSpec>,
    /// What kind of target it is ("emulator", "bmv2"), once reached.
    pub kind: &'static str,
    /// Why it is down, once it has been.
    pub error: Option<String>,
    /// Its faults at the last reconcile, before any were put back (an
    /// emulator's; `None` for a target without them, or not reached).
    pub faults_found: Option<inagg_switch_api::FaultConfig>,
}

impl Site {
    /// How messages name it: "the switch at ADDR", "the fallback at ADDR".
    pub fn name(&self) -> String {
        format!("the {} at {}", self.role, self.control)
    }
    /// An aggregator not yet reached.
    pub fn new(role: &'static str, control: SocketAddr) -> Site {
        Site {
            role,
            control,
            up: false,
            alloc: None,
            data_addr: None,
            data_given: None,
            elements: None,
            memory: u64::MAX,
            refusals: BTreeMap::new(),
            held: BTreeMap::new(),
            kind: "?",
            error: None,
            faults_found: None,
        }
    }
    /// The site, with the address workers reach its data plane at given by
    /// the operator (`None`: what the target says).
    pub fn with_data_addr(mut self, data: Option<SocketAddr>) -> Site {
        self.data_given = data;
        self
    }
    /// Why it refused job `id`'s session `generation`, if it did.
    pub fn refused(&self, id: u16, generation: u16) -> Option<&str> {
        self.refusals
            .get(&id)
            .filter(|(g, _)| *g == generation)
            .map(|(_, why)| why.as_str())
    }
    /// Whether it holds the job as specified (so its workers may start).
    pub fn holds(&self, spec: &JobSpec) -> bool {
        self.up && self.held.get(&spec.id) == Some(spec)
    }
    /// Why it is down, if it is ("not reached yet" before the first try).
    pub fn down(&self) -> Option<String> {
        match (self.up, &self.error) {
            (true, _) => None,
            (false, Some(e)) => Some(e.clone()),
            (false, None) => Some("not reached yet".into()),
        }
    }
    /// Reached, but with no data-plane address to give workers.
    pub fn lacks_data_addr(&self) -> bool {
        self.up && self.data_addr.is_none()
    }
    /// Whether a job's K is one this site takes, as far as is known (a
    /// site not reached yet might).
    pub fn may_take(&self, decl: &JobDecl) -> bool {
        match self.elements {
            None => true,
            Some((k, true)) => decl.elements == k,
            Some((max, false)) => decl.elements <= max,
        }
    }
    /// The K it takes, in words, once reached.
    pub fn elements_taken(&self) -> Option<String> {
        self.elements.map(|e| match e {
            (k, true) => format!("K = {k} only"),
            (max, false) => format!("K up to {max}"),
        })
    }
    /// What `inagg ctl sites` shows.
    pub fn status(&self) -> SiteStatus {
        SiteStatus {
            role: self.role.into(),
            kind: self.kind.into(),
            control: self.control,
            up: self.up,
            error: self.error.clone(),
            slots: self.alloc.as_ref().map(SlotAllocator::slots),
            elements: self.elements_taken(),
            free: self.alloc.as_ref().map(SlotAllocator::free),
            free_ranges: self
                .alloc
                .as_ref()
                .map(SlotAllocator::free_ranges)
                .unwrap_or_default(),
            memory: None,
        }
    }
}
