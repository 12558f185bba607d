#![no_main]
// Body, input format and checks: ferrite_fuzzing::TARGETS ("cells").
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (ferrite_fuzzing::target("cells").expect("known target").run)(data)
});
