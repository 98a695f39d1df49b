//! Which kernel modules the guest needs, in load order, from the fetched
//! kernel's modules.dep (built-in ones are skipped).

use anyhow::{bail, Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// `kernel/fs/9p/9p.ko.xz` -> `9p`; `-` and `_` are the same to the kernel.
pub fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.split(".ko").next().unwrap_or(file);
    stem.replace('-', "_")
}

pub struct ModuleIndex {
    /// name -> (relative path, dependency paths)
    deps: BTreeMap<String, (String, Vec<String>)>,
    builtin: BTreeSet<String>,
}

impl ModuleIndex {
    pub(crate) fn parse(modules_dep: &str, modules_builtin: &str) -> ModuleIndex {
        let mut deps = BTreeMap::new();
        for line in modules_dep.lines() {
            let Some((path, rest)) = line.split_once(':') else {
                continue;
            };
            let list = rest.split_whitespace().map(str::to_string).collect();
            deps.insert(module_name(path), (path.to_string(), list));
        }
        let builtin = modules_builtin.lines().map(module_name).collect();
        ModuleIndex { deps, builtin }
    }

    pub fn load(modules_dir: &Path) -> Result<ModuleIndex> {
        let read = |n: &str| {
            std::fs::read_to_string(modules_dir.join(n))
                .with_context(|| format!("reading {}", modules_dir.join(n).display()))
        };
        Ok(ModuleIndex::parse(&read("modules.dep")?, &read("modules.builtin")?))
    }

    pub(crate) fn is_builtin(&self, name: &str) -> bool {
        self.builtin.contains(&name.replace('-', "_"))
    }

    /// Relative paths of `wanted` and everything they need, dependencies
    /// first. Built-in modules need nothing; unknown ones are an error,
    /// unless the name ends in `?`: a module some kernels need and others
    /// do not have (ext4's crc32c driver before 6.15).
    pub fn load_order(&self, wanted: &[String]) -> Result<Vec<String>> {
        let mut order = Vec::new();
        let mut seen = BTreeSet::new();
        for name in wanted {
            let (name, optional) = match name.strip_suffix('?') {
                Some(n) => (n.replace('-', "_"), true),
                None => (name.replace('-', "_"), false),
            };
            if self.is_builtin(&name) {
                continue;
            }
            let Some((path, _)) = self.deps.get(&name) else {
                if optional {
                    continue;
                }
                bail!("module {name} is neither built in nor in modules.dep of this kernel");
            };
            self.visit(path, &mut seen, &mut order, 0)?;
        }
        Ok(order)
    }

    fn visit(&self, path: &str, seen: &mut BTreeSet<String>, order: &mut Vec<String>, depth: usize) -> Result<()> {
        if depth > 64 {
            bail!("module dependency loop at {path}");
        }
        if !seen.insert(path.to_string()) {
            return Ok(());
        }
        let name = module_name(path);
        let (_, deps) = self
            .deps
            .get(&name)
            .with_context(|| format!("{path} missing from modules.dep"))?;
        for dep in deps {
            self.visit(dep, seen, order, depth + 1)?;
        }
        order.push(path.to_string());
        Ok(())
    }
}

/// Module names listed in a data file: one per line, `#` comments.
pub(crate) fn read_list(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

/// File name of a module inside the guest (decompressed).
pub(crate) fn guest_file_name(rel: &str) -> String {
    format!("{}.ko", module_name(rel))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEP: &str = "kernel/fs/9p/9p.ko.xz: kernel/fs/netfs/netfs.ko.xz kernel/net/9p/9pnet.ko.xz\n\
kernel/fs/netfs/netfs.ko.xz:\n\
kernel/net/9p/9pnet.ko.xz:\n\
kernel/net/9p/9pnet_virtio.ko.xz: kernel/net/9p/9pnet.ko.xz kernel/drivers/virtio/virtio_ring.ko.xz\n\
kernel/drivers/virtio/virtio_ring.ko.xz:\n";

    #[test]
    fn an_optional_module_is_loaded_when_the_kernel_has_it() {
        let idx = ModuleIndex::parse(DEP, "");
        let order = idx.load_order(&["crc32c_generic?".into(), "netfs?".into()]).unwrap();
        assert_eq!(order, ["kernel/fs/netfs/netfs.ko.xz"]);
        assert!(idx.load_order(&["crc32c_generic".into()]).is_err());
    }

    #[test]
    fn dependencies_come_first_and_once() {
        let idx = ModuleIndex::parse(DEP, "kernel/drivers/virtio/virtio_pci.ko\n");
        let order = idx
            .load_order(&["virtio_pci".into(), "9pnet_virtio".into(), "9p".into()])
            .unwrap();
        let names: Vec<String> = order.iter().map(|p| module_name(p)).collect();
        assert_eq!(names, ["9pnet", "virtio_ring", "9pnet_virtio", "netfs", "9p"]);
    }

    #[test]
    fn unknown_modules_are_an_error() {
        let idx = ModuleIndex::parse(DEP, "");
        let err = idx.load_order(&["nosuch".into()]).unwrap_err();
        assert!(err.to_string().contains("nosuch"));
    }

    #[test]
    fn names_are_normalised() {
        assert_eq!(module_name("kernel/drivers/a/virtio-pci.ko.zst"), "virtio_pci");
        assert_eq!(guest_file_name("kernel/net/9p/9pnet.ko.xz"), "9pnet.ko");
    }
}
