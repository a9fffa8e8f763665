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
    ///
    /// One pass over `text`: each character is lowered and fed to `Cutter`, which drops
    /// ASCII punctuation, splits on whitespace and cuts out articles as it goes. ASCII
    /// bytes are handled inline; any other character is lowered on its own by
    /// [`pystr::lower_each`], which is exact because CPython's `str.lower()` only looks at
    /// the neighbours of a capital sigma (final sigma). A text with a capital sigma is
    /// lowered as a whole instead (rare).
    pub fn tokenize(&mut self, text: &str) {
        self.buf.clear();
        self.spans.clear();
        self.buf.reserve(text.len());
        let mut cut = Cutter::new(&mut self.buf, &mut self.spans);
        if cut.feed_text(text) {
            cut.finish();
        } else {
            self.tokenize_lowered(text);
        }
    }

    /// [`Self::tokenize`] with `text` lowered as a whole by [`pystr::lower_each`].
    fn tokenize_lowered(&mut self, text: &str) {
        self.buf.clear();
        self.spans.clear();
        let mut cut = Cutter::new(&mut self.buf, &mut self.spans);
        pystr::lower_each(text, |c| cut.feed(c));
        cut.finish();
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

    /// The bytes of the `i`-th token.
    #[inline]
    pub fn bytes(&self, i: usize) -> &[u8] {
        &self.buf.as_bytes()[self.spans[i].clone()]
    }

    /// The bytes of each token, in order.
    pub fn iter_bytes(&self) -> impl Iterator<Item = &[u8]> {
        self.spans.iter().map(|r| &self.buf.as_bytes()[r.clone()])
    }
}

/// No position (for [`Cutter`]'s open token and word run).
const NONE: usize = usize::MAX;

/// How [`Cutter`] treats an ASCII byte of the input (before lowering).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ascii {
    /// `string.punctuation`: dropped before anything else, so "t.he" is "the".
    Punct,
    /// `[A-Za-z0-9]`: part of a word run (after `_` is gone, the only ASCII word chars).
    Alnum,
    /// `str.isspace()`.
    Space,
    /// Anything else (controls): part of a token, not a word character.
    Other,
}

const ASCII_CLASS: [Ascii; 128] = {
    let mut t = [Ascii::Other; 128];
    let mut b = 0usize;
    while b < 128 {
        let c = b as u8;
        t[b] = if c.is_ascii_punctuation() {
            Ascii::Punct
        } else if c.is_ascii_alphanumeric() {
            Ascii::Alnum
        } else if pystr::ASCII_SPACE[b] {
            Ascii::Space
        } else {
            Ascii::Other
        };
        b += 1;
    }
    t
};

/// The streaming form of `re.sub(r"\b(a|an|the)\b", " ", text).split()` over the lowered
/// text with ASCII punctuation dropped: characters go in one by one, tokens come out as
/// byte ranges of `buf` (which receives the characters of the tokens and nothing else).
///
/// `\b(a|an|the)\b` only replaces whole word runs, and an article is ASCII, so a
/// candidate is a maximal `[a-z0-9]` run equal to an article whose neighbours are not
/// word characters. An ASCII neighbour is a separator by maximality (`_` is gone); only
/// a non-ASCII one needs the `[\p{L}\p{N}_]` test, and only when the run is an article.
struct Cutter<'a> {
    buf: &'a mut String,
    spans: &'a mut Vec<Range<usize>>,
    /// Start of the open token, or [`NONE`].
    token: usize,
    /// Start of the open `[a-z0-9]` run, or [`NONE`].
    run: usize,
    /// The last character fed that is not in a run (whitespace included); ' ' at the
    /// start. While a run is open it is the character just before the run.
    last: char,
}

impl<'a> Cutter<'a> {
    fn new(buf: &'a mut String, spans: &'a mut Vec<Range<usize>>) -> Self {
        Cutter {
            buf,
            spans,
            token: NONE,
            run: NONE,
            last: ' ',
        }
    }

    /// Feeds `text`, lowering as it goes; false (and stops) at a capital sigma, whose
    /// lowercase depends on its context.
    fn feed_text(&mut self, text: &str) -> bool {
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if b.is_ascii() {
                match ASCII_CLASS[usize::from(b)] {
                    Ascii::Punct => {}
                    Ascii::Alnum => {
                        // The whole stretch of `[A-Za-z0-9]` in one tight loop.
                        self.start_run();
                        while i < bytes.len() && bytes[i].is_ascii_alphanumeric() {
                            self.buf.push(char::from(bytes[i].to_ascii_lowercase()));
                            i += 1;
                        }
                        continue;
                    }
                    Ascii::Space => self.space(char::from(b)),
                    Ascii::Other => self.other(char::from(b)),
                }
                i += 1;
            } else {
                let c = text[i..].chars().next().expect("char boundary");
                if c == '\u{3A3}' {
                    return false;
                }
                let end = i + c.len_utf8();
                pystr::lower_each(&text[i..end], |l| self.feed(l));
                i = end;
            }
        }
        true
    }

    /// Feeds one character of the lowered text.
    #[inline]
    fn feed(&mut self, c: char) {
        if c.is_ascii() {
            match ASCII_CLASS[c as usize] {
                Ascii::Punct => {}
                Ascii::Alnum => self.alnum(c as u8),
                Ascii::Space => self.space(c),
                Ascii::Other => self.other(c),
            }
        } else if pystr::is_space(c) {
            self.space(c);
        } else {
            self.other(c);
        }
    }

    /// Opens a run (and a token) at the end of `buf` unless one is open.
    #[inline]
    fn start_run(&mut self) {
        if self.run == NONE {
            self.run = self.buf.len();
            if self.token == NONE {
                self.token = self.run;
            }
        }
    }

    #[inline]
    fn alnum(&mut self, b: u8) {
        self.start_run();
        self.buf.push(char::from(b));
    }

    #[inline]
    fn space(&mut self, c: char) {
        self.end_run(c);
        if self.token != NONE {
            self.spans.push(self.token..self.buf.len());
            self.token = NONE;
        }
        self.last = c;
    }

    #[inline]
    fn other(&mut self, c: char) {
        self.end_run(c);
        if self.token == NONE {
            self.token = self.buf.len();
        }
        self.buf.push(c);
        self.last = c;
    }

    /// Closes the open run (if any), which `next` follows (' ' at the end of the text),
    /// cutting it out of its token if it is an article.
    #[inline]
    fn end_run(&mut self, next: char) {
        if self.run == NONE {
            return;
        }
        let run = self.run;
        self.run = NONE;
        if matches!(&self.buf.as_bytes()[run..], b"a" | b"an" | b"the")
            && !is_word(self.last)
            && !is_word(next)
        {
            if run > self.token {
                self.spans.push(self.token..run);
            }
            self.token = NONE;
            self.buf.truncate(run);
        }
    }

    fn finish(mut self) {
        self.end_run(' ');
        if self.token != NONE {
            self.spans.push(self.token..self.buf.len());
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

    /// Lowering the whole text first, as the Python does.
    fn general(text: &str) -> Vec<String> {
        let mut t = QaTokens::default();
        t.tokenize_lowered(text);
        t.iter().map(str::to_owned).collect()
    }

    proptest! {
        /// Lowering byte by byte (ASCII) or char by char agrees with lowering the whole
        /// text first.
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

        /// The same on mixed text: cased letters whose lowercase is ASCII or longer,
        /// combining marks, non-ASCII word characters, whitespace and punctuation.
        #[test]
        fn per_char_lowering_equals_general(
            words in prop::collection::vec(
                prop::sample::select(vec!["a", "an", "THE", " ", ".", "\u{212a}", "\u{130}", "\u{131}", "é", "É", "\u{301}", "ß", "Ω", "\u{3a3}", "\u{3c2}", "日", "\u{660}", "\u{2160}", "\u{85}", "\u{a0}", "\u{2028}", "«", "\u{2014}", "\u{1f600}", "\u{a7cb}"]),
                0..30,
            )
        ) {
            let s = words.concat();
            prop_assert_eq!(qa_tokens(&s), general(&s));
        }
    }
}
