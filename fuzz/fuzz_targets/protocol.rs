#![no_main]
// Body, input format and checks: ferrite_fuzzing::TARGETS ("protocol").
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (ferrite_fuzzing::target("protocol").expect("known target").run)(data)
});
