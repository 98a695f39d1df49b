//! Host packages: install what is missing with apt, one line per package
//! saying why. Fast when all is present (one dpkg-query). Never adds a newer
//! distribution's sources to the host: kernels of another distribution are
//! handled in a chroot (see `host::chroot`), so the host libc is never replaced.

use anyhow::{bail, Context, Result};
use xshell::{cmd, Shell};

/// A host package and why the project needs it.
#[derive(Debug, Clone)]
pub struct Need {
    pub package: String,
    pub why: String,
    /// apt target release (`bookworm-backports`) when the package comes from backports.
    pub release: Option<String>,
}

impl Need {
    pub fn new(package: &str, why: &str) -> Need {
        Need {
            package: package.to_string(),
            why: why.to_string(),
            release: None,
        }
    }
}

/// What every guest run needs on the host. QEMU is not among them: it is
/// unpacked into the cache unless the host has bookworm's 7.2 (`qemu::binary`).
pub fn base_needs() -> Vec<Need> {
    [
        ("busybox-static", "static busybox: the guest's whole userland"),
        ("cpio", "packs the guest initramfs"),
        ("gzip", "compresses the guest initramfs"),
        ("xz-utils", "decompresses the guest kernel modules (.ko.xz)"),
        ("zstd", "decompresses .ko.zst guest modules"),
        ("kmod", "depmod/modinfo: guest module dependencies"),
        (
            "debootstrap",
            "builds the chroot used for kernels of another Debian release (7.x)",
        ),
        ("debian-archive-keyring", "verifies Debian archives in debootstrap"),
        ("make", "builds the kernel module"),
        ("binutils", "strips debug info from binaries put in the initramfs"),
        ("gcc", "builds the kernel module for bookworm kernels"),
        ("libc6-dev", "headers for the module's static test programs"),
        (
            "nvme-cli",
            "the stock-driver guests pull the controller's Telemetry log with Debian's nvme-cli (harness/src/nvme_cli.rs)",
        ),
    ]
    .iter()
    .map(|(p, w)| Need::new(p, w))
    .collect()
}

/// What the test command's independent checks need beside the guests
/// (`cargo xtask test`, `cargo xtask deps`): readers of our exports and the
/// firmware kit's cross tools, about 0.5 GB that `cargo xtask boot` does not
/// install.
pub fn test_needs() -> Vec<Need> {
    [
        (
            "babeltrace2",
            "reads the analyzer's CTF export in its tests (analyzer/tests/ctf.rs)",
        ),
        (
            "python3-bt2",
            "babeltrace2's Python bindings: the CTF export's independent reader",
        ),
        (
            "clang",
            "firmware-sdk: the C producer must build warning-free with clang too",
        ),
        (
            "gcc-arm-none-eabi",
            "firmware-sdk: cross-builds the C producer and its test firmware for Cortex-M",
        ),
        (
            "shellcheck",
            "checks the guest scripts of harness/guest-scripts/ (harness/tests/guest_scripts.rs)",
        ),
    ]
    .iter()
    .map(|(p, w)| Need::new(p, w))
    .chain([Need {
        // On bookworm from backports: 10.0 has the Cortex-R52 board
        // (mps3-an536), and bookworm's 7.2 cannot be installed beside the
        // backported qemu-utils 10.0 hosts carry (apt would remove it).
        // Later releases have 10.0 or newer in main.
        release: (crate::host::apt_env::host_codename().as_deref() == Some("bookworm"))
            .then(|| "bookworm-backports".to_string()),
        ..Need::new(
            "qemu-system-arm",
            "firmware-sdk: runs the test firmware on emulated Cortex-M3 (mps2-an385) and Cortex-R52 (mps3-an536)",
        )
    }])
    .collect()
}

/// Packages of `needs` that dpkg does not report as installed.
pub(crate) fn missing(sh: &Shell, needs: &[Need]) -> Result<Vec<Need>> {
    if needs.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<&str> = needs.iter().map(|n| n.package.as_str()).collect();
    let format = "-f=${Package} ${db:Status-Status}\\n";
    // dpkg-query exits 1 when some package is unknown; its stdout still lists the known ones.
    let out = cmd!(sh, "dpkg-query -W {format} {names...}")
        .quiet()
        .ignore_stderr()
        .ignore_status()
        .read()?;
    Ok(needs
        .iter()
        .filter(|n| !out.lines().any(|l| l == format!("{} installed", n.package)))
        .cloned()
        .collect())
}

/// Set to 1 to only report missing host packages, never install them.
pub(crate) const NO_INSTALL_ENV: &str = "HMB_TRACE_NO_INSTALL";

/// Install the missing ones, saying what and why for each.
///
/// Never removes or downgrades a package the user has: apt's plan is
/// simulated first and refused if it would, and the real run carries
/// `--no-remove` as a second guard. apt's own output goes to
/// `target/hmb-trace/apt.log` (one line per package here; the log's path
/// on failure). Without root, apt runs through `sudo -n` when that works.
pub fn ensure(sh: &Shell, needs: &[Need]) -> Result<()> {
    let todo = missing(sh, needs)?;
    if todo.is_empty() {
        return Ok(());
    }
    let all: Vec<&str> = todo.iter().map(|n| n.package.as_str()).collect();
    if std::env::var_os(NO_INSTALL_ENV).is_some_and(|v| !v.is_empty() && v != "0") {
        for n in &todo {
            println!("    missing {}: {}", n.package, n.why);
        }
        bail!(
            "missing host packages and {NO_INSTALL_ENV} is set: install them yourself (apt-get install {})",
            all.join(" ")
        );
    }
    let sudo = privilege(&all)?;
    for codename in todo
        .iter()
        .filter_map(|n| n.release.as_deref()?.strip_suffix("-backports"))
    {
        ensure_backports_source(sh, codename)?;
    }
    for n in &todo {
        let from = n.release.as_deref().map(|r| format!(" (from {r})")).unwrap_or_default();
        println!("    installing {}{from}: {}", n.package, n.why);
    }
    let log = AptLog::open()?;
    log.run(sh, &sudo, &["update"], 600).context("apt-get update")?;
    let mut releases: Vec<Option<String>> = todo.iter().map(|n| n.release.clone()).collect();
    releases.dedup();
    for release in releases {
        let mut args: Vec<&str> = vec!["-y", "--no-install-recommends", "install"];
        if let Some(r) = release.as_deref() {
            args.extend(["-t", r]);
        }
        args.extend(todo.iter().filter(|n| n.release == release).map(|n| n.package.as_str()));
        let plan = log
            .run(sh, &sudo, &[&["-s"][..], &args].concat(), 600)
            .context("apt-get -s install")?;
        let harm = harm_in_plan(sh, &plan);
        if !harm.is_empty() {
            bail!(
                "installing {} would {}.\n\
                 hmb-trace never removes or downgrades a package you have. Choices: install \
                 the packages above yourself in a way that suits this machine and run again; \
                 or run on a machine (or container) where they fit; {NO_INSTALL_ENV}=1 only \
                 lists what is missing. apt's plan is in {}",
                args[3..].join(" "),
                harm.join(", "),
                log.path.display()
            );
        }
        log.run(sh, &sudo, &[&["--no-remove"][..], &args].concat(), 1800)
            .with_context(|| format!("apt-get install (log: {})", log.path.display()))?;
    }
    let still = missing(sh, needs)?;
    if !still.is_empty() {
        let names: Vec<&str> = still.iter().map(|n| n.package.as_str()).collect();
        bail!(
            "still missing after apt-get install: {} (log: {})",
            names.join(" "),
            log.path.display()
        );
    }
    Ok(())
}

/// How apt gets root: none needed, or `sudo -n` (never a password prompt
/// in the middle of a build).
fn privilege(packages: &[&str]) -> Result<Vec<String>> {
    if is_root() {
        return Ok(Vec::new());
    }
    let sudo_works = std::process::Command::new("sudo")
        .args(["-n", "true"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !sudo_works {
        bail!(
            "missing host packages; run as root, make `sudo -n` work, or: sudo apt-get install {}",
            packages.join(" ")
        );
    }
    Ok(vec!["sudo".into(), "-n".into()])
}

/// apt's output, appended to one file with a header per command.
struct AptLog {
    path: std::path::PathBuf,
}

impl AptLog {
    fn open() -> Result<AptLog> {
        let dir = super::target_dir().join("hmb-trace");
        std::fs::create_dir_all(&dir)?;
        Ok(AptLog {
            path: dir.join("apt.log"),
        })
    }

    /// Run `apt-get -q <args>` (through `sudo` if given), append its output
    /// to the log, and return its stdout; an error names the log.
    fn run(&self, sh: &Shell, sudo: &[String], args: &[&str], timeout_s: u32) -> Result<String> {
        use std::io::Write;
        let timeout = timeout_s.to_string();
        let mut argv: Vec<String> = sudo.to_vec();
        argv.extend(["timeout", "--foreground", &timeout, "apt-get", "-q"].map(String::from));
        argv.extend(args.iter().map(|a| a.to_string()));
        let out = sh
            .cmd(&argv[0])
            .args(&argv[1..])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .quiet()
            .ignore_status()
            .output()?;
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&self.path)?;
        writeln!(file, "==> apt-get {}", args.join(" "))?;
        file.write_all(&out.stdout)?;
        file.write_all(&out.stderr)?;
        if !out.status.success() {
            bail!(
                "apt-get {} failed ({}); see {}",
                args.join(" "),
                out.status,
                self.path.display()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// What a simulated apt run (`apt-get -s`) would do to packages already
/// installed: removals, and downgrades (`Inst p [installed] (new ...)` with
/// new < installed, by dpkg's own version comparison).
fn harm_in_plan(sh: &Shell, plan: &str) -> Vec<String> {
    let mut harm = Vec::new();
    for line in plan.lines() {
        if let Some(rest) = line.strip_prefix("Remv ") {
            harm.push(format!("remove {}", rest.split_whitespace().next().unwrap_or(rest)));
        } else if let Some((package, old, new)) = parse_upgrade(line) {
            let lower = cmd!(sh, "dpkg --compare-versions {new} lt {old}")
                .quiet()
                .ignore_stderr()
                .run()
                .is_ok();
            if lower {
                harm.push(format!("downgrade {package} from {old} to {new}"));
            }
        }
    }
    harm
}

/// `Inst pkg [old] (new suite [arch])` -> (pkg, old, new); `None` for a
/// fresh install (no `[old]`) or any other line.
fn parse_upgrade(line: &str) -> Option<(&str, &str, &str)> {
    let rest = line.strip_prefix("Inst ")?;
    let (package, rest) = rest.split_once(' ')?;
    let old = rest.strip_prefix('[')?.split_once(']')?.0;
    let new = rest.split_once('(')?.1.split_whitespace().next()?;
    Some((package, old, new))
}

pub use super::apt_env::is_root;

/// Add `<codename>-backports` to the host's apt sources if it is not there
/// (backports are pinned at 100 by Debian: nothing is upgraded from them
/// unless asked for by name). Returns true when it was added.
pub(crate) fn ensure_backports_source(sh: &Shell, codename: &str) -> Result<bool> {
    let suite = format!("{codename}-backports");
    let mut texts = vec![std::fs::read_to_string("/etc/apt/sources.list").unwrap_or_default()];
    if let Ok(entries) = std::fs::read_dir("/etc/apt/sources.list.d") {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".list") || name.ends_with(".sources") {
                texts.push(std::fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
    }
    let present = texts.iter().flat_map(|t| t.lines()).any(|l| {
        let l = l.trim();
        !l.starts_with('#') && l.split_whitespace().any(|w| w == suite)
    });
    if present {
        return Ok(false);
    }
    if !is_root() {
        bail!("apt has no {suite} source; as root: echo 'deb http://deb.debian.org/debian {suite} main' > /etc/apt/sources.list.d/{suite}.list");
    }
    println!("    adding apt source {suite}: 6.12 kernel headers and QEMU 10.0 come from it");
    std::fs::write(
        format!("/etc/apt/sources.list.d/hmb-trace-{suite}.list"),
        format!("deb http://deb.debian.org/debian {suite} main\n"),
    )?;
    cmd!(sh, "timeout --foreground 600 apt-get -q update")
        .quiet()
        .run()
        .context("apt-get update")?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installed_and_unknown_packages_are_told_apart() {
        let sh = Shell::new().unwrap();
        let needs = vec![
            Need::new("dpkg", "present on every Debian"),
            Need::new("hmbt-no-such-package", "absent"),
        ];
        let todo = missing(&sh, &needs).unwrap();
        let names: Vec<&str> = todo.iter().map(|n| n.package.as_str()).collect();
        assert_eq!(names, ["hmbt-no-such-package"]);
    }

    #[test]
    fn a_plan_that_removes_or_downgrades_is_harmful() {
        let sh = Shell::new().unwrap();
        // The plan seen on a fresh machine with bookworm-backports' qemu-utils.
        let plan =
            "Inst qemu-system-common [1:10.0.2+ds-2~bpo12+1] (1:7.2+dfsg-7+deb12u18 Debian:12.12/stable [amd64])\n\
                    Remv qemu-utils [1:10.0.2+ds-2+deb13u1~bpo12+1]\n\
                    Inst libfdt1 (1.6.1-4+b1 Debian:12.12/stable [amd64])\n\
                    Inst zstd [1.5.4+dfsg2-4] (1.5.4+dfsg2-5 Debian:12.12/stable [amd64])\n\
                    Conf libfdt1 (1.6.1-4+b1 Debian:12.12/stable [amd64])\n";
        assert_eq!(
            harm_in_plan(&sh, plan),
            [
                "downgrade qemu-system-common from 1:10.0.2+ds-2~bpo12+1 to 1:7.2+dfsg-7+deb12u18",
                "remove qemu-utils"
            ]
        );
        assert!(harm_in_plan(&sh, "Inst libfdt1 (1.6.1-4+b1 Debian:12.12/stable [amd64])\n").is_empty());
    }
}
