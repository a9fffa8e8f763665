//! The SQuAD-style normalisation Azure's F1ScoreEvaluator applies before splitting:
//! lowercase, drop ASCII punctuation, blank out the articles "a", "an", "the", split on
//! whitespace.

use std::ops::Range;
use std::sync::LazyLock;

use regex::Regex;

use super::{pystr, swar};

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
    /// The normalised text the spans index (UTF-8: only whole characters are written).
    buf: Vec<u8>,
    spans: Vec<Range<usize>>,
    /// Positions in `buf` of its control and non-ASCII characters, ascending.
    mixed: Vec<usize>,
}

impl QaTokens {
    /// Replaces the contents with the tokens of `text`.
    ///
    /// Two passes without per-byte branches on ASCII text, instead of a state machine
    /// fed one character at a time (which profiles of `f1_score` showed as over half of
    /// a row):
    ///
    /// 1. Each byte is mapped through a table to its output: a lowered letter, `' '`
    ///    for any whitespace, nothing for punctuation. A non-ASCII character is lowered
    ///    on its own by [`pystr::lower_each`], which is exact because CPython's
    ///    `str.lower()` only looks at the neighbours of a capital sigma (final sigma); a
    ///    text with a capital sigma is lowered as a whole instead (rare).
    /// 2. 64 bytes at a time, a bit mask of the output's non-space bytes gives the
    ///    whitespace-separated pieces, visited one by one. What is left of the text is
    ///    `[a-z0-9]`, ASCII controls and non-ASCII characters; `\b(a|an|the)\b` only
    ///    cuts maximal `[a-z0-9]` runs, so a piece of `[a-z0-9]` alone (nearly all of
    ///    them) is dropped when it equals an article and kept whole otherwise, and only
    ///    a piece with a control or non-ASCII character needs its runs and their
    ///    neighbours looked at ([`split_piece`]).
    pub fn tokenize(&mut self, text: &str) {
        if !self.lower_and_filter(text) {
            self.tokenize_lowered(text);
            return;
        }
        self.spans.clear();
        let buf = &self.buf[..];
        let mut pieces = Pieces {
            buf,
            spans: &mut self.spans,
            mixed: &self.mixed,
        };
        let mut open = false;
        let mut start = 0;
        for (base, block) in (0..).step_by(64).zip(buf.chunks(64)) {
            let word = non_space_mask(block);
            // Bits where a byte differs in kind from the byte before it (the last byte
            // of the previous block, or a space before the text). The end of a short
            // last block is a change too when its last byte is a word byte.
            let mut changes = word ^ ((word << 1) | u64::from(open));
            while changes != 0 {
                let i = base + changes.trailing_zeros() as usize;
                changes &= changes - 1;
                if open {
                    pieces.push(start, i);
                } else {
                    start = i;
                }
                open = !open;
            }
        }
        if open {
            pieces.push(start, buf.len());
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

    /// Pass 1 of [`Self::tokenize`]: `buf` receives `text` lowered, without ASCII
    /// punctuation and with every whitespace character as `' '`; `mixed` the positions
    /// in `buf` of the control and non-ASCII characters left in it, in order. False
    /// (and `buf` unusable) when the text has a capital sigma.
    fn lower_and_filter(&mut self, text: &str) -> bool {
        let bytes = text.as_bytes();
        self.buf.clear();
        self.mixed.clear();
        // Room for the ASCII output, which is never longer than its input; a non-ASCII
        // character makes room for its own lowercase. So `buf` always has room for as
        // many bytes as are left to read, and the loops below write in bounds.
        self.buf.resize(bytes.len(), 0);
        let mut n = 0;
        let mut i = 0;
        loop {
            // A stretch of bytes that map on their own, in a loop of a few instructions
            // per byte over a local slice (through `self.buf` the compiler reloads the
            // vector's pointer and length at every byte).
            let out = &mut self.buf[..];
            // Eight bytes at a time while they are letters, digits and spaces (most of
            // a text), then byte by byte to the end of the eight that are not.
            while let Some(w) = bytes.get(i..i + 8) {
                let w = swar::word(w);
                let Some(lowered) = lower_plain_word(w) else {
                    break;
                };
                // In bounds: `buf` has room for as many bytes as are left to read.
                out[n..n + 8].copy_from_slice(&lowered.to_le_bytes());
                n += 8;
                i += 8;
            }
            let stop = bytes.len().min(i + 8);
            while let Some(&b) = bytes[..stop].get(i) {
                let e = BYTE_OUT[usize::from(b)];
                if e & MIXED != 0 {
                    break;
                }
                out[n] = e as u8;
                n += usize::from(e & KEEP != 0);
                i += 1;
            }
            if i == bytes.len() {
                break;
            }
            if i == stop {
                continue;
            }
            let b = bytes[i];
            if b.is_ascii() {
                // A control character: kept, part of a token, not a word character.
                self.mixed.push(n);
                self.buf[n] = b;
                n += 1;
                i += 1;
                continue;
            }
            let c = text[i..].chars().next().expect("char boundary");
            if c == '\u{3A3}' {
                return false;
            }
            let end = i + c.len_utf8();
            n = push_lowered(
                &mut self.buf,
                &mut self.mixed,
                n,
                &text[i..end],
                bytes.len() - end,
            );
            i = end;
        }
        self.buf.truncate(n);
        true
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.iter_bytes()
            .map(|t| std::str::from_utf8(t).expect("tokens are whole characters"))
    }

    /// The bytes of the `i`-th token.
    #[inline]
    pub fn bytes(&self, i: usize) -> &[u8] {
        &self.buf[self.spans[i].clone()]
    }

    /// The bytes of each token, in order.
    pub fn iter_bytes(&self) -> impl Iterator<Item = &[u8]> {
        self.spans.iter().map(|r| &self.buf[r.clone()])
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

/// [`BYTE_OUT`]: the entry's byte is written (it is not punctuation).
const KEEP: u16 = 1 << 8;
/// [`BYTE_OUT`]: the byte is not handled by the table (a control character that is not
/// whitespace, or part of a non-ASCII character).
const MIXED: u16 = 1 << 9;

/// Pass 1 of [`QaTokens::tokenize`] for each byte: the byte to write (the lowered letter
/// or digit, `' '` for whitespace) and the flags [`KEEP`] and [`MIXED`].
const BYTE_OUT: [u16; 256] = {
    let mut t = [MIXED; 256];
    let mut b = 0usize;
    while b < 128 {
        t[b] = match ASCII_CLASS[b] {
            Ascii::Punct => 0,
            Ascii::Alnum => (b as u8).to_ascii_lowercase() as u16 | KEEP,
            Ascii::Space => b' ' as u16 | KEEP,
            Ascii::Other => MIXED,
        };
        b += 1;
    }
    t
};

/// Writes the lowercase of the non-ASCII character `c` at `buf[n..]` (whitespace as
/// `' '`), noting the position of each non-ASCII character written in `mixed`; returns
/// the new end. Keeps room for `rest` more bytes after it. (A function of its own, not a
/// closure over `n`, so that pass 1's loop keeps `n` in a register.)
#[inline(never)]
fn push_lowered(
    buf: &mut Vec<u8>,
    mixed: &mut Vec<usize>,
    mut n: usize,
    c: &str,
    rest: usize,
) -> usize {
    pystr::lower_each(c, |l| {
        let mut utf8 = [0u8; 4];
        let l = if pystr::is_space(l) {
            " "
        } else {
            if !l.is_ascii() {
                mixed.push(n);
            }
            l.encode_utf8(&mut utf8)
        };
        let need = n + l.len() + rest;
        if buf.len() < need {
            buf.resize(need, 0);
        }
        buf[n..n + l.len()].copy_from_slice(l.as_bytes());
        n += l.len();
    });
    n
}

/// The eight bytes of `w` lowered, when each is an ASCII letter, digit or space (the
/// bytes [`BYTE_OUT`] maps to themselves or their lowercase, and keeps); `None` if any
/// is not.
#[inline]
fn lower_plain_word(w: u64) -> Option<u64> {
    if w & swar::HIGH != 0 {
        return None;
    }
    let letters = swar::letters(w);
    if letters | swar::digits(w) | swar::equal_to(w, b' ') != swar::HIGH {
        return None;
    }
    Some(swar::lowercase(w, letters))
}

/// Bit `k` set when `block[k]` is not `' '` (for blocks of at most 64 bytes), eight
/// bytes at a time (the per-byte loop compiled to about six instructions a byte).
#[inline]
fn non_space_mask(block: &[u8]) -> u64 {
    let mut mask = 0u64;
    let mut words = block.chunks_exact(8);
    for (k, w) in words.by_ref().enumerate() {
        mask |= swar::gather(swar::not_equal_to(swar::word(w), b' ')) << (8 * k);
    }
    let done = block.len() - words.remainder().len();
    for (k, &c) in (done..).zip(words.remainder()) {
        mask |= u64::from(c != b' ') << k;
    }
    mask
}

/// Pass 2 of [`QaTokens::tokenize`]: records the tokens of each whitespace-free piece
/// of the lowered, punctuation-free text, pieces in order.
struct Pieces<'a> {
    buf: &'a [u8],
    spans: &'a mut Vec<Range<usize>>,
    /// The positions of control and non-ASCII characters not yet passed.
    mixed: &'a [usize],
}

impl Pieces<'_> {
    /// The piece `buf[start..end]`: `[a-z0-9]` only (nearly always) is one token unless
    /// it is an article; one with a control or non-ASCII character goes to
    /// [`split_piece`].
    #[inline]
    fn push(&mut self, start: usize, end: usize) {
        while self.mixed.first().is_some_and(|&m| m < start) {
            self.mixed = &self.mixed[1..];
        }
        if self.mixed.first().is_some_and(|&m| m < end) {
            split_piece(self.buf, self.spans, start, end);
        } else if !is_article(self.buf, start, end) {
            self.spans.push(start..end);
        }
    }
}

/// Whether `buf[start..end]` is "a", "an" or "the". Token lengths follow no pattern a
/// processor can predict, so instead of a branch on the length (what `matches!` on the
/// slice compiles to) the first three bytes and the length form one key, compared with
/// the three articles' keys.
#[inline]
fn is_article(buf: &[u8], start: usize, end: usize) -> bool {
    const fn key(t: &[u8]) -> u32 {
        let mut k = (t.len() as u32) << 24;
        let mut i = 0;
        while i < t.len() {
            k |= (t[i] as u32) << (8 * i);
            i += 1;
        }
        k
    }
    const A: u32 = key(b"a");
    const AN: u32 = key(b"an");
    const THE: u32 = key(b"the");
    let len = end - start;
    let Some(&[b0, b1, b2]) = buf.get(start..start + 3) else {
        // Within three bytes of the end.
        return matches!(&buf[start..end], b"a" | b"an" | b"the");
    };
    let bytes = u32::from(b0) | (u32::from(b1) << 8) | (u32::from(b2) << 16);
    let k = (bytes & ((1u32 << (8 * len.min(3))) - 1)) | ((len.min(4) as u32) << 24);
    (k == A) | (k == AN) | (k == THE)
}

/// [`Pieces::push`] for a piece with a control or non-ASCII character: each maximal
/// `[a-z0-9]` run equal to an article whose neighbours in the piece are not word
/// characters (the piece's ends are whitespace) is cut out, the rest kept as tokens.
/// Runs are found on the bytes (no byte of a non-ASCII character is ASCII); the piece is
/// read as text, once, only when it has an article-shaped run.
#[cold]
fn split_piece(buf: &[u8], spans: &mut Vec<Range<usize>>, start: usize, end: usize) {
    let mut text = None;
    let mut token = start;
    let mut i = start;
    while i < end {
        if !buf[i].is_ascii_alphanumeric() {
            i += 1;
            continue;
        }
        let run = i;
        while i < end && buf[i].is_ascii_alphanumeric() {
            i += 1;
        }
        if !matches!(&buf[run..i], b"a" | b"an" | b"the") {
            continue;
        }
        let piece: &str = text.get_or_insert_with(|| {
            std::str::from_utf8(&buf[start..end]).expect("pieces are whole characters")
        });
        let before = piece[..run - start].chars().next_back().unwrap_or(' ');
        let after = piece[i - start..].chars().next().unwrap_or(' ');
        if !is_word(before) && !is_word(after) {
            if run > token {
                spans.push(token..run);
            }
            token = i;
        }
    }
    if end > token {
        spans.push(token..end);
    }
}

/// The general path of [`QaTokens::tokenize`], for a text lowered as a whole (one with a
/// capital sigma): the streaming form of `re.sub(r"\b(a|an|the)\b", " ", text).split()`
/// over the lowered text with ASCII punctuation dropped: characters go in one by one, tokens come out as
/// byte ranges of `buf` (which receives the characters of the tokens and nothing else).
///
/// `\b(a|an|the)\b` only replaces whole word runs, and an article is ASCII, so a
/// candidate is a maximal `[a-z0-9]` run equal to an article whose neighbours are not
/// word characters. An ASCII neighbour is a separator by maximality (`_` is gone); only
/// a non-ASCII one needs the `[\p{L}\p{N}_]` test, and only when the run is an article.
struct Cutter<'a> {
    buf: &'a mut Vec<u8>,
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
    fn new(buf: &'a mut Vec<u8>, spans: &'a mut Vec<Range<usize>>) -> Self {
        Cutter {
            buf,
            spans,
            token: NONE,
            run: NONE,
            last: ' ',
        }
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
        self.buf.push(b);
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
        let mut utf8 = [0u8; 4];
        self.buf
            .extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
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
        if matches!(&self.buf[run..], b"a" | b"an" | b"the")
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
    use crate::text::mutations::{Mutator, golden_texts};

    #[test]
    fn is_article_tests_the_whole_piece() {
        // Every piece of 1..=5 bytes over letters of the articles and others, at every
        // distance from the end of the buffer (the last three bytes are read otherwise).
        let letters = b"antheA0";
        let mut pieces: Vec<Vec<u8>> = vec![vec![]];
        for _ in 0..5 {
            let longer: Vec<Vec<u8>> = pieces
                .iter()
                .filter(|p| p.len() == pieces.last().map_or(0, Vec::len))
                .flat_map(|p| letters.iter().map(move |&c| [p.as_slice(), &[c]].concat()))
                .collect();
            pieces.extend(longer);
        }
        for piece in pieces.iter().filter(|p| !p.is_empty()) {
            for after in 0..4 {
                let mut buf = b"xx ".to_vec();
                buf.extend_from_slice(piece);
                buf.extend(std::iter::repeat_n(b'e', after));
                let want = matches!(piece.as_slice(), b"a" | b"an" | b"the");
                assert_eq!(is_article(&buf, 3, 3 + piece.len()), want, "{buf:?}");
            }
        }
    }

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

    #[test]
    fn word_masks_agree_with_bytewise_tests() {
        let bytes: Vec<u8> = (0u8..=255).collect();
        for (k, &b) in bytes.iter().enumerate() {
            for &other in &[b' ', b'a', b'Z', b'5', b'.', 0x80, 0x00] {
                let mut block = [other; 8];
                block[k % 8] = b;
                let want_mask: u64 = (0..8).map(|j| u64::from(block[j] != b' ') << j).sum();
                assert_eq!(non_space_mask(&block), want_mask, "{block:?}");
                let plain = block
                    .iter()
                    .all(|c| c.is_ascii_alphanumeric() || *c == b' ');
                let want = plain.then(|| u64::from_le_bytes(block.map(|c| c.to_ascii_lowercase())));
                assert_eq!(
                    lower_plain_word(u64::from_le_bytes(block)),
                    want,
                    "{block:?}"
                );
            }
        }
        // A short block: only its own bytes count.
        assert_eq!(non_space_mask(b"ab c"), 0b1011);
    }

    /// Every golden text and 16 mutations of each (articles, case, punctuation,
    /// controls, non-ASCII letters, marks and spaces inserted at random places): the
    /// two-pass tokenizer gives the tokens of the character-at-a-time one.
    #[test]
    fn two_passes_equal_general_on_mutated_golden_texts() {
        const PIECES: &[&str] = &[
            "a", "The", " an ", "A.", ".", "_", "'", "\u{301}", "é", "É", "\u{a0}", "\u{130}",
            "\u{212a}", "日", "\u{1}", "\t", "\u{1f}", "\u{3a3}", "\u{2014}", "ANOTHER",
        ];
        let mut mutator = Mutator::new(0x2545_F491_4F6C_DD1D);
        let mut checked = 0;
        for t in golden_texts() {
            assert_eq!(qa_tokens(&t), general(&t), "{t:?}");
            for _ in 0..16 {
                let m = mutator.mutate(&t, PIECES, 3);
                assert_eq!(qa_tokens(&m), general(&m), "{m:?}");
                checked += 1;
            }
        }
        assert!(checked > 10_000, "{checked}");
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

        /// The two-pass path for ASCII text without controls (taken, checked first)
        /// agrees with the character-at-a-time one, across 64-byte blocks, runs of
        /// whitespace of every kind and articles at every position.
        #[test]
        fn ascii_two_pass_equals_general(s in "[ -~\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f]{0,300}") {
            let mut t = QaTokens::default();
            prop_assert!(t.lower_and_filter(&s) && t.mixed.is_empty());
            prop_assert_eq!(qa_tokens(&s), general(&s));
        }

        #[test]
        fn ascii_two_pass_equals_general_on_words(
            words in prop::collection::vec(
                prop::sample::select(vec!["a", "an", "the", "A", "THE", "An", "x", "an_", "-", ".", "a.", "t.he", " ", "  ", "\t", "\x1f", "\n", "3", "the3", "abcdefghijklmnopqrstuvwxyz0123456789"]),
                0..80,
            )
        ) {
            let s = words.concat();
            let mut t = QaTokens::default();
            prop_assert!(t.lower_and_filter(&s) && t.mixed.is_empty());
            prop_assert_eq!(qa_tokens(&s), general(&s));
        }

        /// The same on mixed text: cased letters whose lowercase is ASCII or longer,
        /// combining marks, non-ASCII word characters, whitespace and punctuation.
        #[test]
        fn per_char_lowering_equals_general(
            words in prop::collection::vec(
                prop::sample::select(vec!["a", "an", "THE", " ", ".", "\u{212a}", "\u{130}", "\u{131}", "é", "É", "\u{301}", "ß", "Ω", "\u{3a3}", "\u{3c2}", "日", "\u{660}", "\u{2160}", "\u{85}", "\u{a0}", "\u{2028}", "«", "\u{2014}", "\u{1f600}", "\u{a7cb}"]),
                0..60,
            )
        ) {
            let s = words.concat();
            prop_assert_eq!(qa_tokens(&s), general(&s));
        }
    }
}
