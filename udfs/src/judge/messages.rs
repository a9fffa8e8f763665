//! Conversations: `parse_messages(text)`, and reading judge inputs of any Arrow type.
//!
//! A conversation is `List<Struct{role, content, context}>`, what the JSON-lines reader gives
//! for a `messages` array; `parse_messages` builds the same from a JSON-text column. Each
//! assistant turn is judged against the user turn before it and the turn's context.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, ListBuilder, StringBuilder, StructBuilder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::{DataFusionError, Result, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};
use serde_json::Value;

use crate::common::docs::JUDGE_METRICS;
use crate::common::signature::is_text;
use crate::common::{texts, truncate_for_error};

/// Whether `t` is a conversation: a list of structs with `role` and `content` fields.
pub fn is_conversation_type(t: &DataType) -> bool {
    match t {
        DataType::List(f) | DataType::LargeList(f) => match f.data_type() {
            DataType::Struct(fields) => {
                fields.find("role").is_some() && fields.find("content").is_some()
            }
            _ => false,
        },
        _ => false,
    }
}

/// One assistant turn of a conversation, with what it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// The user message before it.
    pub query: Option<String>,
    /// The assistant message's context, else the user message's.
    pub context: Option<String>,
    pub response: Option<String>,
}

/// The assistant turns of every row of a conversation column (NULL rows give `None`).
pub fn conversation_turns(array: &ArrayRef) -> Result<Vec<Option<Vec<Turn>>>> {
    let list = match array.data_type() {
        DataType::LargeList(f) => cast(array, &DataType::List(Arc::clone(f)))?,
        DataType::List(_) => Arc::clone(array),
        other => return exec_err!("a conversation must be a list of messages, not {other}"),
    };
    let list = list.as_list::<i32>();
    let messages = list.values().as_struct();
    let column = |name: &str| -> Result<Vec<Option<String>>> {
        match messages.column_by_name(name) {
            Some(c) => texts(c),
            None => Ok(vec![None; messages.len()]),
        }
    };
    let roles = column("role")?;
    let contents = column("content")?;
    let contexts = column("context")?;
    let offsets = list.value_offsets();
    let mut rows = Vec::with_capacity(list.len());
    for row in 0..list.len() {
        if list.is_null(row) {
            rows.push(None);
            continue;
        }
        let mut turns = Vec::new();
        let mut user: Option<usize> = None;
        for i in offsets[row] as usize..offsets[row + 1] as usize {
            if messages.is_null(i) {
                continue;
            }
            match roles[i].as_deref().map(str::to_ascii_lowercase).as_deref() {
                Some("user") => user = Some(i),
                Some("assistant") => turns.push(Turn {
                    query: user.and_then(|u| contents[u].clone()),
                    context: contexts[i]
                        .clone()
                        .or_else(|| user.and_then(|u| contexts[u].clone())),
                    response: contents[i].clone(),
                }),
                _ => {}
            }
        }
        rows.push(Some(turns));
    }
    Ok(rows)
}

// ---- parse_messages -----------------------------------------------------------------------

fn message_fields() -> Fields {
    Fields::from(vec![
        Field::new("role", DataType::Utf8, true),
        Field::new("content", DataType::Utf8, true),
        Field::new("context", DataType::Utf8, true),
    ])
}

/// `parse_messages(text)`: a JSON conversation as `List<Struct{role, content, context}>`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ParseMessagesFunc {
    signature: Signature,
}

impl Default for ParseMessagesFunc {
    fn default() -> Self {
        Self {
            signature: Signature::string(1, Volatility::Immutable),
        }
    }
}

static PARSE_MESSAGES_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        JUDGE_METRICS,
        "Parses a JSON conversation (an array of {role, content, context} objects, or an \
         object with a messages array) into List<Struct{role, content, context}>, the form \
         the conversation mode of groundedness, relevance, coherence, fluency and \
         retrieval_score takes. Content given as a list of parts keeps its text parts; a \
         context object is kept as JSON text. NULL gives NULL; malformed JSON is an error.",
        "parse_messages(text)",
    )
    .with_argument("text", "A JSON conversation.")
    .build()
});

impl ScalarUDFImpl for ParseMessagesFunc {
    fn name(&self) -> &str {
        "parse_messages"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        if arg_types.len() != 1 || !is_text(&arg_types[0]) {
            return plan_err!("parse_messages(text) takes one string, got {arg_types:?}");
        }
        Ok(DataType::List(Arc::new(Field::new(
            "item",
            DataType::Struct(message_fields()),
            true,
        ))))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let rows = texts(&arrays[0])?;
        let mut builder =
            ListBuilder::new(StructBuilder::from_fields(message_fields(), 0)).with_field(Arc::new(
                Field::new("item", DataType::Struct(message_fields()), true),
            ));
        for text in rows.iter().take(args.number_rows.max(rows.len())) {
            let Some(text) = text else {
                builder.append_null();
                continue;
            };
            let messages = parse_conversation(text).map_err(|why| {
                DataFusionError::Execution(format!(
                    "parse_messages: {why}: {}",
                    truncate_for_error(text)
                ))
            })?;
            let fields = builder.values();
            for m in &messages {
                for (i, v) in [&m.0, &m.1, &m.2].into_iter().enumerate() {
                    fields
                        .field_builder::<StringBuilder>(i)
                        .expect("three string fields")
                        .append_option(v.as_deref());
                }
                fields.append(true);
            }
            builder.append(true);
        }
        Ok(ColumnarValue::Array(Arc::new(builder.finish())))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&PARSE_MESSAGES_DOC)
    }
}

type Message = (Option<String>, Option<String>, Option<String>);

fn parse_conversation(text: &str) -> std::result::Result<Vec<Message>, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let list = match &value {
        Value::Array(items) => items,
        Value::Object(o) => match o.get("messages") {
            Some(Value::Array(items)) => items,
            _ => return Err("a JSON object without a messages array".into()),
        },
        _ => return Err("not a JSON array of messages".into()),
    };
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let Value::Object(o) = m else {
                return Err(format!("message {i} is not an object"));
            };
            let text = |v: Option<&Value>| -> Option<String> {
                match v? {
                    Value::Null => None,
                    Value::String(s) => Some(s.clone()),
                    Value::Array(parts)
                        if parts
                            .iter()
                            .all(|p| p.get("text").is_some_and(Value::is_string)) =>
                    {
                        Some(
                            parts
                                .iter()
                                .filter_map(|p| p.get("text").and_then(Value::as_str))
                                .collect::<Vec<_>>()
                                .join(""),
                        )
                    }
                    other => Some(other.to_string()),
                }
            };
            Ok((
                text(o.get("role")),
                text(o.get("content")),
                text(o.get("context")),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::StringArray;

    #[test]
    fn parses_conversations_and_finds_turns() {
        let text = r#"[{"role":"system","content":"Be brief."},
            {"role":"user","content":"Capital of France?"},
            {"role":"assistant","content":"Paris.","context":{"citations":[{"content":"Paris is the capital."}]}},
            {"role":"user","content":[{"type":"text","text":"And "},{"type":"text","text":"Spain?"}]},
            {"role":"assistant","content":"Madrid."}]"#;
        let input: ArrayRef = Arc::new(StringArray::from(vec![Some(text), None]));
        let f = ParseMessagesFunc::default();
        let out = f
            .invoke_with_args(ScalarFunctionArgs {
                args: vec![ColumnarValue::Array(input)],
                arg_fields: vec![Arc::new(Field::new("t", DataType::Utf8, true))],
                number_rows: 2,
                return_field: Arc::new(Field::new(
                    "r",
                    f.return_type(&[DataType::Utf8]).unwrap(),
                    true,
                )),
                config_options: Arc::new(Default::default()),
            })
            .unwrap();
        let ColumnarValue::Array(list) = out else {
            panic!()
        };
        assert!(is_conversation_type(list.data_type()));
        let turns = conversation_turns(&list).unwrap();
        assert_eq!(turns[1], None);
        let turns = turns[0].as_ref().unwrap();
        assert_eq!(turns.len(), 2);
        assert_eq!(turns[0].query.as_deref(), Some("Capital of France?"));
        assert_eq!(
            turns[0].context.as_deref(),
            Some(r#"{"citations":[{"content":"Paris is the capital."}]}"#)
        );
        assert_eq!(turns[1].query.as_deref(), Some("And Spain?"));
        assert_eq!(turns[1].context, None);
        assert_eq!(turns[1].response.as_deref(), Some("Madrid."));
    }

    #[test]
    fn bad_json_is_an_error_naming_the_function() {
        assert!(parse_conversation("[{\"role\": 1").is_err());
        assert!(parse_conversation("{\"x\": 1}").is_err());
        assert!(parse_conversation("[1]").is_err());
        assert_eq!(
            parse_conversation(r#"{"messages":[{"role":"user","content":"hi"}]}"#).unwrap(),
            vec![(Some("user".into()), Some("hi".into()), None)]
        );
    }
}
