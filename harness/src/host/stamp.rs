//! Input fingerprints: a cached output is reused only while the hash of
//! everything it was built from is unchanged.
//!
//! The hash is FNV-1a 64 (change detection, not security), stable across Rust
//! versions unlike `DefaultHasher`.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

#[derive(Clone)]
pub(crate) struct Fingerprint {
    state: u64,
}

impl Default for Fingerprint {
    fn default() -> Self {
        Self::new()
    }
}

impl Fingerprint {
    pub(crate) fn new() -> Self {
        Fingerprint {
            state: 0xcbf2_9ce4_8422_2325,
        }
    }

    fn bytes(&mut self, data: &[u8]) {
        for &b in data {
            self.state ^= u64::from(b);
            self.state = self.state.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// A labelled value; the label and a length prefix keep `("ab","c")` and `("a","bc")` apart.
    pub(crate) fn add(&mut self, label: &str, value: &[u8]) -> &mut Self {
        for part in [label.as_bytes(), value] {
            self.bytes(&(part.len() as u64).to_le_bytes());
            self.bytes(part);
        }
        self
    }

    pub(crate) fn add_str(&mut self, label: &str, value: &str) -> &mut Self {
        self.add(label, value.as_bytes())
    }

    /// A file's content (or the fact that it is missing). Files over 1 MiB
    /// (release binaries with debug info) are taken by size and mtime: reading
    /// them byte by byte would cost more than the rest of a warm run.
    pub(crate) fn add_file(&mut self, label: &str, path: &Path) -> Result<&mut Self> {
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.len() > 1 << 20 {
                let mtime = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
                return Ok(self.add_str(label, &format!("large file: {} bytes, mtime {mtime:?}", meta.len())));
            }
        }
        match std::fs::read(path) {
            Ok(data) => Ok(self.add(label, &data)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(self.add_str(label, "<missing>")),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// Every regular file under `dir` (path and content), in sorted order,
    /// skipping names for which `skip` returns true (build products).
    pub(crate) fn add_tree(&mut self, label: &str, dir: &Path, skip: &dyn Fn(&str) -> bool) -> Result<&mut Self> {
        let mut files = Vec::new();
        collect_files(dir, dir, skip, &mut files)?;
        files.sort();
        self.add_str(label, &files.len().to_string());
        for rel in files {
            let shown = rel.to_string_lossy().into_owned();
            self.add_file(&format!("{label}/{shown}"), &dir.join(&rel))?;
        }
        Ok(self)
    }

    pub(crate) fn hex(&self) -> String {
        format!("{:016x}", self.state)
    }
}

fn collect_files(base: &Path, dir: &Path, skip: &dyn Fn(&str) -> bool, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if skip(&name) {
            continue;
        }
        let kind = entry.file_type()?;
        let path = entry.path();
        if kind.is_dir() {
            collect_files(base, &path, skip, out)?;
        } else if kind.is_file() {
            out.push(path.strip_prefix(base).expect("under base").to_path_buf());
        }
    }
    Ok(())
}

/// A stamp file next to a cached output: holds the fingerprint it was built from.
pub(crate) struct Stamp {
    path: PathBuf,
    want: String,
}

impl Stamp {
    pub(crate) fn new(path: PathBuf, fingerprint: &Fingerprint) -> Self {
        Stamp {
            path,
            want: fingerprint.hex(),
        }
    }

    /// True when the output was built from exactly these inputs.
    pub(crate) fn is_fresh(&self) -> bool {
        std::fs::read_to_string(&self.path)
            .map(|s| s.trim() == self.want)
            .unwrap_or(false)
    }

    /// Forget the old output's stamp before rebuilding, so a half-built output is never trusted.
    pub(crate) fn invalidate(&self) -> Result<()> {
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("removing {}", self.path.display()))
            }
            _ => Ok(()),
        }
    }

    pub(crate) fn record(&self) -> Result<()> {
        if let Some(parent) = self.path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&self.path, format!("{}\n", self.want))
            .with_context(|| format!("writing {}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_boundaries_matter() {
        let a = Fingerprint::new().add_str("x", "ab").add_str("y", "c").hex();
        let b = Fingerprint::new().add_str("x", "a").add_str("y", "bc").hex();
        let c = Fingerprint::new().add_str("x", "ab").add_str("y", "c").hex();
        assert_ne!(a, b);
        assert_eq!(a, c);
    }

    #[test]
    fn tree_changes_are_seen_and_skipped_names_are_not() {
        let dir = std::env::temp_dir().join(format!("hmbt-stamp-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/a.c"), "int x;").unwrap();
        let skip = |n: &str| n.ends_with(".o");
        let first = Fingerprint::new().add_tree("t", &dir, &skip).unwrap().hex();
        std::fs::write(dir.join("sub/a.o"), "junk").unwrap();
        assert_eq!(first, Fingerprint::new().add_tree("t", &dir, &skip).unwrap().hex());
        std::fs::write(dir.join("sub/a.c"), "int y;").unwrap();
        assert_ne!(first, Fingerprint::new().add_tree("t", &dir, &skip).unwrap().hex());

        let mut fp = Fingerprint::new();
        fp.add_str("k", "v");
        let stamp = Stamp::new(dir.join("out.stamp"), &fp);
        assert!(!stamp.is_fresh());
        stamp.record().unwrap();
        assert!(stamp.is_fresh());
        fp.add_str("k2", "v2");
        assert!(!Stamp::new(dir.join("out.stamp"), &fp).is_fresh());
        stamp.invalidate().unwrap();
        assert!(!stamp.is_fresh());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
