//! The JSON header, field for field as pccx-lab's `PccxHeader` (serde
//! defaults included), so files round-trip between the two.
//!
//! pccx-lab quirks kept on purpose:
//! * `pccx_lab_version` is required; `arch`, `trace`, `payload` and
//!   `format_minor` may be missing.
//! * Inside a present `arch`, `mac_dims` and `isa_version` are required and
//!   `peak_tops` defaults to 0; inside a present `trace`, `cycles` and `cores`
//!   are required and `clock_mhz` defaults to 1000 — but a missing `trace`
//!   object defaults as a whole, giving `clock_mhz = 0` (derived `Default`).
//! * Inside a present `payload`, `encoding` and `byte_length` are required;
//!   a missing `payload` means an empty payload.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ArchConfig {
    /// MAC array dimensions as (rows, cols), a JSON array of two numbers.
    pub mac_dims: (u32, u32),
    pub isa_version: String,
    #[serde(default)]
    pub peak_tops: f64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TraceConfig {
    pub cycles: u64,
    pub cores: u32,
    #[serde(default = "default_clock_mhz")]
    pub clock_mhz: u32,
}

fn default_clock_mhz() -> u32 {
    1000
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PayloadConfig {
    /// "bincode" | "flatbuf" | "raw"; see [`Encoding`].
    pub encoding: String,
    pub byte_length: u64,
    /// FNV-1a 64 of the payload. Read from a JSON number, a hex string
    /// ("0x…", as the seed's prose shows) or null; written as a number or
    /// null, the form pccx-lab reads.
    #[serde(default, serialize_with = "checksum_ser", deserialize_with = "checksum_de")]
    pub checksum_fnv64: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PccxHeader {
    pub pccx_lab_version: String,
    #[serde(default)]
    pub arch: ArchConfig,
    #[serde(default)]
    pub trace: TraceConfig,
    #[serde(default)]
    pub payload: PayloadConfig,
    #[serde(default)]
    pub format_minor: u8,
}

/// The payload encodings the format names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Bincode,
    Flatbuf,
    Raw,
}

impl Encoding {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "bincode" => Some(Encoding::Bincode),
            "flatbuf" => Some(Encoding::Flatbuf),
            "raw" => Some(Encoding::Raw),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Bincode => "bincode",
            Encoding::Flatbuf => "flatbuf",
            Encoding::Raw => "raw",
        }
    }
}

impl PayloadConfig {
    pub fn encoding(&self) -> Option<Encoding> {
        Encoding::parse(&self.encoding)
    }
}

fn checksum_ser<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(n) => s.serialize_u64(*n),
        None => s.serialize_none(),
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ChecksumRepr {
    Number(u64),
    Text(String),
}

fn checksum_de<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<ChecksumRepr>::deserialize(d)? {
        None => Ok(None),
        Some(ChecksumRepr::Number(n)) => Ok(Some(n)),
        Some(ChecksumRepr::Text(s)) => parse_hex_checksum(&s).map(Some).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "checksum_fnv64 {s:?} is neither a number nor a hex string of 1 to 16 digits"
            ))
        }),
    }
}

/// "0x" or "0X" prefix optional, 1 to 16 hex digits.
pub fn parse_hex_checksum(s: &str) -> Option<u64> {
    let digits = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")).unwrap_or(s);
    if digits.is_empty() || digits.len() > 16 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<PccxHeader, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn defaults_match_pccx_lab() {
        let h = parse(r#"{"pccx_lab_version":"x"}"#).unwrap();
        assert_eq!(h.format_minor, 0);
        assert_eq!(h.trace.clock_mhz, 0, "a missing trace object uses the derived Default");
        assert_eq!(h.payload, PayloadConfig::default());
        let h = parse(
            r#"{"pccx_lab_version":"x","trace":{"cycles":5,"cores":2},"arch":{"mac_dims":[4,8],"isa_version":"1"}}"#,
        )
        .unwrap();
        assert_eq!(h.trace.clock_mhz, 1000);
        assert_eq!(h.arch.peak_tops, 0.0);
        assert_eq!(h.arch.mac_dims, (4, 8));
        assert!(parse(r#"{"arch":{}}"#).is_err(), "pccx_lab_version is required");
        assert!(parse(r#"{"pccx_lab_version":"x","trace":{"cores":1}}"#).is_err());
    }

    #[test]
    fn checksum_forms() {
        let with = |c: &str| {
            parse(&format!(
                r#"{{"pccx_lab_version":"x","payload":{{"encoding":"raw","byte_length":0,"checksum_fnv64":{c}}}}}"#
            ))
        };
        assert_eq!(
            with("13668806591801049621").unwrap().payload.checksum_fnv64,
            Some(13668806591801049621)
        );
        assert_eq!(
            with(r#""0xCBF29CE484222325""#).unwrap().payload.checksum_fnv64,
            Some(0xcbf29ce484222325)
        );
        assert_eq!(
            with(r#""cbf29ce4842223""#).unwrap().payload.checksum_fnv64,
            Some(0xcbf29ce4842223)
        );
        assert_eq!(with("null").unwrap().payload.checksum_fnv64, None);
        assert!(with(r#""0x""#).is_err());
        assert!(with(r#""0x1ffffffffffffffff""#).is_err());
        assert!(with("-1").is_err());
        assert!(with("1.5").is_err());
        let h = with(r#""0x10""#).unwrap();
        let out = serde_json::to_string(&h).unwrap();
        assert!(out.contains(r#""checksum_fnv64":16"#), "{out}");
    }

    #[test]
    fn serialises_in_pccx_lab_field_order() {
        let h = PccxHeader {
            pccx_lab_version: "v".into(),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_string(&h).unwrap(),
            r#"{"pccx_lab_version":"v","arch":{"mac_dims":[0,0],"isa_version":"","peak_tops":0.0},"trace":{"cycles":0,"cores":0,"clock_mhz":0},"payload":{"encoding":"","byte_length":0,"checksum_fnv64":null},"format_minor":0}"#
        );
    }
}
