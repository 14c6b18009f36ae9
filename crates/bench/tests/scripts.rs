//! The Python scripts beside the bench that computed published figures
//! (`scripts/ab_summary.py`, `scripts/tip_latency.py`, `scripts/hostile.py`)
//! are checked by their unittest module; run here so that `cargo test`
//! covers them.

use std::path::Path;
use std::process::Command;

#[test]
fn bench_scripts_pass_their_unit_tests() {
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts");
    let out = Command::new("python3")
        .args(["-m", "unittest", "-v", "test_bench_scripts"])
        .current_dir(&scripts)
        // No __pycache__ left in the source tree.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 runs (the test scripts need it as well)");
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{report}");
    assert!(
        report.contains("\nOK") && !report.contains("Ran 0 tests"),
        "{report}"
    );
}
