#![no_main]
// Body, input format and checks: ferrite_fuzzing::TARGETS ("log").
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (ferrite_fuzzing::target("log").expect("known target").run)(data)
});
