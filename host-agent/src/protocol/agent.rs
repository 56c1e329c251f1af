//! The protocol core for those who bring their own I/O and clock: the
//! protocol simulator (`inagg-protosim`), and anyone embedding a worker in
//! an event loop of their own. An [`Agent`] is a worker's protocol state
//! (what a [`crate::Worker`] keeps between all-reduces, without its
//! socket); [`Agent::allreduce_i32`] and [`Agent::allreduce_f32`] start one
//! all-reduce as an [`AllReduce`], which takes events and hands back the
//! datagrams to send.

use super::announce::LastRound;
use super::path::Path;
use super::session::{SlotSession, Token};
use super::time::Nanos;
use super::{Codec, Core, Encoded, Lane};
use crate::codec::{chunk_count, FloatCodec, IntCodec, LaneData};
use crate::stats::Stats;
use crate::{AgentConfig, Error, Result};

/// A worker's protocol state without I/O.
#[derive(Debug, Clone)]
pub struct Agent {
    config: AgentConfig,
    sessions: Vec<SlotSession>,
    last: Vec<LastRound>,
    token: Token,
    path: Path,
}

impl Agent {
    /// A worker of `config` whose session token derives from `seed` (a
    /// [`crate::Worker`] draws it at random): one seed, one run.
    pub fn new(config: AgentConfig, seed: u64) -> Result<Agent> {
        config.validate()?;
        let token = Token::with_seed(config.rank, config.workers, config.elements, seed)
            .ok_or_else(|| Error::Config("no room for the session token".into()))?;
        Ok(Agent {
            sessions: vec![SlotSession::default(); config.pool_size as usize],
            last: vec![LastRound::default(); config.pool_size as usize],
            path: Path::new(&config),
            token,
            config,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// Starts an exact int32 all-reduce of `data` in place.
    pub fn allreduce_i32<'a>(&'a mut self, data: &'a mut [i32]) -> Result<AllReduce<'a>> {
        let (data, chunks, bytes) = self.whole(data);
        let codec = AnyCodec::Int(IntCodec {
            data,
            classes: None,
        });
        self.start(codec, chunks, bytes)
    }

    /// Starts a float all-reduce of `data` in place (within
    /// [`crate::quant::error_bound`]).
    pub fn allreduce_f32<'a>(&'a mut self, data: &'a mut [f32]) -> Result<AllReduce<'a>> {
        let (data, chunks, bytes) = self.whole(data);
        let codec = AnyCodec::F32(FloatCodec::new(data, self.config.workers, None));
        self.start(codec, chunks, bytes)
    }

    /// `data` as the one lane's view, its chunks of K, and its bytes.
    fn whole<'a, T>(&self, data: &'a mut [T]) -> (LaneData<'a, T>, usize, u64) {
        let k = self.config.values_per_packet();
        let chunks = chunk_count(data.len(), k);
        let bytes = std::mem::size_of_val(data) as u64;
        let window = chunks.min(self.config.pool_size as usize).max(1);
        (LaneData::split(data, k, window, 1).remove(0), chunks, bytes)
    }

    fn start<'a>(
        &'a mut self,
        codec: AnyCodec<'a>,
        chunks: usize,
        bytes: u64,
    ) -> Result<AllReduce<'a>> {
        let lane = Lane {
            config: &self.config,
            sessions: &mut self.sessions,
            token: self.token,
            path: &mut self.path,
            last: &mut self.last,
            lane: (0, 1),
        };
        let core = Core::new(lane, codec, chunks, bytes, Vec::new(), |len| {
            Ok(vec![0; len])
        })?;
        Ok(AllReduce { core })
    }
}

/// The codecs an [`Agent`] runs.
enum AnyCodec<'a> {
    Int(IntCodec<'a>),
    F32(FloatCodec<'a, f32>),
}

impl Codec for AnyCodec<'_> {
    fn rounds(&self, slot: usize, window: usize) -> usize {
        match self {
            AnyCodec::Int(c) => c.rounds(slot, window),
            AnyCodec::F32(c) => c.rounds(slot, window),
        }
    }
    fn encode(&mut self, slot: usize, round: usize, window: usize, payload: &mut [u8]) -> Encoded {
        match self {
            AnyCodec::Int(c) => c.encode(slot, round, window, payload),
            AnyCodec::F32(c) => c.encode(slot, round, window, payload),
        }
    }
    fn decode(&mut self, slot: usize, round: usize, window: usize, payload: &[u8], exponent: u8) {
        match self {
            AnyCodec::Int(c) => c.decode(slot, round, window, payload, exponent),
            AnyCodec::F32(c) => c.decode(slot, round, window, payload, exponent),
        }
    }
    fn carries_values(&self, slot: usize, round: usize, window: usize) -> bool {
        match self {
            AnyCodec::Int(c) => c.carries_values(slot, round, window),
            AnyCodec::F32(c) => c.carries_values(slot, round, window),
        }
    }
    fn class(&self, slot: usize, round: usize, window: usize) -> Option<u8> {
        match self {
            AnyCodec::Int(c) => c.class(slot, round, window),
            AnyCodec::F32(c) => c.class(slot, round, window),
        }
    }
}

/// One all-reduce of an [`Agent`], driven by events. Times are
/// nanoseconds since the all-reduce started, on the driver's clock.
///
/// The loop: [`AllReduce::transmit`], wait for datagrams until
/// [`AllReduce::next_wakeup`], [`AllReduce::on_datagram`] for each,
/// [`AllReduce::on_idle`]; until [`AllReduce::is_done`] or an error.
pub struct AllReduce<'a> {
    core: Core<'a, Vec<u8>, AnyCodec<'a>>,
}

impl AllReduce<'_> {
    /// A datagram arrived at `now`.
    pub fn on_datagram(&mut self, now: Nanos, data: &[u8]) -> Result<()> {
        self.core.on_datagram(now, data)
    }

    /// The datagrams that arrived together were handed in; `drained` when
    /// no more wait (fewer than a receive batch, 64, came). Returns the
    /// error of a worker that gave up.
    pub fn on_idle(&mut self, now: Nanos, drained: bool) -> Result<()> {
        self.core.on_idle(now, drained, 0).map(|_| ())
    }

    /// When the core next wants [`AllReduce::on_idle`] called.
    pub fn next_wakeup(&self) -> Nanos {
        self.core.next_wakeup()
    }

    /// Whether the tensor is reduced.
    pub fn is_done(&self) -> bool {
        self.core.is_done()
    }

    /// The datagrams to send now (contributions, then queries), handed to
    /// `send` in order; `now` stamps when they left.
    pub fn transmit(&mut self, now: Nanos, mut send: impl FnMut(&[u8])) -> Result<()> {
        for p in self.core.packets() {
            send(p);
        }
        self.core.build_queries(|len| Ok(vec![0; len]))?;
        for q in self.core.queries() {
            send(q);
        }
        self.core.sent(now, 0);
        Ok(())
    }

    /// The counts so far.
    pub fn stats(&self) -> &Stats {
        self.core.stats()
    }

    /// Ends the all-reduce; its statistics.
    pub fn finish(self) -> Stats {
        self.core.finish().0
    }
}
