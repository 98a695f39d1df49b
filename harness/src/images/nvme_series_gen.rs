//! One source for the NVMe host-driver series: `cargo xtask nvme-series
//! --write` generates kmod/patches/<kernel>/*.patch (git format-patch form)
//! from
//!
//! - `kmod/nvme/pci-hmb-trace.{c,h}`: the driver code, the same on every
//!   kernel but for the few lines of [`COMPAT`];
//! - `kmod/include/uapi/linux/nvme_hmb_trace.h` and
//!   `kmod/include/linux/nvme-hmb-trace.h`: the headers the module shares;
//! - `kmod/nvme/series/NNNN.msg`: each patch's subject and message;
//! - `kmod/nvme/hooks/<kernel>/NNNN.diff`: the only per-kernel part, the
//!   small hunks into files the kernel already has (MAINTAINERS,
//!   drivers/nvme/host/Makefile and pci.c's calls of the hooks).
//!
//! The committed series must be exactly what this generates
//! ([`check_committed`], a host-only test and the first step of every
//! `cargo xtask nvme-series`). docs/kmod.md, "One source".

use crate::host::workspace_root;
use anyhow::{bail, ensure, Context, Result};
use std::path::{Path, PathBuf};

/// Per-kernel differences of pci-hmb-trace.c: (kernel, upstream text, text
/// on that kernel). Each must occur in the source, so the table cannot rot.
pub(crate) const COMPAT: &[(&str, &str, &str)] = &[
    // nvme_ctrl_state() arrived in 6.7.
    ("6.1", "nvme_ctrl_state(t->ctrl)", "READ_ONCE(t->ctrl->state)"),
    // 7.x's checkpatch wants the typed allocator, which 6.1 and 6.12 lack.
    ("7.x", "kzalloc(sizeof(*mem), GFP_KERNEL)", "kzalloc_obj(*mem)"),
];

/// New files of each patch: (path in the kernel tree, path under the repository).
const NEW_FILES: &[&[(&str, &str)]] = &[
    &[(
        "include/uapi/linux/nvme_hmb_trace.h",
        "kmod/include/uapi/linux/nvme_hmb_trace.h",
    )],
    &[
        ("drivers/nvme/host/pci-hmb-trace.c", "kmod/nvme/pci-hmb-trace.c"),
        ("drivers/nvme/host/pci-hmb-trace.h", "kmod/nvme/pci-hmb-trace.h"),
        ("include/linux/nvme-hmb-trace.h", "kmod/include/linux/nvme-hmb-trace.h"),
    ],
];

const AUTHOR: &str = "Seed 34eb2086 maintainers\n <maintainers@users.noreply.a-seed-34eb2086.example>";
const DATE: &str = "Wed, 2 Dec 2026 04:00:00 +0000";
const GIT_VERSION: &str = "2.47.3";

/// One generated patch: its file name and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GeneratedPatch {
    pub name: String,
    pub text: String,
}

/// The series of `kernel` as `--write` would commit it.
pub(crate) fn generate(kernel: &str) -> Result<Vec<GeneratedPatch>> {
    generate_from(&workspace_root(), kernel)
}

pub(crate) fn generate_from(root: &Path, kernel: &str) -> Result<Vec<GeneratedPatch>> {
    let total = NEW_FILES.len();
    let mut out = Vec::new();
    for (i, new_files) in NEW_FILES.iter().enumerate() {
        let n = i + 1;
        let msg_path = root.join(format!("kmod/nvme/series/{n:04}.msg"));
        let msg = read(&msg_path)?;
        let (subject, body) = msg
            .split_once("\n\n")
            .with_context(|| format!("{}: no blank line after the subject", msg_path.display()))?;
        let hooks = read(&root.join(format!("kmod/nvme/hooks/{kernel}/{n:04}.diff")))?;
        let mut files = split_diff(&hooks)?;
        for (tree_path, repo_path) in new_files.iter() {
            let mut text = read(&root.join(repo_path))?;
            if tree_path.ends_with("pci-hmb-trace.c") {
                text = apply_compat(kernel, &text)?;
            }
            files.push(new_file_diff(tree_path, &text));
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let text = format_patch(n, total, subject.trim(), body, &files);
        out.push(GeneratedPatch {
            name: format!("{n:04}-{}.patch", slug(subject.trim())),
            text,
        });
    }
    Ok(out)
}

fn read(p: &Path) -> Result<String> {
    std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
}

/// pci-hmb-trace.c as it goes into `kernel`'s tree.
pub(crate) fn apply_compat(kernel: &str, text: &str) -> Result<String> {
    let mut text = text.to_string();
    for (k, from, to) in COMPAT.iter().filter(|(k, ..)| *k == kernel) {
        ensure!(
            text.contains(from),
            "compat line for kernel {k}: `{from}` is not in pci-hmb-trace.c (update nvme_series_gen::COMPAT)"
        );
        text = text.replace(from, to);
    }
    Ok(text)
}

/// One file's section of a diff.
#[derive(Debug, Clone)]
struct FileDiff {
    path: String,
    text: String,
    insertions: usize,
    deletions: usize,
    created: bool,
}

/// Split a `git diff` into its files, counting each one's lines.
fn split_diff(text: &str) -> Result<Vec<FileDiff>> {
    let mut out: Vec<FileDiff> = Vec::new();
    for section in text.split("diff --git ").filter(|s| !s.trim().is_empty()) {
        let first = section.lines().next().unwrap_or_default();
        let path = first
            .split_whitespace()
            .next()
            .and_then(|a| a.strip_prefix("a/"))
            .with_context(|| format!("hook diff section without a path: {first}"))?
            .to_string();
        let mut ins = 0;
        let mut del = 0;
        let mut in_hunk = false;
        for l in section.lines() {
            if l.starts_with("@@") {
                in_hunk = true;
            } else if in_hunk && l.starts_with('+') {
                ins += 1;
            } else if in_hunk && l.starts_with('-') {
                del += 1;
            }
        }
        ensure!(in_hunk, "hook diff for {path} has no hunk");
        out.push(FileDiff {
            path,
            text: format!("diff --git {section}"),
            insertions: ins,
            deletions: del,
            created: false,
        });
    }
    Ok(out)
}

fn new_file_diff(path: &str, text: &str) -> FileDiff {
    let lines: Vec<&str> = text.lines().collect();
    let mut d = format!(
        "diff --git a/{path} b/{path}\nnew file mode 100644\nindex 0000000..{}\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{} @@\n",
        &git_blob_sha1(text.as_bytes())[..7],
        lines.len()
    );
    for l in &lines {
        d.push('+');
        d.push_str(l);
        d.push('\n');
    }
    FileDiff {
        path: path.to_string(),
        text: d,
        insertions: lines.len(),
        deletions: 0,
        created: true,
    }
}

fn format_patch(n: usize, total: usize, subject: &str, body: &str, files: &[FileDiff]) -> String {
    let mut t = String::new();
    t.push_str("From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n");
    t.push_str(&format!("From: {AUTHOR}\nDate: {DATE}\n"));
    t.push_str(&fold_subject(&format!("Subject: [PATCH {n}/{total}] {subject}")));
    t.push_str("\n\n");
    t.push_str(body.trim_end());
    t.push_str("\n---\n");
    t.push_str(&diffstat(files));
    t.push('\n');
    for f in files {
        t.push_str(&f.text);
        if !f.text.ends_with('\n') {
            t.push('\n');
        }
    }
    t.push_str(&format!("-- \n{GIT_VERSION}\n\n"));
    t
}

/// git folds a long Subject header at a blank before column 78.
fn fold_subject(line: &str) -> String {
    if line.len() <= 78 {
        return line.to_string();
    }
    match line[..78].rfind(' ') {
        Some(i) => format!("{}\n {}", &line[..i], &line[i + 1..]),
        None => line.to_string(),
    }
}

/// `git format-patch`'s --stat block (72 columns) and summary.
fn diffstat(files: &[FileDiff]) -> String {
    let name_w = files.iter().map(|f| f.path.len()).max().unwrap_or(0);
    let max_change = files.iter().map(|f| f.insertions + f.deletions).max().unwrap_or(0);
    let count_w = max_change.to_string().len();
    let graph_w = 72usize.saturating_sub(name_w + count_w + 4).max(6);
    let mut t = String::new();
    for f in files {
        let change = f.insertions + f.deletions;
        let (mut plus, mut minus) = (f.insertions, f.deletions);
        if max_change > graph_w {
            plus = scale(f.insertions, max_change, graph_w);
            minus = scale(f.deletions, max_change, graph_w);
        }
        t.push_str(&format!(
            " {:name_w$} | {:>count_w$} {}{}\n",
            f.path,
            change,
            "+".repeat(plus),
            "-".repeat(minus)
        ));
    }
    let ins: usize = files.iter().map(|f| f.insertions).sum();
    let del: usize = files.iter().map(|f| f.deletions).sum();
    let plural = |n: usize, one: &str, many: &str| if n == 1 { one.to_string() } else { many.to_string() };
    t.push_str(&format!(
        " {} {} changed",
        files.len(),
        plural(files.len(), "file", "files")
    ));
    if ins > 0 {
        t.push_str(&format!(", {ins} {}(+)", plural(ins, "insertion", "insertions")));
    }
    if del > 0 {
        t.push_str(&format!(", {del} {}(-)", plural(del, "deletion", "deletions")));
    }
    t.push('\n');
    for f in files.iter().filter(|f| f.created) {
        t.push_str(&format!(" create mode 100644 {}\n", f.path));
    }
    t
}

/// git's scale_linear: at least one column for a non-zero count.
fn scale(n: usize, max: usize, width: usize) -> usize {
    if n == 0 {
        0
    } else {
        1 + (n * (width - 1)) / max
    }
}

/// git format-patch's file name: the subject with every run of other
/// characters turned into one '-', at most 52 characters.
fn slug(subject: &str) -> String {
    let mut s = String::new();
    for c in subject.chars() {
        if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
            s.push(c);
        } else if !s.ends_with('-') {
            s.push('-');
        }
    }
    let s = s.trim_matches('-');
    s.chars().take(52).collect()
}

/// The series directory's .patch files differ from what would be generated.
pub(crate) fn check_committed(kernel: &str) -> Result<()> {
    let dir = workspace_root().join("kmod/patches").join(kernel);
    let want = generate(kernel)?;
    let mut have: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("no patch series at {}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "patch"))
        .collect();
    have.sort();
    let names: Vec<String> = have
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    let want_names: Vec<String> = want.iter().map(|p| p.name.clone()).collect();
    if names != want_names {
        bail!(
            "kmod/patches/{kernel} holds {names:?}, the sources generate {want_names:?}: run `cargo xtask nvme-series --write`"
        );
    }
    for (p, path) in want.iter().zip(&have) {
        let text = read(path)?;
        if text != p.text {
            let line = text
                .lines()
                .zip(p.text.lines())
                .position(|(a, b)| a != b)
                .map(|i| i + 1)
                .unwrap_or_else(|| text.lines().count().min(p.text.lines().count()) + 1);
            bail!(
                "{} differs from what kmod/nvme generates (first at line {line}): run `cargo xtask nvme-series --write`",
                path.display()
            );
        }
    }
    Ok(())
}

/// Replace kmod/patches/<kernel>/*.patch with the generated series.
pub fn write(kernel: &str) -> Result<Vec<PathBuf>> {
    let dir = workspace_root().join("kmod/patches").join(kernel);
    let series = generate(kernel)?;
    std::fs::create_dir_all(&dir)?;
    for e in std::fs::read_dir(&dir)? {
        let p = e?.path();
        if p.extension().is_some_and(|e| e == "patch") {
            std::fs::remove_file(&p)?;
        }
    }
    let mut written = Vec::new();
    for p in series {
        let path = dir.join(&p.name);
        std::fs::write(&path, &p.text)?;
        written.push(path);
    }
    Ok(written)
}

/// Git's object name of a blob (the `index` line of a new file).
fn git_blob_sha1(data: &[u8]) -> String {
    let mut msg = format!("blob {}\0", data.len()).into_bytes();
    msg.extend_from_slice(data);
    sha1_hex(&msg)
}

/// SHA-1 (FIPS 180-4), only to name blobs as git does.
fn sha1_hex(data: &[u8]) -> String {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut msg = data.to_vec();
    let bit_len = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bit_len.to_be_bytes());
    for block in msg.chunks(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let temp = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = temp;
        }
        for (hv, v) in h.iter_mut().zip([a, b, c, d, e]) {
            *hv = hv.wrapping_add(v);
        }
    }
    h.iter().map(|v| format!("{v:08x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::kernels;

    /// The drift check: every committed series is exactly what the one
    /// source generates (fails after an edit of kmod/nvme/ or the shared
    /// headers until `cargo xtask nvme-series --write`).
    #[test]
    fn committed_series_match_the_one_source() {
        let specs = kernels::load(&workspace_root().join("images/KERNELS")).unwrap();
        assert!(!specs.is_empty());
        for s in specs {
            check_committed(&s.name).unwrap_or_else(|e| panic!("kernel {}: {e:#}", s.name));
        }
    }

    #[test]
    fn drift_is_detected() {
        let root = tempfile::tempdir().unwrap();
        let src = workspace_root();
        for dir in ["kmod/nvme", "kmod/include"] {
            let sh = xshell::Shell::new().unwrap();
            let (from, to) = (src.join(dir), root.path().join(dir));
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            xshell::cmd!(sh, "cp -a {from} {to}").run().unwrap();
        }
        let before = generate_from(root.path(), "6.12").unwrap();
        let c = root.path().join("kmod/nvme/pci-hmb-trace.c");
        let text = std::fs::read_to_string(&c).unwrap();
        std::fs::write(&c, text.replace("HMB trace slice:", "HMB trace slice is:")).unwrap();
        let after = generate_from(root.path(), "6.12").unwrap();
        assert_eq!(before.len(), after.len());
        assert_eq!(before[0], after[0], "patch 1 does not carry pci-hmb-trace.c");
        assert_ne!(before[1].text, after[1].text, "an edit of the source changes patch 2");
    }

    /// Hooks a kernel's pci.c has no place for, and why.
    const NOT_CALLED_ON: &[(&str, &str, &str)] = &[(
        "6.1",
        "nvme_hmb_trace_ctrl_dead",
        "6.1 removes a controller whose reset failed (nvme_remove_dead_ctrl -> \
         remove_work -> nvme_remove -> nvme_hmb_trace_release): no dead but bound \
         controller, as 6.12 and later leave",
    )];

    /// Every hook pci-hmb-trace.h declares is called from pci.c on every
    /// kernel but where NOT_CALLED_ON says why not: a hook lost in a kernel
    /// bump would leave a slice that is never advertised, or never freed.
    #[test]
    fn every_kernel_calls_every_hook() {
        let root = workspace_root();
        let header = std::fs::read_to_string(root.join("kmod/nvme/pci-hmb-trace.h")).unwrap();
        let hooks: Vec<&str> = header
            .lines()
            // Prototypes start at column 0 (members and comments are indented).
            .filter(|l| ["u64 ", "bool ", "void ", "int "].iter().any(|t| l.starts_with(t)))
            .filter_map(|l| l.split_once('('))
            .filter_map(|(head, _)| head.split_whitespace().last())
            .map(|name| name.trim_start_matches('*'))
            .filter(|name| name.starts_with("nvme_hmb_trace_"))
            .collect();
        assert!(hooks.len() >= 6, "the prototypes were not found: {hooks:?}");
        let specs = kernels::load(&root.join("images/KERNELS")).unwrap();
        for s in specs {
            let diff = std::fs::read_to_string(root.join(format!("kmod/nvme/hooks/{}/0002.diff", s.name))).unwrap();
            let pci = diff
                .split("diff --git ")
                .find(|f| f.starts_with("a/drivers/nvme/host/pci.c "))
                .unwrap();
            for h in &hooks {
                let call = format!("{h}(&dev->hmb_trace");
                let called = pci.lines().any(|l| l.starts_with('+') && l.contains(&call));
                let exempt = NOT_CALLED_ON.iter().any(|(k, hook, _)| *k == s.name && hook == h);
                assert!(
                    called != exempt,
                    "kernel {}: pci.c {} {h}{}",
                    s.name,
                    if exempt { "calls" } else { "never calls" },
                    if exempt {
                        " although NOT_CALLED_ON says it needs not"
                    } else {
                        ""
                    }
                );
            }
            assert!(
                diff.lines()
                    .any(|l| l.starts_with("+nvme-y") && l.contains("pci-hmb-trace.o")),
                "kernel {}: pci-hmb-trace.o is not built",
                s.name
            );
        }
    }

    #[test]
    fn every_compat_line_applies() {
        let text = std::fs::read_to_string(workspace_root().join("kmod/nvme/pci-hmb-trace.c")).unwrap();
        for (k, from, to) in COMPAT {
            let out = apply_compat(k, &text).unwrap();
            assert!(!out.contains(from) && out.contains(to), "{k}: {from}");
        }
        assert!(apply_compat("6.1", "nothing").is_err());
    }

    #[test]
    fn blob_names_are_gits() {
        // `printf 'hello\n' | git hash-object --stdin`
        assert_eq!(git_blob_sha1(b"hello\n"), "ce013625030ba8dba906f756967f9e9ca394464a");
        assert_eq!(git_blob_sha1(b""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
    }

    #[test]
    fn subjects_become_gits_file_names() {
        assert_eq!(
            slug("nvme-pci: reserve a firmware trace slice in the host memory buffer"),
            "nvme-pci-reserve-a-firmware-trace-slice-in-the-host-"
        );
        assert_eq!(
            slug("nvme: add the HMB trace ring ABI header"),
            "nvme-add-the-HMB-trace-ring-ABI-header"
        );
    }
}
