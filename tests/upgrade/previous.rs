//! The previous release's module: built once from the commit CHANGELOG.md names, by
//! `scripts/previous-release.sh` (which `make test` starts beside the first tests; a
//! test that comes first waits for that build).

use std::path::Path;
use std::process::Command;

/// The path of the previous release's module.
pub fn module() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("scripts/previous-release.sh"))
        .output()
        .expect("run scripts/previous-release.sh");
    assert!(
        out.status.success(),
        "building the previous release failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(Path::new(&path).is_file(), "no module at {path}");
    path
}
