//! Flows over links with max-min fair sharing: the flow-level network model.
//!
//! A link is a one-way capacity (bytes/s): a host's uplink, a host's
//! downlink, one direction of a WAN link. A flow crosses a set of links and
//! gets, by progressive filling, the max-min fair rate over all of them. An
//! L3 multicast is one flow over the sender's uplink and every receiver's
//! downlink, so it runs at its slowest receiver's rate, as a switch that
//! replicates packets does. Flows carry a strict-priority class (0 first):
//! each class shares what the classes above it left, so the allocation is
//! work-conserving (Geryon's and SELMCAST-SSP's assumption).
//!
//! Time moves only through [`FlowNet::advance_to`]; the caller interleaves
//! it with its own events (see [`crate::events`]).

/// A flow's handle.
pub type FlowId = usize;

#[derive(Debug, Clone)]
struct Flow {
    links: Vec<usize>,
    remaining: f64,
    class: u8,
    rate: f64,
    tag: u64,
}

/// Links, the flows on them, and the clock.
#[derive(Debug, Clone, Default)]
pub struct FlowNet {
    capacity: Vec<f64>,
    usage: Vec<LinkUsage>,
    /// Whether [`FlowNet::advance_to`] keeps `usage` (only the scenarios
    /// that probe their links pay for it).
    track_usage: bool,
    /// Scratch of [`FlowNet::advance_to`]: per link, the bytes moved and
    /// the rates summed in this step, and the links that moved any.
    step_bytes: Vec<f64>,
    step_rate: Vec<f64>,
    touched: Vec<usize>,
    flows: Vec<Option<Flow>>,
    free: Vec<FlowId>,
    now: f64,
    stale: bool,
}

/// What a link has carried since it was added: what a passive probe on it
/// would see.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LinkUsage {
    /// Bytes that crossed it.
    pub bytes: f64,
    /// Seconds during which at least one flow moved bytes over it.
    pub busy: f64,
    /// Bytes that crossed it while it was full (its flows' rates summing to
    /// its capacity): a sender timing its back-to-back departures sees
    /// these. A flow held back elsewhere leaves the link idle part of the
    /// time; in a fluid model that shows as a link that is busy but not
    /// full, and it is not counted here.
    pub train_bytes: f64,
    /// Seconds during which it was full.
    pub train: f64,
}

impl std::ops::AddAssign for LinkUsage {
    fn add_assign(&mut self, other: LinkUsage) {
        self.bytes += other.bytes;
        self.busy += other.busy;
        self.train_bytes += other.train_bytes;
        self.train += other.train;
    }
}

/// A flow that finished: its handle and the caller's tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    pub id: FlowId,
    pub tag: u64,
}

/// Bytes below which a flow counts as done (rounding of rate x time).
const EPS_BYTES: f64 = 1e-3;

impl FlowNet {
    /// A network with no links, at time 0.
    pub fn new() -> FlowNet {
        FlowNet::default()
    }

    /// Adds a link of `capacity` bytes/s; returns its index.
    pub fn add_link(&mut self, capacity: f64) -> usize {
        self.capacity.push(capacity.max(0.0));
        self.usage.push(LinkUsage::default());
        self.step_bytes.push(0.0);
        self.step_rate.push(0.0);
        self.capacity.len() - 1
    }

    /// A network like [`FlowNet::new`]'s that also keeps what each link
    /// carries ([`FlowNet::usage`]).
    pub fn tracking_usage() -> FlowNet {
        FlowNet {
            track_usage: true,
            ..FlowNet::default()
        }
    }

    /// What `link` has carried so far (all zero unless the network was
    /// made by [`FlowNet::tracking_usage`]).
    pub fn usage(&self, link: usize) -> LinkUsage {
        self.usage[link]
    }

    /// Changes a link's capacity from now on (a WAN link's rate redrawn).
    pub fn set_capacity(&mut self, link: usize, capacity: f64) {
        self.capacity[link] = capacity.max(0.0);
        self.stale = true;
    }

    /// A link's capacity.
    pub fn capacity(&self, link: usize) -> f64 {
        self.capacity[link]
    }

    /// The clock, seconds.
    pub fn now(&self) -> f64 {
        self.now
    }

    /// Starts a flow of `bytes` over `links` (deduplicated) in priority
    /// `class`; `tag` comes back when it finishes. A flow over no link or
    /// of no bytes finishes at the next [`FlowNet::advance_to`].
    pub fn start(&mut self, links: &[usize], bytes: f64, class: u8, tag: u64) -> FlowId {
        let mut links = links.to_vec();
        links.sort_unstable();
        links.dedup();
        let flow = Flow {
            links,
            remaining: bytes.max(0.0),
            class,
            rate: 0.0,
            tag,
        };
        self.stale = true;
        match self.free.pop() {
            Some(id) => {
                self.flows[id] = Some(flow);
                id
            }
            None => {
                self.flows.push(Some(flow));
                self.flows.len() - 1
            }
        }
    }

    /// Moves a running flow to priority `class` (no-op if it has ended).
    pub fn set_class(&mut self, id: FlowId, class: u8) {
        if let Some(Some(f)) = self.flows.get_mut(id) {
            if f.class != class {
                f.class = class;
                self.stale = true;
            }
        }
    }

    /// Stops a flow; returns the bytes it had left.
    pub fn cancel(&mut self, id: FlowId) -> Option<f64> {
        let flow = self.flows.get_mut(id)?.take()?;
        self.free.push(id);
        self.stale = true;
        Some(flow.remaining)
    }

    /// Bytes a flow has left.
    pub fn remaining(&self, id: FlowId) -> Option<f64> {
        self.flows.get(id)?.as_ref().map(|f| f.remaining)
    }

    /// A flow's current rate (bytes/s).
    pub fn rate(&mut self, id: FlowId) -> Option<f64> {
        self.allocate();
        self.flows.get(id)?.as_ref().map(|f| f.rate)
    }

    /// Flows running.
    pub fn active(&self) -> usize {
        self.flows.iter().flatten().count()
    }

    /// When the next flow finishes at the current rates (None: no flow can).
    pub fn next_finish(&mut self) -> Option<f64> {
        self.allocate();
        self.flows
            .iter()
            .flatten()
            .filter_map(|f| finish_in(f).map(|dt| self.now + dt))
            .min_by(f64::total_cmp)
    }

    /// Moves the clock to `t` (never back), draining every flow at its rate;
    /// returns the flows that finished, in handle order.
    pub fn advance_to(&mut self, t: f64) -> Vec<Finished> {
        self.allocate();
        let dt = (t - self.now).max(0.0);
        self.now = self.now.max(t);
        let mut done = Vec::new();
        for (id, slot) in self.flows.iter_mut().enumerate() {
            let Some(f) = slot else { continue };
            let moved = (f.rate * dt).min(f.remaining);
            if self.track_usage && moved > 0.0 {
                for &l in &f.links {
                    if self.step_bytes[l] == 0.0 {
                        self.touched.push(l);
                    }
                    self.step_bytes[l] += moved;
                    self.step_rate[l] += f.rate;
                }
            }
            f.remaining -= f.rate * dt;
            if f.remaining <= EPS_BYTES || f.links.is_empty() {
                done.push(Finished { id, tag: f.tag });
                *slot = None;
            }
        }
        self.account(dt);
        if !done.is_empty() {
            self.free.extend(done.iter().map(|d| d.id));
            self.stale = true;
        }
        done
    }

    /// Adds a step of `dt` seconds to the usage of the links that moved
    /// bytes in it.
    fn account(&mut self, dt: f64) {
        for l in self.touched.drain(..) {
            let u = &mut self.usage[l];
            let bytes = std::mem::take(&mut self.step_bytes[l]);
            let rate = std::mem::take(&mut self.step_rate[l]);
            u.bytes += bytes;
            u.busy += dt;
            if rate >= self.capacity[l] * (1.0 - 1e-9) {
                u.train_bytes += bytes;
                u.train += dt;
            }
        }
    }

    /// Runs until every flow has finished; returns them in finishing order
    /// with their times.
    pub fn drain(&mut self) -> Vec<(f64, Finished)> {
        let mut out = Vec::new();
        while let Some(t) = self.next_finish() {
            for f in self.advance_to(t) {
                out.push((t, f));
            }
        }
        out
    }

    /// Max-min fair rates by progressive filling, class by class.
    fn allocate(&mut self) {
        if !self.stale {
            return;
        }
        self.stale = false;
        let mut residual = self.capacity.clone();
        let mut ids: Vec<FlowId> = (0..self.flows.len())
            .filter(|&i| self.flows[i].is_some())
            .collect();
        let class = |i: FlowId| self.flows[i].as_ref().map_or(0, |f| f.class);
        ids.sort_by_key(|&i| class(i));
        let classes: Vec<Vec<FlowId>> = ids
            .chunk_by(|&a, &b| class(a) == class(b))
            .map(<[FlowId]>::to_vec)
            .collect();
        let mut scratch = Scratch::new(residual.len(), self.flows.len());
        for members in &classes {
            self.fill(members, &mut residual, &mut scratch);
        }
    }

    /// Progressive filling of `members` over `residual` capacities: the link
    /// with the least share per unfrozen flow fixes its flows at that share.
    /// Only the links the members cross are looked at, so a class of one
    /// flow (SELMCAST-SSP's strict priorities) costs its own links.
    fn fill(&mut self, members: &[FlowId], residual: &mut [f64], s: &mut Scratch) {
        for &id in members {
            let f = self.flows[id].as_mut().expect("member");
            f.rate = 0.0;
            for &l in &f.links {
                if s.count[l] == 0 {
                    s.touched.push(l);
                }
                s.on_link[l].push(id);
                s.count[l] += 1;
            }
        }
        loop {
            let bottleneck = s
                .touched
                .iter()
                .filter(|&&l| s.count[l] > 0)
                .map(|&l| (l, residual[l].max(0.0) / s.count[l] as f64))
                .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
            let Some((link, share)) = bottleneck else {
                break;
            };
            for k in 0..s.on_link[link].len() {
                let id = s.on_link[link][k];
                if std::mem::replace(&mut s.frozen[id], true) {
                    continue;
                }
                let f = self.flows[id].as_mut().expect("member");
                f.rate = share;
                for &m in &f.links {
                    residual[m] -= share;
                    s.count[m] -= 1;
                }
            }
        }
        s.clear(members);
    }
}

/// Per-allocation work space, reused across classes.
struct Scratch {
    on_link: Vec<Vec<FlowId>>,
    count: Vec<usize>,
    touched: Vec<usize>,
    frozen: Vec<bool>,
}

impl Scratch {
    fn new(links: usize, flows: usize) -> Scratch {
        Scratch {
            on_link: vec![Vec::new(); links],
            count: vec![0; links],
            touched: Vec::new(),
            frozen: vec![false; flows],
        }
    }

    /// Resets what one class's filling used.
    fn clear(&mut self, members: &[FlowId]) {
        for &l in &self.touched {
            self.on_link[l].clear();
            self.count[l] = 0;
        }
        self.touched.clear();
        for &id in members {
            self.frozen[id] = false;
        }
    }
}

/// Seconds until `f` finishes at its rate.
fn finish_in(f: &Flow) -> Option<f64> {
    if f.links.is_empty() || f.remaining <= EPS_BYTES {
        Some(0.0)
    } else if f.rate > 0.0 {
        Some(f.remaining / f.rate)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_min_shares_the_bottleneck_and_gives_the_rest_away() {
        // Links: a (10), b (4). Flow x over a+b, y over a: x is held to 4 by
        // b, y takes the 6 left on a.
        let mut net = FlowNet::tracking_usage();
        let a = net.add_link(10.0);
        let b = net.add_link(4.0);
        let x = net.start(&[a, b], 8.0, 0, 1);
        let y = net.start(&[a], 60.0, 0, 2);
        assert_eq!(net.rate(x), Some(4.0));
        assert_eq!(net.rate(y), Some(6.0));
        // x ends at 2 s; then y has all 10: 60 - 12 = 48 left, 4.8 s more.
        let done = net.drain();
        assert_eq!(done[0], (2.0, Finished { id: x, tag: 1 }));
        assert!((done[1].0 - 6.8).abs() < 1e-9, "{done:?}");
        // What a probe on each link saw: a carried both flows for 6.8 s,
        // full all the time; b carried x's 8 bytes in 2 s, full too.
        let close = |x: f64, y: f64| (x - y).abs() < 1e-9;
        let (ua, ub) = (net.usage(a), net.usage(b));
        assert!(close(ua.bytes, 68.0) && close(ua.busy, 6.8), "{ua:?}");
        assert!(
            close(ua.train_bytes, 68.0) && close(ua.train, 6.8),
            "{ua:?}"
        );
        assert!(close(ub.bytes, 8.0) && close(ub.busy, 2.0), "{ub:?}");
        assert!(close(ub.train_bytes, 8.0) && close(ub.train, 2.0), "{ub:?}");
    }

    #[test]
    fn a_link_held_back_by_another_is_busy_but_never_full() {
        // A flow over a (10) and b (2) moves at 2: a carries it all the
        // time at a fifth of its rate, so it gives no train; b is full.
        let mut net = FlowNet::tracking_usage();
        let a = net.add_link(10.0);
        let b = net.add_link(2.0);
        let idle = net.add_link(5.0);
        net.start(&[a, b], 4.0, 0, 0);
        net.drain();
        let (ua, ub) = (net.usage(a), net.usage(b));
        assert!((ua.bytes / ua.busy - 2.0).abs() < 1e-9, "{ua:?}");
        assert_eq!((ua.train_bytes, ua.train), (0.0, 0.0), "{ua:?}");
        assert!((ub.train_bytes / ub.train - 2.0).abs() < 1e-9, "{ub:?}");
        assert_eq!(net.usage(idle), LinkUsage::default());
    }

    #[test]
    fn multicast_runs_at_the_slowest_receiver() {
        let mut net = FlowNet::new();
        let up = net.add_link(10.0);
        let fast = net.add_link(10.0);
        let slow = net.add_link(2.0);
        let m = net.start(&[up, fast, slow], 10.0, 0, 0);
        assert_eq!(net.rate(m), Some(2.0));
        assert_eq!(net.next_finish(), Some(5.0));
    }

    #[test]
    fn strict_priority_is_work_conserving() {
        let mut net = FlowNet::new();
        let l = net.add_link(10.0);
        let other = net.add_link(3.0);
        let hi = net.start(&[l, other], 30.0, 0, 0);
        let lo = net.start(&[l], 70.0, 1, 0);
        // hi is limited to 3 elsewhere; lo takes the 7 left, not 0.
        assert_eq!(net.rate(hi), Some(3.0));
        assert_eq!(net.rate(lo), Some(7.0));
        // Same class: equal shares would give lo 7 too; with hi unlimited,
        // hi takes everything.
        net.set_capacity(other, 100.0);
        assert_eq!(net.rate(hi), Some(10.0));
        assert_eq!(net.rate(lo), Some(0.0));
        assert_eq!(net.cancel(hi).map(|r| r > 0.0), Some(true));
        assert_eq!(net.rate(lo), Some(10.0));
    }
}
