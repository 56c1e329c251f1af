//! A client of the controller's API.

use std::net::SocketAddr;
use std::time::Duration;

use inagg_netio::lines::{self, CallError, Endpoint};
use inagg_netio::tls::ClientTls;
use inagg_switch_api::FaultConfig;

use crate::{
    Admission, Caller, Envelope, Event, GroupDecl, GroupStatus, JobDecl, JobStatus, Reply, Request,
    Response, SiteFaults, SiteStats, SiteStatus, TenantDecl, TenantStatus,
};

/// How long to wait to connect, and for an answer beyond a request's own wait.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Client errors.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Not reachable (the environment: is it running there?).
    #[error("cannot reach the controller at {addr}: {source}; is `inagg controller` running?")]
    Connect {
        /// Where.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The connection broke.
    #[error("controller connection failed: {0}")]
    Io(#[from] std::io::Error),
    /// An answer we cannot read (a version mismatch).
    #[error("unexpected reply from the controller: {0}")]
    Protocol(String),
    /// The controller refused the request; its message says why.
    #[error("{0}")]
    Refused(String),
}

/// A connection to `inagg controller`.
pub struct Client {
    lines: lines::Client,
    token: Option<String>,
    local: SocketAddr,
}

impl Client {
    /// Connects; `token` is the controller's `--token`, if it has one.
    pub fn connect(addr: SocketAddr, token: Option<String>) -> Result<Client, ClientError> {
        Client::connect_tls(addr, token, None)
    }

    /// Connects under TLS when `tls` is given (the controller's certificate
    /// verified before the token is sent); `token` is the controller's
    /// `--token` or a tenant's credential.
    pub fn connect_tls(
        addr: SocketAddr,
        token: Option<String>,
        tls: Option<&ClientTls>,
    ) -> Result<Client, ClientError> {
        let err = |source| ClientError::Connect { addr, source };
        let lines = lines::Client::connect_with(addr, TIMEOUT, tls).map_err(err)?;
        let local = lines.local_addr().map_err(err)?;
        Ok(Client {
            lines,
            token,
            local,
        })
    }

    /// This end of the connection: the address the controller sees us at.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn call(&mut self, request: Request, wait: Duration) -> Result<Reply, ClientError> {
        self.lines.set_read_timeout(wait + TIMEOUT)?;
        let line = serde_json::to_vec(&Envelope {
            version: crate::API_VERSION,
            token: self.token.clone(),
            request,
        })
        .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let answer = self.lines.call(&line).map_err(|e| match e {
            CallError::Io(e) => ClientError::Io(e),
            e => ClientError::Protocol(format!("the controller {e}")),
        })?;
        match serde_json::from_str::<Response>(&answer) {
            Ok(Response::Ok(r)) => Ok(r),
            Ok(Response::Error(e)) => Err(ClientError::Refused(e)),
            Err(e) => Err(ClientError::Protocol(
                Endpoint::Controller
                    .misdirected(&answer)
                    .unwrap_or(format!("{e}: {answer}")),
            )),
        }
    }

    /// Admits a job.
    pub fn create_job(&mut self, decl: JobDecl) -> Result<JobStatus, ClientError> {
        match self.call(Request::CreateJob { decl }, Duration::ZERO)? {
            Reply::Job { job } => Ok(job),
            other => Err(unexpected(other)),
        }
    }

    /// Removes a job.
    pub fn delete_job(&mut self, name: &str) -> Result<(), ClientError> {
        match self.call(Request::DeleteJob { name: name.into() }, Duration::ZERO)? {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Every job.
    pub fn jobs(&mut self) -> Result<Vec<JobStatus>, ClientError> {
        match self.call(Request::Jobs, Duration::ZERO)? {
            Reply::Jobs { jobs } => Ok(jobs),
            other => Err(unexpected(other)),
        }
    }

    /// Adds a tenant; returns it and its credential (shown this once).
    pub fn create_tenant(
        &mut self,
        decl: TenantDecl,
    ) -> Result<(TenantStatus, String), ClientError> {
        match self.call(Request::CreateTenant { decl }, Duration::ZERO)? {
            Reply::Tenant { tenant, credential } => Ok((tenant, credential)),
            other => Err(unexpected(other)),
        }
    }

    /// Gives a tenant a new credential (the old one stops working).
    pub fn rotate_tenant(&mut self, name: &str) -> Result<(TenantStatus, String), ClientError> {
        match self.call(Request::RotateTenant { name: name.into() }, Duration::ZERO)? {
            Reply::Tenant { tenant, credential } => Ok((tenant, credential)),
            other => Err(unexpected(other)),
        }
    }

    /// Removes a tenant (it must have no jobs).
    pub fn delete_tenant(&mut self, name: &str) -> Result<(), ClientError> {
        match self.call(Request::DeleteTenant { name: name.into() }, Duration::ZERO)? {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Every tenant.
    pub fn tenants(&mut self) -> Result<Vec<TenantStatus>, ClientError> {
        match self.call(Request::Tenants, Duration::ZERO)? {
            Reply::Tenants { tenants } => Ok(tenants),
            other => Err(unexpected(other)),
        }
    }

    /// Who the controller takes this client for.
    pub fn whoami(&mut self) -> Result<Caller, ClientError> {
        match self.call(Request::Whoami, Duration::ZERO)? {
            Reply::Caller { caller } => Ok(caller),
            other => Err(unexpected(other)),
        }
    }

    /// Holds an aggregator (the switch when `site` is `None`) to `faults`.
    pub fn set_faults(
        &mut self,
        site: Option<SocketAddr>,
        faults: FaultConfig,
    ) -> Result<(), ClientError> {
        match self.call(Request::SetFaults { site, faults }, Duration::ZERO)? {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// The faults the controller holds each aggregator to.
    pub fn faults(&mut self) -> Result<Vec<SiteFaults>, ClientError> {
        match self.call(Request::Faults, Duration::ZERO)? {
            Reply::Faults { sites } => Ok(sites),
            other => Err(unexpected(other)),
        }
    }

    /// The last `last` entries of the audit (a tenant's own), oldest first.
    pub fn events(&mut self, last: u32) -> Result<Vec<Event>, ClientError> {
        match self.call(Request::Events { last }, Duration::ZERO)? {
            Reply::Events { events } => Ok(events),
            other => Err(unexpected(other)),
        }
    }

    /// Makes a multicast group by hand; returns it as installed.
    pub fn create_group(&mut self, decl: GroupDecl) -> Result<GroupStatus, ClientError> {
        match self.call(Request::CreateGroup { decl }, Duration::ZERO)? {
            Reply::Groups { mut groups } if groups.len() == 1 => Ok(groups.remove(0)),
            other => Err(unexpected(other)),
        }
    }

    /// Removes a group made by hand.
    pub fn delete_group(&mut self, name: &str) -> Result<(), ClientError> {
        match self.call(Request::DeleteGroup { name: name.into() }, Duration::ZERO)? {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Every multicast group.
    pub fn groups(&mut self) -> Result<Vec<GroupStatus>, ClientError> {
        match self.call(Request::Groups, Duration::ZERO)? {
            Reply::Groups { groups } => Ok(groups),
            other => Err(unexpected(other)),
        }
    }

    /// The aggregators.
    pub fn sites(&mut self) -> Result<Vec<SiteStatus>, ClientError> {
        match self.call(Request::Sites, Duration::ZERO)? {
            Reply::Sites { sites } => Ok(sites),
            other => Err(unexpected(other)),
        }
    }

    /// Counters of every aggregator and its jobs.
    pub fn stats(&mut self) -> Result<Vec<SiteStats>, ClientError> {
        match self.call(Request::Stats, Duration::ZERO)? {
            Reply::Stats { sites } => Ok(sites),
            other => Err(unexpected(other)),
        }
    }

    /// The switch-wide class -> queue map.
    pub fn priority(&mut self) -> Result<Vec<inagg_switch_api::queues::ClassQueue>, ClientError> {
        match self.call(Request::Priority, Duration::ZERO)? {
            Reply::Priority { map } => Ok(map),
            other => Err(unexpected(other)),
        }
    }

    /// Sends priority class `class` through egress queue `queue` everywhere.
    pub fn set_priority(&mut self, class: u8, queue: u8) -> Result<(), ClientError> {
        match self.call(Request::SetPriority { class, queue }, Duration::ZERO)? {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Registers rank `rank` of `job` with its data endpoint and waits (up
    /// to `wait`) until the job is installed. An endpoint whose address is
    /// unspecified (0.0.0.0) is registered at the address the controller
    /// sees this host at.
    pub fn register(
        &mut self,
        job: &str,
        rank: u16,
        endpoint: SocketAddr,
        wait: Duration,
    ) -> Result<Admission, ClientError> {
        let (endpoint, port) = if endpoint.ip().is_unspecified() {
            (None, Some(endpoint.port()))
        } else {
            (Some(endpoint), None)
        };
        let request = Request::Register {
            job: job.into(),
            rank,
            endpoint,
            port,
            wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        };
        match self.call(request, wait)? {
            Reply::Admitted { admission } => Ok(admission),
            other => Err(unexpected(other)),
        }
    }
}

fn unexpected(r: Reply) -> ClientError {
    ClientError::Protocol(format!("unexpected reply {r:?}"))
}
