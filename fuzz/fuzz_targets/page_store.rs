#![no_main]
// Body, input format and checks: ferrite_fuzzing::TARGETS ("page_store").
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (ferrite_fuzzing::target("page_store").expect("known target").run)(data)
});
