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
