//! Snapshots of how problems are shown to users. Each malformed spec
//! `tests/bad_specs/NAME.kyn` sits next to `NAME.stderr`, its expected
//! rendering, so that a change in wording or layout shows up in review like
//! a change in code. `KYNML_BLESS=1 cargo test` rewrites the `.stderr` files.

use std::fs;
use std::path::{Path, PathBuf};

use super::{parse_spec, render};

#[test]
fn bad_specs_render_as_recorded() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bad_specs");
    let bless = std::env::var_os("KYNML_BLESS").is_some_and(|v| v == "1");
    let mut specs: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "kyn"))
        .collect();
    specs.sort();
    assert!(specs.len() >= 25, "expected at least 25 bad specs in {}", dir.display());

    let mut failures = Vec::new();
    for spec in &specs {
        let name = spec.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let source = fs::read_to_string(spec).unwrap_or_else(|e| panic!("cannot read {name}: {e}"));
        let rendered = match parse_spec(&source) {
            Ok(_) => {
                failures.push(format!("{name}: parsed without any problem"));
                continue;
            }
            Err(error) => render(&name, &source, &error.diagnostics),
        };
        let expected_path = spec.with_extension("stderr");
        if bless {
            fs::write(&expected_path, &rendered).unwrap_or_else(|e| panic!("cannot write {name}: {e}"));
            continue;
        }
        match fs::read_to_string(&expected_path) {
            Ok(expected) if expected.replace("\r\n", "\n") == rendered => {}
            Ok(expected) => {
                failures.push(format!("{name}: rendering changed\n--- expected\n{expected}--- found\n{rendered}---"))
            }
            Err(_) => failures.push(format!("{name}: no .stderr file; run with KYNML_BLESS=1 and review it")),
        }
    }

    let orphans = fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "stderr") && !path.with_extension("kyn").exists());
    for orphan in orphans {
        failures.push(format!("{}: no matching .kyn file", orphan.display()));
    }
    assert!(failures.is_empty(), "{} snapshot problems:\n\n{}", failures.len(), failures.join("\n\n"));
}
