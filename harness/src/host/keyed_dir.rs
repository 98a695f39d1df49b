//! A cached build output in a folder named by the hash of everything that
//! built it (`<name>-<key>`), for outputs that several work trees build
//! from different inputs into one shared cache: each input set has its own
//! folder, so one tree's build never overwrites (or is taken for) another's,
//! and a path handed out stays what it was while the other tree builds.
//! A folder is used only once its `built` marker holds its key, written
//! after a clean build: a failed or interrupted build is never taken.
//! The least recently used folders of a name beyond [`KEEP`] are removed.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::stamp::Fingerprint;

/// Folders kept per name: the current one and the three used last (a few
/// work trees with different inputs at once), a few MB each.
pub(crate) const KEEP: usize = 4;

/// The marker file in a finished folder.
const BUILT: &str = "built";

pub(crate) struct KeyedDir {
    /// Where the folders of every name live.
    parent: PathBuf,
    name: String,
    key: String,
}

impl KeyedDir {
    pub(crate) fn new(parent: &Path, name: &str, inputs: &Fingerprint) -> Self {
        KeyedDir {
            parent: parent.to_path_buf(),
            name: name.to_string(),
            key: inputs.hex(),
        }
    }

    /// `<parent>/<name>-<key>`.
    pub(crate) fn dir(&self) -> PathBuf {
        self.parent.join(format!("{}-{}", self.name, self.key))
    }

    /// True when the folder holds a finished build of exactly this key;
    /// marks it used (for [`prune`](Self::prune)).
    pub(crate) fn is_built(&self) -> bool {
        let marker = self.dir().join(BUILT);
        let built = std::fs::read_to_string(&marker).is_ok_and(|k| k.trim() == self.key);
        if built {
            let _ = std::fs::File::options()
                .append(true)
                .open(&marker)
                .and_then(|f| f.set_modified(SystemTime::now()));
        }
        built
    }

    /// An empty folder for a new build (whatever a failed one left removed).
    pub(crate) fn start(&self) -> Result<PathBuf> {
        let dir = self.dir();
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(dir)
    }

    /// The build in the folder finished cleanly.
    pub(crate) fn mark_built(&self) -> Result<()> {
        let marker = self.dir().join(BUILT);
        std::fs::write(&marker, format!("{}\n", self.key)).with_context(|| format!("writing {}", marker.display()))
    }

    /// Remove this name's folders beyond the [`KEEP`] used last (by their
    /// marker's time; unfinished ones count as oldest), never this key's.
    pub(crate) fn prune(&self) -> Result<Vec<PathBuf>> {
        let prefix = format!("{}-", self.name);
        let mine = self.dir();
        let mut others: Vec<(Option<SystemTime>, PathBuf)> = Vec::new();
        for entry in std::fs::read_dir(&self.parent).with_context(|| format!("listing {}", self.parent.display()))? {
            let path = entry?.path();
            let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let is_ours = file_name
                .as_deref()
                .and_then(|n| n.strip_prefix(&prefix))
                .is_some_and(is_key);
            if is_ours && path.is_dir() && path != mine {
                let used = std::fs::metadata(path.join(BUILT)).and_then(|m| m.modified()).ok();
                others.push((used, path));
            }
        }
        // Newest first; None (unfinished) sorts last.
        others.sort_by_key(|o| std::cmp::Reverse(o.0));
        let mut removed = Vec::new();
        for (_, path) in others.into_iter().skip(KEEP - 1) {
            std::fs::remove_dir_all(&path).with_context(|| format!("removing {}", path.display()))?;
            removed.push(path);
        }
        Ok(removed)
    }
}

/// A key as [`Fingerprint::hex`] writes it: 16 lowercase hex digits. Other
/// names sharing the prefix (`6.12-debug-<key>` beside `6.12-<key>`) are
/// not one of ours.
fn is_key(s: &str) -> bool {
    s.len() == 16 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(v: &str) -> Fingerprint {
        let mut f = Fingerprint::new();
        f.add_str("input", v);
        f
    }

    #[test]
    fn a_folder_is_used_only_after_its_own_build_finished() {
        let parent = tempfile::tempdir().unwrap();
        let a = KeyedDir::new(parent.path(), "6.1", &fp("series a"));
        let b = KeyedDir::new(parent.path(), "6.1", &fp("series b"));
        assert_ne!(a.dir(), b.dir(), "other inputs, another folder");
        assert!(!a.is_built());
        let dir = a.start().unwrap();
        std::fs::write(dir.join("nvme.ko"), "a").unwrap();
        assert!(!a.is_built(), "built, not yet marked: an interrupted build");
        a.mark_built().unwrap();
        assert!(a.is_built());
        // b's build leaves a's folder as it was.
        b.start().unwrap();
        b.mark_built().unwrap();
        assert_eq!(std::fs::read_to_string(a.dir().join("nvme.ko")).unwrap(), "a");
        assert!(a.is_built() && b.is_built());
        // A marker of another key (a folder copied or renamed) is not taken.
        std::fs::write(a.dir().join(BUILT), format!("{}\n", fp("other").hex())).unwrap();
        assert!(!a.is_built());
        // A new start empties the folder.
        a.start().unwrap();
        assert!(!a.dir().join("nvme.ko").exists());
    }

    #[test]
    fn pruning_keeps_the_newest_and_never_other_names() {
        let parent = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let mut dirs = Vec::new();
        for i in 0..6u64 {
            let d = KeyedDir::new(parent.path(), "6.12", &fp(&i.to_string()));
            d.start().unwrap();
            d.mark_built().unwrap();
            // Folder i was used i minutes ago.
            std::fs::File::options()
                .append(true)
                .open(d.dir().join(BUILT))
                .unwrap()
                .set_modified(now - std::time::Duration::from_secs(60 * i))
                .unwrap();
            dirs.push(d);
        }
        let debug = KeyedDir::new(parent.path(), "6.12-debug", &fp("0"));
        debug.start().unwrap();
        std::fs::create_dir(parent.path().join("6.12")).unwrap(); // the old unkeyed layout
                                                                  // The oldest is the current one: kept, with the 3 used last.
        let removed = dirs[5].prune().unwrap();
        assert_eq!(removed, vec![dirs[3].dir(), dirs[4].dir()]);
        for (i, d) in dirs.iter().enumerate() {
            assert_eq!(d.dir().exists(), !matches!(i, 3 | 4), "folder {i}");
        }
        assert!(debug.dir().exists() && parent.path().join("6.12").exists());
    }
}
