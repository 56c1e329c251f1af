//! libFuzzer on [`inagg_fuzz::control`]: `fuzz/run control`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| inagg_fuzz::control(data));
