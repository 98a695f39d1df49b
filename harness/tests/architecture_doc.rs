//! docs/architecture.md's crate table says what the manifests say: every
//! workspace crate, its folder, and every dependency edge between workspace
//! crates (normal and dev-only), as `cargo metadata` reports them.

use std::collections::BTreeMap;
use std::process::Command;

use hmb_harness::workspace_root;
use serde_json::Value;

/// (folder, normal deps, dev-only deps), by crate name.
type Graph = BTreeMap<String, (String, Vec<String>, Vec<String>)>;

fn from_manifests() -> Graph {
    let root = workspace_root();
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(&root)
        .output()
        .expect("running cargo metadata");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut graph = Graph::new();
    for p in meta["packages"].as_array().unwrap() {
        let manifest = std::path::Path::new(p["manifest_path"].as_str().unwrap());
        let folder = manifest.parent().unwrap().strip_prefix(&root).unwrap();
        let (mut normal, mut dev) = (Vec::new(), Vec::new());
        for d in p["dependencies"].as_array().unwrap() {
            // Workspace crates are path dependencies; registry crates are not drawn.
            if d["path"].is_null() {
                continue;
            }
            let name = d["name"].as_str().unwrap().to_string();
            match d["kind"].as_str() {
                None => normal.push(name),
                Some("dev") => dev.push(name),
                Some(_) => {}
            }
        }
        normal.sort();
        normal.dedup();
        // A crate that is both a normal and a dev dependency is drawn once, as normal.
        dev.retain(|d| !normal.contains(d));
        dev.sort();
        dev.dedup();
        graph.insert(
            p["name"].as_str().unwrap().to_string(),
            (format!("{}/", folder.display()), normal, dev),
        );
    }
    graph
}

fn from_doc() -> Graph {
    let text = std::fs::read_to_string(workspace_root().join("docs/architecture.md")).unwrap();
    let start = text.find("<!-- crate-graph:start -->").expect("start marker");
    let end = text.find("<!-- crate-graph:end -->").expect("end marker");
    let names = |cell: &str| -> Vec<String> {
        let mut v: Vec<String> = cell
            .split(',')
            .map(|s| s.trim().trim_matches('`').to_string())
            .filter(|s| !s.is_empty())
            .collect();
        v.sort();
        v
    };
    let mut graph = Graph::new();
    for line in text[start..end].lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 4, "{line}");
        graph.insert(
            cells[0].trim_matches('`').to_string(),
            (cells[1].trim_matches('`').to_string(), names(cells[2]), names(cells[3])),
        );
    }
    graph
}

#[test]
fn the_crate_table_matches_the_manifests() {
    let (doc, manifests) = (from_doc(), from_manifests());
    for (name, want) in &manifests {
        assert_eq!(doc.get(name), Some(want), "docs/architecture.md row of {name}");
    }
    let extra: Vec<&String> = doc.keys().filter(|k| !manifests.contains_key(*k)).collect();
    assert!(
        extra.is_empty(),
        "docs/architecture.md lists crates that do not exist: {extra:?}"
    );
}

/// The folder table's rows: (the folders of the first cell, every
/// backticked word of the row).
fn folder_rows() -> Vec<(Vec<String>, Vec<String>)> {
    let text = std::fs::read_to_string(workspace_root().join("docs/architecture.md")).unwrap();
    let start = text.find("## Folders").expect("a Folders section");
    let ticked = |cell: &str| -> Vec<String> { cell.split('`').skip(1).step_by(2).map(str::to_string).collect() };
    text[start..]
        .lines()
        .skip_while(|l| !l.starts_with("| `"))
        .take_while(|l| l.starts_with('|'))
        .map(|line| {
            let (first, rest) = line.trim_start_matches('|').split_once('|').unwrap();
            (ticked(first), ticked(rest))
        })
        .collect()
}

/// `a/{b,c}.rs` -> `a/b.rs`, `a/c.rs`.
fn expand_braces(word: &str) -> Vec<String> {
    match (word.find('{'), word.find('}')) {
        (Some(open), Some(close)) if open < close => word[open + 1..close]
            .split(',')
            .flat_map(|alt| expand_braces(&format!("{}{alt}{}", &word[..open], &word[close + 1..])))
            .collect(),
        _ => vec![word.to_string()],
    }
}

/// A word that names a file or folder: a slash in it, or a file ending.
fn is_path(word: &str) -> bool {
    let endings = [".rs", ".c", ".h", ".md", ".sh", ".py", ".toml"];
    !word.contains(' ') && (word.contains('/') || endings.iter().any(|e| word.ends_with(e)))
}

/// Where a path word of a row may live: the root, the row's folder, its
/// `src/`, or (a bare file name) anywhere below the row's folder.
fn resolves(word: &str, folders: &[String]) -> bool {
    let root = workspace_root();
    if root.join(word).exists() {
        return true;
    }
    folders.iter().any(|f| {
        let base = root.join(f);
        base.join(word).exists()
            || base.join("src").join(word).exists()
            || (!word.trim_end_matches('/').contains('/') && found_below(&base, word.trim_end_matches('/')))
    })
}

fn found_below(dir: &std::path::Path, name: &str) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        let p = e.path();
        let skip = p.file_name().is_some_and(|n| n == "target" || n == "testdata");
        !skip && (e.file_name() == name || (p.is_dir() && found_below(&p, name)))
    })
}

#[test]
fn every_path_the_folder_table_names_exists() {
    let rows = folder_rows();
    assert!(rows.len() > 10, "the folder table was not found");
    let mut missing = Vec::new();
    for (folders, words) in &rows {
        for f in folders {
            if !workspace_root().join(f).exists() {
                missing.push(f.clone());
            }
        }
        for w in words.iter().filter(|w| is_path(w)).flat_map(|w| expand_braces(w)) {
            if !resolves(&w, folders) {
                missing.push(format!("{w} (row {})", folders.join(", ")));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/architecture.md names paths that do not exist: {missing:?}"
    );
}

/// Folders below a crate's `src/` (and harness's guest scripts) that hold
/// source: each must be named in its row, as `name/` or a longer path.
#[test]
fn every_source_folder_is_in_the_folder_table() {
    let root = workspace_root();
    let rows = folder_rows();
    let mut unnamed = Vec::new();
    for (folders, words) in &rows {
        for f in folders {
            let mut dirs = Vec::new();
            source_dirs(&root.join(f), &mut dirs);
            for d in dirs {
                let name = format!("{}/", d.file_name().unwrap().to_string_lossy());
                if !words
                    .iter()
                    .flat_map(|w| expand_braces(w))
                    .any(|w| w.ends_with(&name) || w.contains(&format!("/{name}")) || w.starts_with(&name))
                {
                    unnamed.push(d.strip_prefix(&root).unwrap().display().to_string());
                }
            }
        }
    }
    assert!(
        unnamed.is_empty(),
        "source folders docs/architecture.md does not name: {unnamed:?}"
    );
}

/// Folders below `dir` with a source file in them, under a `src/` or named
/// like harness's `guest-scripts/`; not `tests/`, `target/` or test data.
fn source_dirs(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if !p.is_dir()
            || [
                "target",
                "tests",
                "testdata",
                "benches",
                "fuzz_targets",
                "corpus",
                "artifacts",
            ]
            .contains(&name.as_str())
        {
            continue;
        }
        let inside_src = p.components().any(|c| c.as_os_str() == "src") && name != "src";
        let has_source = std::fs::read_dir(&p).into_iter().flatten().flatten().any(|f| {
            let n = f.file_name().to_string_lossy().into_owned();
            n.ends_with(".rs") || n.ends_with(".sh")
        });
        if (inside_src || name == "guest-scripts") && has_source {
            out.push(p.clone());
        }
        source_dirs(&p, out);
    }
}
