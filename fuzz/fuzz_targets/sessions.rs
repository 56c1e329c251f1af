//! libFuzzer on [`inagg_fuzz::sessions`]: `fuzz/run sessions`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| inagg_fuzz::sessions(data));
