//! The BF Runtime connection: gRPC channel, the client's subscription on
//! the StreamChannel, and blocking wrappers around the calls.
//!
//! bf_switchd's BF Runtime server knows a client by the id it subscribed
//! with: it takes writes only from a subscribed client, bound to the
//! program it names (SetForwardingPipelineConfig, BIND or a push), and it
//! forgets the client when its stream closes. So the stream stays open for
//! the client's lifetime. As with the bmv2 target, the [`Target`] trait is
//! synchronous: the client owns a current-thread tokio runtime and every
//! wait is bounded by the configured timeout.
//!
//! [`Target`]: crate::Target

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use super::proto::bfrt_proto as bfrt;
use super::proto::bfrt_proto::bf_runtime_client::BfRuntimeClient;
use crate::target::{ControlError, Result};

/// Largest reply accepted (a program's bf-rt.json, whole-table reads).
const MAX_MESSAGE: usize = 256 << 20;

/// The subscription: kept open, since closing it unbinds the client.
type Subscription = (
    mpsc::Sender<bfrt::StreamMessageRequest>,
    tonic::Streaming<bfrt::StreamMessageResponse>,
);

/// A connected, subscribed BF Runtime client for one device.
pub(crate) struct Client {
    grpc: BfRuntimeClient<Channel>,
    addr: SocketAddr,
    device_id: u32,
    client_id: u32,
    timeout: Duration,
    /// The program the client is bound to, named in every write and read.
    p4_name: String,
    _stream: Subscription,
    /// Declared last so it is dropped last, after everything that lives on it.
    rt: Runtime,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("addr", &self.addr)
            .field("device_id", &self.device_id)
            .field("client_id", &self.client_id)
            .field("p4_name", &self.p4_name)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects and subscribes as `client_id` on `device_id`.
    pub(crate) fn connect(
        addr: SocketAddr,
        device_id: u32,
        client_id: u32,
        timeout: Duration,
    ) -> Result<Client> {
        let (rt, channel) = crate::grpc::connect(addr, timeout, None)
            .map_err(|reason| ControlError::BfRuntimeUnreachable { addr, reason })?;
        let grpc = BfRuntimeClient::new(channel).max_decoding_message_size(MAX_MESSAGE);
        let stream = Self::subscribe(&rt, grpc.clone(), addr, device_id, client_id, timeout)?;
        Ok(Client {
            grpc,
            addr,
            device_id,
            client_id,
            timeout,
            p4_name: String::new(),
            _stream: stream,
            rt,
        })
    }

    /// Opens the StreamChannel with a Subscribe and waits for the server's
    /// answer: a status of 0 binds the client id to the device.
    fn subscribe(
        rt: &Runtime,
        mut grpc: BfRuntimeClient<Channel>,
        addr: SocketAddr,
        device_id: u32,
        client_id: u32,
        timeout: Duration,
    ) -> Result<Subscription> {
        let (tx, rx) = mpsc::channel(4);
        let hello = bfrt::StreamMessageRequest {
            client_id,
            update: Some(bfrt::stream_message_request::Update::Subscribe(
                bfrt::Subscribe {
                    device_id,
                    notifications: Some(Default::default()),
                    status: None,
                },
            )),
        };
        tx.try_send(hello)
            .map_err(|e| ControlError::Protocol(format!("subscribe: {e}")))?;
        let answer = async {
            let replies = grpc
                .stream_channel(ReceiverStream::new(rx))
                .await?
                .into_inner();
            let subscribed = |m: bfrt::StreamMessageResponse| match m.update {
                Some(bfrt::stream_message_response::Update::Subscribe(s)) => Some(s),
                _ => None,
            };
            let closed = "the switch closed the stream without answering the subscription";
            crate::grpc::first_reply(replies, subscribed, closed).await
        };
        let (subscribed, replies) =
            match rt.block_on(async { tokio::time::timeout(timeout, answer).await }) {
                Err(_) => {
                    return Err(ControlError::BfRuntimeUnreachable {
                        addr,
                        reason: format!("no answer to the subscription within {timeout:?}"),
                    })
                }
                Ok(Err(status)) => {
                    return Err(status_error(addr, "StreamChannel (subscribe)", &status))
                }
                Ok(Ok(answer)) => answer,
            };
        let status = subscribed.status.unwrap_or_default();
        if status.code != 0 {
            return Err(ControlError::BfRuntime {
                op: format!("StreamChannel (subscribe as client {client_id})"),
                code: status.code,
                message: status.message,
            });
        }
        Ok((tx, replies))
    }

    /// The target of a write or read: every pipe, both directions.
    fn target(&self) -> bfrt::TargetDevice {
        bfrt::TargetDevice {
            device_id: self.device_id,
            pipe_id: ALL_PIPES,
            direction: BOTH_DIRECTIONS,
            prsr_id: ALL_PARSERS,
        }
    }

    /// One pipe of the device, both directions: where an entry of a
    /// per-pipe table (the traffic manager's queues) is written.
    pub(crate) fn pipe(&self, pipe: u32) -> bfrt::TargetDevice {
        bfrt::TargetDevice {
            pipe_id: pipe,
            ..self.target()
        }
    }

    /// Runs one call with the timeout.
    fn call<T>(
        &self,
        op: &str,
        fut: impl Future<Output = std::result::Result<T, tonic::Status>>,
    ) -> Result<T> {
        crate::grpc::call(&self.rt, self.timeout, fut)
            .map_err(|status| status_error(self.addr, op, &status))
    }

    /// Writes a batch of updates with ROLLBACK_ON_ERROR: the driver undoes
    /// them all if one fails. `op` says what they are, for errors.
    pub(crate) fn write(&self, op: &str, updates: Vec<bfrt::Update>) -> Result<()> {
        let op = format!("Write ({op})");
        let request = bfrt::WriteRequest {
            target: Some(self.target()),
            client_id: self.client_id,
            updates,
            atomicity: bfrt::write_request::Atomicity::RollbackOnError as i32,
            p4_name: self.p4_name.clone(),
        };
        let mut grpc = self.grpc.clone();
        let response = self.call(&op, async move { grpc.write(request).await })?;
        match response
            .into_inner()
            .status
            .into_iter()
            .find(|e| e.canonical_code != 0)
        {
            Some(e) => Err(ControlError::BfRuntime {
                op,
                code: e.canonical_code,
                message: e.message,
            }),
            None => Ok(()),
        }
    }

    /// Reads entities: a table entry with a key reads that entry; with no
    /// key, every entry of the table.
    pub(crate) fn read(&self, op: &str, entities: Vec<bfrt::Entity>) -> Result<Vec<bfrt::Entity>> {
        let op = format!("Read ({op})");
        let request = bfrt::ReadRequest {
            target: Some(self.target()),
            client_id: self.client_id,
            entities,
            p4_name: self.p4_name.clone(),
        };
        let mut grpc = self.grpc.clone();
        let (out, errors) = self.call(&op, async move {
            let mut stream = grpc.read(request).await?.into_inner();
            let (mut out, mut errors) = (Vec::new(), Vec::new());
            while let Some(reply) = stream.message().await? {
                out.extend(reply.entities);
                errors.extend(reply.status.into_iter().filter(|e| e.canonical_code != 0));
            }
            Ok((out, errors))
        })?;
        match errors.into_iter().next() {
            Some(e) => Err(ControlError::BfRuntime {
                op,
                code: e.canonical_code,
                message: e.message,
            }),
            None => Ok(out),
        }
    }

    /// Pushes a compiled program (or, with `config` None, binds to the one
    /// the switch runs under `p4_name`), and binds the client to it.
    pub(crate) fn set_pipeline(
        &mut self,
        p4_name: &str,
        config: Option<bfrt::ForwardingPipelineConfig>,
    ) -> Result<()> {
        use bfrt::set_forwarding_pipeline_config_request::Action;
        let (action, config) = match config {
            Some(c) => (Action::VerifyAndWarmInitBeginAndEnd, c),
            None => (
                Action::Bind,
                bfrt::ForwardingPipelineConfig {
                    p4_name: p4_name.to_string(),
                    ..Default::default()
                },
            ),
        };
        let request = bfrt::SetForwardingPipelineConfigRequest {
            device_id: self.device_id,
            client_id: self.client_id,
            action: action as i32,
            dev_init_mode: 0,
            base_path: String::new(),
            config: vec![config],
        };
        let mut grpc = self.grpc.clone();
        self.call("SetForwardingPipelineConfig", async move {
            grpc.set_forwarding_pipeline_config(request)
                .await
                .map(|_| ())
        })?;
        // The program every later write and read is about.
        self.p4_name = p4_name.to_string();
        Ok(())
    }

    /// The programs the device runs, and the driver's fixed tables.
    pub(crate) fn pipeline(&self) -> Result<bfrt::GetForwardingPipelineConfigResponse> {
        let request = bfrt::GetForwardingPipelineConfigRequest {
            device_id: self.device_id,
            client_id: self.client_id,
        };
        let mut grpc = self.grpc.clone();
        self.call("GetForwardingPipelineConfig", async move {
            grpc.get_forwarding_pipeline_config(request)
                .await
                .map(tonic::Response::into_inner)
        })
    }

    /// The server's address.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// `TargetDevice.pipe_id` for every pipe.
const ALL_PIPES: u32 = 0xffff;
/// `TargetDevice.direction` for ingress and egress.
const BOTH_DIRECTIONS: u32 = 0xff;
/// `TargetDevice.prsr_id` for every parser.
const ALL_PARSERS: u32 = 0xff;

/// A failed call as a [`ControlError`]: UNAVAILABLE is an unreachable
/// server; otherwise its code and message.
fn status_error(addr: SocketAddr, op: &str, status: &tonic::Status) -> ControlError {
    if status.code() == tonic::Code::Unavailable {
        return ControlError::BfRuntimeUnreachable {
            addr,
            reason: format!("{op}: {}", status.message()),
        };
    }
    let message = match status.message() {
        "" => "(no message)".to_string(),
        m => m.to_string(),
    };
    ControlError::BfRuntime {
        op: op.into(),
        code: status.code() as i32,
        message,
    }
}
