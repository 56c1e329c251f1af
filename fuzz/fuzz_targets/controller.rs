//! libFuzzer on [`inagg_fuzz::controller`]: `fuzz/run controller`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| inagg_fuzz::controller(data));
