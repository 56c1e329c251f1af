//! The P4Runtime connection: gRPC channel, arbitration on the StreamChannel,
//! and blocking wrappers around the calls.
//!
//! The [`Target`](crate::Target) trait is synchronous, so the client owns a
//! current-thread tokio runtime and blocks on each call. Every wait is
//! bounded: connecting, arbitration and each call give up after the
//! configured timeout, so a missing or silent switch is an error, not a hang.
//! The arbitration stream stays open for the client's lifetime: a P4Runtime
//! server lets only the primary's requests write, and forgets the primary
//! when its stream closes. A client without an election id is an observer:
//! it opens no stream (P4Runtime serves reads to anyone), so it can look at
//! a switch another controller owns without disturbing it, and it refuses
//! to write.

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use inagg_netio::tls::ClientFiles;
use prost::Message;
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use super::proto::google::rpc;
use super::proto::p4::v1 as p4;
use super::proto::p4::v1::p4_runtime_client::P4RuntimeClient;
use crate::target::{ControlError, Result};

/// Largest reply accepted (a P4Info with many registers, big reads).
const MAX_MESSAGE: usize = 64 << 20;

/// The arbitration stream: kept open, since closing it gives up being
/// primary.
type Arbitration = (
    mpsc::Sender<p4::StreamMessageRequest>,
    tonic::Streaming<p4::StreamMessageResponse>,
);

/// A connected P4Runtime client for one device: primary, or an observer
/// (no election id) that only reads.
pub(crate) struct Client {
    grpc: P4RuntimeClient<Channel>,
    addr: SocketAddr,
    device_id: u64,
    election_id: Option<u128>,
    timeout: Duration,
    _stream: Option<Arbitration>,
    /// Declared last so it is dropped last, after everything that lives on it.
    rt: Runtime,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("addr", &self.addr)
            .field("device_id", &self.device_id)
            .field("election_id", &self.election_id)
            .finish_non_exhaustive()
    }
}

/// How long a claim refused because the same election id is held is
/// tried again (the holder may be a client of ours that just left).
const HANDOVER: Duration = Duration::from_secs(2);

fn uint128(v: u128) -> p4::Uint128 {
    p4::Uint128 {
        high: (v >> 64) as u64,
        low: v as u64,
    }
}

impl Client {
    /// Connects and, with an election id, becomes the primary controller of
    /// `device_id`; without one, connects as an observer.
    pub(crate) fn connect(
        addr: SocketAddr,
        device_id: u64,
        election_id: Option<u128>,
        (timeout, tls): (Duration, Option<&ClientFiles>),
    ) -> Result<Client> {
        let (rt, channel) = crate::grpc::connect(addr, timeout, tls)
            .map_err(|reason| ControlError::P4RuntimeUnreachable { addr, reason })?;
        let grpc = P4RuntimeClient::new(channel).max_decoding_message_size(MAX_MESSAGE);
        let stream = match election_id {
            Some(id) => {
                // A client that just closed its stream with the same id
                // may still hold it on the switch for a moment (PI drops
                // it asynchronously), as when a script runs `ctl` commands
                // back to back, each claiming id 1: that refusal is tried
                // again for a short while.
                let deadline = Instant::now() + HANDOVER.min(timeout);
                loop {
                    match Self::arbitrate(&rt, grpc.clone(), addr, device_id, id, timeout) {
                        Err(ControlError::NotPrimary { message, .. })
                            if message.contains("already exists") && Instant::now() < deadline =>
                        {
                            std::thread::sleep(Duration::from_millis(50))
                        }
                        other => break Some(other?),
                    }
                }
            }
            None => None,
        };
        Ok(Client {
            rt,
            grpc,
            addr,
            device_id,
            election_id,
            timeout,
            _stream: stream,
        })
    }

    /// Opens the StreamChannel with `election_id` and waits for the switch
    /// to make us primary.
    fn arbitrate(
        rt: &Runtime,
        mut grpc: P4RuntimeClient<Channel>,
        addr: SocketAddr,
        device_id: u64,
        election_id: u128,
        timeout: Duration,
    ) -> Result<Arbitration> {
        // Arbitration: send our election id, wait for the switch's verdict.
        let (tx, rx) = mpsc::channel(4);
        let hello = p4::StreamMessageRequest {
            update: Some(p4::stream_message_request::Update::Arbitration(
                p4::MasterArbitrationUpdate {
                    device_id,
                    role: None,
                    election_id: Some(uint128(election_id)),
                    status: None,
                },
            )),
        };
        tx.try_send(hello)
            .map_err(|e| ControlError::Protocol(format!("arbitration: {e}")))?;
        let arbitration = async {
            let replies = grpc
                .stream_channel(ReceiverStream::new(rx))
                .await?
                .into_inner();
            let answer = |m: p4::StreamMessageResponse| match m.update {
                Some(p4::stream_message_response::Update::Arbitration(a)) => Some(Ok(a)),
                Some(p4::stream_message_response::Update::Error(e)) => Some(Err(e)),
                _ => None,
            };
            let closed = "the switch closed the stream without an arbitration answer";
            crate::grpc::first_reply(replies, answer, closed).await
        };
        let (update, replies) =
            match rt.block_on(async { tokio::time::timeout(timeout, arbitration).await }) {
                Err(_) => {
                    return Err(ControlError::P4RuntimeUnreachable {
                        addr,
                        reason: format!("no arbitration answer within {timeout:?}"),
                    })
                }
                Ok(Err(status)) if status.message().contains("already exists") => {
                    // PI refuses a second stream with the primary's id.
                    return Err(ControlError::NotPrimary {
                        device_id,
                        ours: election_id,
                        message: format!(
                            "another client is connected with the same election id ({})",
                            status.message()
                        ),
                    });
                }
                Ok(Err(status)) => {
                    return Err(status_error(addr, "StreamChannel (arbitration)", &status))
                }
                Ok(Ok((Err(e), _))) => {
                    return Err(ControlError::Rpc {
                        op: "StreamChannel (arbitration)".into(),
                        code: e.canonical_code,
                        message: e.message,
                    })
                }
                Ok(Ok((Ok(update), replies))) => (update, replies),
            };
        let status = update.status.unwrap_or_default();
        if status.code != 0 {
            let highest = update
                .election_id
                .map_or(0, |e| (u128::from(e.high) << 64) | u128::from(e.low));
            return Err(ControlError::NotPrimary {
                device_id,
                ours: election_id,
                message: format!(
                    "{} (highest election id {highest})",
                    if status.message.is_empty() {
                        "the switch made another controller primary"
                    } else {
                        status.message.as_str()
                    }
                ),
            });
        }
        Ok((tx, replies))
    }

    /// Our election id, or the error for a write on an observer.
    fn primary(&self, op: &str) -> Result<p4::Uint128> {
        self.election_id
            .map(uint128)
            .ok_or_else(|| ControlError::ReadOnly {
                addr: self.addr,
                op: op.into(),
            })
    }

    /// Runs one call with the timeout (the timer is made inside the runtime,
    /// which it needs).
    fn call<T>(
        &self,
        op: &str,
        fut: impl Future<Output = std::result::Result<T, tonic::Status>>,
    ) -> Result<T> {
        crate::grpc::call(&self.rt, self.timeout, fut)
            .map_err(|status| status_error(self.addr, op, &status))
    }

    /// Writes a batch of updates. `op` says what they are, for errors.
    pub(crate) fn write(&self, op: &str, updates: Vec<p4::Update>) -> Result<()> {
        let op = format!("Write ({op})");
        let request = p4::WriteRequest {
            device_id: self.device_id,
            role: String::new(),
            election_id: Some(self.primary(&op)?),
            updates,
            atomicity: p4::write_request::Atomicity::ContinueOnError as i32,
        };
        let mut grpc = self.grpc.clone();
        self.call(&op, async move { grpc.write(request).await.map(|_| ()) })
    }

    /// Reads entities (a table entry with only its table id reads the whole
    /// table; a counter entry with an index reads one cell).
    pub(crate) fn read(&self, op: &str, entities: Vec<p4::Entity>) -> Result<Vec<p4::Entity>> {
        let request = p4::ReadRequest {
            device_id: self.device_id,
            role: String::new(),
            entities,
        };
        let mut grpc = self.grpc.clone();
        self.call(&format!("Read ({op})"), async move {
            let mut stream = grpc.read(request).await?.into_inner();
            let mut out = Vec::new();
            while let Some(reply) = stream.message().await? {
                out.extend(reply.entities);
            }
            Ok(out)
        })
    }

    /// Installs a pipeline (VERIFY_AND_COMMIT: clears the forwarding state).
    pub(crate) fn set_pipeline(&self, config: p4::ForwardingPipelineConfig) -> Result<()> {
        let request = p4::SetForwardingPipelineConfigRequest {
            device_id: self.device_id,
            role: String::new(),
            election_id: Some(self.primary("SetForwardingPipelineConfig")?),
            action: p4::set_forwarding_pipeline_config_request::Action::VerifyAndCommit as i32,
            config: Some(config),
        };
        let mut grpc = self.grpc.clone();
        self.call("SetForwardingPipelineConfig", async move {
            grpc.set_forwarding_pipeline_config(request)
                .await
                .map(|_| ())
        })
    }

    /// The installed pipeline's P4Info and cookie (None without a pipeline).
    pub(crate) fn pipeline(
        &self,
        response_type: p4::get_forwarding_pipeline_config_request::ResponseType,
    ) -> Result<Option<p4::ForwardingPipelineConfig>> {
        let request = p4::GetForwardingPipelineConfigRequest {
            device_id: self.device_id,
            response_type: response_type as i32,
        };
        let mut grpc = self.grpc.clone();
        self.call("GetForwardingPipelineConfig", async move {
            grpc.get_forwarding_pipeline_config(request)
                .await
                .map(|r| r.into_inner().config)
        })
    }

    /// The server's address.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The P4Runtime device id.
    pub(crate) fn device_id(&self) -> u64 {
        self.device_id
    }
}

/// A failed call as a [`ControlError`]: UNAVAILABLE is an unreachable
/// server; otherwise the code and message, taken from the per-update
/// `p4.v1.Error`s in the details when the server packed them there (a
/// failed Write).
fn status_error(addr: SocketAddr, op: &str, status: &tonic::Status) -> ControlError {
    if status.code() == tonic::Code::Unavailable {
        return ControlError::P4RuntimeUnreachable {
            addr,
            reason: format!("{op}: {}", status.message()),
        };
    }
    // The connection broke under the call: what a server with TLS does to
    // a client in clear, and under mutual TLS to one it does not trust.
    if status.code() == tonic::Code::Unknown && status.message() == "transport error" {
        let cause = std::error::Error::source(status)
            .map(crate::grpc::chain)
            .unwrap_or_else(|| status.message().to_string());
        return ControlError::P4RuntimeUnreachable {
            addr,
            reason: format!(
                "{op}: the connection broke ({cause}); a server with TLS does that to a client \
                 in clear (give its CA: --switch-tls-ca) and, under mutual TLS, to one without \
                 a certificate it trusts (--switch-tls-cert, --switch-tls-key)"
            ),
        };
    }
    let mut code = status.code() as i32;
    let mut message = status.message().to_string();
    if let Ok(details) = rpc::Status::decode(status.details()) {
        let errors: Vec<(usize, p4::Error)> = details
            .details
            .iter()
            .enumerate()
            .filter(|(_, any)| any.type_url.ends_with("/p4.v1.Error"))
            .filter_map(|(i, any)| p4::Error::decode(any.value.as_slice()).ok().map(|e| (i, e)))
            .filter(|(_, e)| e.canonical_code != 0)
            .collect();
        if let Some((_, first)) = errors.first() {
            code = first.canonical_code;
            message = errors
                .iter()
                .map(|(i, e)| format!("update {i}: {}", e.message))
                .collect::<Vec<_>>()
                .join("; ");
        }
    }
    if message.is_empty() {
        message = "(no message)".into();
    }
    ControlError::Rpc {
        op: op.into(),
        code,
        message,
    }
}

/// The gRPC canonical code of a Write that failed, when it is one.
pub(crate) fn rpc_code(e: &ControlError) -> Option<i32> {
    match e {
        ControlError::Rpc { code, .. } => Some(*code),
        _ => None,
    }
}
