//! The layer order written in `src/lib.rs` holds: a module imports only from its own
//! layer or the layers below it, and nothing inside `src/` imports through the crate
//! root's re-exports (`use crate::{…}` or `crate::Type`), which would hide the layer used.
//!
//! Reads the sources as text: every `crate::<module>` path outside comments and outside
//! `#[cfg(test)] mod tests`, in every file under `src/` but the binary (its own crate).

use std::path::{Path, PathBuf};

/// Lowest first. A module may use its own layer and those before it.
const LAYERS: &[&[&str]] = &[
    // The basics: errors, time, secrets, untrusted text, the log budget, parser messages,
    // bounded file reading, clouds, the HTTP plumbing, the environment and telemetry.
    &[
        "error",
        "clock",
        "secret",
        "untrusted_text",
        "log_budget",
        "parser_errors",
        "regular_file",
        "cloud",
        "http",
        "environment",
        "telemetry",
    ],
    &["file"],
    &["token"],
    &["reload"],
    &["azure"],
    &["dataplane"],
    &["keyvault"],
    &["serve"],
    &["hypershift"],
    // Across the layers: the health report, the fixed limits, the helpers the workspace's
    // other crates share, the testing kit.
    &["inspect", "limits", "unstable"],
    &["testing"],
];

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().unwrap() != "bin" {
                sources(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a file belongs to: the first component under `src/`.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_owned()
}

/// `(line number, module)` of every `crate::<module>` path in code (not comments, not the
/// unit tests at the end of a file).
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with("mod tests {") {
            break;
        }
        let code = line.split("//").next().unwrap();
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let before = rest[..at].chars().last();
            rest = &rest[at + "crate::".len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue; // `msi_dataplane_crate::` and the like
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '{')
                .collect();
            found.push((n + 1, name));
        }
    }
    found
}

#[test]
fn each_module_imports_only_its_layer_and_those_below() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut problems = Vec::new();
    for file in &files {
        let module = module_of(&src, file);
        if module == "lib" || module == "guide" {
            continue;
        }
        let Some(own) = rank(&module) else {
            problems.push(format!(
                "{}: module `{module}` has no layer",
                file.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        for (line, used) in crate_paths(&text) {
            let at = format!("{}:{line}", file.strip_prefix(&src).unwrap().display());
            if used.starts_with('{') {
                problems.push(format!("{at}: `use crate::{{…}}` imports through the root"));
                continue;
            }
            if used == module {
                continue;
            }
            match rank(&used) {
                Some(r) if r <= own => {}
                Some(_) => problems.push(format!("{at}: `{module}` uses `{used}`, a layer above")),
                None => problems.push(format!(
                    "{at}: `crate::{used}` is not a module (a root re-export hides the layer)"
                )),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_check_sees_a_violation() {
    let paths = crate_paths(
        "use crate::{Error, Result};\nuse crate::token::x; // crate::keyvault\n\
         fn f() { crate::ErrorKind::X }\nmod tests {\nuse crate::testing;\n",
    );
    let names: Vec<&str> = paths.iter().map(|(_, m)| m.as_str()).collect();
    assert_eq!(names, ["{Error", "token", "ErrorKind"]);
    assert!(rank("token") < rank("keyvault"));
    assert_eq!(rank("ErrorKind"), None);
}
