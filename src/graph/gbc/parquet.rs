//! ml-gbc's Parquet layout: `pd.DataFrame(records).to_parquet(path)` on the dumped records.
//!
//! pyarrow infers the Arrow type of each column from the Python values, so the layout is the JSON
//! nesting itself: objects become structs (their fields sorted by name), lists become
//! `list<element: ...>`, a field that is null in every record becomes the `null` type, integers
//! `int64` and floats `double`. The top-level columns keep the records' key order. Reading turns
//! each row back into the JSON record; writing infers the same types from the records and encodes
//! them with arrow-json, so pandas/pyarrow (and ml-gbc's `load_list_from_file`) read our files as
//! they read theirs.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use serde_json::{Map, Number, Value};

use super::temp_path;
use crate::error::{Error, Result};

/// Rows per record batch when reading and writing.
const BATCH_ROWS: usize = 256;

/// Streams the records of a Parquet file, batch by batch, to `on_record(row_index, record)`.
/// A row that does not convert to JSON (an unsupported column type, a NaN) is passed as `Err`
/// with the reason; an unreadable file stops the read with an error.
pub fn read_parquet_records(
    path: &Path,
    mut on_record: impl FnMut(usize, std::result::Result<Value, String>) -> Result<()>,
) -> Result<()> {
    let input = crate::ingest::ParquetInput::open(path)?;
    let mut reader = decoder_guard(path, || {
        ParquetRecordBatchReaderBuilder::try_new(input.clone())
            .and_then(|builder| builder.with_batch_size(BATCH_ROWS).build())
    })?
    .map_err(|e| input.parquet_error(e))?;
    let mut row_index = 0;
    while let Some(batch) = decoder_guard(path, || reader.next())? {
        let batch = batch.map_err(|e| input.arrow_error(e))?;
        for record in record_batch_to_records(&batch) {
            on_record(row_index, record)?;
            row_index += 1;
        }
    }
    Ok(())
}

/// Runs a step of the Parquet decoder, turning a panic into an error about the file.
///
/// NB: the parquet crate can panic on corrupt pages (an over-long RLE varint overflows a shift in
/// `BitReader::get_vlq_int`, seen with a single flipped byte). A damaged input file must not take
/// the process down, so the panic is caught here and the file reported as unreadable; the
/// decoder is dropped afterwards, so its possibly inconsistent state is never used again.
fn decoder_guard<T>(path: &Path, step: impl FnOnce() -> T) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(step)).map_err(|panic| {
        let detail = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "decoder panic".to_string());
        Error::record(
            path.display().to_string(),
            "Parquet data",
            format!("corrupt Parquet file, the decoder failed: {detail}"),
        )
    })
}

/// Converts every row of a batch to a JSON object keyed by column name, in column order.
pub fn record_batch_to_records(batch: &RecordBatch) -> Vec<std::result::Result<Value, String>> {
    let schema = batch.schema();
    (0..batch.num_rows())
        .map(|row| {
            let mut map = Map::new();
            for (field, column) in schema.fields().iter().zip(batch.columns()) {
                map.insert(
                    field.name().clone(),
                    array_value(column.as_ref(), row, field.name())?,
                );
            }
            Ok(Value::Object(map))
        })
        .collect()
}

/// The JSON value of `array[i]`; `path` names the column for error messages.
fn array_value(array: &dyn Array, i: usize, path: &str) -> std::result::Result<Value, String> {
    if matches!(array.data_type(), DataType::Null) || array.is_null(i) {
        return Ok(Value::Null);
    }
    let float = |x: f64| {
        Number::from_f64(x)
            .map(Value::Number)
            .ok_or_else(|| format!("{path}: {x} has no JSON form"))
    };
    use arrow::datatypes as t;
    Ok(match array.data_type() {
        DataType::Boolean => Value::Bool(array.as_boolean().value(i)),
        DataType::Int8 => array.as_primitive::<t::Int8Type>().value(i).into(),
        DataType::Int16 => array.as_primitive::<t::Int16Type>().value(i).into(),
        DataType::Int32 => array.as_primitive::<t::Int32Type>().value(i).into(),
        DataType::Int64 => array.as_primitive::<t::Int64Type>().value(i).into(),
        DataType::UInt8 => array.as_primitive::<t::UInt8Type>().value(i).into(),
        DataType::UInt16 => array.as_primitive::<t::UInt16Type>().value(i).into(),
        DataType::UInt32 => array.as_primitive::<t::UInt32Type>().value(i).into(),
        DataType::UInt64 => array.as_primitive::<t::UInt64Type>().value(i).into(),
        DataType::Float32 => float(f64::from(array.as_primitive::<t::Float32Type>().value(i)))?,
        DataType::Float64 => float(array.as_primitive::<t::Float64Type>().value(i))?,
        DataType::Utf8 => Value::String(array.as_string::<i32>().value(i).to_string()),
        DataType::LargeUtf8 => Value::String(array.as_string::<i64>().value(i).to_string()),
        DataType::Utf8View => Value::String(array.as_string_view().value(i).to_string()),
        DataType::List(_) => list_value(array.as_list::<i32>().value(i).as_ref(), path)?,
        DataType::LargeList(_) => list_value(array.as_list::<i64>().value(i).as_ref(), path)?,
        DataType::FixedSizeList(_, _) => {
            list_value(array.as_fixed_size_list().value(i).as_ref(), path)?
        }
        DataType::Struct(fields) => {
            let s = array.as_struct();
            let mut map = Map::new();
            for (field, child) in fields.iter().zip(s.columns()) {
                let child_path = format!("{path}.{}", field.name());
                map.insert(
                    field.name().clone(),
                    array_value(child.as_ref(), i, &child_path)?,
                );
            }
            Value::Object(map)
        }
        DataType::Map(_, _) => {
            let entries = array.as_map().value(i);
            let (keys, values) = (entries.column(0), entries.column(1));
            let mut map = Map::new();
            for j in 0..entries.len() {
                let key = match array_value(keys.as_ref(), j, path)? {
                    Value::String(k) => k,
                    other => return Err(format!("{path}: map key {other} is not a string")),
                };
                map.insert(key, array_value(values.as_ref(), j, path)?);
            }
            Value::Object(map)
        }
        DataType::Dictionary(_, value_type) => {
            let one = arrow::compute::cast(&array.slice(i, 1), value_type)
                .map_err(|e| format!("{path}: {e}"))?;
            array_value(one.as_ref(), 0, path)?
        }
        other => return Err(format!("{path}: Arrow type {other} has no GBC JSON form")),
    })
}

fn list_value(items: &dyn Array, path: &str) -> std::result::Result<Value, String> {
    (0..items.len())
        .map(|j| array_value(items, j, path))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map(Value::Array)
}

/// The Arrow type pyarrow would infer for a set of JSON values.
#[derive(Clone, Debug, PartialEq)]
enum Inferred {
    Null,
    Bool,
    Int,
    Float,
    Str,
    List(Box<Inferred>),
    Struct(Vec<(String, Inferred)>),
}

impl Inferred {
    fn of(value: &Value) -> Inferred {
        match value {
            Value::Null => Inferred::Null,
            Value::Bool(_) => Inferred::Bool,
            Value::Number(n) if n.is_f64() => Inferred::Float,
            Value::Number(_) => Inferred::Int,
            Value::String(_) => Inferred::Str,
            Value::Array(_) => Inferred::List(Box::new(Inferred::Null)),
            Value::Object(_) => Inferred::Struct(Vec::new()),
        }
    }

    /// Widens `self` so that `value` fits, the way pyarrow unifies a column's values.
    fn absorb(&mut self, value: &Value, path: &str) -> std::result::Result<(), String> {
        let incoming = Inferred::of(value);
        match (&mut *self, &incoming) {
            (_, Inferred::Null) => return Ok(()),
            (Inferred::Null, _) => *self = incoming,
            (Inferred::Int, Inferred::Float) => *self = Inferred::Float,
            (Inferred::Float, Inferred::Int) => {}
            (a, b) if std::mem::discriminant(a) == std::mem::discriminant(b) => {}
            (a, _) => {
                return Err(format!(
                    "{path} holds both {} and {} values; a Parquet column has one type",
                    a.name(),
                    incoming.name()
                ))
            }
        }
        match (self, value) {
            (Inferred::List(item), Value::Array(items)) => {
                let item_path = format!("{path}[]");
                for v in items {
                    item.absorb(v, &item_path)?;
                }
            }
            (Inferred::Struct(fields), Value::Object(map)) => {
                for (key, v) in map {
                    let field_path = format!("{path}.{key}");
                    match fields.iter_mut().find(|(name, _)| name == key) {
                        Some((_, kind)) => kind.absorb(v, &field_path)?,
                        None => {
                            let mut kind = Inferred::Null;
                            kind.absorb(v, &field_path)?;
                            fields.push((key.clone(), kind));
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn name(&self) -> &'static str {
        match self {
            Inferred::Null => "null",
            Inferred::Bool => "boolean",
            Inferred::Int => "integer",
            Inferred::Float => "float",
            Inferred::Str => "string",
            Inferred::List(_) => "list",
            Inferred::Struct(_) => "object",
        }
    }

    fn data_type(&self) -> DataType {
        match self {
            Inferred::Null => DataType::Null,
            Inferred::Bool => DataType::Boolean,
            Inferred::Int => DataType::Int64,
            Inferred::Float => DataType::Float64,
            Inferred::Str => DataType::Utf8,
            Inferred::List(item) => {
                DataType::List(Arc::new(Field::new("element", item.data_type(), true)))
            }
            Inferred::Struct(fields) => {
                let mut sorted: Vec<&(String, Inferred)> = fields.iter().collect();
                sorted.sort_by(|a, b| a.0.cmp(&b.0));
                DataType::Struct(Fields::from(
                    sorted
                        .into_iter()
                        .map(|(name, kind)| Field::new(name, kind.data_type(), true))
                        .collect::<Vec<_>>(),
                ))
            }
        }
    }
}

/// The schema pandas/pyarrow would give a DataFrame of these records.
fn infer_schema(records: &[Value]) -> Result<SchemaRef> {
    let mut columns: Vec<(String, Inferred)> = Vec::new();
    for (index, record) in records.iter().enumerate() {
        let Value::Object(map) = record else {
            return Err(Error::invalid(
                format!("GBC record {index}"),
                "a record must be a JSON object",
            ));
        };
        for (key, value) in map {
            let slot = match columns.iter().position(|(name, _)| name == key) {
                Some(p) => p,
                None => {
                    columns.push((key.clone(), Inferred::Null));
                    columns.len() - 1
                }
            };
            columns[slot]
                .1
                .absorb(value, key)
                .map_err(|reason| Error::invalid(format!("GBC record {index}"), reason))?;
        }
    }
    if columns.is_empty() {
        // No records: the columns of an empty ml-gbc `GbcGraph` dump.
        for name in [
            "vertices",
            "img_url",
            "img_path",
            "original_caption",
            "short_caption",
            "detail_caption",
        ] {
            columns.push((name.to_string(), Inferred::Null));
        }
    }
    Ok(Arc::new(Schema::new(
        columns
            .iter()
            .map(|(name, kind)| Field::new(name, kind.data_type(), true))
            .collect::<Vec<_>>(),
    )))
}

/// Encodes JSON records as record batches of `schema`.
fn records_to_batches(schema: &SchemaRef, records: &[Value]) -> Result<Vec<RecordBatch>> {
    let mut batches = Vec::new();
    for chunk in records.chunks(BATCH_ROWS) {
        let mut decoder = arrow::json::ReaderBuilder::new(schema.clone())
            .with_batch_size(chunk.len())
            .build_decoder()
            .map_err(|e| Error::arrow("encoding GBC records", e))?;
        decoder
            .serialize(chunk)
            .map_err(|e| Error::arrow("encoding GBC records", e))?;
        if let Some(batch) = decoder
            .flush()
            .map_err(|e| Error::arrow("encoding GBC records", e))?
        {
            batches.push(batch);
        }
    }
    Ok(batches)
}

/// Writes JSON records in ml-gbc's Parquet layout (snappy-compressed, as pandas writes it). The
/// file is written beside `path` and renamed into place.
pub fn write_parquet(path: &Path, records: &[Value]) -> Result<()> {
    let schema = infer_schema(records)?;
    let batches = records_to_batches(&schema, records)?;
    let tmp = temp_path(path);
    let what = || format!("{}: writing Parquet", path.display());
    let result = (|| {
        let file = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .build();
        let mut writer = ArrowWriter::try_new(file, schema.clone(), Some(props))
            .map_err(|e| Error::parquet(what(), e))?;
        for batch in &batches {
            writer.write(batch).map_err(|e| Error::parquet(what(), e))?;
        }
        // `finish` (not `into_inner`, which reports a failed flush as text) keeps a failed
        // write the I/O error it is.
        writer.finish().map_err(|e| Error::parquet(what(), e))?;
        writer.inner().sync_all().map_err(|e| Error::io(&tmp, e))
    })();
    match result {
        Ok(()) => std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e)),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}
