//! The memory checks Debian's production kernels carry compiled in but off,
//! switched on for every guest by its kernel command line, and the kernel
//! log lines that fail a run (docs/debug-checks.md). Both lists live in
//! `images/KERNEL_CHECKS`, the one source every guest and every kernel-log
//! gate reads: `VmConfig::kernel_cmdline` adds the parameters,
//! `console::is_fault_line` (the live console scan, conformance's dmesg
//! check, the NVMe guests' trouble lines) matches the faults.

use anyhow::{bail, Result};
use std::sync::LazyLock;

/// The environment variable that turns the checks off (`off`), to measure
/// what they cost; anything else, or unset, leaves them on.
pub(crate) const CHECKS_ENV: &str = "HMB_TRACE_KERNEL_CHECKS";

/// `images/KERNEL_CHECKS`, compiled in: a guest must not depend on where
/// the binary runs from.
const SOURCE: &str = include_str!("../../../images/KERNEL_CHECKS");

/// The parsed `images/KERNEL_CHECKS`.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Checks {
    /// Kernel command-line parameters.
    pub(crate) cmdline: Vec<String>,
    /// Texts that make a kernel log line a fault.
    pub(crate) faults: Vec<String>,
    /// Lines that are neither (a unit test requires none).
    pub(crate) malformed: Vec<String>,
}

/// Parse the `cmdline PARAM` / `fault TEXT` lines; `#` starts a comment line.
pub(crate) fn parse(text: &str) -> Checks {
    let mut checks = Checks::default();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.split_once(' ') {
            Some(("cmdline", param)) if !param.trim().contains(' ') => checks.cmdline.push(param.trim().into()),
            Some(("fault", text)) if !text.trim().is_empty() => checks.faults.push(text.trim().into()),
            _ => checks.malformed.push(line.into()),
        }
    }
    checks
}

static CHECKS: LazyLock<Checks> = LazyLock::new(|| parse(SOURCE));

/// True unless `HMB_TRACE_KERNEL_CHECKS=off`.
pub fn enabled() -> bool {
    !std::env::var(CHECKS_ENV).is_ok_and(|v| v == "off")
}

/// The parameters to add to a guest's kernel command line.
pub fn cmdline() -> Vec<String> {
    if !enabled() {
        return Vec::new();
    }
    CHECKS.cmdline.clone()
}

/// True if a kernel message (the text after the `[ time]` stamp) reports a
/// fault: one of the listed texts, or a SLUB report.
pub(crate) fn is_fault_message(message: &str) -> bool {
    CHECKS.faults.iter().any(|p| message.contains(p.as_str())) || is_slub_report(message)
}

/// SLUB's reports start "BUG <cache name> (<taint>): <what>" (mm/slub.c
/// slab_bug), without the colon of the kernel's other BUG lines, and the
/// reason varies (slab_err prints free-form text), so the shape is matched.
pub(crate) fn is_slub_report(message: &str) -> bool {
    let Some(rest) = message.trim_start().strip_prefix("BUG ") else {
        return false;
    };
    rest.split_once(" (")
        .is_some_and(|(cache, after)| !cache.is_empty() && !cache.contains(' ') && after.contains("): "))
}

/// Lines of a guest's kernel log (`dmesg`, every level) that show each
/// check is on. `kfence` says whether the kernel has KFENCE
/// (`CONFIG_KFENCE=y`; see `kernel_has_kfence`).
pub fn verify_active(dmesg: &str, kfence: bool) -> Result<()> {
    if !enabled() {
        return Ok(());
    }
    let Some(cmdline) = dmesg
        .lines()
        .find_map(|l| l.split_once("Kernel command line: ").map(|(_, c)| c))
    else {
        bail!("the guest's kernel log has no 'Kernel command line:' line (was it cut?)");
    };
    let params: Vec<&str> = cmdline.split_whitespace().collect();
    for want in &CHECKS.cmdline {
        if !params.contains(&want.as_str()) {
            bail!("the guest kernel's command line lacks {want}: {cmdline}");
        }
    }
    // What each check prints when it turns on (mm/mm_init.c, mm/slub.c,
    // mm/kfence/core.c), for each parameter the list has: proof that the
    // kernel took it, not only that QEMU passed it.
    const EVIDENCE: &[(&str, &str)] = &[
        (
            "page_poison=",
            "mem auto-init: CONFIG_PAGE_POISONING is on, will take precedence over init_on_alloc and init_on_free",
        ),
        (
            "slub_debug=",
            "mem auto-init: SLAB_POISON will take precedence over init_on_alloc/init_on_free",
        ),
        ("kfence.sample_interval=", "kfence: initialized - using "),
    ];
    for (param, line) in EVIDENCE {
        let listed = CHECKS.cmdline.iter().any(|p| p.starts_with(param));
        let applies = listed && (kfence || !param.starts_with("kfence."));
        if applies && !dmesg.contains(line) {
            bail!("the guest's kernel log does not show {param}… on (no '{line}')");
        }
    }
    Ok(())
}

/// Whether a kernel config (`/boot/config-*`) has KFENCE built in.
pub(crate) fn kernel_has_kfence(config: &str) -> bool {
    config.lines().any(|l| l.trim() == "CONFIG_KFENCE=y")
}

/// Whether a kernel config has lockdep (`CONFIG_PROVE_LOCKING=y`: only
/// the debug kernel, docs/debug-checks.md).
pub(crate) fn kernel_has_lockdep(config: &str) -> bool {
    config.lines().any(|l| l.trim() == "CONFIG_PROVE_LOCKING=y")
}

/// What a guest script notes from `/proc/lockdep_stats` at its end, after
/// its last module load and unload: the `debug_locks` value, empty when
/// the file is not there (a kernel without lockdep).
pub const LOCKDEP_NOTE: &str = "lockdep_debug_locks";

/// The guest's note `LOCKDEP_NOTE` proves lockdep was still on at the end
/// of the run: on a lockdep kernel `debug_locks` must be 1 (the first
/// lockdep report turns it off for the rest of the boot, so every lock
/// taken after such a report went unchecked, whatever the gates tolerated);
/// on a kernel without lockdep the file must be absent (so a lockdep
/// kernel taken for a production one fails here too).
pub fn verify_lockdep_on(note: Option<&str>, has_lockdep: bool) -> Result<()> {
    let Some(value) = note else {
        bail!("the guest noted no {LOCKDEP_NOTE} (the end of its script did not run)");
    };
    match (has_lockdep, value.trim()) {
        (true, "1") | (false, "") => Ok(()),
        (true, "") => {
            bail!("the kernel has lockdep (CONFIG_PROVE_LOCKING=y) but the guest found no /proc/lockdep_stats")
        }
        (true, v) => bail!(
            "lockdep was off at the end of the run (/proc/lockdep_stats debug_locks: {v}): a lockdep report turned it \
             off, and what ran after it was not checked"
        ),
        (false, v) => bail!("a kernel without lockdep in its config has /proc/lockdep_stats (debug_locks: {v})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_list_parses_and_has_what_the_docs_promise() {
        let checks = parse(SOURCE);
        assert!(checks.malformed.is_empty(), "{:?}", checks.malformed);
        assert_eq!(
            checks.cmdline,
            [
                "slub_debug=FZP",
                "page_poison=1",
                "kfence.sample_interval=100",
                "log_buf_len=1M"
            ]
        );
        for f in [
            "BUG:",
            "WARNING:",
            "Oops",
            "BUG: KFENCE:",
            "Poison overwritten",
            "pagealloc: memory corruption",
        ] {
            assert!(checks.faults.iter().any(|x| x == f), "{f}");
        }
    }

    #[test]
    fn malformed_lines_are_reported_not_taken() {
        let c = parse("# c\n\ncmdline a=1\nfault  x y \ncmdline a b\nfoo bar\nfault\n");
        assert_eq!(c.cmdline, ["a=1"]);
        assert_eq!(c.faults, ["x y"]);
        assert_eq!(c.malformed, ["cmdline a b", "foo bar", "fault"]);
    }

    #[test]
    fn checks_are_on_unless_turned_off() {
        // One test for every use of the environment: it is process-wide.
        std::env::remove_var(CHECKS_ENV);
        let on = cmdline();
        assert!(on.contains(&"slub_debug=FZP".to_string()));
        assert!(on.contains(&"page_poison=1".to_string()));
        assert!(verify_active("no command line here", false).is_err());
        std::env::set_var(CHECKS_ENV, "off");
        assert!(cmdline().is_empty());
        assert!(verify_active("no command line here", false).is_ok());
        std::env::remove_var(CHECKS_ENV);
        verification_needs_every_check();
    }

    /// Called with the checks on (see above).
    fn verification_needs_every_check() {
        // The boot lines of a 6.12 guest with the checks on (printk.time=1).
        let boot = "\
[    0.000000] Kernel command line: console=ttyS0 panic=-1 slub_debug=FZP page_poison=1 kfence.sample_interval=100 log_buf_len=1M rdinit=/init
[    0.004187] mem auto-init: SLAB_POISON will take precedence over init_on_alloc/init_on_free
[    0.106123] mem auto-init: CONFIG_PAGE_POISONING is on, will take precedence over init_on_alloc and init_on_free
[    0.106125] mem auto-init: stack:all(zero), heap alloc:off, heap free:off
[    0.180000] kfence: initialized - using 2097152 bytes for 255 objects at 0x(____ptrval____)-0x(____ptrval____)
";
        verify_active(boot, true).unwrap();
        let without_kfence: String = boot
            .lines()
            .filter(|l| !l.contains("kfence:"))
            .map(|l| format!("{l}\n"))
            .collect();
        verify_active(&without_kfence, false).unwrap();
        let err = verify_active(&without_kfence, true).unwrap_err().to_string();
        assert!(err.contains("kfence"), "{err}");
        let no_poison = boot.replace("CONFIG_PAGE_POISONING is on", "x");
        assert!(verify_active(&no_poison, true)
            .unwrap_err()
            .to_string()
            .contains("page_poison"));
        let no_param = boot.replace(" slub_debug=FZP", "");
        assert!(verify_active(&no_param, true)
            .unwrap_err()
            .to_string()
            .contains("slub_debug=FZP"));
    }

    #[test]
    fn lockdep_proof_fails_unless_lockdep_stayed_on() {
        assert!(kernel_has_lockdep("CONFIG_LOCKDEP=y\nCONFIG_PROVE_LOCKING=y\n"));
        assert!(!kernel_has_lockdep(
            "# CONFIG_PROVE_LOCKING is not set\nCONFIG_LOCKDEP_SUPPORT=y\n"
        ));
        verify_lockdep_on(Some("1"), true).unwrap();
        verify_lockdep_on(Some(""), false).unwrap();
        let off = verify_lockdep_on(Some("0"), true).unwrap_err().to_string();
        assert!(off.contains("lockdep was off"), "{off}");
        assert!(verify_lockdep_on(Some(""), true).is_err());
        assert!(verify_lockdep_on(Some("1"), false).is_err());
        assert!(verify_lockdep_on(None, true).is_err());
        assert!(verify_lockdep_on(None, false).is_err());
    }

    #[test]
    fn kfence_config_is_read() {
        assert!(kernel_has_kfence(
            "CONFIG_SLUB=y\nCONFIG_KFENCE=y\nCONFIG_KFENCE_SAMPLE_INTERVAL=0\n"
        ));
        assert!(!kernel_has_kfence("# CONFIG_KFENCE is not set\n"));
    }

    /// Report texts as the kernels print them, built from the format
    /// strings of mm/slub.c (slab_bug, check_bytes_and_report, slab_err,
    /// slab_pad_check), mm/kfence/report.c (kfence_report_error) and
    /// mm/page_poison.c (check_poison_mem).
    #[test]
    fn real_reports_are_faults_and_their_neighbours_are_not() {
        let reports = [
            // slab_bug("%s overwritten", "Poison") after a use-after-free write.
            "BUG kmalloc-128 (Tainted: G           OE     ): Poison overwritten",
            "BUG kmalloc-64 (Not tainted): Redzone overwritten",
            "BUG kmalloc-rnd-05-96 (Tainted: G        W  OE     ): Left Redzone overwritten",
            "BUG dma-kmalloc-512 (Tainted: G           O      ): Object padding overwritten",
            // slab_err(): free-form reasons, matched by the shape.
            "BUG kmalloc-256 (Tainted: G    B      OE     ): Object already free",
            "BUG nvme_hmb_trace_client (Tainted: G           OE     ): Objects remaining on __kmem_cache_shutdown()",
            "BUG kmalloc-32 (Not tainted): Padding overwritten. 0x00000000a1b2c3d4-0x00000000a1b2c3ff @offset=4064",
            // KFENCE, every report kind.
            "BUG: KFENCE: out-of-bounds read in hmb_trace_read+0x9c/0x1f0 [nvme_hmb_trace]",
            "BUG: KFENCE: use-after-free write in nvme_hmb_trace_remove+0x41/0xb0 [nvme_hmb_trace]",
            "BUG: KFENCE: memory corruption in kfree+0x7b/0x380",
            "BUG: KFENCE: invalid read in hmb_trace_mmap_fault+0x12/0x60 [nvme_hmb_trace]",
            "BUG: KFENCE: invalid free in nvme_free_host_mem+0x77/0x100 [nvme]",
            // Page poisoning.
            "pagealloc: memory corruption",
            "pagealloc: single bit error",
            "BUG: Bad page state in process kworker/0:1  pfn:10a3f",
            // The 6.12-debug kernel's reports (kernel/locking/lockdep.c,
            // kernel/sched/core.c, mm/kasan/report.c, lib/ubsan.c; a
            // DEBUG_OBJECTS report is a WARN, so its "WARNING: CPU:" line).
            "WARNING: possible circular locking dependency detected",
            "WARNING: possible recursive locking detected",
            "WARNING: inconsistent lock state",
            "WARNING: HARDIRQ-safe -> HARDIRQ-unsafe lock order detected",
            "WARNING: bad unlock balance detected!",
            "WARNING: held lock freed!",
            "WARNING: suspicious RCU usage",
            "BUG: sleeping function called from invalid context at kernel/locking/mutex.c:283",
            "BUG: scheduling while atomic: kworker/1:2/87/0x00000002",
            "BUG: KASAN: slab-use-after-free in hmb_trace_release+0x5c/0x120 [nvme_hmb_trace]",
            "BUG: KASAN: global-out-of-bounds in nvme_hmb_trace_setup+0x1a0/0x3c0 [nvme]",
            "UBSAN: array-index-out-of-bounds in drivers/nvme/host/pci.c:2144:23",
            "WARNING: CPU: 1 PID: 93 at lib/debugobjects.c:514 debug_print_object+0xd8/0x140",
            "INFO: trying to register non-static key.",
            "turning off the locking correctness validator.",
            "Call Trace:",
        ];
        for r in reports {
            assert!(is_fault_message(r), "{r}");
        }
        let benign = [
            "kfence: initialized - using 2097152 bytes for 255 objects at 0x(____ptrval____)-0x(____ptrval____)",
            "mem auto-init: SLAB_POISON will take precedence over init_on_alloc/init_on_free",
            "mem auto-init: CONFIG_PAGE_POISONING is on, will take precedence over init_on_alloc and init_on_free",
            "SLUB: HWalign=64, Order=0-3, MinObjects=0, CPUs=2, Nodes=1",
            "Unknown kernel command line parameters \"kfence.sample_interval=100\", will be passed to user space.",
            "BUG fixes in this release (none)",
            "nvme nvme0: 2/0/0 default/read/poll queues",
            // The debug kernel's boot lines.
            "kasan: KernelAddressSanitizer initialized (generic)",
            "Lock dependency validator: Copyright (c) 2006 Red Hat, Inc., Ingo Molnar",
            "... MAX_LOCKDEP_SUBCLASSES:  8",
        ];
        for b in benign {
            assert!(!is_fault_message(b), "{b}");
        }
    }
}
