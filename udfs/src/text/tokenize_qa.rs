//! The SQuAD-style normalisation Azure's F1ScoreEvaluator applies before splitting:
//! lowercase, drop ASCII punctuation, blank out the articles "a", "an", "the", split on
//! whitespace.

use std::sync::LazyLock;

use regex::Regex;

use super::pystr;

/// Python's `re` word characters for `str` patterns: letters, numbers and `_`
/// (`str.isalnum()` per character). Rust's `\w` would also take combining marks, which
/// would hide the article in "a\u{301}" (NFD text), so the class is spelled out.
static WORD_RUN: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[\p{L}\p{N}_]+").expect("valid regex"));

/// Normalised tokens of `text`, as Azure's `normalize_text(text).split()`.
pub fn qa_tokens(text: &str) -> Vec<String> {
    // str.lower() of CPython 3.11 (Unicode 14), which a newer Rust differs from on a few letters.
    let lowered = pystr::lower(text);
    let without_punct: String = lowered
        .chars()
        .filter(|c| !c.is_ascii_punctuation())
        .collect();
    // re.sub(r"\b(a|an|the)\b", " ", text): a match is always a whole word run, so replacing
    // whole runs equal to an article is the same substitution.
    let mut out = String::with_capacity(without_punct.len());
    let mut last = 0;
    for m in WORD_RUN.find_iter(&without_punct) {
        if matches!(m.as_str(), "a" | "an" | "the") {
            out.push_str(&without_punct[last..m.start()]);
            out.push(' ');
            last = m.end();
        }
    }
    out.push_str(&without_punct[last..]);
    pystr::split_whitespace(&out).map(str::to_owned).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn articles_punctuation_and_case() {
        assert_eq!(
            qa_tokens("The cat, a DOG; an  ant!"),
            vec!["cat", "dog", "ant"]
        );
        // "another" and "theme" are words of their own, not articles.
        assert_eq!(qa_tokens("another theme"), vec!["another", "theme"]);
        // Punctuation goes first, so "the_end" becomes "theend".
        assert_eq!(qa_tokens("the_end"), vec!["theend"]);
        // A combining mark is not a word character for Python: the "a" is an article.
        assert_eq!(qa_tokens("a\u{301} b"), vec!["\u{301}", "b"]);
        // Non-ASCII punctuation stays.
        assert_eq!(qa_tokens("«a» b"), vec!["«", "»", "b"]);
    }
}
