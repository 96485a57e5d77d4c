//! The examples in the runtime's documentation are what a user of this
//! crate reads under `backstop`'s items: they name `backstop`, which is the
//! crate a user depends on. (The runtime's own doctests alias it with a
//! hidden `extern crate retry_runtime as backstop;` line.)

use std::path::Path;

/// Items not re-exported by `backstop`: their examples stay in the
/// runtime's names.
const RUNTIME_ONLY: [&str; 1] = ["macro_support"];

/// The `.rs` files under `dir`, in its subdirectories too.
fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

#[test]
fn runtime_examples_name_the_crate_users_depend_on() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("retry-runtime/src");
    let mut offenders = Vec::new();
    let mut blocks = 0;
    for path in rust_files(&src) {
        if path.file_name().is_some_and(|n| n == "lib.rs") {
            continue; // the runtime crate's own front page
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let doc: Vec<(usize, &str)> = text
            .lines()
            .enumerate()
            .filter_map(|(n, line)| {
                let line = line.trim_start();
                let rest = line
                    .strip_prefix("///")
                    .or_else(|| line.strip_prefix("//!"))?;
                Some((n + 1, rest.strip_prefix(' ').unwrap_or(rest)))
            })
            .collect();
        let mut in_code = false;
        let mut block: Vec<(usize, &str)> = Vec::new();
        for (n, line) in doc {
            if let Some(info) = line.strip_prefix("```") {
                if in_code {
                    blocks += 1;
                    let runtime_only = block
                        .iter()
                        .any(|(_, l)| RUNTIME_ONLY.iter().any(|item| l.contains(item)));
                    for (n, l) in block.drain(..) {
                        let visible = !l.starts_with('#');
                        if visible && l.contains("retry_runtime") && !runtime_only {
                            offenders.push(format!("{}:{n}: {l}", path.display()));
                        }
                    }
                    in_code = false;
                } else {
                    in_code = !info.contains("text");
                }
            } else if in_code {
                block.push((n, line));
            }
        }
    }
    assert!(
        blocks > 50,
        "found only {blocks} examples: is the scan broken?"
    );
    assert!(
        offenders.is_empty(),
        "examples naming `retry_runtime`:\n{}",
        offenders.join("\n")
    );
}

/// Users read the documentation without this repository's design notes:
/// it states each rule itself, and never sends them to a document they do
/// not have.
#[test]
fn documentation_states_its_rules_rather_than_cite_design_notes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut offenders = Vec::new();
    for dir in ["src", "retry-runtime/src", "retry-macros/src"] {
        for path in rust_files(&root.join(dir)) {
            let text = std::fs::read_to_string(&path).unwrap();
            for (n, line) in text.lines().enumerate() {
                let line = line.trim_start();
                let is_doc = line.starts_with("///") || line.starts_with("//!");
                if is_doc && line.contains("DESIGN") {
                    offenders.push(format!("{}:{}: {line}", path.display(), n + 1));
                }
            }
        }
    }
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    if readme.contains("DESIGN") {
        offenders.push("README.md mentions DESIGN".to_owned());
    }
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
}
