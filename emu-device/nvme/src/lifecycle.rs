//! Controller life cycle: CC writes, enable (CC.EN 0 -> 1), controller level reset
//! (CC.EN 1 -> 0), transport reset, shutdown notification, Controller Fatal Status. Each way
//! out releases the HMB, telling the observer first.

use crate::admin::Features;
use crate::queue::{CompQueue, SubQueue, CQE_BYTES, SQE_BYTES};
use crate::regs::*;
use crate::{dma, Controller};

impl Controller {
    pub(crate) fn write_cc(&mut self, v: u32) {
        let v = v & CC_WRITABLE;
        let old = self.cc;
        self.cc = v;
        let (was, now) = (old & CC_EN != 0, v & CC_EN != 0);
        if was && !now {
            self.controller_reset(false);
            return;
        }
        if !was && now {
            self.enable();
        }
        if cc_shn(v) != 0 && self.csts & CSTS_SHST_COMPLETE == 0 {
            self.shutdown();
        }
    }

    fn enable(&mut self) {
        if self.csts & CSTS_CFS != 0 {
            return;
        }
        let cc = self.cc;
        let asqs = (self.aqa & 0xfff) + 1;
        let acqs = ((self.aqa >> 16) & 0xfff) + 1;
        let problem = if cc_css(cc) != 0 {
            Some(format!("CC.CSS {} not supported (NVM command set only)", cc_css(cc)))
        } else if cc_mps(cc) != 0 {
            Some(format!("CC.MPS {} outside CAP.MPSMIN..=MPSMAX (0)", cc_mps(cc)))
        } else if cc_ams(cc) != 0 {
            Some(format!("CC.AMS {} not supported (round robin only)", cc_ams(cc)))
        } else if asqs < 2 || acqs < 2 {
            Some(format!(
                "AQA sizes {asqs}/{acqs}: an admin queue needs 2 entries at least"
            ))
        } else if !dma::mapped(&self.mem, self.asq, u64::from(asqs) * SQE_BYTES)
            || !dma::mapped(&self.mem, self.acq, u64::from(acqs) * CQE_BYTES)
        {
            Some(format!(
                "admin queues at {:#x}/{:#x} not in guest memory",
                self.asq, self.acq
            ))
        } else {
            None
        };
        if let Some(p) = problem {
            self.fatal(p);
            return;
        }
        self.sqs[0] = Some(SubQueue::new(self.asq, asqs, 0));
        self.cqs[0] = Some(CompQueue::new(self.acq, acqs, 0, true));
        self.csts = CSTS_RDY;
        self.fatal_reason = None;
    }

    /// Controller level reset (CC.EN 1->0) or, with `full`, a transport/function level reset
    /// that also clears the registers. The HMB is released (observer told first); its
    /// descriptor list is kept for a later MR=1.
    fn controller_reset(&mut self, full: bool) {
        self.drop_deferred();
        self.release_hmb();
        self.sqs.iter_mut().for_each(|q| *q = None);
        self.cqs.iter_mut().for_each(|q| *q = None);
        self.dbbuf = None;
        // Outstanding AERs are aborted implicitly: their queue is gone, no CQE is posted.
        self.aers.clear();
        self.forget_queued_telemetry_notice();
        self.events.clear();
        self.masked_event_types = 0;
        self.feat = Features::default();
        self.csts = 0;
        self.counters.resets += 1;
        self.reset_ns = self.now_ns();
        if full {
            self.cc = 0;
            self.aqa = 0;
            self.asq = 0;
            self.acq = 0;
            self.intms = 0;
            self.fatal_reason = None;
        } else {
            self.cc &= !CC_EN;
        }
    }

    /// Transport/function-level reset: as after power-on, except that the last HMB
    /// descriptor list is remembered for MR=1.
    pub fn reset(&mut self) {
        self.controller_reset(true);
    }

    fn shutdown(&mut self) {
        self.release_hmb();
        if let Err(e) = self.ns.flush() {
            log::warn!("nvme: flushing the namespace at shutdown: {e}");
        }
        self.csts |= CSTS_SHST_COMPLETE;
        self.counters.shutdowns += 1;
    }

    /// A device-side failure on request (the control socket's `inject
    /// reset` on the NVMe device): Controller Fatal Status exactly as an
    /// internal error sets it (HMB released, observer first; doorbells
    /// ignored until CC.EN 1 -> 0). Only a running controller can fail;
    /// returns whether this call set CFS.
    pub fn inject_fatal(&mut self, why: &str) -> bool {
        if !self.running() {
            return false;
        }
        self.fatal(format!("injected: {why}"));
        true
    }

    /// Controller Fatal Status: stop processing until the host resets the controller.
    pub(crate) fn fatal(&mut self, reason: String) {
        if self.csts & CSTS_CFS != 0 {
            return;
        }
        // What the observer was told of before the failure comes first (held.rs).
        self.release_notes();
        log::warn!("nvme: controller fatal status: {reason}");
        self.drop_deferred();
        self.release_hmb();
        self.csts |= CSTS_CFS;
        self.fatal_reason = Some(reason);
        self.counters.fatal_errors += 1;
        // The state of a failure is what controller-initiated telemetry is for (a no-op
        // if release_hmb just captured the trace ring's FROZEN and it is not released).
        let _ = self.capture_controller_telemetry("controller fatal status");
    }

    /// Release the HMB. If a slice of it was shared (the trace ring), the ring goes FROZEN
    /// in the observer and the controller captures its telemetry (log 08h) right after.
    pub(crate) fn release_hmb(&mut self) {
        // The observer hears of the commands before the HMB goes (held.rs).
        self.release_notes();
        if let Some(h) = self.hmb.take() {
            // First: the map cache leaves the HMB (its last reads and writes there) before
            // the trace producer writes FROZEN and the audit checks what is left.
            self.detach_map_cache(&h);
            let shared = self.vendor.shared_slice().is_some();
            self.observer.on_hmb_disabling(&h);
            if shared {
                let _ = self.capture_controller_telemetry("the shared HMB slice was released: trace ring FROZEN");
            }
            self.audit.losing(&h);
            self.retained_hmb = Some(h.descriptors().to_vec());
            self.hmb_report.disables += 1;
        }
        // Get Features 0Dh reports the enabled buffer only: EHM = 0 or a reset clears it.
        self.hmb_attrs = Default::default();
        self.hmb_bits = 0;
    }

    /// Take other HMB limits (Identify HMPRE, HMMIN, HMMINDS, HMMAXD) between two host
    /// drivers, as if another controller model sat behind the function: issue 26's
    /// personality checks run one driver after another in one guest. Only while no driver
    /// runs it (CC.EN = 0 or shut down, no HMB held), so no host sees its Identify data
    /// change under it. The retained list is forgotten (a Memory Return into another
    /// controller would be meaningless), and the HMB report and audit start afresh.
    pub fn set_hmb_limits(&mut self, hmpre: u64, hmmin: u64, hmminds: u64, hmmaxd: u16) -> Result<(), crate::Error> {
        if self.running() || self.hmb.is_some() {
            return Err(crate::Error::Config(
                "HMB limits change only while no driver runs the controller (CC.EN = 0 or shut down)".into(),
            ));
        }
        let mut cfg = self.cfg.clone();
        (cfg.hmpre_bytes, cfg.hmmin_bytes, cfg.hmminds_bytes, cfg.hmmaxd) = (hmpre, hmmin, hmminds, hmmaxd);
        cfg.validate()?;
        self.cfg = cfg;
        self.retained_hmb = None;
        self.hmb_report = crate::report::HmbReport {
            preferred_bytes: hmpre,
            minimum_bytes: hmmin,
            ..Default::default()
        };
        self.audit = Default::default();
        Ok(())
    }

    pub(crate) fn running(&self) -> bool {
        self.csts & CSTS_RDY != 0 && self.csts & (CSTS_CFS | CSTS_SHST_COMPLETE) == 0
    }
}
