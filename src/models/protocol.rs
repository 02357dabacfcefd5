//! The wire format between capflow and an external model: one Arrow IPC stream per direction.
//!
//! capflow opens an IPC *stream* on the model's stdin whose schema is [`ModelKind::request_schema`]
//! and writes one RecordBatch per request batch; the model opens an IPC stream on its stdout whose
//! schema is [`ModelKind::reply_schema`] and answers each request batch with exactly one
//! RecordBatch, in order, echoing the `request_id` column. `docs/adapters.md` is the reference
//! for adapter authors; this module is the Rust side of that contract.

use std::fmt;
use std::ops::Range;
use std::str::FromStr;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Float32Type, Float64Type, Schema};
use serde::{Deserialize, Serialize};

/// Protocol version written into the request schema's metadata (`capflow.protocol`).
pub const PROTOCOL_VERSION: &str = "1";
/// Column that ties each reply row to its request row.
pub const REQUEST_ID: &str = "request_id";
/// Request schema metadata key naming the protocol version.
pub const META_PROTOCOL: &str = "capflow.protocol";
/// Request schema metadata key naming the model kind the adapter is expected to serve.
pub const META_KIND: &str = "capflow.kind";
/// Request schema metadata key naming the adapter as configured (for the adapter's own logs).
pub const META_ADAPTER: &str = "capflow.adapter";

/// What an external model computes; decides the request and reply columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    /// `text: Utf8` → `penman: Utf8` (caption to AMR graph).
    TextToAmr,
    /// `penman: Utf8` → `text: Utf8` (AMR graph to sentence).
    AmrToText,
    /// `text: Utf8` → `score: Float64` in [0, 1].
    QualityScorer,
    /// `text: Utf8` → `vector: List<Float32>`, one dimension for every row of a run.
    Embedder,
    /// `image: Utf8` (path), `text: Utf8` → `score: Float64` in [0, 1].
    ImageTextScorer,
}

impl ModelKind {
    pub const ALL: [ModelKind; 5] = [
        ModelKind::TextToAmr,
        ModelKind::AmrToText,
        ModelKind::QualityScorer,
        ModelKind::Embedder,
        ModelKind::ImageTextScorer,
    ];

    /// The name used in dataflow specs, in `capflow.kind` and in error messages.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::TextToAmr => "text_to_amr",
            ModelKind::AmrToText => "amr_to_text",
            ModelKind::QualityScorer => "quality_scorer",
            ModelKind::Embedder => "embedder",
            ModelKind::ImageTextScorer => "image_text_scorer",
        }
    }

    /// The request columns after `request_id`, all `Utf8`, in order.
    pub fn request_columns(self) -> &'static [&'static str] {
        match self {
            ModelKind::TextToAmr | ModelKind::QualityScorer | ModelKind::Embedder => &["text"],
            ModelKind::AmrToText => &["penman"],
            ModelKind::ImageTextScorer => &["image", "text"],
        }
    }

    /// The reply column after `request_id`.
    pub fn reply_field(self) -> Field {
        match self {
            ModelKind::TextToAmr => Field::new("penman", DataType::Utf8, false),
            ModelKind::AmrToText => Field::new("text", DataType::Utf8, false),
            ModelKind::QualityScorer | ModelKind::ImageTextScorer => {
                Field::new("score", DataType::Float64, false)
            }
            ModelKind::Embedder => Field::new(
                "vector",
                DataType::List(Arc::new(Field::new_list_field(DataType::Float32, true))),
                false,
            ),
        }
    }

    /// The schema of the stream capflow writes to the adapter's stdin.
    pub fn request_schema(self, adapter: &str) -> Schema {
        let mut fields = vec![Field::new(REQUEST_ID, DataType::Int64, false)];
        fields.extend(
            self.request_columns()
                .iter()
                .map(|name| Field::new(*name, DataType::Utf8, false)),
        );
        let metadata: std::collections::HashMap<String, String> = [
            (META_PROTOCOL, PROTOCOL_VERSION),
            (META_KIND, self.name()),
            (META_ADAPTER, adapter),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        Schema::new_with_metadata(fields, metadata)
    }

    /// The schema an adapter is expected to write to its stdout.
    pub fn reply_schema(self) -> Schema {
        Schema::new(vec![
            Field::new(REQUEST_ID, DataType::Int64, false),
            self.reply_field(),
        ])
    }
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ModelKind {
    type Err = crate::Error;

    fn from_str(s: &str) -> crate::Result<Self> {
        ModelKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let known: Vec<&str> = ModelKind::ALL.iter().map(|k| k.name()).collect();
                crate::Error::Config(format!(
                    "unknown model kind `{s}`; expected one of {}",
                    known.join(", ")
                ))
            })
    }
}

/// Builds one request batch: `request_id` numbered from `first_id`, then the kind's columns.
pub fn encode_request(
    kind: ModelKind,
    adapter: &str,
    first_id: i64,
    columns: Vec<Vec<&str>>,
) -> Result<RecordBatch, String> {
    let rows = columns.first().map_or(0, Vec::len);
    let ids: Int64Array = (first_id..first_id + rows as i64).collect();
    let mut arrays: Vec<ArrayRef> = vec![Arc::new(ids)];
    arrays.extend(
        columns
            .into_iter()
            .map(|values| Arc::new(StringArray::from(values)) as ArrayRef),
    );
    RecordBatch::try_new(Arc::new(kind.request_schema(adapter)), arrays)
        .map_err(|e| format!("cannot build the request batch: {e}"))
}

/// The decoded reply column of one batch.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplyValues {
    Texts(Vec<String>),
    Scores(Vec<f64>),
    Vectors(Vec<Vec<f32>>),
}

/// Checks a reply batch against its request and decodes the reply column.
///
/// The reply must have the request's row count, echo the request ids in order, and carry the
/// kind's reply column without nulls. Numeric columns of another float width are accepted and
/// cast, since `pa.array([0.5])` is `double` and numpy embeddings are often `float64`. Scores
/// must lie in [0, 1]. The error is the reason, for the caller to wrap with adapter and batch.
pub fn decode_reply(
    kind: ModelKind,
    reply: &RecordBatch,
    expected_ids: Range<i64>,
) -> Result<ReplyValues, String> {
    let expected_rows = (expected_ids.end - expected_ids.start) as usize;
    if reply.num_rows() != expected_rows {
        return Err(format!(
            "reply has {} rows for a request of {expected_rows}",
            reply.num_rows()
        ));
    }
    let ids = reply
        .column_by_name(REQUEST_ID)
        .ok_or_else(|| format!("reply has no `{REQUEST_ID}` column"))?;
    let ids = arrow::compute::cast(ids, &DataType::Int64)
        .map_err(|e| format!("reply column `{REQUEST_ID}` is not an integer column: {e}"))?;
    let ids = ids.as_primitive::<arrow::datatypes::Int64Type>();
    for (row, expected) in expected_ids.clone().enumerate() {
        if ids.is_null(row) || ids.value(row) != expected {
            let got = if ids.is_null(row) {
                "null".to_string()
            } else {
                ids.value(row).to_string()
            };
            return Err(format!(
                "reply row {row} has {REQUEST_ID} {got}, expected {expected} (replies must keep request order)"
            ));
        }
    }
    let field = kind.reply_field();
    let column = reply.column_by_name(field.name()).ok_or_else(|| {
        format!(
            "reply has no `{}` column (a {} adapter replies with `{REQUEST_ID}` and `{}`)",
            field.name(),
            kind,
            field.name()
        )
    })?;
    if let Some(row) = (0..column.len()).find(|&row| column.is_null(row)) {
        return Err(format!("reply row {row} has a null `{}`", field.name()));
    }
    let cast = arrow::compute::cast(column, field.data_type()).map_err(|e| {
        format!(
            "reply column `{}` has type {}, expected {}: {e}",
            field.name(),
            column.data_type(),
            field.data_type()
        )
    })?;
    match kind {
        ModelKind::TextToAmr | ModelKind::AmrToText => {
            let texts = cast.as_string::<i32>();
            Ok(ReplyValues::Texts(
                texts.iter().map(|t| t.unwrap_or("").to_string()).collect(),
            ))
        }
        ModelKind::QualityScorer | ModelKind::ImageTextScorer => {
            let scores = cast.as_primitive::<Float64Type>();
            let scores: Vec<f64> = scores.values().to_vec();
            if let Some((row, score)) = scores
                .iter()
                .enumerate()
                .find(|(_, s)| !(0.0..=1.0).contains(*s))
            {
                return Err(format!("reply row {row} has score {score}, outside [0, 1]"));
            }
            Ok(ReplyValues::Scores(scores))
        }
        ModelKind::Embedder => {
            let lists = cast.as_list::<i32>();
            let mut vectors = Vec::with_capacity(lists.len());
            for row in 0..lists.len() {
                let values = lists.value(row);
                if values.null_count() > 0 {
                    return Err(format!("reply row {row} has a null vector component"));
                }
                let values = values.as_primitive::<Float32Type>();
                if let Some(v) = values.values().iter().find(|v| !v.is_finite()) {
                    return Err(format!("reply row {row} has a non-finite component {v}"));
                }
                vectors.push(values.values().to_vec());
            }
            Ok(ReplyValues::Vectors(vectors))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float32Array, Float64Array, ListArray};

    fn reply(ids: Vec<i64>, column: (&str, ArrayRef)) -> RecordBatch {
        RecordBatch::try_from_iter([
            (REQUEST_ID, Arc::new(Int64Array::from(ids)) as ArrayRef),
            column,
        ])
        .unwrap()
    }

    #[test]
    fn kinds_round_trip_through_their_names() {
        for kind in ModelKind::ALL {
            assert_eq!(kind.name().parse::<ModelKind>().unwrap(), kind);
        }
        let err = "amr_parser".parse::<ModelKind>().unwrap_err().to_string();
        assert!(err.contains("text_to_amr"), "{err}");
    }

    #[test]
    fn request_schema_carries_kind_and_columns() {
        let schema = ModelKind::ImageTextScorer.request_schema("clip");
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["request_id", "image", "text"]);
        assert_eq!(schema.metadata()[META_KIND], "image_text_scorer");
        assert_eq!(schema.metadata()[META_ADAPTER], "clip");
        let batch = encode_request(
            ModelKind::ImageTextScorer,
            "clip",
            10,
            vec![vec!["a.jpg", "b.jpg"], vec!["x", "y"]],
        )
        .unwrap();
        let ids = batch
            .column(0)
            .as_primitive::<arrow::datatypes::Int64Type>();
        assert_eq!(ids.values().to_vec(), vec![10, 11]);
    }

    #[test]
    fn replies_out_of_order_or_short_are_rejected() {
        let scores = (
            "score",
            Arc::new(Float64Array::from(vec![0.1, 0.2])) as ArrayRef,
        );
        let swapped = reply(vec![1, 0], scores.clone());
        let err = decode_reply(ModelKind::QualityScorer, &swapped, 0..2).unwrap_err();
        assert!(err.contains("row 0 has request_id 1, expected 0"), "{err}");
        let err =
            decode_reply(ModelKind::QualityScorer, &reply(vec![0, 1], scores), 0..3).unwrap_err();
        assert!(err.contains("2 rows for a request of 3"), "{err}");
    }

    #[test]
    fn scores_outside_unit_interval_and_nulls_are_rejected() {
        let high = (
            "score",
            Arc::new(Float64Array::from(vec![0.5, 1.5])) as ArrayRef,
        );
        let err =
            decode_reply(ModelKind::QualityScorer, &reply(vec![0, 1], high), 0..2).unwrap_err();
        assert!(err.contains("row 1 has score 1.5"), "{err}");
        let null = (
            "score",
            Arc::new(Float64Array::from(vec![Some(0.5), None])) as ArrayRef,
        );
        let err =
            decode_reply(ModelKind::ImageTextScorer, &reply(vec![0, 1], null), 0..2).unwrap_err();
        assert!(err.contains("row 1 has a null `score`"), "{err}");
    }

    #[test]
    fn float32_scores_and_float64_vectors_are_cast() {
        let scores = (
            "score",
            Arc::new(Float32Array::from(vec![0.25f32])) as ArrayRef,
        );
        assert_eq!(
            decode_reply(ModelKind::QualityScorer, &reply(vec![7], scores), 7..8).unwrap(),
            ReplyValues::Scores(vec![0.25])
        );
        let vectors = ListArray::from_iter_primitive::<Float64Type, _, _>(vec![Some(vec![
            Some(1.5),
            Some(-2.0),
        ])]);
        let vectors = ("vector", Arc::new(vectors) as ArrayRef);
        assert_eq!(
            decode_reply(ModelKind::Embedder, &reply(vec![0], vectors), 0..1).unwrap(),
            ReplyValues::Vectors(vec![vec![1.5, -2.0]])
        );
    }

    #[test]
    fn fixed_size_list_vectors_are_cast() {
        let values = Float32Array::from(vec![1.0f32, 2.0, 3.0, 4.0]);
        let item = Arc::new(Field::new_list_field(DataType::Float32, false));
        let vectors =
            arrow::array::FixedSizeListArray::try_new(item, 2, Arc::new(values), None).unwrap();
        let vectors = ("vector", Arc::new(vectors) as ArrayRef);
        assert_eq!(
            decode_reply(ModelKind::Embedder, &reply(vec![0, 1], vectors), 0..2).unwrap(),
            ReplyValues::Vectors(vec![vec![1.0, 2.0], vec![3.0, 4.0]])
        );
    }

    #[test]
    fn missing_reply_column_names_the_expected_one() {
        let wrong = ("text", Arc::new(StringArray::from(vec!["x"])) as ArrayRef);
        let err = decode_reply(ModelKind::TextToAmr, &reply(vec![0], wrong), 0..1).unwrap_err();
        assert!(err.contains("no `penman` column"), "{err}");
    }
}
