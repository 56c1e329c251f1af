//! libFuzzer on [`inagg_fuzz::frame`]: `fuzz/run frame`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| inagg_fuzz::frame(data));
