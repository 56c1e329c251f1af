//! libFuzzer on [`inagg_fuzz::config`]: `fuzz/run config`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| inagg_fuzz::config(data));
