#![no_main]
// Body, input format and checks: ferrite_fuzzing::TARGETS ("tx_ds").
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (ferrite_fuzzing::target("tx_ds").expect("known target").run)(data)
});
