//! `inagg controller`: the daemon that owns the aggregators (the switch and
//! host emulators for fallback), keeps the desired state (jobs, pools,
//! priority map) in an embedded database, admits jobs and registering
//! workers, and keeps every aggregator in step with that state (so a
//! restarted switch or controller gets it all back).
//!
//! Its API's types and client are `inagg-controller-api`'s; the switches it
//! drives are `inagg-switch-control`'s targets. Here:
//!
//! - [`file`](mod@file): declarative files (`inagg ctl --controller ADDR apply -f`);
//! - [`alloc`]: the slot allocator pools are placed with, pure;
//! - `book`: the bookkeeping, pure (jobs, placement, grants, sessions and
//!   generations, groups), unit-tested transition by transition;
//! - `site`: what the controller knows of one aggregator;
//! - `link`: the connection to one aggregator and what goes over it;
//! - `state`: the book, the links and the database together:
//!   reconciliation;
//! - `store`: the database;
//! - [`tenants`]: tenants' credentials (hashed) and quotas, pure;
//! - `daemon`: the server (a thread per connection, one lock over the
//!   state, a reconcile thread);
//! - [`metrics`]: its Prometheus exposition.

pub mod alloc;
mod audit;
mod book;
mod daemon;
pub mod file;
mod link;
pub mod metrics;
mod site;
mod state;
mod store;
pub mod tenants;

pub use daemon::*;
