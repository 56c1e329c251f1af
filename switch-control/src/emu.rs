//! The emulator target: a client of `inagg emu`'s control endpoint (one JSON
//! request per line, one JSON response per line, over TCP).

use std::net::SocketAddr;
use std::time::Duration;

use inagg_switch_api::counters::Counters;
use inagg_switch_api::detour::{RelayInfo, RelayKey, RelaySpec};
use inagg_switch_api::FaultConfig;
use inagg_switch_api::{
    ApiError, GroupInfo, GroupSpec, JobInfo, JobSpec, PoolMap, Reply, Request, Response, SwitchInfo,
};

use inagg_netio::lines::{self, CallError, Endpoint};
use inagg_netio::tls::ClientTls;
use inagg_netio::token::Token;

use crate::registry::{refuse, BoxedTarget, ConnectOptions, Registered};
use crate::target::{ControlError, QueueReport, Result, Target};

/// How long a claim refused for its own election id is tried again.
const HANDOVER: Duration = Duration::from_secs(2);

/// How long to wait for the emulator to connect or answer.
const TIMEOUT: Duration = Duration::from_secs(5);

/// The emulator in the registry of targets.
pub const REGISTERED: Registered = Registered {
    name: "emu",
    about: "inagg's software switch (`inagg emu`)",
    default_addr: SocketAddr::new(
        std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        inagg_wire::DEFAULT_CONTROL_PORT,
    ),
    files: "none",
    says_data_addr: true,
    connect: connect_registered,
};

/// Connects from the command line's options: the token and election id;
/// the P4 targets' options are refused.
fn connect_registered(o: &ConnectOptions) -> Result<BoxedTarget> {
    if o.any_p4() {
        return Err(refuse(
            "emulator",
            "the P4 targets' options (--device-id, --p4info, --bmv2-json, --program, \
             --client-id, --topology); use them with --target bmv2 or tofino",
        ));
    }
    let token = o
        .switch_token
        .clone()
        .map(Token::new)
        .transpose()
        .map_err(|e| ControlError::Protocol(format!("--switch-token: {e}")))?;
    let tls = o
        .tls
        .as_ref()
        .map(ClientTls::load)
        .transpose()
        .map_err(|e| ControlError::Protocol(format!("TLS towards the emulator: {e}")))?;
    let addr = o.addr.unwrap_or(REGISTERED.default_addr);
    Ok(Box::new(EmuTarget::connect_tls(
        addr,
        tls.as_ref(),
        token.as_ref(),
        o.election_id,
    )?))
}

/// A connection to an emulator's control endpoint, or an in-process
/// emulator's reader.
pub struct EmuTarget {
    via: Via,
    /// Whether this connection holds a claim on the switch, which its
    /// drop waits to see given up.
    claimed: bool,
}

/// How requests reach the emulator.
enum Via {
    /// Its control endpoint.
    Socket(lines::Client),
    /// A function of the same process that answers them (`inagg emu`'s
    /// metrics exporter, which holds no token or certificate).
    Local(Box<dyn FnMut(Request) -> Response + Send>),
}

impl std::fmt::Debug for EmuTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.via {
            Via::Socket(c) => write!(f, "EmuTarget({c:?})"),
            Via::Local(_) => write!(f, "EmuTarget(in process)"),
        }
    }
}

/// A claimant's drop waits this long at most for the emulator to give up
/// its claim and close: a controller stopped and then another client's
/// change of the switch (an operator's, a restarted controller's claim)
/// must not meet the old claim.
const RELEASE: Duration = Duration::from_secs(1);

impl Drop for EmuTarget {
    fn drop(&mut self) {
        if let (Via::Socket(lines), true) = (&mut self.via, self.claimed) {
            lines.close(RELEASE);
        }
    }
}

impl EmuTarget {
    /// Connects, with a timeout, so a missing emulator is an error not a hang.
    pub fn connect(addr: SocketAddr) -> Result<EmuTarget> {
        EmuTarget::connect_with(addr, None, None)
    }

    /// Connects and claims the emulator for a controller with
    /// `election_id` (P4Runtime's arbitration, as bmv2 does it): refused
    /// with `ControlError::Arbitration` while another connection holds the
    /// same id or a higher one. The claim lasts as long as the connection.
    pub fn connect_as(addr: SocketAddr, election_id: u64) -> Result<EmuTarget> {
        EmuTarget::connect_with(addr, None, Some(election_id))
    }

    /// Connects, presents `token` when given (an emulator started with
    /// `--token` answers nothing before), and claims the switch with
    /// `election_id` when given.
    pub fn connect_with(
        addr: SocketAddr,
        token: Option<&Token>,
        election_id: Option<u64>,
    ) -> Result<EmuTarget> {
        EmuTarget::connect_tls(addr, None, token, election_id)
    }

    /// As [`EmuTarget::connect_with`], under TLS when `tls` is given (the
    /// emulator's certificate verified before the token is sent).
    pub fn connect_tls(
        addr: SocketAddr,
        tls: Option<&ClientTls>,
        token: Option<&Token>,
        election_id: Option<u64>,
    ) -> Result<EmuTarget> {
        let connect_err = |source| ControlError::Connect {
            target: "emulator",
            addr,
            source,
        };
        let lines = lines::Client::connect_with(addr, TIMEOUT, tls).map_err(connect_err)?;
        let mut t = EmuTarget {
            via: Via::Socket(lines),
            claimed: false,
        };
        if let Some(token) = token {
            let token = token.secret().to_string();
            match t.call(&Request::Authenticate { token })? {
                Reply::Done => {}
                other => return Err(unexpected(other)),
            }
        }
        if let Some(election_id) = election_id {
            t.claim(election_id)?;
        }
        Ok(t)
    }

    /// Claims the switch with `election_id`. A claim refused because a
    /// connection with the same id holds it is tried again for up to
    /// [`HANDOVER`]: the holder is most likely this controller's own
    /// previous connection, which the emulator has not seen close yet (a
    /// restarted controller, a loaded machine). A higher id is a rival:
    /// refused at once.
    fn claim(&mut self, election_id: u64) -> Result<()> {
        let deadline = std::time::Instant::now() + HANDOVER;
        loop {
            match self.call(&Request::Arbitrate { election_id }) {
                Ok(Reply::Done) => {
                    self.claimed = true;
                    return Ok(());
                }
                Ok(other) => return Err(unexpected(other)),
                Err(ControlError::Arbitration(ApiError::NotPrimary { primary, .. }))
                    if primary == election_id && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A target over an in-process emulator's `answer` (its
    /// `Emulator::reader`).
    pub fn local(answer: impl FnMut(Request) -> Response + Send + 'static) -> EmuTarget {
        EmuTarget {
            via: Via::Local(Box::new(answer)),
            claimed: false,
        }
    }

    fn call(&mut self, request: &Request) -> Result<Reply> {
        let lines = match &mut self.via {
            Via::Socket(lines) => lines,
            Via::Local(answer) => {
                return match answer(request.clone()) {
                    Response::Ok(reply) => Ok(reply),
                    Response::Err(e) => Err(e.into()),
                }
            }
        };
        let line =
            serde_json::to_vec(request).map_err(|e| ControlError::Protocol(e.to_string()))?;
        let answer = lines.call(&line).map_err(|e| match e {
            CallError::Io(e) => ControlError::Io(e),
            e => ControlError::Protocol(format!("the emulator {e}")),
        })?;
        match serde_json::from_str::<Response>(&answer) {
            Ok(Response::Ok(reply)) => Ok(reply),
            Ok(Response::Err(e)) => Err(e.into()),
            Err(e) => Err(ControlError::Protocol(
                Endpoint::Emulator
                    .misdirected(&answer)
                    .unwrap_or(format!("{e}: {answer}")),
            )),
        }
    }
}

fn unexpected(reply: Reply) -> ControlError {
    ControlError::Protocol(format!("unexpected reply {reply:?}"))
}

impl Target for EmuTarget {
    fn kind(&self) -> &'static str {
        "emulator"
    }

    fn info(&mut self) -> Result<SwitchInfo> {
        match self.call(&Request::Info)? {
            Reply::Info { info, .. } => Ok(info),
            other => Err(unexpected(other)),
        }
    }

    fn data_addr(&mut self) -> Result<Option<SocketAddr>> {
        match self.call(&Request::Info)? {
            Reply::Info { data_addr, .. } => Ok(Some(data_addr)),
            other => Err(unexpected(other)),
        }
    }

    fn create_job(&mut self, spec: &JobSpec) -> Result<()> {
        match self.call(&Request::CreateJob { spec: spec.clone() })? {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    fn delete_job(&mut self, id: u16) -> Result<()> {
        match self.call(&Request::DeleteJob { id })? {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    fn job(&mut self, id: u16) -> Result<JobInfo> {
        match self.call(&Request::GetJob { id })? {
            Reply::Job { job } => Ok(*job),
            other => Err(unexpected(other)),
        }
    }

    fn jobs(&mut self) -> Result<Vec<JobInfo>> {
        match self.call(&Request::ListJobs)? {
            Reply::Jobs { jobs } => Ok(jobs),
            other => Err(unexpected(other)),
        }
    }

    fn pools(&mut self) -> Result<PoolMap> {
        match self.call(&Request::Pools)? {
            Reply::Pools { pools } => Ok(pools),
            other => Err(unexpected(other)),
        }
    }

    fn counters(&mut self) -> Result<Counters> {
        match self.call(&Request::Counters)? {
            Reply::Counters { counters } => Ok(counters),
            other => Err(unexpected(other)),
        }
    }

    fn reset_counters(&mut self) -> Result<()> {
        match self.call(&Request::ResetCounters)? {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    fn faults(&mut self) -> Result<FaultConfig> {
        match self.call(&Request::GetFaults)? {
            Reply::Faults { faults } => Ok(faults),
            other => Err(unexpected(other)),
        }
    }

    fn set_faults(&mut self, faults: FaultConfig) -> Result<()> {
        match self.call(&Request::SetFaults { faults })? {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    fn set_priority_queue(&mut self, class: u8, queue: u8) -> Result<()> {
        match self.call(&Request::SetPriorityQueue { class, queue })? {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    fn groups(&mut self) -> Result<Vec<GroupInfo>> {
        match self.call(&Request::ListGroups)? {
            Reply::Groups { groups } => Ok(groups),
            other => Err(unexpected(other)),
        }
    }

    fn create_group(&mut self, group: &GroupSpec) -> Result<()> {
        let group = group.clone();
        match self.call(&Request::CreateGroup { group })? {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    fn delete_group(&mut self, id: u16) -> Result<()> {
        match self.call(&Request::DeleteGroup { id })? {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    fn relays(&mut self) -> Result<Vec<RelayInfo>> {
        match self.call(&Request::ListRelays)? {
            Reply::Relays { relays } => Ok(relays),
            other => Err(unexpected(other)),
        }
    }

    fn create_relay(&mut self, relay: &RelaySpec) -> Result<()> {
        match self.call(&Request::CreateRelay { relay: *relay })? {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    fn delete_relay(&mut self, key: RelayKey) -> Result<()> {
        match self.call(&Request::DeleteRelay { key })? {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    fn set_port_rate(&mut self, port: SocketAddr, rate_bps: Option<u64>) -> Result<()> {
        match self.call(&Request::SetPortRate { port, rate_bps })? {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    fn queues(&mut self) -> Result<QueueReport> {
        match self.call(&Request::Queues)? {
            Reply::Queues { map, link, ports } => Ok(QueueReport { map, link, ports }),
            other => Err(unexpected(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::install_job;
    use inagg_emu::{Emulator, EmulatorConfig};
    use inagg_switch_api::JobError;

    fn spec(id: u16, base: u32, size: u32) -> JobSpec {
        JobSpec::new(id, vec!["127.0.0.1:7001".parse().unwrap()], base, size, 64)
    }

    #[test]
    fn jobs_round_trip_through_a_real_emulator() {
        let emu = Emulator::start(EmulatorConfig::ephemeral()).unwrap();
        let mut t = EmuTarget::connect(emu.control_addr()).unwrap();
        install_job(&mut t, &spec(1, 0, 100)).unwrap();
        assert_eq!(t.jobs().unwrap().len(), 1);
        assert_eq!(t.pools().unwrap().free, 8192 - 100);
        let err = install_job(&mut t, &spec(2, 50, 100)).unwrap_err();
        assert!(
            matches!(
                err,
                ControlError::Job(JobError::PoolOverlap { other: 1, .. })
            ),
            "{err}"
        );
        // The emulator refuses it too when the check is bypassed.
        let err = t.create_job(&spec(2, 50, 100)).unwrap_err();
        assert!(
            matches!(err, ControlError::Job(JobError::PoolOverlap { .. })),
            "{err}"
        );
        t.delete_job(1).unwrap();
        assert!(matches!(
            t.delete_job(1).unwrap_err(),
            ControlError::Job(JobError::UnknownJob { id: 1 })
        ));
        assert_eq!(t.data_addr().unwrap(), Some(emu.data_addr()));
    }

    #[test]
    fn a_missing_emulator_is_a_clear_error() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let err = EmuTarget::connect(port).unwrap_err();
        assert!(err.to_string().contains("is it running?"), "{err}");
    }
}
