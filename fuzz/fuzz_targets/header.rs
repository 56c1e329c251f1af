//! libFuzzer on [`inagg_fuzz::header`]: `fuzz/run header`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| inagg_fuzz::header(data));
