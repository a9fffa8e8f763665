//! NLTK's tokenizers as Azure AI Evaluation applies them before BLEU, GLEU and METEOR.

pub mod nist;
pub mod punkt;
pub mod word_tokenize;

use std::cell::RefCell;
use std::convert::Infallible;
use std::ops::Range;
use std::sync::Arc;

use datafusion::logical_expr::ColumnarValue;

use crate::common::StrArg;
use crate::common::recent::{Recent, RowRanges, memoized_argument};

/// Azure's `nltk_tokenize(text)`: `nltk.word_tokenize` (Punkt sentences, then the Treebank
/// word tokenizer) when the text is ASCII, otherwise NLTK's NIST `international_tokenize`.
/// The choice is per text, so a response and its ground truth may take different paths.
pub fn azure_tokens(text: &str) -> Vec<String> {
    let mut out = TokenList::default();
    azure_tokens_into(text, &mut out);
    out.iter().map(str::to_owned).collect()
}

/// [`azure_tokens`] into a reusable [`TokenList`] (cleared first).
pub fn azure_tokens_into(text: &str, out: &mut TokenList) {
    out.clear();
    push_azure_tokens(text, out);
}

/// Appends Azure's tokens of `text` to `out`.
fn push_azure_tokens(text: &str, out: &mut TokenList) {
    if text.is_ascii() {
        word_tokenize::word_tokenize_into(text, out);
    } else {
        nist::international_tokenize_into(text, out);
    }
}

/// Azure's tokens of every row of one text argument (a batch), back to back.
///
/// BLEU, GLEU and METEOR all start from these tokens, and the tokenizers are most of
/// BLEU's and GLEU's cost; so the three metrics of one query over the same columns
/// tokenize each text once ([`token_column`]), not once per metric.
#[derive(Debug)]
pub struct TokenColumn {
    tokens: TokenList,
    rows: RowRanges,
}

impl TokenColumn {
    /// The tokens of each row of `text` (`number_rows` rows; one for a literal).
    fn new(text: &StrArg<'_>, number_rows: usize) -> Self {
        let mut tokens = TokenList::default();
        // Room for about all of the batch's tokens at once: grown from empty, the buffers
        // of a batch were copied over and over as they doubled (1-2 % of BLEU's time).
        // The tokens hold the text less its spaces, plus a few quotes made two bytes;
        // a token is about five bytes.
        let rows = if text.is_scalar() { 1 } else { number_rows };
        let bytes: usize = (0..rows)
            .filter_map(|row| text.get(row))
            .map(str::len)
            .sum();
        tokens.reserve(bytes + bytes / 8, bytes / 5);
        let Ok(rows) = RowRanges::build::<Infallible>(text, number_rows, |t| {
            push_azure_tokens(t, &mut tokens);
            Ok(tokens.len())
        });
        #[cfg(test)]
        TOKENIZED_ROWS.with(|c| c.set(c.get() + rows.rows()));
        TokenColumn { tokens, rows }
    }

    /// The tokens of `row`, in order.
    pub fn row(&self, row: usize) -> impl Iterator<Item = &str> + '_ {
        self.tokens.range(self.rows.get(row))
    }

    /// The tokens of `row` as spans of [`Self::bytes`], in order.
    pub fn row_spans(&self, row: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.tokens.spans(self.rows.get(row))
    }

    /// The bytes of every row's tokens, back to back.
    pub fn bytes(&self) -> &[u8] {
        self.tokens.bytes()
    }

    /// The number of tokens of `row`.
    pub fn row_len(&self, row: usize) -> usize {
        self.rows.get(row).len()
    }
}

thread_local! {
    /// Token columns made lately on this thread (see [`crate::common::recent`]).
    static RECENT: RefCell<Recent<TokenColumn>> = const { RefCell::new(Recent::new()) };
}

#[cfg(test)]
thread_local! {
    /// Rows tokenized into columns on this thread, for the tests of the sharing.
    static TOKENIZED_ROWS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Azure's tokens of the text argument `value` (read through `text`) for `number_rows`
/// rows: made once per column array and shared with the query's other functions that
/// ask for the same array on this thread.
pub fn token_column(
    value: &ColumnarValue,
    text: &StrArg<'_>,
    number_rows: usize,
) -> Arc<TokenColumn> {
    memoized_argument(&RECENT, value, || TokenColumn::new(text, number_rows))
}

/// A token sequence stored as one string plus token end offsets, so that collecting
/// tokens allocates nothing per token (and nothing at all once the buffers have grown).
#[derive(Default, Debug, Clone)]
pub struct TokenList {
    text: String,
    ends: Vec<usize>,
}

impl TokenList {
    pub fn clear(&mut self) {
        self.text.clear();
        self.ends.clear();
    }

    /// Room for `bytes` more bytes of tokens and `tokens` more tokens.
    pub fn reserve(&mut self, bytes: usize, tokens: usize) {
        self.text.reserve(bytes);
        self.ends.reserve(tokens);
    }

    /// Appends one token.
    #[inline]
    pub fn push(&mut self, token: &str) {
        self.text.push_str(token);
        self.ends.push(self.text.len());
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The tokens in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        self.range(0..self.len())
    }

    /// The tokens' bytes, back to back.
    pub fn bytes(&self) -> &[u8] {
        self.text.as_bytes()
    }

    /// Where tokens number `tokens.start` up to `tokens.end` lie in [`Self::bytes`]:
    /// `(start, end)`, in order.
    pub fn spans(&self, tokens: Range<usize>) -> impl Iterator<Item = (usize, usize)> + '_ {
        let mut start = match tokens.start {
            0 => 0,
            i => self.ends[i - 1],
        };
        self.ends[tokens].iter().map(move |&end| {
            let span = (start, end);
            start = end;
            span
        })
    }

    /// Tokens number `tokens.start` up to `tokens.end`, in order.
    pub fn range(&self, tokens: Range<usize>) -> impl Iterator<Item = &str> + '_ {
        self.spans(tokens)
            .map(|(start, end)| &self.text[start..end])
    }
}

#[cfg(test)]
mod shared_columns {
    use std::sync::Arc;

    use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field};
    use datafusion::config::ConfigOptions;
    use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl};
    use datafusion::scalar::ScalarValue;

    use super::TOKENIZED_ROWS;
    use crate::text::bleu::{BleuFunc, bleu};
    use crate::text::gleu::{GleuFunc, gleu};
    use crate::text::meteor::{MeteorFunc, meteor};

    fn invoke(
        f: impl ScalarUDFImpl + 'static,
        args: Vec<ColumnarValue>,
        rows: usize,
    ) -> Vec<Option<f64>> {
        let field = Arc::new(Field::new("t", DataType::Utf8, true));
        let out = ScalarUDF::from(f)
            .invoke_with_args(ScalarFunctionArgs {
                arg_fields: vec![Arc::clone(&field); args.len()],
                args,
                number_rows: rows,
                return_field: Arc::new(Field::new("x", DataType::Float64, true)),
                config_options: Arc::new(ConfigOptions::default()),
            })
            .unwrap();
        let array = out.into_array(rows).unwrap();
        let values = array.as_primitive::<datafusion::arrow::datatypes::Float64Type>();
        (0..rows)
            .map(|i| values.is_valid(i).then(|| values.value(i)))
            .collect()
    }

    /// BLEU, GLEU and METEOR of one query tokenize each column once, and score exactly as
    /// each does alone, NULL rows and a literal reference included.
    #[test]
    fn the_nltk_metrics_of_one_query_tokenize_each_column_once() {
        let responses = [
            Some("The cat sat on the mat."),
            None,
            Some("Le chat est sur le tapis « vraiment »."),
            Some(""),
            Some("It's 3.5 o'clock, isn't it?"),
        ];
        let truths = [
            Some("The cat is on the mat."),
            Some("x"),
            Some("Le chat est sur le tapis."),
            Some("nothing"),
            None,
        ];
        let p: ArrayRef = Arc::new(StringArray::from(responses.to_vec()));
        let r: ArrayRef = Arc::new(StringArray::from(truths.to_vec()));
        let args = || {
            vec![
                ColumnarValue::Array(Arc::clone(&p)),
                ColumnarValue::Array(Arc::clone(&r)),
            ]
        };
        let before = TOKENIZED_ROWS.with(|n| n.get());
        let got = [
            invoke(BleuFunc::default(), args(), 5),
            invoke(GleuFunc::default(), args(), 5),
            invoke(MeteorFunc::default(), args(), 5),
        ];
        assert_eq!(
            TOKENIZED_ROWS.with(|n| n.get()) - before,
            10,
            "two columns of five rows, tokenized once for three metrics"
        );
        let alone = |f: fn(&str, &str) -> f64| -> Vec<Option<f64>> {
            responses
                .iter()
                .zip(&truths)
                .map(|(a, b)| Some(f((*a)?, (*b)?)))
                .collect()
        };
        assert_eq!(got[0], alone(bleu));
        assert_eq!(got[1], alone(gleu));
        assert_eq!(got[2], alone(|a, b| meteor(a, b, 0.9, 3.0, 0.5)));

        // A literal reference is tokenized once for the batch, and not remembered.
        let literal =
            ColumnarValue::Scalar(ScalarValue::Utf8(Some("The cat is on the mat.".into())));
        let before = TOKENIZED_ROWS.with(|n| n.get());
        let with_literal = invoke(
            BleuFunc::default(),
            vec![ColumnarValue::Array(Arc::clone(&p)), literal],
            5,
        );
        assert_eq!(
            TOKENIZED_ROWS.with(|n| n.get()) - before,
            1,
            "the column was shared, the literal is one row"
        );
        let expected: Vec<Option<f64>> = responses
            .iter()
            .map(|a| Some(bleu((*a)?, "The cat is on the mat.")))
            .collect();
        assert_eq!(with_literal, expected);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::azure_tokens;

    /// Every golden text's Azure tokens (`tokens_response`, `tokens_ground_truth`), whichever
    /// tokenizer the text takes.
    #[test]
    fn golden_tokens() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/golden/text_metrics.jsonl"
        );
        let text = std::fs::read_to_string(path).expect("golden file");
        let mut compared = 0;
        let mut failures = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let row: Value = serde_json::from_str(line).expect("JSON");
            for (text_key, tokens_key, tokenizer_key) in [
                ("response", "tokens_response", "tokenizer_response"),
                (
                    "ground_truth",
                    "tokens_ground_truth",
                    "tokenizer_ground_truth",
                ),
            ] {
                let input = row[text_key].as_str().expect("text");
                let expected: Vec<&str> = row[tokens_key]
                    .as_array()
                    .expect("tokens")
                    .iter()
                    .map(|t| t.as_str().expect("token"))
                    .collect();
                let tokenizer = row[tokenizer_key].as_str().expect("tokenizer");
                assert_eq!(
                    tokenizer,
                    if input.is_ascii() {
                        "word_tokenize"
                    } else {
                        "nist_international_tokenize"
                    },
                    "{}: tokenizer choice",
                    row["id"]
                );
                let got = azure_tokens(input);
                compared += 1;
                if got != expected {
                    failures.push(format!("{} {text_key}: {got:?} != {expected:?}", row["id"]));
                }
            }
        }
        assert!(compared > 0);
        assert!(
            failures.is_empty(),
            "{} token mismatches:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
}
