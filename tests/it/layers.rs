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

/// No two files of a crate name each other's items, directly or around a circle, in the
/// library, the testing kit, the token server's crate and its command line: each file
/// can be read knowing only the files it names, and those never name it back.
///
/// Reads the sources as text. A file names another when a path in its code (a `use` or
/// an inline `crate::`/`super::`/`self::` path, outside comments and the unit tests at
/// the end of a file) leads to an item of that file's module: the longest prefix of the
/// path that is a module with a file of its own. `mod x;` declarations are not names.
#[test]
fn no_two_files_name_each_other_directly_or_around_a_circle() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let roots = [
        (manifest.join("src"), "lib.rs"),
        (manifest.join("crates/msi-dataplane-testing/src"), "lib.rs"),
        (manifest.join("crates/msi-credential/src"), "lib.rs"),
        (
            manifest.join("crates/msi-credential/src/bin/msi-credential"),
            "main.rs",
        ),
    ];
    let mut circles = Vec::new();
    for (dir, root) in &roots {
        circles.extend(file_circles(dir, root));
    }
    assert!(
        circles.is_empty(),
        "files that name each other:\n{}",
        circles.join("\n")
    );
}

/// The circles among a crate's files, each as `a.rs -> b.rs -> a.rs`.
fn file_circles(dir: &Path, root: &str) -> Vec<String> {
    let mut files = Vec::new();
    crate_sources(dir, dir, &mut files);
    // Module path (names below the crate root) of every file.
    let modules: Vec<Vec<String>> = files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(dir).unwrap().with_extension("");
            let mut path: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if path
                .last()
                .is_some_and(|l| l == "mod" || l == root.trim_end_matches(".rs"))
            {
                path.pop();
            }
            path
        })
        .collect();
    let index_of = |path: &[String]| modules.iter().position(|m| m.as_slice() == path);
    let mut edges: Vec<Vec<usize>> = vec![Vec::new(); files.len()];
    for (i, file) in files.iter().enumerate() {
        let text = std::fs::read_to_string(file).unwrap();
        for path in named_paths(&code_of(&text)) {
            let mut at: Vec<String> = modules[i].clone();
            let mut segments = path.iter().peekable();
            match segments.peek().map(|s| s.as_str()) {
                Some("crate") => {
                    at.clear();
                    segments.next();
                }
                Some("self") => {
                    segments.next();
                }
                Some("super") => {}
                // `use child::Item` after `mod child;`.
                Some(first)
                    if index_of(&[at.clone(), vec![first.to_owned()]].concat()).is_some() => {}
                _ => continue,
            }
            while segments.peek().is_some_and(|s| *s == "super") {
                at.pop();
                segments.next();
            }
            // The longest prefix that is a file's module.
            let mut target = index_of(&at);
            for s in segments {
                at.push(s.clone());
                match index_of(&at) {
                    Some(j) => target = Some(j),
                    None => break,
                }
            }
            if let Some(j) = target
                && j != i
                && !edges[i].contains(&j)
            {
                edges[i].push(j);
            }
        }
    }
    let name = |i: usize| files[i].strip_prefix(dir).unwrap().display().to_string();
    let mut circles = Vec::new();
    let mut reported: Vec<Vec<usize>> = Vec::new();
    for start in 0..files.len() {
        // The shortest circle through `start`, by breadth-first search.
        let mut previous = vec![usize::MAX; files.len()];
        let mut queue = std::collections::VecDeque::from([start]);
        let mut closing = None;
        while let Some(f) = queue.pop_front() {
            for &g in &edges[f] {
                if g == start {
                    closing = Some(f);
                    break;
                }
                if previous[g] == usize::MAX {
                    previous[g] = f;
                    queue.push_back(g);
                }
            }
            if closing.is_some() {
                break;
            }
        }
        let Some(mut f) = closing else { continue };
        let mut circle = vec![f];
        while f != start {
            f = previous[f];
            circle.push(f);
        }
        circle.reverse();
        let mut key = circle.clone();
        key.sort();
        if reported.contains(&key) {
            continue;
        }
        reported.push(key);
        let names: Vec<String> = circle.iter().chain([&start]).map(|&i| name(i)).collect();
        circles.push(format!("{}: {}", dir.display(), names.join(" -> ")));
    }
    circles
}

/// Every `.rs` file of the crate rooted at `dir` (a `bin` folder is a crate of its own).
fn crate_sources(dir: &Path, at: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(at).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().unwrap() != "bin" || at != dir {
                crate_sources(dir, &path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
}

/// A file's code: comments and the unit tests at its end left out. Inside an inline
/// module (`mod name { … }`), `super::` is the file's own module: written `self::`.
fn code_of(text: &str) -> String {
    let mut code = String::new();
    // The brace depth at which the inline module being read opened.
    let (mut depth, mut inline): (i32, Option<i32>) = (0, None);
    for line in text.lines() {
        if line.starts_with("mod tests {") || line.starts_with("mod tests;") {
            break;
        }
        let line = line.split("//").next().unwrap();
        let trimmed = line.trim_start();
        if inline.is_none()
            && (trimmed.starts_with("mod ") || trimmed.starts_with("pub mod "))
            && trimmed.trim_end().ends_with('{')
        {
            inline = Some(depth);
        }
        if inline.is_some() {
            code.push_str(&line.replace("super::", "self::"));
        } else {
            code.push_str(line);
        }
        code.push('\n');
        depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
        if inline.is_some_and(|d| depth <= d) {
            inline = None;
        }
    }
    code
}

/// Every path starting with `crate`, `super` or `self` in `code`, with `use` trees
/// (`use a::{b, c::d}`) expanded, as its segments.
fn named_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(|c: char| c.is_ascii_alphabetic()) {
        let before = rest[..at].chars().last();
        let word_len = rest[at..]
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len() - at);
        let word = &rest[at..at + word_len];
        let after = &rest[at + word_len..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            rest = after;
            continue;
        }
        // A `use` statement: the word begins its line (after `pub`, `pub(crate)`, ...).
        let line_start = rest[..at].rfind('\n').map_or(0, |n| n + 1);
        let lead = rest[line_start..at].trim();
        if word == "use" && (lead.is_empty() || lead.starts_with("pub")) {
            let end = after.find(';').unwrap_or(after.len());
            // Without spaces and renames: `a::{b as c}` is `a::{b}`.
            let mut tree = String::new();
            let mut words = after[..end].split_whitespace();
            while let Some(w) = words.next() {
                if w == "as" {
                    let renamed = words.next().unwrap_or("");
                    tree.push_str(&renamed[renamed.find([',', '}']).unwrap_or(renamed.len())..]);
                } else {
                    tree.push_str(w);
                }
            }
            expand_use(&tree, &mut Vec::new(), &mut paths);
            rest = &after[end..];
            continue;
        }
        if matches!(word, "crate" | "super" | "self") && after.starts_with("::") {
            let len = after
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(after.len());
            let mut segments = vec![word.to_owned()];
            segments.extend(
                after[..len]
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned),
            );
            paths.push(segments);
            rest = &after[len..];
            continue;
        }
        rest = after;
    }
    paths
}

/// Expand a `use` tree without spaces (`crate::a::{b,c::{d,e}}`) into paths.
fn expand_use(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim_start_matches("::");
    if let Some(open) = tree.find('{') {
        let head = &tree[..open];
        let close = tree.rfind('}').filter(|&c| c > open).unwrap_or(tree.len());
        let inner = &tree[open + 1..close];
        let pushed: Vec<String> = head
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        let n = pushed.len();
        prefix.extend(pushed);
        // Split the group at its top-level commas.
        let (mut depth, mut start) = (0, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_use(&inner[start..i], prefix, out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand_use(&inner[start..], prefix, out);
        prefix.truncate(prefix.len() - n);
    } else if !tree.is_empty() {
        let mut path = prefix.clone();
        path.extend(
            tree.split("::")
                .filter(|s| !s.is_empty() && *s != "*")
                .map(str::to_owned),
        );
        if path.last().is_some_and(|s| s == "self") {
            path.pop();
        }
        out.push(path);
    }
}

#[test]
fn the_circle_check_sees_each_kind_of_circle() {
    let dir = std::env::temp_dir().join(format!("layers-circles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("m")).unwrap();
    let files = [
        // A facade: the root re-exports `a`, and `a` names the root's re-export.
        ("lib.rs", "mod a;\nmod m;\npub use a::A;\n"),
        ("a.rs", "pub struct A;\nfn f() -> crate::A { todo!() }\n"),
        // Around three files, through a `use` group with a rename.
        ("m/mod.rs", "mod x;\nmod y;\nmod z;\n"),
        ("m/x.rs", "use super::{y::{Y as Why}};\n"),
        ("m/y.rs", "use crate::m::z::Z;\n"),
        (
            "m/z.rs",
            "mod inner {\n    use super::Z; // the file's own\n}\n\
             pub(crate) use self::inner::*;\nfn f() { crate::m::x::g() }\n",
        ),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let circles = file_circles(&dir, "lib.rs");
    std::fs::remove_dir_all(&dir).unwrap();
    let circles: Vec<&str> = circles
        .iter()
        .map(|c| c.split(": ").nth(1).unwrap())
        .collect();
    assert_eq!(
        circles,
        [
            "a.rs -> lib.rs -> a.rs",
            "m/x.rs -> m/y.rs -> m/z.rs -> m/x.rs"
        ]
    );
}
