//! libFuzzer on [`inagg_fuzz::switch`]: `fuzz/run switch`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| inagg_fuzz::switch(data));
