//! Node.js with the packages the tests run as independent, real clients
//! (`.ci/node/package.json`: JavaScript's `@azure/identity`): the `node_modules` directory
//! under `$MSI_TEST_NODE_MODULES` when set; else `target/test-node`, installed there with
//! the machine's `npm` from the package registry on first use (by whichever test binary
//! comes first; the others use it once it is complete).

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The directory holding `node_modules` (for `NODE_PATH`).
pub fn modules() -> PathBuf {
    static MODULES: OnceLock<PathBuf> = OnceLock::new();
    MODULES
        .get_or_init(|| match std::env::var_os("MSI_TEST_NODE_MODULES") {
            Some(dir) => PathBuf::from(dir),
            None => provision(),
        })
        .clone()
}

/// `target/test-node/node_modules`, installed if missing: in a directory of this
/// process's own, then renamed into place, so that no test binary sees half of one.
fn provision() -> PathBuf {
    let root = &super::repo_root();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let dir = target.join("test-node");
    if dir.join("node_modules/@azure/identity").is_dir() {
        return dir.join("node_modules");
    }
    let building = target.join(format!("test-node.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    std::fs::create_dir_all(&building).unwrap();
    std::fs::copy(
        root.join(".ci/node/package.json"),
        building.join("package.json"),
    )
    .unwrap();
    let out = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&building)
        .output()
        .unwrap_or_else(|e| panic!("cannot run npm to install .ci/node/package.json: {e}"));
    assert!(
        out.status.success(),
        "cannot install .ci/node/package.json:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if std::fs::rename(&building, &dir).is_err() {
        // Another test binary was first.
        let _ = std::fs::remove_dir_all(&building);
    }
    dir.join("node_modules")
}
