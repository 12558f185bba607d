#![no_main]
// Body, input format and checks: ferrite_fuzzing::TARGETS ("bytemap").
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (ferrite_fuzzing::target("bytemap").expect("known target").run)(data)
});
