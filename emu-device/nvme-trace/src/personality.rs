//! Controller personalities (issue 26, section Tests): the same controller model with the
//! HMB limits and trace-contract behaviour of the controllers a host driver meets, so the
//! driver can be tested against each. `serve-nvme --personality NAME` picks one.
//!
//! | name | HMB (Identify) | trace contract |
//! |---|---|---|
//! | `tracing` (default) | as configured | declared, adverts adopted |
//! | `stock` | as configured | not declared (vendor area zero), C0h Invalid Field |
//! | `refusing-probe` | as configured | declared, every advert refused (Invalid Field) |
//! | `refusing-reinit` | as configured | declared, the first advert of a fresh HMB adopted, every later one refused |
//! | `small-hmb` | HMPRE = HMMIN (the configured minimum) | declared |
//! | `few-descriptors` | HMMAXD = 4 | declared |
//! | `big-chunks` | HMMINDS = 2 MiB | declared |

use hmb_nvme::ControllerConfig;
use serde::{Deserialize, Serialize};

/// HMMAXD of `few-descriptors`: fewer than the default list (8 cache chunks of 4 MiB plus a
/// slice's lead and data chunks), so a driver must drop descriptors to fit.
pub const FEW_DESCRIPTORS: u16 = 4;
/// HMMINDS of `big-chunks`: every descriptor at least 2 MiB (the trace slice's 4 KiB lead
/// chunk no longer fits).
pub const BIG_CHUNK_BYTES: u64 = 2 << 20;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Personality {
    Stock,
    #[default]
    Tracing,
    RefusingProbe,
    RefusingReinit,
    SmallHmb,
    FewDescriptors,
    BigChunks,
}

/// When a contract-declaring controller refuses the advert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    Never,
    /// Every advert.
    Always,
    /// Every advert after the first one adopted since the HMB was enabled without MR.
    AfterFirst,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown personality {0:?}; one of: {names}", names = Personality::names())]
pub struct UnknownPersonality(pub String);

impl Personality {
    pub const ALL: [Personality; 7] = [
        Personality::Stock,
        Personality::Tracing,
        Personality::RefusingProbe,
        Personality::RefusingReinit,
        Personality::SmallHmb,
        Personality::FewDescriptors,
        Personality::BigChunks,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Personality::Stock => "stock",
            Personality::Tracing => "tracing",
            Personality::RefusingProbe => "refusing-probe",
            Personality::RefusingReinit => "refusing-reinit",
            Personality::SmallHmb => "small-hmb",
            Personality::FewDescriptors => "few-descriptors",
            Personality::BigChunks => "big-chunks",
        }
    }

    fn names() -> String {
        Personality::ALL.map(Personality::name).join(", ")
    }

    /// Does the controller declare the trace contract (Identify byte 3072) and answer C0h?
    pub fn declares_contract(self) -> bool {
        self != Personality::Stock
    }

    /// Does the controller serve its trace through the Telemetry logs (07h, 08h)? They
    /// come with the trace contract's vendor features (`install`): `stock` has none.
    pub fn serves_telemetry(self) -> bool {
        self.declares_contract()
    }

    pub fn refusal(self) -> Refusal {
        match self {
            Personality::RefusingProbe => Refusal::Always,
            Personality::RefusingReinit => Refusal::AfterFirst,
            _ => Refusal::Never,
        }
    }

    /// The controller configuration of this personality, from the configured one (its
    /// HMPRE/HMMIN and everything else are kept unless the personality is about them).
    pub fn apply(self, mut cfg: ControllerConfig) -> ControllerConfig {
        match self {
            Personality::SmallHmb => cfg.hmpre_bytes = cfg.hmmin_bytes,
            Personality::FewDescriptors => cfg.hmmaxd = FEW_DESCRIPTORS,
            Personality::BigChunks => cfg.hmminds_bytes = BIG_CHUNK_BYTES,
            _ => {}
        }
        cfg
    }
}

impl std::fmt::Display for Personality {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Personality {
    type Err = UnknownPersonality;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Personality::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| UnknownPersonality(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_choices() {
        for p in Personality::ALL {
            assert_eq!(p.name().parse::<Personality>(), Ok(p));
            assert_eq!(serde_json::to_value(p).unwrap(), p.name());
        }
        let e = "fast".parse::<Personality>().unwrap_err().to_string();
        assert!(
            e.contains("\"fast\"") && e.contains("stock, tracing, refusing-probe"),
            "{e}"
        );
        assert_eq!(Personality::default(), Personality::Tracing);
    }

    #[test]
    fn sizes_change_only_for_the_size_personalities() {
        let base = ControllerConfig::default();
        let small = Personality::SmallHmb.apply(base.clone());
        assert_eq!(
            (small.hmpre_bytes, small.hmmin_bytes),
            (base.hmmin_bytes, base.hmmin_bytes)
        );
        assert_eq!(Personality::FewDescriptors.apply(base.clone()).hmmaxd, FEW_DESCRIPTORS);
        assert_eq!(
            Personality::BigChunks.apply(base.clone()).hmminds_bytes,
            BIG_CHUNK_BYTES
        );
        for p in [Personality::Stock, Personality::Tracing, Personality::RefusingProbe] {
            let c = p.apply(base.clone());
            assert_eq!(
                (c.hmpre_bytes, c.hmmin_bytes, c.hmminds_bytes, c.hmmaxd),
                (base.hmpre_bytes, base.hmmin_bytes, base.hmminds_bytes, base.hmmaxd)
            );
        }
    }
}
