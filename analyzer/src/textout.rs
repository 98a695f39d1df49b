//! Fast text output for `decode` and `convert`: records are formatted into
//! one reused byte buffer (integers two digits per division straight into
//! it, no `format!`, no per-field allocation), and the buffer goes to the output in large writes.
//!
//! Everything that depends only on the opcode (the name, CSV-quoted,
//! JSON-escaped or padded; the field keys with their separators) is
//! rendered once per opcode and cached. The output is byte for byte what
//! the `format!`-based code produced (the insta snapshots in
//! tests/snapshots pin it); rows this module does not handle (markers,
//! names or keys needing CSV quoting) are written by the general code into
//! the same buffer.

use std::io::{self, Write};

use hmb_trace_file::Item;

use crate::catalog::{field_width, Catalog, Field};

/// Bytes gathered before they are handed to the output.
const CHUNK: usize = 256 << 10;

/// A byte buffer in front of the output: one `write_all` per chunk.
pub struct ChunkOut<'a> {
    pub buf: Vec<u8>,
    out: &'a mut dyn Write,
}

impl<'a> ChunkOut<'a> {
    pub fn new(out: &'a mut dyn Write) -> Self {
        Self {
            buf: Vec::with_capacity(CHUNK + 8192),
            out,
        }
    }

    /// Hand the buffer over once it is full (call after each row).
    #[inline]
    pub fn row_done(&mut self) -> io::Result<()> {
        if self.buf.len() >= CHUNK {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Everything buffered to the output, and the output flushed.
    pub fn finish(&mut self) -> io::Result<()> {
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        self.out.flush()
    }
}

/// "00" to "99": two digits per division.
const DIGITS2: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

const POW10: [u64; 20] = {
    let mut p = [1u64; 20];
    let mut i = 1;
    while i < 20 {
        p[i] = p[i - 1] * 10;
        i += 1;
    }
    p
};

/// `v` in decimal at the start of `out`; returns the digit count.
#[inline]
fn decimal(mut v: u64, out: &mut [u8; 20]) -> usize {
    // Digit count: log2 * log10(2) ~ 1233/4096, corrected by one compare
    // (core's ilog10 costs several times more here).
    let bits = 64 - (v | 1).leading_zeros();
    let t = ((bits * 1233) >> 12) as usize;
    let n = (t + usize::from(v >= POW10[t])).max(1);
    let mut i = n;
    while v >= 100 {
        let d = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        out[i] = DIGITS2[d];
        out[i + 1] = DIGITS2[d + 1];
    }
    if v >= 10 {
        let d = v as usize * 2;
        out[0] = DIGITS2[d];
        out[1] = DIGITS2[d + 1];
    } else {
        out[0] = b'0' + v as u8;
    }
    n
}

/// Append a fixed-size block and keep its first `n` bytes: a constant-size
/// copy the compiler inlines, instead of a `memcpy` call per number.
#[inline]
fn push_prefix<const N: usize>(buf: &mut Vec<u8>, block: &[u8; N], n: usize) {
    let old = buf.len();
    buf.extend_from_slice(block);
    buf.truncate(old + n.min(N));
}

#[inline]
pub fn push_u64(buf: &mut Vec<u8>, v: u64) {
    let mut d = [0u8; 20];
    let n = decimal(v, &mut d);
    push_prefix(buf, &d, n);
}

const SPACES: [u8; 20] = [b' '; 20];

#[inline]
fn push_spaces(buf: &mut Vec<u8>, n: usize) {
    if n <= SPACES.len() {
        push_prefix(buf, &SPACES, n);
    } else {
        buf.resize(buf.len() + n, b' ');
    }
}

/// `{v:>width}`
#[inline]
pub fn push_u64_right(buf: &mut Vec<u8>, v: u64, width: usize) {
    let mut d = [0u8; 20];
    let n = decimal(v, &mut d);
    push_spaces(buf, width.saturating_sub(n));
    push_prefix(buf, &d, n);
}

/// `{v:<width}`
#[inline]
pub fn push_u64_left(buf: &mut Vec<u8>, v: u64, width: usize) {
    let mut d = [0u8; 20];
    let n = decimal(v, &mut d);
    push_prefix(buf, &d, n);
    push_spaces(buf, width.saturating_sub(n));
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `{opcode:#06x}`: a u16 always gives "0x" and four digits.
#[inline]
pub fn push_opcode_hex(buf: &mut Vec<u8>, op: u16) {
    buf.extend_from_slice(&[
        b'0',
        b'x',
        HEX[(op >> 12) as usize & 15],
        HEX[(op >> 8) as usize & 15],
        HEX[(op >> 4) as usize & 15],
        HEX[op as usize & 15],
    ]);
}

/// Lower-case hex of every byte (as `format::hex`).
#[inline]
pub fn push_hex(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.reserve(bytes.len() * 2);
    for &b in bytes {
        buf.push(HEX[(b >> 4) as usize]);
        buf.push(HEX[(b & 15) as usize]);
    }
}

/// One payload field of an opcode, with its keys rendered.
pub struct FieldFmt {
    offset: usize,
    width: usize,
    /// `name=`
    pub eq_key: Vec<u8>,
    /// `"name":`
    pub json_key: Vec<u8>,
}

impl FieldFmt {
    /// The field's value, if the payload holds it (as `catalog::read_field`).
    #[inline]
    pub fn read(&self, payload: &[u8]) -> Option<u64> {
        let b = payload.get(self.offset..self.offset + self.width)?;
        let mut v = [0u8; 8];
        v[..self.width].copy_from_slice(b);
        Some(u64::from_le_bytes(v))
    }
}

/// What is rendered once per opcode.
pub struct OpFmt {
    /// `{name:<14}` as `decode` prints it.
    pub decode_name: Vec<u8>,
    /// The name as a CSV cell; `None` when the name or a field key needs
    /// CSV quoting (those rows take the general path).
    pub csv_ready: Option<Vec<u8>>,
    /// The name as a JSON string, quotes included.
    pub json_name: Vec<u8>,
    pub fields: Vec<FieldFmt>,
}

fn needs_csv_quote(s: &str) -> bool {
    s.contains([',', '"', '\n', '\r'])
}

impl OpFmt {
    fn new(catalog: &Catalog, opcode: u16) -> Self {
        let name = catalog.name(opcode);
        let fields: Vec<&Field> = catalog.get(opcode).map_or(Vec::new(), |op| op.fields.iter().collect());
        let json = |s: &str| serde_json::to_vec(s).unwrap_or_default();
        let csv_ready = (!needs_csv_quote(&name) && !fields.iter().any(|f| needs_csv_quote(&f.name)))
            .then(|| name.clone().into_bytes());
        Self {
            decode_name: format!("{name:<14}").into_bytes(),
            csv_ready,
            json_name: json(&name),
            fields: fields
                .iter()
                .filter_map(|f| {
                    Some(FieldFmt {
                        offset: f.offset as usize,
                        width: field_width(&f.ty)?,
                        eq_key: format!("{}=", f.name).into_bytes(),
                        json_key: {
                            let mut k = json(&f.name);
                            k.push(b':');
                            k
                        },
                    })
                })
                .collect(),
        }
    }
}

/// Per-opcode renderings, built on first use.
pub struct OpCache<'c> {
    catalog: &'c Catalog,
    ops: Vec<Option<Box<OpFmt>>>,
}

impl<'c> OpCache<'c> {
    pub fn new(catalog: &'c Catalog) -> Self {
        Self {
            catalog,
            ops: (0..1 << 16).map(|_| None).collect(),
        }
    }

    #[inline]
    pub fn get(&mut self, opcode: u16) -> &OpFmt {
        let catalog = self.catalog;
        self.ops[opcode as usize].get_or_insert_with(|| Box::new(OpFmt::new(catalog, opcode)))
    }
}

/// `decode`'s line for a record (without the newline), as
/// `"{:>10} e{epoch} #{:<8} {:>14} ns {:<14} src={:<5} len={:<4} {fields}"`.
#[inline]
pub fn decode_record(buf: &mut Vec<u8>, op: &OpFmt, epoch: u64, item: &Item<'_>) {
    push_u64_right(buf, item.offset, 10);
    buf.extend_from_slice(b" e");
    push_u64(buf, epoch);
    buf.extend_from_slice(b" #");
    push_u64_left(buf, item.seq(), 8);
    buf.push(b' ');
    push_u64_right(buf, item.timestamp_ns(), 14);
    buf.extend_from_slice(b" ns ");
    buf.extend_from_slice(&op.decode_name);
    buf.extend_from_slice(b" src=");
    push_u64_left(buf, item.source() as u64, 5);
    buf.extend_from_slice(b" len=");
    push_u64_left(buf, item.payload.len() as u64, 4);
    buf.push(b' ');
    let mut first = true;
    for f in &op.fields {
        if let Some(v) = f.read(item.payload) {
            if !first {
                buf.push(b' ');
            }
            first = false;
            buf.extend_from_slice(&f.eq_key);
            push_u64(buf, v);
        }
    }
}

/// `convert --format csv`'s row for a record (newline included), when
/// `op.csv_ready`; returns false (nothing written) otherwise.
#[inline]
pub fn csv_record(buf: &mut Vec<u8>, op: &OpFmt, epoch: u64, item: &Item<'_>, payload: bool) -> bool {
    let Some(name) = &op.csv_ready else { return false };
    buf.extend_from_slice(b"record,");
    push_u64(buf, item.offset);
    buf.push(b',');
    push_u64(buf, epoch);
    buf.push(b',');
    push_u64(buf, item.seq());
    buf.push(b',');
    push_u64(buf, item.timestamp_ns());
    buf.push(b',');
    push_opcode_hex(buf, item.opcode());
    buf.push(b',');
    buf.extend_from_slice(name);
    buf.push(b',');
    push_u64(buf, item.source() as u64);
    buf.push(b',');
    push_u64(buf, item.payload.len() as u64);
    buf.push(b',');
    let mut first = true;
    for f in &op.fields {
        if let Some(v) = f.read(item.payload) {
            if !first {
                buf.push(b';');
            }
            first = false;
            buf.extend_from_slice(&f.eq_key);
            push_u64(buf, v);
        }
    }
    if payload {
        buf.push(b',');
        push_hex(buf, item.payload);
    }
    buf.push(b'\n');
    true
}

/// `convert --format jsonl`'s line for a record (newline included), key
/// order and number formatting as serde_json's compact writer gives them.
#[inline]
pub fn jsonl_record(buf: &mut Vec<u8>, op: &OpFmt, epoch: u64, item: &Item<'_>, payload: bool) {
    buf.extend_from_slice(b"{\"kind\":\"record\",\"offset\":");
    push_u64(buf, item.offset);
    buf.extend_from_slice(b",\"epoch\":");
    push_u64(buf, epoch);
    buf.extend_from_slice(b",\"seq\":");
    push_u64(buf, item.seq());
    buf.extend_from_slice(b",\"timestamp_ns\":");
    push_u64(buf, item.timestamp_ns());
    buf.extend_from_slice(b",\"opcode\":");
    push_u64(buf, item.opcode() as u64);
    buf.extend_from_slice(b",\"name\":");
    buf.extend_from_slice(&op.json_name);
    buf.extend_from_slice(b",\"source\":");
    push_u64(buf, item.source() as u64);
    buf.extend_from_slice(b",\"length\":");
    push_u64(buf, item.payload.len() as u64);
    buf.extend_from_slice(b",\"fields\":{");
    let mut first = true;
    for f in &op.fields {
        if let Some(v) = f.read(item.payload) {
            if !first {
                buf.push(b',');
            }
            first = false;
            buf.extend_from_slice(&f.json_key);
            push_u64(buf, v);
        }
    }
    buf.push(b'}');
    if payload {
        buf.extend_from_slice(b",\"payload_hex\":\"");
        push_hex(buf, item.payload);
        buf.push(b'"');
    }
    buf.extend_from_slice(b"}\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_match_format() {
        let mut all = vec![0u64, 7, 9, 10, 99, 100, 101, 12345678, 123456789012, u64::MAX];
        all.extend((0..64).map(|s| 1u64 << s));
        all.extend((1..20).map(|e| 10u64.pow(e) - 1));
        all.extend((1..20).map(|e| 10u64.pow(e)));
        for v in all {
            let mut b = Vec::new();
            push_u64(&mut b, v);
            push_u64_right(&mut b, v, 10);
            push_u64_left(&mut b, v, 8);
            push_u64_right(&mut b, v, 25);
            assert_eq!(String::from_utf8(b).unwrap(), format!("{v}{v:>10}{v:<8}{v:>25}"));
        }
        for op in [0u16, 0x0f01, 0xffff, 0x00a0] {
            let mut b = Vec::new();
            push_opcode_hex(&mut b, op);
            assert_eq!(String::from_utf8(b).unwrap(), format!("{op:#06x}"));
        }
        let mut b = Vec::new();
        push_hex(&mut b, &[0, 0x5a, 0xff, 0x10]);
        assert_eq!(b, crate::format::hex(&[0, 0x5a, 0xff, 0x10]).into_bytes());
    }
}
