//! Python with the packages the tests run as independent, real clients and parsers
//! (`.ci/python-requirements.txt`): `$MSI_TEST_PYTHON` when set; else a virtual
//! environment under `target/test-python`, made with the machine's `python3` and the
//! requirements installed from the package index on first use (by whichever test binary
//! comes first; the others use it once it is complete).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The interpreter to run.
pub fn interpreter() -> PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON
        .get_or_init(|| match std::env::var_os("MSI_TEST_PYTHON") {
            Some(python) => PathBuf::from(python),
            None => provision(),
        })
        .clone()
}

/// `target/test-python/bin/python`, made if missing ([`super::provisioned`]). A virtual
/// environment names its own path in its scripts, not in `bin/python`'s lookup of its
/// packages (`pyvenv.cfg` sits beside it): the renamed one works.
fn provision() -> PathBuf {
    let root = super::repo_root();
    let made = |venv: &std::path::Path| venv.join("bin/python").exists();
    let venv = super::provisioned("test-python", made, |building| {
        let status = |what: &str, cmd: &mut Command| {
            let out = cmd
                .output()
                .unwrap_or_else(|e| panic!("cannot {what}: {e}"));
            assert!(
                out.status.success(),
                "cannot {what}:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        status(
            "make a Python virtual environment (python3 -m venv)",
            Command::new("python3").arg("-m").arg("venv").arg(building),
        );
        status(
            "install .ci/python-requirements.txt",
            Command::new(building.join("bin/python"))
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "-r",
                ])
                .arg(root.join(".ci/python-requirements.txt")),
        );
    });
    venv.join("bin/python")
}

/// Run `script` with `stdin` on its standard input; its stdout on success, a panic with
/// its stderr otherwise.
#[track_caller]
pub fn run(script: &str, stdin: &[u8]) -> String {
    let python = interpreter();
    let mut child = Command::new(&python)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{} failed:\n{}",
        python.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The samples of a Prometheus scrape as Python's `prometheus_client` parser reads them
/// (it refuses what Prometheus refuses): `TYPE name{label="value",...} VALUE` lines with
/// the labels sorted and the value as a Python float (`1.0`), sorted.
#[track_caller]
pub fn prometheus_samples(text: &str) -> Vec<String> {
    let script = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
        print(f"{family.type} {s.name}{{{labels}}} {float(s.value)!r}")
"#;
    let mut lines: Vec<String> = run(script, text.as_bytes())
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}
