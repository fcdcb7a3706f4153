//! Any bytes as a `.kyn` spec: parsing and rendering the diagnostics never
//! panic, hang or allocate without bound.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else { return };
    if let Err(error) = kynml_core::spec::parse_spec(source) {
        let _ = kynml_core::spec::render("fuzz.kyn", source, &error.diagnostics);
    }
});
