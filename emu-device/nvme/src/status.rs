//! NVMe completion status (NVMe 1.4 section 4.6.1.2): status code type, status code, DNR.

use serde::Serialize;

/// A completion status. `Status::SUCCESS` or an error the host sees in the CQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Status {
    /// Status Code Type: 0 generic, 1 command specific, 2 media and data integrity.
    pub sct: u8,
    /// Status Code.
    pub sc: u8,
    /// Do Not Retry: set for guest mistakes that a retry cannot fix.
    pub dnr: bool,
}

const fn generic(sc: u8) -> Status {
    Status { sct: 0, sc, dnr: true }
}

const fn specific(sc: u8) -> Status {
    Status { sct: 1, sc, dnr: true }
}

const fn media(sc: u8) -> Status {
    Status { sct: 2, sc, dnr: true }
}

impl Status {
    pub const SUCCESS: Status = Status {
        sct: 0,
        sc: 0,
        dnr: false,
    };
    pub const INVALID_OPCODE: Status = generic(0x01);
    pub const INVALID_FIELD: Status = generic(0x02);
    pub const DATA_TRANSFER_ERROR: Status = generic(0x04);
    pub const INTERNAL_ERROR: Status = generic(0x06);
    /// Abort requested (Abort command, reset): retrying is allowed.
    pub const ABORT_REQUESTED: Status = Status {
        sct: 0,
        sc: 0x07,
        dnr: false,
    };
    pub const INVALID_NAMESPACE: Status = generic(0x0B);
    pub const COMMAND_SEQUENCE_ERROR: Status = generic(0x0C);
    pub const INVALID_PRP_OFFSET: Status = generic(0x13);
    pub const LBA_OUT_OF_RANGE: Status = generic(0x80);
    /// Media and data integrity errors (SCT 2).
    pub const UNRECOVERED_READ_ERROR: Status = media(0x81);
    pub const COMPARE_FAILURE: Status = media(0x85);
    pub const COMPLETION_QUEUE_INVALID: Status = specific(0x00);
    pub const INVALID_QUEUE_IDENTIFIER: Status = specific(0x01);
    pub const INVALID_QUEUE_SIZE: Status = specific(0x02);
    pub const ASYNC_EVENT_LIMIT_EXCEEDED: Status = specific(0x05);
    pub const INVALID_INTERRUPT_VECTOR: Status = specific(0x08);
    pub const INVALID_LOG_PAGE: Status = specific(0x09);
    pub const INVALID_QUEUE_DELETION: Status = specific(0x0C);
    pub const FEATURE_NOT_SAVEABLE: Status = specific(0x0D);
    pub const FEATURE_NOT_NAMESPACE_SPECIFIC: Status = specific(0x0F);

    pub fn is_success(self) -> bool {
        self.sct == 0 && self.sc == 0
    }

    /// The 15-bit status field of CQE DW3 bits 31:17 (phase excluded): SC 7:0, SCT 10:8, DNR 14.
    pub fn field(self) -> u16 {
        u16::from(self.sc) | (u16::from(self.sct & 7) << 8) | (u16::from(self.dnr) << 14)
    }

    /// Inverse of [`Status::field`] (CRD and More are dropped).
    pub fn from_field(f: u16) -> Status {
        Status {
            sc: (f & 0xff) as u8,
            sct: ((f >> 8) & 7) as u8,
            dnr: f & (1 << 14) != 0,
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "sct {:#x} sc {:#04x}{}",
            self.sct,
            self.sc,
            if self.dnr { " dnr" } else { "" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_round_trips_and_places_dnr_at_bit_14() {
        let s = Status::INVALID_QUEUE_DELETION;
        assert_eq!(s.field(), 0x0C | 1 << 8 | 1 << 14);
        assert_eq!(Status::from_field(s.field()), s);
        assert_eq!(Status::SUCCESS.field(), 0);
    }
}
