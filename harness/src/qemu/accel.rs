//! The accelerator a guest runs under. `tcg` and `kvm` are taken as asked;
//! `auto` probes KVM with a short boot of the same kernel (KVM guests hang
//! on some hosts, /dev/kvm or not) and falls back to TCG, saying why in one
//! line. The verdict is cached per host kernel and QEMU version.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

use super::args::MemoryBackend;
use super::{Accel, Vm, VmConfig};
use crate::host::cache_dir;
use crate::host::stamp::Fingerprint;

/// How long the probe guest may take to run `true` under KVM.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// The accelerator to use and why, for the one line printed about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Choice {
    pub accel: Accel,
    pub why: String,
}

/// Resolve `asked` for guests like `config` (its binary, kernel and
/// initramfs boot the probe). Prints one line when `asked` is `Auto`.
pub fn resolve(asked: Accel, config: &VmConfig) -> Result<Accel> {
    let choice = choose(asked, config)?;
    if asked == Accel::Auto {
        println!("    accelerator: {:?} ({})", choice.accel, choice.why);
    }
    Ok(choice.accel)
}

pub(crate) fn choose(asked: Accel, config: &VmConfig) -> Result<Choice> {
    match asked {
        Accel::Tcg | Accel::Kvm => Ok(Choice {
            accel: asked,
            why: "as asked".into(),
        }),
        Accel::Auto => probe(config),
    }
}

fn tcg(why: String) -> Result<Choice> {
    Ok(Choice { accel: Accel::Tcg, why })
}

fn probe(config: &VmConfig) -> Result<Choice> {
    if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm") {
        return tcg(format!("KVM unusable: cannot open /dev/kvm: {e}"));
    }
    let verdict_path = verdict_path(&config.binary.version);
    if let Ok(v) = std::fs::read_to_string(&verdict_path) {
        let works = v.trim() == "works";
        let why = format!("KVM probe cached in {}: {}", verdict_path.display(), v.trim());
        return if works {
            Ok(Choice { accel: Accel::Kvm, why })
        } else {
            tcg(why)
        };
    }
    let mut probe = VmConfig::new(
        config.binary.clone(),
        config.kernel.clone(),
        config.initramfs.clone(),
        config.run_dir.join("kvm-probe"),
    );
    probe.accel = Accel::Kvm;
    probe.memory_mb = 256;
    probe.memory_backend = MemoryBackend::Anonymous;
    probe.smp = 1;
    probe.guest_script = Some("true".into());
    let outcome = Vm::start(&probe)
        .and_then(|mut vm| vm.wait_for("the KVM probe's result", PROBE_TIMEOUT, |l| l.contains("HMBT-RESULT")));
    std::fs::create_dir_all(cache_dir())?;
    let verdict = if outcome.is_ok() { "works" } else { "hangs" };
    std::fs::write(&verdict_path, format!("{verdict}\n"))?;
    match outcome {
        Ok(_) => Ok(Choice {
            accel: Accel::Kvm,
            why: "a probe guest booted under KVM".into(),
        }),
        Err(e) => {
            let first = format!("{e:#}");
            let first = first.lines().next().unwrap_or_default();
            tcg(format!("the KVM probe guest did not finish ({first})"))
        }
    }
}

fn verdict_path(qemu_version: &str) -> PathBuf {
    let host = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut fp = Fingerprint::new();
    fp.add_str("host", host.trim()).add_str("qemu", qemu_version);
    cache_dir().join(format!("kvm-probe-{}", fp.hex()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qemu::binary::QemuBinary;

    #[test]
    fn explicit_choices_boot_nothing() {
        let cfg = VmConfig::new(
            QemuBinary::at("/nonexistent/qemu".into()),
            "/k".into(),
            "/i".into(),
            "/nonexistent/run".into(),
        );
        for a in [Accel::Tcg, Accel::Kvm] {
            assert_eq!(choose(a, &cfg).unwrap().accel, a);
        }
    }
}
