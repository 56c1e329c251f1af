//! inagg's network I/O, the sockets and threads beside `inagg-wire`'s
//! bytes: what every endpoint (the emulator, the agents, the controller,
//! `inagg ctl`) shares to move them.
//!
//! - [`udp`]: batched datagram I/O (`recvmmsg`/`sendmmsg`) over a kernel UDP
//!   socket, the fallback data path both ends use;
//! - [`shm`]: datagrams through shared memory between a worker and an
//!   emulator on the same host (no kernel copies);
//! - [`lines`]: JSON lines over TCP, the framing of every control
//!   channel: the bounded accept loop, line reader and client they share;
//! - [`conns`]: the bounds on a control endpoint's connections;
//! - [`token`]: control endpoints' shared secrets, compared in constant
//!   time;
//! - [`tls`] and [`stream`]: TLS on the control channels, and the
//!   connection type (clear or TLS) every control channel reads and writes;
//! - [`throttle`]: a bound on how often a kind of log line is written
//!   (strangers' refusals);
//! - [`metrics`]: the Prometheus text exposition and the small HTTP server
//!   that serves it.

pub mod conns;
pub mod lines;
pub mod metrics;
pub mod shm;
pub mod stream;
pub mod throttle;
pub mod tls;
pub mod token;
pub mod udp;
