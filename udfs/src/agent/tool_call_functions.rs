//! The tool-call metrics as SQL functions: `tool_call_valid(predicted)` and
//! `tool_name_match`, `tool_parameter_key_match`, `tool_parameter_kv_match`
//! `(predicted, reference)`, over a model response as JSON text
//! `{"content": "...", "tool_calls": [{"name": ..., "arguments": {...}}]}`. One struct serves
//! the four names (kernels in [`super::tool_call`]); each is registered as its own function.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDFImpl, Signature,
};

use super::tool_call::{parse_tool_calls, score_parsed, tool_call_valid};
use crate::common::docs::AGENT_METRICS;
use crate::common::signature::{Param, named};
use crate::common::{float64_rows, prepare_args, truncate_for_error};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Valid,
    NameMatch,
    KeyMatch,
    KvMatch,
}

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ToolCallFunc {
    name: &'static str,
    kind: Kind,
    signature: Signature,
    doc: Documentation,
}

const FORM: &str = "A response is JSON text {\"content\": \"...\", \"tool_calls\": [{\"name\": \
    ..., \"arguments\": {...}}]}; calls are compared by position over the reference's calls \
    (a missing predicted call scores 0, extra ones are ignored), and each score is the mean \
    over the reference's calls. An invalid prediction scores 0.0 (tool_call_valid measures \
    that); an invalid reference is an error. NULL in either argument gives NULL.";

impl ToolCallFunc {
    fn pair(name: &'static str, kind: Kind, what: &str) -> Self {
        let doc = Documentation::builder(
            AGENT_METRICS,
            format!("{what} {FORM}"),
            format!("{name}(predicted, reference)"),
        )
        .with_argument(
            "predicted",
            "The model's response with its tool calls (JSON text).",
        )
        .with_argument(
            "reference",
            "The expected response with its tool calls (JSON text).",
        )
        .build();
        Self {
            name,
            kind,
            signature: named(&[("predicted", Param::Text), ("reference", Param::Text)]),
            doc,
        }
    }

    pub fn valid() -> Self {
        let name = "tool_call_valid";
        let doc = Documentation::builder(
            AGENT_METRICS,
            "1.0 when the response is a well-formed tool-call response - a JSON object whose \
             tool_calls is a non-empty array of {\"name\": string, \"arguments\": object} \
             (content optional) - else 0.0 (Vertex AI tool_call_valid). Never an error. NULL \
             gives NULL.",
            format!("{name}(predicted)"),
        )
        .with_argument(
            "predicted",
            "The model's response with its tool calls (JSON text).",
        )
        .build();
        Self {
            name,
            kind: Kind::Valid,
            signature: named(&[("predicted", Param::Text)]),
            doc,
        }
    }

    pub fn name_match() -> Self {
        Self::pair(
            "tool_name_match",
            Kind::NameMatch,
            "The share of reference tool calls whose name the prediction matches at the same \
             position (Vertex AI tool_name_match).",
        )
    }

    pub fn parameter_key_match() -> Self {
        Self::pair(
            "tool_parameter_key_match",
            Kind::KeyMatch,
            "The share of reference tool calls whose argument names the prediction matches \
             (Vertex AI tool_parameter_key_match; for each call, the share of the reference's \
             argument names present in the prediction, averaged over calls).",
        )
    }

    pub fn parameter_kv_match() -> Self {
        Self::pair(
            "tool_parameter_kv_match",
            Kind::KvMatch,
            "The share of reference tool calls whose arguments the prediction matches name and \
             value (Vertex AI tool_parameter_kv_match; values compared as JSON, key order \
             ignored, 1 and 1.0 different).",
        )
    }
}

impl ScalarUDFImpl for ToolCallFunc {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let name = self.name;
        let prepared = prepare_args(&args.args)?;
        let predicted = prepared.str(name, 0)?;
        if self.kind == Kind::Valid {
            return float64_rows(prepared.all_scalar(), args.number_rows, |row| {
                Ok(predicted.get(row).map(tool_call_valid))
            });
        }
        let reference = prepared.str(name, 1)?;
        float64_rows(prepared.all_scalar(), args.number_rows, |row| {
            let (Some(p), Some(r)) = (predicted.get(row), reference.get(row)) else {
                return Ok(None);
            };
            let reference = match parse_tool_calls(r) {
                Ok(calls) => calls,
                Err(e) => {
                    return exec_err!(
                        "{name}: reference {} is not a tool-call response: {e}",
                        truncate_for_error(r)
                    );
                }
            };
            let predicted = parse_tool_calls(p).ok();
            let scores = score_parsed(predicted.as_deref(), &reference);
            Ok(Some(match self.kind {
                Kind::NameMatch => scores.name_match,
                Kind::KeyMatch => scores.parameter_key_match,
                Kind::KvMatch => scores.parameter_kv_match,
                Kind::Valid => unreachable!("handled above"),
            }))
        })
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&self.doc)
    }
}
