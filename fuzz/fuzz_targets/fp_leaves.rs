#![no_main]
// Body, input format and checks: ferrite_fuzzing::TARGETS ("fp_leaves").
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (ferrite_fuzzing::target("fp_leaves").expect("known target").run)(data)
});
