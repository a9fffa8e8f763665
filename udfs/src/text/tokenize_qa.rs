//! The SQuAD-style normalisation Azure's F1ScoreEvaluator applies before splitting:
//! lowercase, drop ASCII punctuation, blank out the articles "a", "an", "the", split on
//! whitespace.

use std::ops::Range;
use std::sync::LazyLock;

use regex::Regex;

use super::pystr;

/// Python's `re` word characters for `str` patterns: letters, numbers and `_`
/// (`str.isalnum()` per character). Rust's `\w` would also take combining marks, which
/// would hide the article in "a\u{301}" (NFD text), so the class is spelled out.
static WORD_CHAR: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[\p{L}\p{N}_]$").expect("valid regex"));

/// Normalised tokens of `text`, as Azure's `normalize_text(text).split()`.
pub fn qa_tokens(text: &str) -> Vec<String> {
    let mut tokens = QaTokens::default();
    tokens.tokenize(text);
    tokens.iter().map(str::to_owned).collect()
}

/// Reusable token buffer: the normalised text and the byte ranges of its tokens.
#[derive(Debug, Default)]
pub struct QaTokens {
    buf: String,
    spans: Vec<Range<usize>>,
}

impl QaTokens {
    /// Replaces the contents with the tokens of `text`.
    pub fn tokenize(&mut self, text: &str) {
        self.buf.clear();
        self.spans.clear();
        if text.is_ascii() {
            self.tokenize_ascii(text);
        } else {
            self.tokenize_general(text);
        }
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.spans.iter().map(|r| &self.buf[r.clone()])
    }

    /// One pass over ASCII text, no regex: the common case, several times faster. After
    /// lowercasing and dropping punctuation (which includes `_`), a word character is
    /// `[a-z0-9]`; a whitespace token splits wherever a whole word run is an article.
    fn tokenize_ascii(&mut self, text: &str) {
        self.buf.extend(
            text.bytes()
                .filter(|b| !b.is_ascii_punctuation())
                .map(|b| char::from(b.to_ascii_lowercase())),
        );
        let bytes = self.buf.as_bytes();
        let n = bytes.len();
        let mut i = 0;
        while i < n {
            if pystr::is_space(char::from(bytes[i])) {
                i += 1;
                continue;
            }
            // A whitespace-delimited token [i, end), cut around article runs.
            let mut piece_start = i;
            while i < n && !pystr::is_space(char::from(bytes[i])) {
                if bytes[i].is_ascii_alphanumeric() {
                    let run_start = i;
                    while i < n && bytes[i].is_ascii_alphanumeric() {
                        i += 1;
                    }
                    if matches!(&bytes[run_start..i], b"a" | b"an" | b"the") {
                        if run_start > piece_start {
                            self.spans.push(piece_start..run_start);
                        }
                        piece_start = i;
                    }
                } else {
                    i += 1;
                }
            }
            if i > piece_start {
                self.spans.push(piece_start..i);
            }
        }
    }

    /// Any text, in one pass over the lowered text: CPython 3.11's `str.lower()` (Unicode
    /// 14, which a newer Rust differs from on a few letters) minus ASCII punctuation goes
    /// into the buffer, then whitespace tokens are cut around article runs.
    ///
    /// `re.sub(r"\b(a|an|the)\b", " ", text)` only replaces whole word runs, and an
    /// article is ASCII, so a candidate is a maximal `[a-z0-9]` run equal to an article
    /// whose neighbours are not word characters; only a non-ASCII neighbour needs the
    /// `[\p{L}\p{N}_]` test (an ASCII one is a separator by maximality, as `_` is gone).
    fn tokenize_general(&mut self, text: &str) {
        let buf = &mut self.buf;
        pystr::lower_each(text, |c| {
            if !c.is_ascii_punctuation() {
                buf.push(c);
            }
        });
        let s = self.buf.as_str();
        let bytes = s.as_bytes();
        let n = bytes.len();
        let mut piece_start: Option<usize> = None;
        let mut i = 0;
        while i < n {
            let b = bytes[i];
            if b.is_ascii_alphanumeric() {
                let run_start = i;
                while i < n && bytes[i].is_ascii_alphanumeric() {
                    i += 1;
                }
                let start = *piece_start.get_or_insert(run_start);
                if matches!(&bytes[run_start..i], b"a" | b"an" | b"the")
                    && !s[..run_start].chars().next_back().is_some_and(is_word)
                    && !s[i..].chars().next().is_some_and(is_word)
                {
                    if run_start > start {
                        self.spans.push(start..run_start);
                    }
                    piece_start = None;
                }
                continue;
            }
            let (c, len) = if b.is_ascii() {
                (char::from(b), 1)
            } else {
                let c = s[i..].chars().next().expect("char boundary");
                (c, c.len_utf8())
            };
            if pystr::is_space(c) {
                if let Some(start) = piece_start.take() {
                    self.spans.push(start..i);
                }
            } else {
                piece_start.get_or_insert(i);
            }
            i += len;
        }
        if let Some(start) = piece_start {
            self.spans.push(start..n);
        }
    }
}

/// Whether `c` is a word character of Python's `re` (`[\p{L}\p{N}_]`). Called only next
/// to an article-shaped run, so the regex cost is rare.
fn is_word(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_alphanumeric() || c == '_'
    } else {
        let mut tmp = [0u8; 4];
        WORD_CHAR.is_match(c.encode_utf8(&mut tmp))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

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
        // A control character is no word character: the "a" in "a\0b" is an article.
        assert_eq!(qa_tokens("a\u{0}b"), vec!["\u{0}b"]);
        // A combining mark is not a word character for Python: the "a" is an article.
        assert_eq!(qa_tokens("a\u{301} b"), vec!["\u{301}", "b"]);
        // Non-ASCII punctuation stays.
        assert_eq!(qa_tokens("«a» b"), vec!["«", "»", "b"]);
    }

    fn general(text: &str) -> Vec<String> {
        let mut t = QaTokens::default();
        t.tokenize_general(text);
        t.iter().map(str::to_owned).collect()
    }

    proptest! {
        /// The ASCII fast path and the step-by-step path agree on every ASCII text.
        #[test]
        fn ascii_fast_path_equals_general(s in "[ -~\\t\\n\\r\\x00-\\x1f\\x7f]{0,80}") {
            prop_assert_eq!(qa_tokens(&s), general(&s));
        }

        #[test]
        fn ascii_fast_path_equals_general_on_words(
            words in prop::collection::vec(
                prop::sample::select(vec!["a", "an", "the", "A", "The", "x", "_", "-", ".", "a.", "an_", "\u{0}", "\u{1c}", " ", "\t", "3", "the3"]),
                0..30,
            )
        ) {
            let s = words.concat();
            prop_assert_eq!(qa_tokens(&s), general(&s));
        }
    }
}
