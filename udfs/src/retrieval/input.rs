//! Reading the two inputs every retrieval metric takes: the ranked document ids and the
//! graded judgements, in each encoding a user is likely to have them in.
//!
//! - ranked ids: `List<Utf8>` (any list; other element types are cast to text) or JSON text
//!   `["doc-1", "doc-2", ...]` (integers are read as their decimal text);
//! - judgements: JSON text `{"doc-id": grade, ...}` (read like Python's `json.loads`: a
//!   repeated key keeps its last grade) or `[{"id": ..., "relevance": ...}, ...]`, a
//!   `Map<Utf8, Int>`, or a `List<Struct{id, relevance}>`. A grade is an integer (2.0 is 2);
//!   a NULL grade is no judgement.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, ListArray, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::{Result, exec_err};
use serde_json::Value;

use super::ranking::Judgements;
use crate::common::signature::is_text;
use crate::common::{json_values, truncate_for_error};

/// True for the types accepted as a ranked list of ids.
pub fn is_ranked_list_type(t: &DataType) -> bool {
    is_text(t)
        || matches!(
            t,
            DataType::List(_)
                | DataType::LargeList(_)
                | DataType::FixedSizeList(_, _)
                | DataType::ListView(_)
                | DataType::LargeListView(_)
        )
}

/// True for the types accepted as judgements.
pub fn is_judgements_type(t: &DataType) -> bool {
    match t {
        DataType::Map(_, _) => true,
        DataType::List(f) | DataType::LargeList(f) => matches!(f.data_type(), DataType::Struct(_)),
        other => is_text(other),
    }
}

/// The ranked ids of every row.
pub enum RankedIds {
    Text(StringArray),
    List(ListArray),
}

impl RankedIds {
    pub fn new(array: &ArrayRef) -> Result<Self> {
        if is_text(array.data_type()) {
            let text = cast(array, &DataType::Utf8)?;
            return Ok(RankedIds::Text(text.as_string::<i32>().clone()));
        }
        let list_type = DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true)));
        let list = cast(array, &list_type)?;
        Ok(RankedIds::List(list.as_list::<i32>().clone()))
    }

    /// The row's ids in rank order, `None` for NULL. NULL entries of a list are skipped.
    pub fn get(&self, function: &str, row: usize) -> Result<Option<Vec<String>>> {
        match self {
            RankedIds::Text(a) => {
                if a.is_null(row) {
                    return Ok(None);
                }
                let text = a.value(row);
                match parse_id_list(text) {
                    Ok(ids) => Ok(Some(ids)),
                    Err(why) => exec_err!(
                        "{function}: retrieved {} is not a JSON array of document ids: {why}",
                        truncate_for_error(text)
                    ),
                }
            }
            RankedIds::List(l) => {
                if l.is_null(row) {
                    return Ok(None);
                }
                let values = l.value(row);
                let values = values.as_string::<i32>();
                Ok(Some(values.iter().flatten().map(str::to_string).collect()))
            }
        }
    }
}

fn parse_id_list(text: &str) -> std::result::Result<Vec<String>, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let Value::Array(items) = value else {
        return Err("not an array".into());
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(s) => Ok(s),
            Value::Number(n) if n.is_i64() || n.is_u64() => Ok(n.to_string()),
            other => Err(format!("element {i} is {other}, not a string id")),
        })
        .collect()
}

/// The judgements of every row.
pub enum JudgementsColumn {
    Text(StringArray),
    Json(Vec<Option<Value>>),
}

impl JudgementsColumn {
    pub fn new(array: &ArrayRef) -> Result<Self> {
        if is_text(array.data_type()) {
            let text = cast(array, &DataType::Utf8)?;
            return Ok(JudgementsColumn::Text(text.as_string::<i32>().clone()));
        }
        Ok(JudgementsColumn::Json(json_values(array)?))
    }

    /// The row's judgements, `None` for NULL.
    pub fn get(&self, function: &str, row: usize) -> Result<Option<Judgements>> {
        let (parsed, shown) = match self {
            JudgementsColumn::Text(a) => {
                if a.is_null(row) {
                    return Ok(None);
                }
                let text = a.value(row);
                let parsed = serde_json::from_str::<Value>(text)
                    .map_err(|e| e.to_string())
                    .and_then(|v| judgements_from_json(&v));
                (parsed, text.to_string())
            }
            JudgementsColumn::Json(values) => match &values[row] {
                None => return Ok(None),
                Some(v) => (judgements_from_json(v), v.to_string()),
            },
        };
        match parsed {
            Ok(j) => Ok(Some(j)),
            Err(why) => exec_err!(
                "{function}: qrels {} are not relevance judgements ({{\"doc-id\": grade}} or \
                 [{{\"id\": ..., \"relevance\": grade}}]): {why}",
                truncate_for_error(&shown)
            ),
        }
    }
}

fn judgements_from_json(value: &Value) -> std::result::Result<Judgements, String> {
    let mut grades = HashMap::new();
    match value {
        Value::Object(map) => {
            for (id, g) in map {
                if let Some(g) = grade(id, g)? {
                    grades.insert(id.clone(), g);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                let Value::Object(fields) = item else {
                    return Err(format!("{item} is not an object with id and relevance"));
                };
                let id = match fields.get("id") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
                    _ => return Err(format!("{item} has no string id")),
                };
                let Some(g) = grade(&id, fields.get("relevance").unwrap_or(&Value::Null))? else {
                    continue;
                };
                if grades.insert(id.clone(), g).is_some() {
                    return Err(format!("document {id:?} is judged twice"));
                }
            }
        }
        other => return Err(format!("{other} is neither an object nor a list")),
    }
    Ok(Judgements::new(grades))
}

/// An integer grade; NULL is no judgement.
fn grade(id: &str, g: &Value) -> std::result::Result<Option<i64>, String> {
    match g {
        Value::Null => Ok(None),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                return Ok(Some(i));
            }
            match n.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(Some(f as i64)),
                _ => Err(format!("the grade of {id:?} is {n}, not an integer")),
            }
        }
        other => Err(format!("the grade of {id:?} is {other}, not an integer")),
    }
}
