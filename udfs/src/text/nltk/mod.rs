//! NLTK's tokenizers as Azure AI Evaluation applies them before BLEU, GLEU and METEOR.

pub mod nist;
pub mod punkt;
pub mod word_tokenize;

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
    if text.is_ascii() {
        word_tokenize::word_tokenize_into(text, out);
    } else {
        nist::international_tokenize_into(text, out);
    }
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
        let mut start = 0;
        self.ends.iter().map(move |&end| {
            let t = &self.text[start..end];
            start = end;
            t
        })
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
