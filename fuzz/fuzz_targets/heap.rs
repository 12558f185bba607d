#![no_main]
// Body, input format and checks: ferrite_fuzzing::TARGETS ("heap").
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (ferrite_fuzzing::target("heap").expect("known target").run)(data)
});
