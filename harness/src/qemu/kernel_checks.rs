//! The memory checks Debian's production kernels carry compiled in but off,
//! switched on for every guest by its kernel command line (docs/images.md,
//! "Kernel checks"). They find use-after-free, out-of-bounds writes and
//! double frees in the module and the patched driver at a small cost, where
//! a production kernel would go on silently; their reports are faults for
//! the console scan (`console::is_fault_line`).

/// The environment variable that turns the checks off (`off`), to measure
/// what they cost; anything else, or unset, leaves them on.
pub const CHECKS_ENV: &str = "HMB_TRACE_KERNEL_CHECKS";

/// Kernel command-line parameters, each with what it finds.
const FREE_CHECKS: &[&str] = &[
    // SLUB: sanity checks on alloc/free (F), red zones around objects (Z),
    // poison of freed objects checked at the next allocation (P). Reports
    // "BUG <cache> (...): Redzone/Poison overwritten". No user tracking (U):
    // it doubles slab metadata for stack traces we do not need.
    "slub_debug=FZP",
    // Freed pages are poisoned and the poison checked on allocation
    // ("pagealloc: memory corruption"). With this and SLUB's P, the kernel
    // says "mem auto-init: ... will take precedence over init_on_alloc and
    // init_on_free" and turns both off (they would only overwrite the
    // poison): memory comes back poisoned, not zeroed, so a read of
    // uninitialised memory sees 0x6b/0xaa patterns instead of zeroes.
    // init_on_free=1 is therefore not set.
    "page_poison=1",
    // KFENCE samples one allocation every 100 ms into a guarded page
    // ("BUG: KFENCE: ..."); the 6.12 and 7.x kernels have it, 6.1 does not,
    // where the unknown module parameter is ignored.
    "kfence.sample_interval=100",
];

/// The parameters to add to a guest's kernel command line.
pub fn cmdline() -> Vec<String> {
    if std::env::var(CHECKS_ENV).is_ok_and(|v| v == "off") {
        return Vec::new();
    }
    FREE_CHECKS.iter().map(|p| p.to_string()).collect()
}

/// Lines the checks above print when they find something (beside the
/// generic "BUG:" that KFENCE reports begin with).
pub(crate) const REPORT_PATTERNS: &[&str] = &[
    "KFENCE",
    "Poison overwritten",
    "Redzone overwritten",
    "Object padding overwritten",
    "Freepointer corrupt",
    "pagealloc: memory corruption",
    "Padding overwritten",
];

/// SLUB's reports start "BUG <cache name> (<taint>): <what>", without the
/// colon of the kernel's other BUG lines.
pub(crate) fn is_slub_report(message: &str) -> bool {
    let Some(rest) = message.trim_start().strip_prefix("BUG ") else {
        return false;
    };
    rest.split_once(" (")
        .is_some_and(|(cache, after)| !cache.contains(' ') && after.contains("):"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_are_on_unless_turned_off() {
        // One test for both states: the environment is process-wide.
        std::env::remove_var(CHECKS_ENV);
        let on = cmdline();
        assert!(on.contains(&"slub_debug=FZP".to_string()));
        assert!(on.contains(&"page_poison=1".to_string()));
        std::env::set_var(CHECKS_ENV, "off");
        assert!(cmdline().is_empty());
        std::env::remove_var(CHECKS_ENV);
    }

    #[test]
    fn slub_reports_are_recognised() {
        assert!(is_slub_report(
            " BUG kmalloc-128 (Tainted: G           O      ): Poison overwritten"
        ));
        assert!(is_slub_report("BUG kmalloc-64 (Not tainted): Redzone overwritten"));
        assert!(!is_slub_report("BUG: kernel NULL pointer dereference, address: 0"));
        assert!(!is_slub_report("BUG fixes in this release (none)"));
    }
}
