//! `exact_match(response, ground_truth)`: 1.0 when the two strings are identical.

use std::sync::LazyLock;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDFImpl, Signature,
};

use crate::common::docs::TEXT_METRICS;
use crate::common::invoke_text_pair;
use crate::common::signature::{Param, named};

static DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        TEXT_METRICS,
        "Exact match: 1.0 when the response equals the ground truth character for character, \
         else 0.0. No normalisation (case, whitespace and Unicode form all count), as Vertex AI's \
         exact_match. NULL in either argument gives NULL.",
        "exact_match(response, ground_truth)",
    )
    .with_sql_example("SELECT exact_match('Paris', 'Paris');  -- 1.0")
    .with_argument("response", "The model's answer (string).")
    .with_argument("ground_truth", "The expected answer (string).")
    .build()
});

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ExactMatchFunc {
    signature: Signature,
}

impl Default for ExactMatchFunc {
    fn default() -> Self {
        Self {
            signature: named(&[("response", Param::Text), ("ground_truth", Param::Text)]),
        }
    }
}

impl ScalarUDFImpl for ExactMatchFunc {
    fn name(&self) -> &str {
        "exact_match"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        invoke_text_pair(self.name(), &args.args, args.number_rows, exact_match)
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&DOC)
    }
}

/// 1.0 iff `response == ground_truth` byte for byte.
pub fn exact_match(response: &str, ground_truth: &str) -> f64 {
    if response == ground_truth { 1.0 } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_normalisation() {
        assert_eq!(exact_match("Paris", "Paris"), 1.0);
        assert_eq!(exact_match("Paris", "paris"), 0.0);
        assert_eq!(exact_match("Paris ", "Paris"), 0.0);
        assert_eq!(exact_match("", ""), 1.0);
        // NFC "é" and NFD "e\u{301}" look alike but differ.
        assert_eq!(exact_match("\u{e9}", "e\u{301}"), 0.0);
    }
}
