#![no_main]
// Body, input format and checks: ferrite_fuzzing::TARGETS ("pool_header").
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (ferrite_fuzzing::target("pool_header").expect("known target").run)(data)
});
