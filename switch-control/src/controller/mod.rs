//! `inagg controller`: the daemon that owns the aggregators (the switch and
//! host emulators for fallback), keeps the desired state (jobs, pools,
//! priority map) in an embedded database, admits jobs and registering
//! workers, and keeps every aggregator in step with that state (so a
//! restarted switch or controller gets it all back).
//!
//! - [`api`]: the JSON-lines protocol;
//! - [`client`]: its client, used by `inagg ctl --controller` and by agents
//!   that register;
//! - [`file`](mod@file): declarative files (`inagg ctl --controller ADDR apply -f`);
//! - `book`: the bookkeeping, pure (jobs, placement, grants, sessions and
//!   generations, groups), unit-tested transition by transition;
//! - `site`: what the controller knows of one aggregator;
//! - `link`: the connection to one aggregator and what goes over it;
//! - `state`: the book, the links and the database together:
//!   reconciliation;
//! - `store`: the database;
//! - `daemon`: the server (a thread per connection, one lock over the
//!   state, a reconcile thread).
//!
//! The daemon and the files take the `controller` feature (on by default;
//! redb and toml); `api` and `client` are always built, so a worker that
//! registers (the C library) needs neither.

pub mod api;
#[cfg(feature = "controller")]
mod book;
pub mod client;
#[cfg(feature = "controller")]
mod daemon;
#[cfg(feature = "controller")]
pub mod file;
#[cfg(feature = "controller")]
mod link;
#[cfg(feature = "controller")]
mod site;
#[cfg(feature = "controller")]
mod state;
#[cfg(feature = "controller")]
mod store;

pub use client::Client;
#[cfg(feature = "controller")]
pub use daemon::*;
