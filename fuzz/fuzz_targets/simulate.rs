#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    joiner_fuzz::simulate(data);
});
