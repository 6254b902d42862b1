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

/// `target/test-node/node_modules`, installed if missing ([`super::provisioned`]).
fn provision() -> PathBuf {
    let root = super::repo_root();
    let installed = |dir: &std::path::Path| dir.join("node_modules/@azure/identity").is_dir();
    let dir = super::provisioned("test-node", installed, |building| {
        std::fs::create_dir_all(building).unwrap();
        let package = building.join("package.json");
        std::fs::copy(root.join(".ci/node/package.json"), package).unwrap();
        let out = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(building)
            .output()
            .unwrap_or_else(|e| panic!("cannot run npm to install .ci/node/package.json: {e}"));
        assert!(
            out.status.success(),
            "cannot install .ci/node/package.json:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
    dir.join("node_modules")
}
