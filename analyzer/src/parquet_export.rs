//! The Parquet table (`export parquet`): one row per record, LOST marker,
//! derived sequence gap, FROZEN, EPOCH and unknown marker, written with the
//! `parquet` crate's column writer (no arrow, no codec). Rows are buffered
//! one row group at a time ([`ROW_GROUP_ROWS`]), so memory is bounded on any
//! trace size; every column chunk carries min/max statistics, so engines
//! skip row groups by time and opcode. docs/analyzer.md has the schema.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use parquet::basic::{Compression, Encoding, LogicalType, Repetition, Type as Physical};
use parquet::data_type::{ByteArray, ByteArrayType, Int32Type, Int64Type};
use parquet::errors::ParquetError;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterVersion};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::{ColumnPath, Type};

use hmb_trace_file::Item;

use crate::catalog::{field_width, read_field, Catalog, Field, PccxMap};
use crate::walk::Event;

/// Rows per row group: DuckDB's own row group size, its unit of parallel
/// work. At most about 30 MB of buffered columns with the builtin catalog.
pub const ROW_GROUP_ROWS: usize = 122_880;

/// The fixed columns, in schema order (catalog field columns follow).
const KIND: usize = 0;
const OFFSET: usize = 1;
const EPOCH: usize = 2;
const SEQ: usize = 3;
const TIMESTAMP: usize = 4;
const OPCODE: usize = 5;
const NAME: usize = 6;
const SOURCE: usize = 7;
const LENGTH: usize = 8;
const OP_LATENCY: usize = 9;
const COUNT: usize = 10;
const FIRST_SEQ: usize = 11;
const LAST_SEQ: usize = 12;
const NEXT_SEQ: usize = 13;
const RING_SIZE: usize = 14;
const FIXED: usize = 15;

/// (name, physical, bit width, required); strings have width 0.
const FIXED_COLUMNS: [(&str, Physical, i8, bool); FIXED] = [
    ("kind", Physical::BYTE_ARRAY, 0, true),
    ("offset", Physical::INT64, 64, true),
    ("epoch", Physical::INT64, 64, true),
    ("seq", Physical::INT64, 64, false),
    ("timestamp_ns", Physical::INT64, 64, false),
    ("opcode", Physical::INT32, 16, false),
    ("name", Physical::BYTE_ARRAY, 0, false),
    ("source", Physical::INT32, 32, false),
    ("length", Physical::INT32, 16, false),
    ("op_latency_ns", Physical::INT64, 64, false),
    ("count", Physical::INT64, 64, false),
    ("first_seq", Physical::INT64, 64, false),
    ("last_seq", Physical::INT64, 64, false),
    ("next_seq", Physical::INT64, 64, false),
    ("ring_size", Physical::INT64, 64, false),
];

#[derive(Debug, thiserror::Error)]
pub enum ParquetExportError {
    #[error("{0}")]
    Parquet(#[from] ParquetError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// One column's values for the row group being filled: the present values
/// and, for an optional column, a definition level per row.
enum Values {
    I64(Vec<i64>),
    I32(Vec<i32>),
    Bytes(Vec<ByteArray>),
}

struct Column {
    values: Values,
    defs: Option<Vec<i16>>,
}

impl Column {
    fn new(physical: Physical, required: bool) -> Self {
        Self {
            values: match physical {
                Physical::INT64 => Values::I64(Vec::new()),
                Physical::INT32 => Values::I32(Vec::new()),
                _ => Values::Bytes(Vec::new()),
            },
            defs: (!required).then(Vec::new),
        }
    }

    fn int(&mut self, v: Option<u64>) {
        if let Some(d) = &mut self.defs {
            d.push(v.is_some() as i16);
        }
        if let Some(v) = v {
            // Unsigned logical types: the bit pattern is the value.
            match &mut self.values {
                Values::I64(x) => x.push(v as i64),
                Values::I32(x) => x.push(v as u32 as i32),
                Values::Bytes(_) => {}
            }
        }
    }

    fn bytes(&mut self, v: Option<&ByteArray>) {
        if let Some(d) = &mut self.defs {
            d.push(v.is_some() as i16);
        }
        if let (Some(v), Values::Bytes(x)) = (v, &mut self.values) {
            x.push(v.clone());
        }
    }

    fn clear(&mut self) {
        match &mut self.values {
            Values::I64(x) => x.clear(),
            Values::I32(x) => x.clear(),
            Values::Bytes(x) => x.clear(),
        }
        if let Some(d) = &mut self.defs {
            d.clear();
        }
    }
}

/// What a record of one opcode fills: (field column, field), its name and
/// the field that holds its declared latency.
struct OpLayout {
    fields: Vec<(usize, Field)>,
    name: ByteArray,
    latency: Option<Field>,
}

#[derive(Debug, Default, Clone)]
pub struct Summary {
    pub rows: u64,
    pub records: u64,
    pub markers: u64,
    pub gaps: u64,
    pub row_groups: u64,
    pub columns: usize,
    pub bytes: u64,
}

pub struct ParquetWriter<'c, W: Write + Send> {
    catalog: &'c Catalog,
    writer: SerializedFileWriter<W>,
    columns: Vec<Column>,
    /// Catalog field name → its column.
    field_column: HashMap<String, usize>,
    ops: HashMap<u16, OpLayout>,
    kinds: [ByteArray; 6],
    rows: usize,
    /// Field values of the row being built (None: absent).
    row_fields: Vec<Option<u64>>,
    sum: Summary,
}

const KIND_NAMES: [&str; 6] = ["record", "lost", "gap", "frozen", "epoch", "unknown_marker"];

/// Catalog field columns: one per distinct field name (a name used by
/// several opcodes is one column, as wide as its widest use). A name that
/// equals a fixed column's, or another field's but for case (SQL engines
/// fold case), gets a `field_` prefix (and a number if still taken).
fn field_columns(catalog: &Catalog) -> Vec<(String, String, usize)> {
    let mut cols: Vec<(String, String, usize)> = Vec::new();
    for op in &catalog.file.opcodes {
        for f in &op.fields {
            let w = field_width(&f.ty).unwrap_or(8);
            if let Some(c) = cols.iter_mut().find(|c| c.0 == f.name) {
                c.2 = c.2.max(w);
                continue;
            }
            let taken = |n: &str, cols: &[(String, String, usize)]| {
                FIXED_COLUMNS.iter().any(|c| c.0.eq_ignore_ascii_case(n))
                    || cols.iter().any(|c| c.1.eq_ignore_ascii_case(n))
            };
            let mut col = f.name.clone();
            if taken(&col, &cols) {
                col = format!("field_{}", f.name);
                let base = col.clone();
                let mut n = 1;
                while taken(&col, &cols) {
                    n += 1;
                    col = format!("{base}_{n}");
                }
            }
            cols.push((f.name.clone(), col, w));
        }
    }
    cols
}

fn uint_column(name: &str, physical: Physical, bits: i8, required: bool) -> Result<Type, ParquetError> {
    Type::primitive_type_builder(name, physical)
        .with_repetition(if required {
            Repetition::REQUIRED
        } else {
            Repetition::OPTIONAL
        })
        .with_logical_type(Some(if bits == 0 {
            LogicalType::String
        } else {
            LogicalType::integer(bits, false)
        }))
        .build()
}

impl<'c, W: Write + Send> ParquetWriter<'c, W> {
    pub fn new(out: W, catalog: &'c Catalog, meta: Vec<(String, String)>) -> Result<Self, ParquetExportError> {
        let mut fields = Vec::new();
        let mut columns = Vec::new();
        for (name, physical, bits, required) in FIXED_COLUMNS {
            fields.push(Arc::new(uint_column(name, physical, bits, required)?));
            columns.push(Column::new(physical, required));
        }
        let mut field_column = HashMap::new();
        for (field, col, width) in field_columns(catalog) {
            let (physical, bits) = match width {
                8 => (Physical::INT64, 64),
                w => (Physical::INT32, (w * 8) as i8),
            };
            fields.push(Arc::new(uint_column(&col, physical, bits, false)?));
            field_column.insert(field, columns.len());
            columns.push(Column::new(physical, false));
        }
        // Dictionaries only where values repeat (kind, name, opcode, source,
        // length, epoch, fields of at most 16 bits): elsewhere the writer
        // would build one per row group and give up (a quarter of the CPU
        // time). Offsets, sequence numbers and timestamps rise row by row:
        // delta encoding stores them in a few bits each.
        let mut props = WriterProperties::builder().set_dictionary_enabled(false);
        for f in &fields {
            let name = f.name();
            let small = match f.get_basic_info().logical_type_ref() {
                Some(LogicalType::Integer(t)) => t.bit_width <= 16,
                _ => true,
            };
            if small || name == "epoch" || name == "source" {
                props = props.set_column_dictionary_enabled(ColumnPath::from(name), true);
            }
            if matches!(name, "offset" | "seq" | "timestamp_ns") {
                props = props.set_column_encoding(ColumnPath::from(name), Encoding::DELTA_BINARY_PACKED);
            }
        }
        let schema = Arc::new(Type::group_type_builder("hmb_trace").with_fields(fields).build()?);
        let props = props
            .set_writer_version(WriterVersion::PARQUET_1_0)
            .set_compression(Compression::UNCOMPRESSED)
            .set_statistics_enabled(EnabledStatistics::Chunk)
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .set_created_by(format!("hmb-trace-analyze {}", env!("CARGO_PKG_VERSION")))
            .set_key_value_metadata(Some(meta.into_iter().map(|(k, v)| KeyValue::new(k, v)).collect()))
            .build();
        let writer = SerializedFileWriter::new(out, schema, Arc::new(props))?;
        let n = columns.len();
        Ok(Self {
            catalog,
            writer,
            columns,
            row_fields: vec![None; n - FIXED],
            field_column,
            ops: HashMap::new(),
            kinds: KIND_NAMES.map(|k| ByteArray::from(Bytes::from_static(k.as_bytes()))),
            rows: 0,
            sum: Summary {
                columns: n,
                ..Summary::default()
            },
        })
    }

    fn layout(&mut self, opcode: u16) -> &OpLayout {
        let catalog = self.catalog;
        let field_column = &self.field_column;
        self.ops.entry(opcode).or_insert_with(|| {
            let op = catalog.get(opcode);
            let latency_name = op.and_then(|op| match &op.pccx {
                Some(PccxMap::Span { duration_field, .. }) => Some(duration_field.clone()),
                Some(PccxMap::End { duration_field, .. }) => duration_field.clone(),
                _ => None,
            });
            OpLayout {
                fields: op.map_or(Vec::new(), |op| {
                    op.fields.iter().map(|f| (field_column[&f.name], f.clone())).collect()
                }),
                // Static bytes: cloning and dropping them per row is free,
                // where shared `Bytes` cost a quarter of the export in
                // atomic reference counting. One leak per distinct opcode
                // (at most 65,536 short names per process).
                name: ByteArray::from(Bytes::from_static(Box::leak(
                    catalog.name(opcode).into_bytes().into_boxed_slice(),
                ))),
                latency: op.and_then(|op| {
                    op.fields
                        .iter()
                        .find(|f| Some(&f.name) == latency_name.as_ref())
                        .cloned()
                }),
            }
        })
    }

    /// One row: the fixed integer columns from `ints` (None: null), a kind,
    /// a name, and the field values in `self.row_fields`.
    fn row(
        &mut self,
        kind: usize,
        name: Option<ByteArray>,
        ints: [Option<u64>; FIXED],
    ) -> Result<(), ParquetExportError> {
        for (i, v) in ints.iter().enumerate() {
            match i {
                KIND => self.columns[KIND].bytes(Some(&self.kinds[kind])),
                NAME => self.columns[NAME].bytes(name.as_ref()),
                _ => self.columns[i].int(*v),
            }
        }
        for (c, v) in self.columns[FIXED..].iter_mut().zip(self.row_fields.iter_mut()) {
            c.int(v.take());
        }
        self.rows += 1;
        self.sum.rows += 1;
        if self.rows >= ROW_GROUP_ROWS {
            self.flush_group()?;
        }
        Ok(())
    }

    fn flush_group(&mut self) -> Result<(), ParquetExportError> {
        if self.rows == 0 {
            return Ok(());
        }
        let mut rg = self.writer.next_row_group()?;
        let mut i = 0;
        while let Some(mut col) = rg.next_column()? {
            let c = &self.columns[i];
            let defs = c.defs.as_deref();
            match &c.values {
                Values::I64(v) => col.typed::<Int64Type>().write_batch(v, defs, None)?,
                Values::I32(v) => col.typed::<Int32Type>().write_batch(v, defs, None)?,
                Values::Bytes(v) => col.typed::<ByteArrayType>().write_batch(v, defs, None)?,
            };
            col.close()?;
            i += 1;
        }
        rg.close()?;
        self.columns.iter_mut().for_each(Column::clear);
        self.rows = 0;
        self.sum.row_groups += 1;
        Ok(())
    }

    fn record(&mut self, epoch: u64, item: &Item<'_>) -> Result<(), ParquetExportError> {
        let opcode = item.opcode();
        self.layout(opcode);
        let op = &self.ops[&opcode];
        for (col, f) in &op.fields {
            self.row_fields[col - FIXED] = read_field(item.payload, f);
        }
        let latency = op.latency.as_ref().and_then(|f| read_field(item.payload, f));
        let name = op.name.clone();
        let mut ints = [None; FIXED];
        ints[OFFSET] = Some(item.offset);
        ints[EPOCH] = Some(epoch);
        ints[SEQ] = Some(item.seq());
        ints[TIMESTAMP] = Some(item.timestamp_ns());
        ints[OPCODE] = Some(opcode as u64);
        ints[SOURCE] = Some(item.source() as u64);
        ints[LENGTH] = Some(item.payload.len() as u64);
        ints[OP_LATENCY] = latency;
        self.sum.records += 1;
        self.row(0, Some(name), ints)
    }

    /// A walk event as a row (records only when `keep` says so).
    pub fn feed(
        &mut self,
        ev: &Event<'_, '_>,
        keep: impl Fn(u64, &Item<'_>) -> bool,
    ) -> Result<(), ParquetExportError> {
        let mut ints = [None; FIXED];
        let kind = match *ev {
            Event::Record { epoch, item } => {
                return if keep(epoch, item) {
                    self.record(epoch, item)
                } else {
                    Ok(())
                };
            }
            Event::Lost {
                offset,
                epoch,
                first_seq,
                count,
            } => {
                ints[OFFSET] = Some(offset);
                ints[EPOCH] = Some(epoch);
                ints[FIRST_SEQ] = Some(first_seq);
                ints[COUNT] = Some(count);
                1
            }
            Event::Gap {
                offset,
                epoch,
                first_seq,
                count,
                timestamp_ns,
            } => {
                ints[OFFSET] = Some(offset);
                ints[EPOCH] = Some(epoch);
                ints[FIRST_SEQ] = Some(first_seq);
                ints[COUNT] = Some(count);
                ints[TIMESTAMP] = Some(timestamp_ns);
                self.sum.gaps += 1;
                2
            }
            Event::Frozen {
                offset,
                epoch,
                last_seq,
                next_seq,
            } => {
                ints[OFFSET] = Some(offset);
                ints[EPOCH] = Some(epoch);
                ints[LAST_SEQ] = last_seq;
                ints[NEXT_SEQ] = Some(next_seq);
                3
            }
            Event::EpochStart {
                offset,
                epoch,
                ring_size,
            } => {
                ints[OFFSET] = Some(offset);
                ints[EPOCH] = Some(epoch);
                ints[RING_SIZE] = Some(ring_size);
                4
            }
            Event::UnknownMarker { offset, opcode } => {
                ints[OFFSET] = Some(offset);
                ints[EPOCH] = Some(0);
                ints[OPCODE] = Some(opcode as u64);
                5
            }
            Event::SeqBackwards { .. } => return Ok(()),
        };
        if kind != 2 {
            self.sum.markers += 1;
        }
        self.row(kind, None, ints)
    }

    /// The last row group and the footer.
    pub fn finish(mut self) -> Result<(Summary, W), ParquetExportError> {
        self.flush_group()?;
        let w = self.writer.into_inner()?;
        Ok((self.sum, w))
    }
}
