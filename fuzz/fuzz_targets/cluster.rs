//! libFuzzer on [`inagg_fuzz::cluster`]: `fuzz/run cluster`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| inagg_fuzz::cluster(data));
