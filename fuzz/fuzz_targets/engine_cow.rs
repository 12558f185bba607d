#![no_main]
// Body, input format and checks: ferrite_fuzzing::TARGETS ("engine_cow").
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (ferrite_fuzzing::target("engine_cow").expect("known target").run)(data)
});
