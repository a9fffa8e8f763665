//! `rouge_1`, `rouge_2`, `rouge_l`, `rouge_l_sum`: the unstemmed ROUGE F-measure under the
//! names Vertex AI uses. One struct serves the four names; each is its own function.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDFImpl, Signature,
};

use super::rouge::{RougeType, invoke_rouge_fmeasure, rouge};
use crate::common::docs::TEXT_METRICS;
use crate::common::invoke_text_pair;
use crate::common::signature::{Param, named};

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct RougeFMeasureFunc {
    name: &'static str,
    rouge_type: RougeType,
    signature: Signature,
    doc: Documentation,
}

impl RougeFMeasureFunc {
    fn new(name: &'static str, rouge_type: RougeType, what: &str, rouge_type_name: &str) -> Self {
        let doc = Documentation::builder(
            TEXT_METRICS,
            format!(
                "{what} F-measure of the response against the ground truth, without stemming \
                 (Vertex AI's {name}); the same as rouge(response, ground_truth, \
                 '{rouge_type_name}')['f1_score'], equal to rouge-score 0.1.2. NULL in either \
                 argument gives NULL."
            ),
            format!("{name}(response, ground_truth)"),
        )
        .with_argument("response", "The model's answer (string).")
        .with_argument("ground_truth", "The reference text (string).")
        .build();
        Self {
            name,
            rouge_type,
            signature: named(&[("response", Param::Text), ("ground_truth", Param::Text)]),
            doc,
        }
    }

    pub fn rouge_1() -> Self {
        Self::new(
            "rouge_1",
            RougeType::N(1),
            "ROUGE-1 (unigram overlap)",
            "rouge1",
        )
    }

    pub fn rouge_2() -> Self {
        Self::new(
            "rouge_2",
            RougeType::N(2),
            "ROUGE-2 (bigram overlap)",
            "rouge2",
        )
    }

    pub fn rouge_l() -> Self {
        Self::new(
            "rouge_l",
            RougeType::L,
            "ROUGE-L (longest common subsequence)",
            "rougeL",
        )
    }

    pub fn rouge_l_sum() -> Self {
        Self::new(
            "rouge_l_sum",
            RougeType::LSum,
            "ROUGE-Lsum (union LCS over newline-separated lines)",
            "rougeLsum",
        )
    }
}

impl ScalarUDFImpl for RougeFMeasureFunc {
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
        let t = self.rouge_type;
        if t == RougeType::LSum {
            return invoke_text_pair(self.name, &args.args, args.number_rows, |r, g| {
                rouge(r, g, t, false).fmeasure
            });
        }
        invoke_rouge_fmeasure(self.name, &args.args, args.number_rows, t)
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&self.doc)
    }
}
