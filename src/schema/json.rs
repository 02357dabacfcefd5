//! Stable JSON rendering of Arrow schemas (`schemas/*.json`) and schema fingerprints.

use arrow::datatypes::{DataType, Field, Schema};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

fn type_to_json(data_type: &DataType) -> Value {
    match data_type {
        DataType::List(item) => json!({ "list": field_to_json(item) }),
        DataType::Struct(fields) => {
            json!({ "struct": fields.iter().map(|f| field_to_json(f)).collect::<Vec<_>>() })
        }
        other => Value::String(other.to_string()),
    }
}

fn field_to_json(field: &Field) -> Value {
    json!({
        "name": field.name(),
        "type": type_to_json(field.data_type()),
        "nullable": field.is_nullable(),
    })
}

/// The schema as pretty JSON, the content of `schemas/<table>.json`.
pub fn schema_to_json(table: &str, schema: &Schema) -> String {
    let value = json!({
        "table": table,
        "fields": schema.fields().iter().map(|f| field_to_json(f)).collect::<Vec<_>>(),
    });
    let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
    text.push('\n');
    text
}

/// SHA-256 of the schema's JSON rendering: changes whenever a field, type or nullability does.
pub fn schema_fingerprint(schema: &Schema) -> String {
    let mut hasher = Sha256::new();
    hasher.update(schema_to_json("", schema).as_bytes());
    hex::encode(hasher.finalize())
}
