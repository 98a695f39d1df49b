//! Controller registers of BAR0 (NVMe 1.4 section 3.1) and their values.

pub(crate) const CAP: u64 = 0x00;
pub(crate) const VS: u64 = 0x08;
pub(crate) const INTMS: u64 = 0x0C;
pub(crate) const INTMC: u64 = 0x10;
pub(crate) const CC: u64 = 0x14;
pub(crate) const CSTS: u64 = 0x1C;
pub(crate) const NSSR: u64 = 0x20;
pub(crate) const AQA: u64 = 0x24;
pub(crate) const ASQ: u64 = 0x28;
pub(crate) const ACQ: u64 = 0x30;
pub(crate) const DOORBELLS: u64 = 0x1000;

/// NVMe 1.4.0.
pub(crate) const VERSION: u32 = 0x0001_0400;

/// CAP.TO in 500 ms units: the driver waits up to this long for CSTS.RDY. The model
/// changes RDY inline, so this only bounds a broken transport.
pub(crate) const CAP_TIMEOUT: u64 = 20;

pub(crate) const CC_EN: u32 = 1;
pub(crate) const CC_SHN_SHIFT: u32 = 14;
/// Bits of CC the model keeps: EN, CSS, MPS, AMS, SHN, IOSQES, IOCQES (the rest reads 0).
pub(crate) const CC_WRITABLE: u32 = 0x00ff_fff1;

pub(crate) const CSTS_RDY: u32 = 1;
pub(crate) const CSTS_CFS: u32 = 1 << 1;
pub(crate) const CSTS_SHST_COMPLETE: u32 = 2 << 2;

pub(crate) fn cc_css(cc: u32) -> u32 {
    (cc >> 4) & 7
}
pub(crate) fn cc_mps(cc: u32) -> u32 {
    (cc >> 7) & 0xf
}
pub(crate) fn cc_ams(cc: u32) -> u32 {
    (cc >> 11) & 7
}
pub(crate) fn cc_shn(cc: u32) -> u32 {
    (cc >> CC_SHN_SHIFT) & 3
}
pub(crate) fn cc_iosqes(cc: u32) -> u32 {
    (cc >> 16) & 0xf
}
pub(crate) fn cc_iocqes(cc: u32) -> u32 {
    (cc >> 20) & 0xf
}

/// CAP: MQES, CQR=1, AMS none beyond round robin, TO, DSTRD=0, NSSRS=0, CSS=NVM,
/// BPS=0, MPSMIN=MPSMAX=0 (4 KiB pages only), PMRS=0, CMBS=0.
pub(crate) fn cap(mqes: u16) -> u64 {
    u64::from(mqes) | 1 << 16 | CAP_TIMEOUT << 24 | 1 << 37
}

/// Registers that are write-1-to-set / write-1-to-clear: a narrow write must not merge
/// with their current value (that would set or clear bits the host did not name).
pub(crate) fn merges_with_current(dword: u64) -> bool {
    dword != INTMS && dword != INTMC
}
