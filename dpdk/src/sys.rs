//! Raw bindings: bindgen's output for the allow-listed DPDK API and the
//! fast-path shim (`inagg_*`, see shim.h). Use the safe wrappers instead.
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    clippy::all,
    missing_docs,
    unsafe_op_in_unsafe_fn
)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
