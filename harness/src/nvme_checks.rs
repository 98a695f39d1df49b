//! Which checks a guest run on emu-device's NVMe controller makes
//! (`cargo xtask boot --checks`, issue 34's warm boot). The default boot is
//! the main job, "the module and daemon trace the emulated SSD and the
//! analyzer decodes it": the probe and the HMB, the pattern written and read
//! back, `reset_controller` with the HMB back (MR=1) and a second epoch,
//! the QD1 reads, trace.bin byte for byte against the controller's journal
//! (and `--inject reset`'s failure and recovery when asked for). `full` adds
//! what the boot grew after that, which `cargo xtask test` runs on every
//! kernel (docs/performance.md, "The warm boot").

use serde::Serialize;

/// `--checks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Checks {
    /// The main job: probe and HMB, data written and read back, reset_controller
    /// (MR=1, a second epoch), 4 KiB QD1 reads, trace.bin against the
    /// controller's journal, the analyzer's report; a stock-driver boot
    /// also pulls NVMe Telemetry with nvme-cli (its only trace).
    #[default]
    Main,
    /// Also the QD32 reads, NVMe Telemetry beside the trace, poll(2)
    /// wake-up latency, the ring's chunk mapping and unbind, module removal
    /// with a reader, the personalities of issue 26 and two controllers in
    /// one guest (what `cargo xtask test` runs on every kernel).
    Full,
}

/// What a run of one configuration does beyond the main job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Selected {
    /// The QD32 read loop (32 processes, one O_DIRECT read in flight each).
    pub(crate) qd32: bool,
    /// nvme-cli's Telemetry logs: without the trace the stock driver's two
    /// snapshots and 08h, with it one snapshot and 08h beside the ring.
    pub(crate) telemetry: bool,
    /// With the trace, after the `done` checkpoint: wake-up latency, chunk
    /// mapping and unbind, removal with a reader, the personalities and the
    /// pair phase (whose second controller the run then starts).
    pub(crate) module_checks: bool,
}

impl Checks {
    /// What a run makes: `trace` (the series' driver, the module and the
    /// daemon) and `serves_telemetry` (the controller's personality has
    /// the Telemetry log pages).
    pub(crate) fn select(self, trace: bool, serves_telemetry: bool) -> Selected {
        let full = self == Checks::Full;
        Selected {
            qd32: full,
            // A stock-driver run keeps its pull in the main job: nvme-cli's
            // logs are the trace a stock kernel gets (README, "Tracing with
            // a stock kernel"); beside the HMB ring they are a second view.
            telemetry: serves_telemetry && (full || !trace),
            module_checks: full && trace,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_main_job_drops_only_what_full_adds() {
        let main = Checks::Main.select(true, true);
        assert_eq!(
            main,
            Selected {
                qd32: false,
                telemetry: false,
                module_checks: false
            }
        );
        let full = Checks::Full.select(true, true);
        assert_eq!(
            full,
            Selected {
                qd32: true,
                telemetry: true,
                module_checks: true
            }
        );
        // The default is the main job.
        assert_eq!(Checks::default(), Checks::Main);
    }

    #[test]
    fn a_stock_driver_run_pulls_telemetry_in_both_and_has_no_module_checks() {
        for checks in [Checks::Main, Checks::Full] {
            let s = checks.select(false, true);
            assert!(s.telemetry, "{checks:?}");
            assert!(!s.module_checks, "{checks:?}");
            assert_eq!(s.qd32, checks == Checks::Full);
        }
    }

    #[test]
    fn a_controller_without_the_log_pages_is_never_asked_for_them() {
        for checks in [Checks::Main, Checks::Full] {
            for trace in [false, true] {
                assert!(!checks.select(trace, false).telemetry, "{checks:?} trace={trace}");
            }
        }
    }

    #[test]
    fn the_flag_parses_its_two_names() {
        use clap::ValueEnum;
        assert_eq!(Checks::from_str("main", false), Ok(Checks::Main));
        assert_eq!(Checks::from_str("full", false), Ok(Checks::Full));
        assert!(Checks::from_str("some", false).is_err());
        assert_eq!(serde_json::to_string(&Checks::Full).unwrap(), "\"full\"");
    }
}
