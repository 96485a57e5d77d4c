//! The runtime's modules are in folders by concern and in layers (see the
//! crate docs, "How it is built"): a module imports only modules of its own
//! layer or below, and none imports one that imports it back. Checked on
//! the source: every `crate::module` path outside comments.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers, bottom first, as the crate docs list them. A module is a
/// file of `src/` (`sync`), a folder (`state`: its `mod.rs` and the files
/// it keeps to itself) or a file of a folder named here (`limit::window`).
const LAYERS: [&[&str]; 5] = [
    &[
        "time::units",
        "sync",
        "time::virtual_time",
        "time::clock",
        "state::backoff",
        "state::vocabulary",
        "reqwest::error",
    ],
    &["classify", "classify::clients"],
    &[
        "limit",
        "limit::token",
        "limit::window",
        "limit::adaptive",
        "limit::breaker",
        "state::policy",
        "run::observe",
        "run::scope",
        "time",
        "time::timer",
        "run::hedge",
        "limit::isolation",
        "limit::keyed",
    ],
    &["state"],
    &[
        "run",
        "macro_support",
        "testing",
        "classify::http",
        "reqwest",
        "config",
        "tower",
        "reqwest::middleware",
        "tower::tonic",
    ],
];

/// Every module named in [`LAYERS`].
fn layered(module: &str) -> bool {
    LAYERS.iter().any(|layer| layer.contains(&module))
}

/// The layer of `module`, numbered from 1 at the bottom as in the docs.
fn layer(module: &str) -> Option<usize> {
    LAYERS
        .iter()
        .position(|layer| layer.contains(&module))
        .map(|at| at + 1)
}

/// The module a path after `crate::` names: `limit::window` for
/// `crate::limit::window::WindowBudget`, `state` for `crate::state::Call`.
fn named(path: &str) -> String {
    let segment = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect()
    };
    let first = segment(path);
    let rest = &path[first.len()..];
    if let Some(rest) = rest.strip_prefix("::") {
        let inner = format!("{first}::{}", segment(rest));
        if layered(&inner) {
            return inner;
        }
    }
    first
}

/// Each module and the modules its code names, read from the files of
/// `src/` and of its folders.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut imports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut visit = |path: &Path, module: &str| {
        let text = std::fs::read_to_string(path).unwrap();
        let entry = imports.entry(module.to_owned()).or_default();
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (at, _) in line.match_indices("crate::") {
                // (`$crate::sync` in a macro names a module too.)
                let name = named(&line[at + 7..]);
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
                let inner = inner.unwrap().path();
                // A folder's module's own submodules (`state/first/` would
                // be part of `state::first`): none today.
                assert!(
                    !inner.is_dir(),
                    "{}: folders are one level deep",
                    inner.display()
                );
                let file = inner.file_stem().unwrap().to_str().unwrap();
                let qualified = format!("{stem}::{file}");
                let module = if layered(&qualified) {
                    qualified
                } else {
                    stem.clone()
                };
                visit(&inner, &module);
            }
        } else if stem != "lib" {
            visit(&path, &stem);
        }
    }
    imports
}

/// The folders hold what the crate docs say, and nothing is left at the
/// top of `src/` but the crate root, the atomics, the configuration and
/// the macro's glue.
#[test]
fn the_modules_are_in_their_folders() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut top: Vec<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    top.sort();
    assert_eq!(
        top,
        [
            "classify",
            "config.rs",
            "lib.rs",
            "limit",
            "macro_support.rs",
            "reqwest",
            "run",
            "state",
            "sync.rs",
            "testing",
            "time",
            "tower"
        ]
    );
    for module in LAYERS.iter().flat_map(|layer| layer.iter()) {
        let file = match module.split_once("::") {
            Some((folder, file)) => src.join(folder).join(format!("{file}.rs")),
            None if src.join(module).is_dir() => src.join(module).join("mod.rs"),
            None => src.join(format!("{module}.rs")),
        };
        assert!(file.is_file(), "`{module}` is not at {}", file.display());
    }
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
