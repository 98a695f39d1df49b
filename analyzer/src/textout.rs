//! Fast text output for `decode` and `convert`: records are formatted
//! straight into one output buffer, handed to the output in large writes.
//!
//! Why it is written this way (measured with `perf record` on `convert
//! --format csv`, docs/performance.md): formatting a number into a small
//! stack array byte by byte and then copying that array into the output
//! made every number a store-forwarding stall (bytes stored one at a time,
//! read back as one 16-byte load), and a field's value was read through a
//! `memcpy` call of its variable width. So here:
//!
//! * the buffer is initialised once and kept, and a row is written into it
//!   through a cursor ([`Row`]) after one check that the row's upper bound
//!   fits: digits are computed eight at a time in a register (lanes split
//!   by multiply-and-shift) and stored as one 8-byte word straight to their
//!   place, with no intermediate copy and no capacity check per push;
//! * short strings (names, field keys, padding) are copied as one fixed
//!   32-byte block and the cursor advanced by their length, so no `memcpy`
//!   call per string;
//! * everything that depends only on the opcode (the name padded for
//!   `decode`, CSV-ready, JSON-escaped; each field's `name=` and `"name":`
//!   keys, its offset and width; the row's upper bound) is resolved once
//!   per opcode ([`OpCache`]);
//! * a field is read with one 8-byte load, shift and mask, whatever its
//!   width (`FieldFmt::read`); numbers below 100 come from a table;
//! * records that arrive in order skip the walker's general step
//!   (`commands::walk_input`), and the row code is inlined into the walk's
//!   loop.
//!
//! The output is byte for byte what the `format!`-based code produced (the
//! insta snapshots in tests/snapshots pin it); rows this module does not
//! handle (markers, names or keys needing CSV quoting) are written by the
//! general code through [`ChunkOut::general`].

use std::io::{self, Write};
use std::ops::ControlFlow;

use hmb_trace_file::Item;

use crate::catalog::{field_width, Catalog, Field};
use crate::commands::{walk_trace, Ctx, Walked};
use crate::exit::AppError;
use crate::walk::Event;

/// `commands::walk_trace` with no state of its own, for the text outputs'
/// row closures.
pub fn walk_text(
    ctx: &Ctx,
    path: &str,
    mut f: impl FnMut(&Event<'_, '_>) -> ControlFlow<()>,
) -> Result<Walked, AppError> {
    walk_trace(
        ctx,
        path,
        |_| (),
        #[inline(always)]
        |(), ev| f(ev),
    )
    .map(|(walked, ())| walked)
}

/// Bytes gathered before they are handed to the output.
const CHUNK: usize = 256 << 10;
/// Room past `CHUNK`: a row whose bound fits here never forces an early
/// write; a larger one (long payload hex) grows the buffer.
const ROOM: usize = 64 << 10;
/// `decode --payload`'s second line starts so.
/// (a newline, ten spaces for the offset column, then " payload ").
const DECODE_PAYLOAD: &[u8] = concat!("\n", "          ", " payload ").as_bytes();
/// The fixed block short strings are copied in (see the module comment).
const BLOCK: usize = 32;
/// Upper bound of a decimal `u64` (20 digits) or of its padding.
const NUM: usize = 20;

/// The output buffer in front of the writer: one `write_all` per chunk.
pub struct ChunkOut<'a> {
    /// Initialised once; `len` bytes of it are filled.
    buf: Box<[u8]>,
    len: usize,
    /// Rows written by the general code (`write!`, serde) before they are
    /// appended.
    scratch: Vec<u8>,
    out: &'a mut dyn Write,
}

impl<'a> ChunkOut<'a> {
    pub fn new(out: &'a mut dyn Write) -> Self {
        Self {
            buf: vec![0u8; CHUNK + ROOM].into_boxed_slice(),
            len: 0,
            scratch: Vec::new(),
            out,
        }
    }

    /// A cursor over at least `bound` free bytes (written out first if the
    /// buffer cannot take them; grown if it never could).
    #[inline(always)]
    fn row(&mut self, bound: usize) -> io::Result<Row<'_>> {
        if self.len + bound > self.buf.len() {
            self.make_room(bound)?;
        }
        Ok(Row {
            b: &mut self.buf[self.len..],
            i: 0,
        })
    }

    /// `row`'s rare part: the buffer written out, grown if it could never
    /// take `bound` bytes.
    #[cold]
    #[inline(never)]
    fn make_room(&mut self, bound: usize) -> io::Result<()> {
        self.write_out()?;
        if bound > self.buf.len() {
            self.buf = vec![0u8; bound].into_boxed_slice();
        }
        Ok(())
    }

    /// Account for `n` bytes written through the last `row`, and hand the
    /// buffer over once it is full.
    #[inline(always)]
    fn row_done(&mut self, n: usize) -> io::Result<()> {
        self.len += n;
        if self.len >= CHUNK {
            self.write_out()?;
        }
        Ok(())
    }

    #[inline(never)]
    fn write_out(&mut self) -> io::Result<()> {
        self.out.write_all(&self.buf[..self.len])?;
        self.len = 0;
        Ok(())
    }

    /// A row written by the general code into a `Vec`, then appended.
    pub fn general(&mut self, f: impl FnOnce(&mut Vec<u8>) -> io::Result<()>) -> io::Result<()> {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let r = f(&mut scratch).and_then(|()| {
            let mut row = self.row(scratch.len())?;
            row.put(&scratch);
            let n = row.i;
            self.row_done(n)
        });
        self.scratch = scratch;
        r
    }

    /// `decode`'s line for a record, as
    /// `"{:>10} e{epoch} #{:<8} {:>14} ns {:<14} src={:<5} len={:<4} {fields}"`,
    /// with `"\n{:10} payload {hex}"` after it when `payload` is asked for
    /// and not empty, and the newline.
    #[inline]
    pub fn decode_record(&mut self, op: &OpFmt, epoch: u64, item: &Item<'_>, payload: bool) -> io::Result<()> {
        let hex = payload && !item.payload.is_empty();
        let mut r = self.row(op.bound + if hex { 2 * item.payload.len() + 32 } else { 0 })?;
        r.u64_right(item.offset, 10);
        r.put(b" e");
        r.u64(epoch);
        r.put(b" #");
        r.u64_left(item.seq(), 8);
        r.put(b" ");
        r.u64_right(item.timestamp_ns(), 14);
        r.put(b" ns ");
        r.text(&op.decode_name);
        r.put(b" src=");
        r.u64_left(item.source() as u64, 5);
        r.put(b" len=");
        r.u64_left(item.payload.len() as u64, 4);
        r.put(b" ");
        r.fields(op, item.payload, b' ', |f| &f.eq_key);
        if hex {
            r.put(DECODE_PAYLOAD);
            r.hex(item.payload);
        }
        r.put(b"\n");
        let n = r.i;
        self.row_done(n)
    }

    /// `convert --format csv`'s row for a record (newline included), when
    /// `op.csv_ready`; returns false (nothing written) otherwise.
    #[inline]
    pub fn csv_record(&mut self, op: &OpFmt, epoch: u64, item: &Item<'_>, payload: bool) -> io::Result<bool> {
        let Some(name) = &op.csv_ready else { return Ok(false) };
        let mut r = self.row(op.bound + if payload { 2 * item.payload.len() + 32 } else { 0 })?;
        r.put(b"record,");
        r.u64(item.offset);
        r.put(b",");
        r.u64(epoch);
        r.put(b",");
        r.u64(item.seq());
        r.put(b",");
        r.u64(item.timestamp_ns());
        r.put(b",");
        r.opcode_hex(item.opcode());
        r.put(b",");
        r.text(name);
        r.put(b",");
        r.u64(item.source() as u64);
        r.put(b",");
        r.u64(item.payload.len() as u64);
        r.put(b",");
        r.fields(op, item.payload, b';', |f| &f.eq_key);
        if payload {
            r.put(b",");
            r.hex(item.payload);
        }
        r.put(b"\n");
        let n = r.i;
        self.row_done(n).map(|()| true)
    }

    /// `convert --format jsonl`'s line for a record (newline included), key
    /// order and number formatting as serde_json's compact writer gives them.
    #[inline]
    pub fn jsonl_record(&mut self, op: &OpFmt, epoch: u64, item: &Item<'_>, payload: bool) -> io::Result<()> {
        let mut r = self.row(op.bound + if payload { 2 * item.payload.len() + 32 } else { 0 })?;
        r.put(b"{\"kind\":\"record\",\"offset\":");
        r.u64(item.offset);
        r.put(b",\"epoch\":");
        r.u64(epoch);
        r.put(b",\"seq\":");
        r.u64(item.seq());
        r.put(b",\"timestamp_ns\":");
        r.u64(item.timestamp_ns());
        r.put(b",\"opcode\":");
        r.u64(item.opcode() as u64);
        r.put(b",\"name\":");
        r.text(&op.json_name);
        r.put(b",\"source\":");
        r.u64(item.source() as u64);
        r.put(b",\"length\":");
        r.u64(item.payload.len() as u64);
        r.put(b",\"fields\":{");
        r.fields(op, item.payload, b',', |f| &f.json_key);
        r.put(b"}");
        if payload {
            r.put(b",\"payload_hex\":\"");
            r.hex(item.payload);
            r.put(b"\"");
        }
        r.put(b"}\n");
        let n = r.i;
        self.row_done(n)
    }

    /// Everything buffered to the output, and the output flushed.
    pub fn finish(&mut self) -> io::Result<()> {
        self.write_out()?;
        self.out.flush()
    }
}

/// A cursor over the free part of the buffer. `ChunkOut::row` made sure the
/// row's bound fits; every write here is still a checked slice index (a
/// wrong bound would panic, never write out of bounds).
struct Row<'b> {
    b: &'b mut [u8],
    i: usize,
}

impl Row<'_> {
    #[inline]
    fn put(&mut self, s: &[u8]) {
        self.b[self.i..self.i + s.len()].copy_from_slice(s);
        self.i += s.len();
    }

    /// A string rendered per opcode: one fixed-size block copy when short.
    #[inline]
    fn text(&mut self, t: &Text) {
        if t.len <= BLOCK {
            self.b[self.i..self.i + BLOCK].copy_from_slice(&t.block);
            self.i += t.len;
        } else {
            self.put(&t.bytes);
        }
    }

    /// `n` spaces (`n <= NUM`), as a fixed block.
    #[inline]
    fn spaces(&mut self, n: usize) {
        self.b[self.i..self.i + NUM].copy_from_slice(&[b' '; NUM]);
        self.i += n;
    }

    /// `{v}`
    #[inline]
    fn u64(&mut self, v: u64) {
        self.number(v, 0);
    }

    /// `{v:>width}` (`width <= NUM`)
    #[inline]
    fn u64_right(&mut self, v: u64, width: usize) {
        self.number(v, width);
    }

    /// `{v:<width}` (`width <= NUM`)
    #[inline]
    fn u64_left(&mut self, v: u64, width: usize) {
        let n = self.number(v, 0);
        self.spaces(width.saturating_sub(n));
    }

    /// `v` right-aligned in `width` (0: no padding); returns its digit
    /// count. Below 10^8 (most numbers of a row) the digits and their
    /// count come from `short` (a table below 100, one word of digits
    /// above); up to 10^16 the part above the low eight digits is such a
    /// short number and the low eight digits one more word; larger ones
    /// count first (`digit_count`) and are stored eight digits per word,
    /// the first word shifted. The bytes up to 7 past a number may be
    /// written (the row's bound has `NUM` per number) and are overwritten
    /// by what follows or lie past the row's end.
    #[inline(always)]
    fn number(&mut self, v: u64, width: usize) -> usize {
        if v < 100_000_000 {
            // Each call site has its own branches: most numbers of a
            // column fall on the same side.
            let (w, n) = short(v as u32);
            if width > 0 {
                self.spaces(width.saturating_sub(n));
            }
            let i = self.i;
            self.word(i, w);
            self.i = i + n;
            return n;
        }
        if v < 10_000_000_000_000_000 {
            // Timestamps, offsets past 100 MB, large field values.
            let (top, low) = (v / 100_000_000, v % 100_000_000);
            let (w, top_n) = short(top as u32);
            let n = top_n + 8;
            if width > 0 {
                self.spaces(width.saturating_sub(n));
            }
            let i = self.i;
            self.word(i, w);
            self.word(i + top_n, ascii(digit_values(low as u32)));
            self.i = i + n;
            return n;
        }
        let n = digit_count(v);
        if width > 0 {
            self.spaces(width.saturating_sub(n));
        }
        let i = self.i;
        let (top, low) = (v / 100_000_000, v % 100_000_000);
        let (top, mid) = (top / 100_000_000, top % 100_000_000);
        self.word(i, ascii(digit_values(top as u32)) >> (8 * (24 - n)));
        self.word(i + n - 16, ascii(digit_values(mid as u32)));
        self.word(i + n - 8, ascii(digit_values(low as u32)));
        self.i = i + n;
        n
    }

    /// Eight bytes at `at`, the lowest first.
    #[inline(always)]
    fn word(&mut self, at: usize, w: u64) {
        self.b[at..at + 8].copy_from_slice(&w.to_le_bytes());
    }

    /// `{opcode:#06x}`: a u16 always gives "0x" and four digits.
    #[inline]
    fn opcode_hex(&mut self, op: u16) {
        let [hi, lo] = op.to_be_bytes();
        let (hi, lo) = (hi as usize * 2, lo as usize * 2);
        self.put(&[b'0', b'x', HEX2[hi], HEX2[hi + 1], HEX2[lo], HEX2[lo + 1]]);
    }

    /// Lower-case hex of every byte (as `format::hex`).
    #[inline]
    fn hex(&mut self, bytes: &[u8]) {
        let out = &mut self.b[self.i..self.i + 2 * bytes.len()];
        for (o, &b) in out.chunks_exact_mut(2).zip(bytes) {
            o.copy_from_slice(&HEX2[b as usize * 2..b as usize * 2 + 2]);
        }
        self.i += 2 * bytes.len();
    }

    /// The fields the payload holds, `key value` joined by `sep`.
    #[inline]
    fn fields(&mut self, op: &OpFmt, payload: &[u8], sep: u8, key: impl Fn(&FieldFmt) -> &Text) {
        let mut first = true;
        for f in &op.fields {
            if let Some(v) = f.read(payload) {
                if !first {
                    self.put(&[sep]);
                }
                first = false;
                self.text(key(f));
                self.u64(v);
            }
        }
    }
}

/// "00" to "ff": two hex digits per byte.
const HEX2: [u8; 512] = {
    let hex = b"0123456789abcdef";
    let mut t = [0u8; 512];
    let mut i = 0;
    while i < 256 {
        t[2 * i] = hex[i >> 4];
        t[2 * i + 1] = hex[i & 15];
        i += 1;
    }
    t
};

const POW10: [u64; 20] = {
    let mut p = [1u64; 20];
    let mut i = 1;
    while i < 20 {
        p[i] = p[i - 1] * 10;
        i += 1;
    }
    p
};

/// Decimal digits of `v` (1 for 0).
#[inline]
fn digit_count(v: u64) -> usize {
    // log2 * log10(2) ~ 1233/4096, corrected by one compare (core's ilog10
    // costs several times more here). bits <= 64 gives t <= 19.
    let bits = 64 - (v | 1).leading_zeros();
    let t = ((bits * 1233) >> 12) as usize;
    (t + usize::from(v >= POW10[t])).max(1)
}

/// The eight decimal digits of `x` (below 10^8, leading zeros included)
/// as byte values 0-9, the first digit in the lowest byte, so that one
/// little-endian store writes them in order. No division by a variable,
/// no table and no branch: lanes of the word are split by
/// multiply-and-shift.
#[inline(always)]
fn digit_values(x: u32) -> u64 {
    // Two 32-bit lanes of four digits each, the higher four first.
    let y = (x / 10_000) as u64 | ((x % 10_000) as u64) << 32;
    // Each lane into two 16-bit lanes of two digits: q = lane / 100
    // (10 486 / 2^20 is exact for values below 10^4; the mask drops what
    // the higher lane's product shifted down).
    let q = ((y * 10_486) >> 20) & 0x0000_007f_0000_007f;
    let y = q | (y - q * 100) << 16;
    // Each into two 8-bit lanes of one digit: q = lane / 10 (103 / 2^10 is
    // exact below 100).
    let q = ((y * 103) >> 10) & 0x000f_000f_000f_000f;
    q | (y - q * 10) << 8
}

/// `short_digits` for `x` below 10^4: one lane of four digits, half the
/// work.
#[inline(always)]
fn four_digits(x: u32) -> (u64, usize) {
    let y = x as u64;
    let q = ((y * 10_486) >> 20) & 0x7f;
    let y = q | (y - q * 100) << 16;
    let q = ((y * 103) >> 10) & 0x000f_000f;
    let d = q | (y - q * 10) << 8;
    let lead = ((d | 1 << 24).trailing_zeros() / 8) as usize;
    ((d | 0x3030_3030) >> (8 * lead), 4 - lead)
}

/// "0" to "99" as the bytes to store (the first digit lowest).
const DIGITS2: [u16; 100] = {
    let mut t = [0u16; 100];
    let mut v = 0;
    while v < 100 {
        t[v] = if v < 10 {
            b'0' as u16 + v as u16
        } else {
            (b'0' + (v / 10) as u8) as u16 | ((b'0' + (v % 10) as u8) as u16) << 8
        };
        v += 1;
    }
    t
};

/// The digits of `x` (below 10^8) as the word to store, and their count:
/// below 100 (epochs, sources, lengths, most small fields) from a table,
/// below 10^4 one lane of four digits, else two.
#[inline(always)]
fn short(x: u32) -> (u64, usize) {
    if x < 100 {
        (DIGITS2[x as usize] as u64, 1 + usize::from(x >= 10))
    } else if x < 10_000 {
        four_digits(x)
    } else {
        short_digits(x)
    }
}

/// Digit values to ASCII.
#[inline(always)]
fn ascii(d: u64) -> u64 {
    d | 0x3030_3030_3030_3030
}

/// The digits of `x` (below 10^8) without leading zeros, as the word to
/// store, and their count: the leading zeros are the word's low zero
/// bytes (the last digit is always kept, so 0 gives "0").
#[inline(always)]
fn short_digits(x: u32) -> (u64, usize) {
    let d = digit_values(x);
    let lead = ((d | 1 << 56).trailing_zeros() / 8) as usize;
    (ascii(d) >> (8 * lead), 8 - lead)
}

/// A string rendered once per opcode, kept also as a zero-padded block for
/// the fixed-size copy.
pub struct Text {
    block: [u8; BLOCK],
    len: usize,
    bytes: Vec<u8>,
}

impl Text {
    fn new(bytes: Vec<u8>) -> Self {
        let mut block = [0u8; BLOCK];
        let n = bytes.len().min(BLOCK);
        block[..n].copy_from_slice(&bytes[..n]);
        Self {
            block,
            len: bytes.len(),
            bytes,
        }
    }
}

/// How a field is read: a load of its own width.
#[derive(Clone, Copy)]
enum Width {
    U8,
    U16,
    U32,
    U64,
}

/// One payload field of an opcode, with its keys rendered.
pub struct FieldFmt {
    offset: usize,
    width: Width,
    /// Where the field's word is read: the 8 bytes ending at the field's
    /// end, or the payload's first 8 when the field ends before byte 8.
    word_at: usize,
    /// The field within that word: shifted down by `shift` bits, masked.
    shift: u32,
    mask: u64,
    /// `name=`
    eq_key: Text,
    /// `"name":`
    json_key: Text,
}

impl FieldFmt {
    fn new(offset: usize, width: Width, eq_key: Text, json_key: Text) -> Self {
        let bytes = match width {
            Width::U8 => 1,
            Width::U16 => 2,
            Width::U32 => 4,
            Width::U64 => 8,
        };
        let word_at = (offset + bytes).max(8) - 8;
        Self {
            offset,
            width,
            word_at,
            shift: 8 * (offset - word_at) as u32,
            mask: u64::MAX >> (64 - 8 * bytes),
            eq_key,
            json_key,
        }
    }

    /// The field's value, if the payload holds it (as `catalog::read_field`):
    /// one 8-byte load, shift and mask, whatever the width. The word lies in
    /// the payload exactly when the field does, except in payloads shorter
    /// than 8 bytes (`read_short`).
    #[inline(always)]
    fn read(&self, payload: &[u8]) -> Option<u64> {
        match payload.get(self.word_at..self.word_at + 8) {
            Some(w) => {
                let w: [u8; 8] = w.try_into().unwrap_or_default();
                Some((u64::from_le_bytes(w) >> self.shift) & self.mask)
            }
            None if payload.len() < 8 => self.read_short(payload),
            None => None,
        }
    }

    /// `read` in a payload shorter than 8 bytes: a load of the field's width.
    #[cold]
    fn read_short(&self, payload: &[u8]) -> Option<u64> {
        let at = self.offset;
        Some(match self.width {
            Width::U8 => *payload.get(at)? as u64,
            Width::U16 => u16::from_le_bytes(payload.get(at..at + 2)?.try_into().ok()?) as u64,
            Width::U32 => u32::from_le_bytes(payload.get(at..at + 4)?.try_into().ok()?) as u64,
            Width::U64 => u64::from_le_bytes(payload.get(at..at + 8)?.try_into().ok()?),
        })
    }
}

/// What is rendered once per opcode.
pub struct OpFmt {
    /// `{name:<14}` as `decode` prints it.
    decode_name: Text,
    /// The name as a CSV cell; `None` when the name or a field key needs
    /// CSV quoting (those rows take the general path).
    csv_ready: Option<Text>,
    /// The name as a JSON string, quotes included.
    json_name: Text,
    fields: Vec<FieldFmt>,
    /// Upper bound of a row's bytes without the payload hex, the block
    /// copies' overhang included.
    bound: usize,
}

fn needs_csv_quote(s: &str) -> bool {
    s.contains([',', '"', '\n', '\r'])
}

/// The fixed text of the longest row kind (`jsonl`'s keys: about 130
/// bytes) and its nine numbers and paddings, rounded up.
const ROW_FIXED: usize = 160 + 9 * NUM + BLOCK;

impl OpFmt {
    fn new(catalog: &Catalog, opcode: u16) -> Self {
        let name = catalog.name(opcode);
        let fields: Vec<&Field> = catalog.get(opcode).map_or(Vec::new(), |op| op.fields.iter().collect());
        let json = |s: &str| serde_json::to_vec(s).unwrap_or_default();
        let csv_ready = (!needs_csv_quote(&name) && !fields.iter().any(|f| needs_csv_quote(&f.name)))
            .then(|| Text::new(name.clone().into_bytes()));
        let fields: Vec<FieldFmt> = fields
            .iter()
            .filter_map(|f| {
                Some(FieldFmt::new(
                    f.offset as usize,
                    match field_width(&f.ty)? {
                        1 => Width::U8,
                        2 => Width::U16,
                        4 => Width::U32,
                        _ => Width::U64,
                    },
                    Text::new(format!("{}=", f.name).into_bytes()),
                    Text::new({
                        let mut k = json(&f.name);
                        k.push(b':');
                        k
                    }),
                ))
            })
            .collect();
        let decode_name = Text::new(format!("{name:<14}").into_bytes());
        let json_name = Text::new(json(&name));
        let names = decode_name
            .len
            .max(json_name.len)
            .max(csv_ready.as_ref().map_or(0, |t| t.len));
        let bound = ROW_FIXED
            + names
            + fields
                .iter()
                .map(|f| f.eq_key.len.max(f.json_key.len) + NUM + 1)
                .sum::<usize>();
        Self {
            decode_name,
            csv_ready,
            json_name,
            fields,
            bound,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row_text(f: impl FnOnce(&mut Row<'_>)) -> String {
        let mut b = vec![0u8; 4096];
        let mut r = Row { b: &mut b, i: 0 };
        f(&mut r);
        let n = r.i;
        String::from_utf8(b[..n].to_vec()).unwrap()
    }

    #[test]
    fn numbers_match_format() {
        let mut all = vec![
            0u64,
            7,
            9,
            10,
            99,
            100,
            101,
            999,
            1000,
            9999,
            10000,
            12345678,
            123456789012,
            u64::MAX,
        ];
        all.extend((0..64).map(|s| 1u64 << s));
        all.extend((0..64).map(|s| (1u64 << s) - 1));
        all.extend((1..20).map(|e| 10u64.pow(e) - 1));
        all.extend((1..20).map(|e| 10u64.pow(e)));
        all.extend((1..20).map(|e| 10u64.pow(e) + 1));
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            all.push(x >> (x % 64));
        }
        for v in all {
            let s = row_text(|r| {
                r.u64(v);
                r.u64_right(v, 10);
                r.u64_left(v, 8);
                r.u64_right(v, 20);
                r.u64_left(v, 20);
            });
            assert_eq!(s, format!("{v}{v:>10}{v:<8}{v:>20}{v:<20}"));
        }
        for op in [0u16, 0x0f01, 0xffff, 0x00a0, 0xa00b] {
            assert_eq!(row_text(|r| r.opcode_hex(op)), format!("{op:#06x}"));
        }
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(row_text(|r| r.hex(&bytes)), crate::format::hex(&bytes));
    }

    #[test]
    fn long_and_short_texts() {
        for len in [0, 1, 31, 32, 33, 100] {
            let s = "x".repeat(len);
            let t = Text::new(s.clone().into_bytes());
            assert_eq!(
                row_text(|r| {
                    r.text(&t);
                    r.put(b"|");
                    r.text(&t);
                }),
                format!("{s}|{s}")
            );
        }
    }
}
