#![no_main]
// Body, input format and checks: ferrite_fuzzing::TARGETS ("ptm").
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (ferrite_fuzzing::target("ptm").expect("known target").run)(data)
});
