//! The runtime's modules are layered (see the crate docs, "How it is
//! built"): a module imports only modules of its own layer or below, and
//! none imports one that imports it back. Checked on the source: every
//! `crate::module` path outside comments.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers, bottom first, as the crate docs list them.
const LAYERS: [&[&str]; 5] = [
    &[
        "units",
        "sync",
        "virtual_time",
        "clock",
        "backoff",
        "vocabulary",
        "reqwest_error",
    ],
    &["classify", "clients"],
    &[
        "throttle",
        "budget",
        "adaptive",
        "breaker",
        "policy",
        "observe",
        "context",
        "timer",
        "hedge",
        "isolation",
    ],
    &["state"],
    &[
        "run",
        "macro_support",
        "testing",
        "http",
        "reqwest",
        "config",
        "tower",
        "reqwest_middleware",
        "tonic",
    ],
];

/// The layer of `module`, numbered from 1 at the bottom as in the docs.
fn layer(module: &str) -> Option<usize> {
    LAYERS
        .iter()
        .position(|layer| layer.contains(&module))
        .map(|at| at + 1)
}

/// Each module (a file of `src/`, with its subdirectory's files) and the
/// modules its code names.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut imports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut visit = |path: &Path, module: &str| {
        let text = std::fs::read_to_string(path).unwrap();
        let entry = imports.entry(module.to_owned()).or_default();
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (at, _) in line.match_indices("crate::") {
                let name: String = line[at + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if !name.is_empty() && name != module {
                    entry.insert(name);
                }
            }
        }
    };
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_str().unwrap().to_owned();
        if path.is_dir() {
            for inner in std::fs::read_dir(&path).unwrap() {
                visit(&inner.unwrap().path(), &stem);
            }
        } else if stem != "lib" {
            visit(&path, &stem);
        }
    }
    imports
}

#[test]
fn every_module_is_in_a_layer_and_imports_none_above_it() {
    let imports = imports();
    let mut wrong = Vec::new();
    for (module, names) in &imports {
        let Some(own) = layer(module) else {
            wrong.push(format!(
                "`{module}` is in no layer: add it to LAYERS and the crate docs"
            ));
            continue;
        };
        for name in names {
            match layer(name) {
                Some(theirs) if theirs > own => {
                    wrong.push(format!(
                        "`{module}` (layer {own}) imports `{name}` (layer {theirs})"
                    ));
                }
                _ => {}
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Whether `target` is reached from `from` by imports (depth-first).
fn reaches(
    imports: &BTreeMap<String, BTreeSet<String>>,
    from: &str,
    target: &str,
    seen: &mut BTreeSet<String>,
) -> bool {
    imports.get(from).is_some_and(|names| {
        names.iter().any(|name| {
            name == target || (seen.insert(name.clone()) && reaches(imports, name, target, seen))
        })
    })
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let imports = imports();
    let cycles: Vec<&String> = imports
        .keys()
        .filter(|module| reaches(&imports, module, module, &mut BTreeSet::new()))
        .collect();
    assert!(cycles.is_empty(), "modules on a cycle: {cycles:?}");
}
