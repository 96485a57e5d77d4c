//! Checks that read the sources of the workspace's packages, here in the
//! unpublished `feature-tests` so that no published package reads a file
//! outside its own directory: the runtime's examples name the crate users
//! depend on, the documentation states its rules, the attribute's copy of
//! the duration units is the runtime's, and the budget takes no lock.

use std::path::Path;

/// Items not re-exported by `backstop`: their examples stay in the
/// runtime's names.
const RUNTIME_ONLY: [&str; 1] = ["macro_support"];

/// The workspace's root, above this package.
fn workspace() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("feature-tests is a member of the workspace")
        .to_path_buf()
}

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
    let src = workspace().join("retry-runtime/src");
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
                        if visible && l.contains("backstop_runtime") && !runtime_only {
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
        "examples naming `backstop_runtime`:\n{}",
        offenders.join("\n")
    );
}

/// Users read the documentation without this repository's design notes:
/// it states each rule itself, and never sends them to a document they do
/// not have.
#[test]
fn documentation_states_its_rules_rather_than_cite_design_notes() {
    let root = workspace();
    let root = root.as_path();
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
    for page in manual_pages(root) {
        let text = std::fs::read_to_string(&page).unwrap();
        if text.contains("DESIGN") {
            offenders.push(format!("{} mentions DESIGN", page.display()));
        }
    }
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
}

/// The README and the manual's chapters in `docs/`.
fn manual_pages(root: &Path) -> Vec<std::path::PathBuf> {
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// A sentence of the README or the manual that promises behaviour names
/// the test that checks it, in backticks: every such name is a test.
#[test]
fn every_test_the_manual_names_exists() {
    let root = workspace();
    let mut functions = std::collections::HashSet::new();
    for dir in [
        "tests",
        "retry-runtime/tests",
        "retry-runtime/src",
        "src",
        "ui-tests",
        "feature-tests",
    ] {
        for path in rust_files(&root.join(dir)) {
            let text = std::fs::read_to_string(&path).unwrap();
            for rest in text.split("fn ").skip(1) {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                functions.insert(name);
            }
        }
    }
    let mut missing = Vec::new();
    let mut named = 0;
    for page in manual_pages(&root) {
        let text = std::fs::read_to_string(&page).unwrap();
        for quoted in text.split('`').skip(1).step_by(2) {
            // A test's name: lower-case words, at least four of them (a
            // metric's name starts with the crate's).
            let is_test_name = quoted.split('_').count() >= 4
                && !quoted.starts_with("backstop_")
                && quoted
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if is_test_name {
                named += 1;
                if !functions.contains(quoted) {
                    missing.push(format!("{}: `{quoted}`", page.display()));
                }
            }
        }
    }
    assert!(named > 10, "the manual names its tests ({named} found)");
    assert!(
        missing.is_empty(),
        "named, but no such test:\n{}",
        missing.join("\n")
    );
}

/// tower's `TpsBudget` takes a mutex on every deposit and withdrawal, and
/// `expect`s it: one panic while it is held poisons the budget for every
/// caller after. The budgets, the breaker and the adaptive throttle take
/// no lock of any kind on a call's path, nor does a table of them per key
/// but when a new key finds its places all held.
#[test]
fn the_budget_path_takes_no_lock() {
    const LOCKS: [&str; 5] = ["Mutex", "RwLock", ".lock()", "parking_lot", "spin::"];
    for file in ["window.rs", "breaker.rs", "adaptive.rs"] {
        let path = workspace().join("retry-runtime/src/limit").join(file);
        let source = std::fs::read_to_string(path).unwrap();
        for lock in LOCKS {
            assert!(!source.contains(lock), "{file} mentions {lock}");
        }
    }
    // The token budget's one lock lends a layer its budget of its own, when
    // the layer is built: nothing before it, on a call's path, takes one.
    let source =
        std::fs::read_to_string(workspace().join("retry-runtime/src/limit/token.rs")).unwrap();
    let lending = source
        .find("pub(crate) struct OwnBudget")
        .expect("token.rs lends layers their budgets");
    for lock in LOCKS {
        assert!(
            !source[..lending].contains(lock),
            "token.rs mentions {lock} before the layers' lending"
        );
    }
    // The table of keys takes one lock: where a new key finds every one of
    // its places held (rare), so that callers bringing the same new key at
    // once take one place between them. A key that has its place, or finds
    // an empty one, takes none.
    let source =
        std::fs::read_to_string(workspace().join("retry-runtime/src/limit/keyed.rs")).unwrap();
    let full = source
        .find("// Every place is held")
        .expect("keyed.rs says where its places are all held");
    let locks: Vec<usize> = source.match_indices(".lock()").map(|(at, _)| at).collect();
    assert_eq!(locks.len(), 1, "keyed.rs takes its lock in one place");
    assert!(
        locks[0] > full && source[full..locks[0]].lines().count() <= 6,
        "keyed.rs takes its lock only once every place is held"
    );
    for line in source.lines().filter(|line| line.contains("Mutex")) {
        assert!(line.contains("looking"), "keyed.rs: {line}");
    }
    for lock in ["RwLock", "parking_lot", "spin::"] {
        assert!(!source.contains(lock), "keyed.rs mentions {lock}");
    }
}

/// The attribute parses durations and checks its defaults with the same
/// units and defaults as the runtime: its copy of the file is the same.
#[test]
fn the_attributes_units_are_the_runtimes() {
    let root = workspace();
    let runtime = std::fs::read_to_string(root.join("retry-runtime/src/time/units.rs")).unwrap();
    let attribute = std::fs::read_to_string(root.join("retry-macros/src/units.rs")).unwrap();
    assert!(
        runtime == attribute,
        "retry-macros/src/units.rs differs from retry-runtime/src/time/units.rs: copy it over"
    );
}

/// The table of `#[retry]`'s options, on the attribute's page: its rows
/// (the option, and its default).
fn options_table(root: &Path) -> Vec<(String, String)> {
    let lib = std::fs::read_to_string(root.join("retry-macros/src/lib.rs")).unwrap();
    let rows: Vec<&str> = lib
        .lines()
        .map(|line| line.trim_start_matches("///").trim())
        .skip_while(|line| *line != "| option | value | default | example |")
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .collect();
    rows.iter()
        .map(|row| {
            let cells: Vec<&str> = row.trim_matches('|').split(" | ").collect();
            (
                cells[0].trim().trim_matches('`').to_owned(),
                cells[2].trim().trim_matches('`').to_owned(),
            )
        })
        .collect()
}

/// `30s`, `100ms`: a duration as the table writes one.
fn duration(text: &str) -> std::time::Duration {
    let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
    let n: u64 = digits.parse().unwrap();
    match &text[digits.len()..] {
        "ms" => std::time::Duration::from_millis(n),
        "s" => std::time::Duration::from_secs(n),
        unit => panic!("a unit the table does not use: {unit}"),
    }
}

/// One table of options, and it is the attribute's: the same names in the
/// same order as the attribute parses them (and lists them in its
/// messages), and the defaults the runtime has.
#[test]
fn the_options_table_is_the_attributes() {
    let root = workspace();
    let table = options_table(&root);
    let args = std::fs::read_to_string(root.join("retry-macros/src/args.rs")).unwrap();
    let block = args
        .split("\noptions! {\n")
        .nth(1)
        .unwrap()
        .split("\n}")
        .next()
        .unwrap();
    let parsed: Vec<String> = block
        .lines()
        .map(|line| {
            line.split("= \"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
                .to_owned()
        })
        .collect();
    let documented: Vec<String> = table.iter().map(|(name, _)| name.clone()).collect();
    assert_eq!(
        documented, parsed,
        "the table's options, and the attribute's"
    );

    let policy = backstop::Policy::DEFAULT;
    let default = |name: &str| {
        table
            .iter()
            .find(|(option, _)| option == name)
            .map(|(_, default)| default.as_str())
            .unwrap()
    };
    assert_eq!(
        default("attempts").parse::<u32>().unwrap(),
        policy.get_attempts()
    );
    assert_eq!(Some(duration(default("deadline"))), policy.get_deadline());
    assert_eq!(duration(default("base")), policy.get_base());
    let factor: f64 = default("factor").parse().unwrap();
    assert!(
        (factor - policy.get_factor()).abs() < f64::EPSILON,
        "factor {factor}"
    );
    assert_eq!(duration(default("cap")), policy.get_cap());
    assert_eq!(
        duration(default("retry_after_max")),
        policy.get_retry_after_max()
    );
    assert_eq!(
        default("backoff"),
        format!("{:?}", policy.get_backoff()).to_lowercase()
    );
    assert_eq!(
        default("jitter"),
        format!("{:?}", policy.get_jitter()).to_lowercase()
    );
}
