//! rouge-score's default tokenizer (`rouge_score.tokenize.tokenize`): lower-case, every
//! run of characters outside `[a-z0-9]` a separator, NLTK's Porter stemmer on tokens of
//! more than three characters when asked; and the token buffers the ROUGE kernels work on
//! (a column's tokens in one buffer, interned to dense ids).

use ahash::AHashMap;

use super::porter::stem_into;
use super::swar;

/// `rouge_score`'s token byte for each ASCII byte after `lower()`: the byte itself when
/// it is in `[a-z0-9]`, 0 when it separates tokens.
pub(super) const ROUGE_ASCII: [u8; 128] = {
    let mut t = [0u8; 128];
    let mut b = 0;
    while b < 128 {
        let l = (b as u8).to_ascii_lowercase();
        if l.is_ascii_lowercase() || l.is_ascii_digit() {
            t[b] = l;
        }
        b += 1;
    }
    t
};

/// The ASCII letter in the lowercase of the non-ASCII character encoded by `utf8`, if
/// any. Only two characters have one: U+0130 LATIN CAPITAL LETTER I WITH DOT ABOVE
/// (lowercase "i\u{307}") and U+212A KELVIN SIGN ("k"); a test checks every character.
#[inline]
pub(super) fn ascii_in_lowercase(utf8: &[u8]) -> Option<u8> {
    match utf8 {
        [0xC4, 0xB0] => Some(b'i'),
        [0xE2, 0x84, 0xAA] => Some(b'k'),
        _ => None,
    }
}

/// Tokens of one or more texts, stored back to back in one string (with the separators
/// of texts that take [`TokenBuf::push_plain_unstemmed`]); `spans` locate the tokens.
#[derive(Default)]
pub(super) struct TokenBuf {
    pub(super) text: String,
    pub(super) spans: Vec<(u32, u32)>,
    /// Scratch for the token being assembled and for the stemmer.
    pub(super) raw: String,
    /// Scratch for the tokens of one text before they join `text`
    /// ([`TokenBuf::push_any_unstemmed`]).
    pub(super) bytes: Vec<u8>,
    pub(super) stem_scratch: Vec<char>,
}

impl TokenBuf {
    pub(super) fn token(&self, i: usize) -> &str {
        let (a, b) = self.spans[i];
        &self.text[a as usize..b as usize]
    }

    /// Appends the tokens of `text` as `rouge_score.tokenize.tokenize` does:
    /// `text.lower()`, every run of characters outside `[a-z0-9]` becomes a
    /// separator, tokens longer than 3 characters are Porter-stemmed when
    /// `use_stemmer`, and only non-empty `[a-z0-9]+` tokens are kept.
    pub(super) fn push_text(&mut self, text: &str, use_stemmer: bool) {
        if !use_stemmer {
            self.push_text_unstemmed(text);
            return;
        }
        for c in text.chars() {
            if c.is_ascii() {
                self.push_char(c.to_ascii_lowercase(), use_stemmer);
            } else {
                // Only the ASCII part of a lowercase mapping can survive the
                // `[^a-z0-9]` filter ('İ' -> "i\u{307}", Kelvin sign -> 'k');
                // final-sigma context and Unicode-version differences only
                // affect non-ASCII results, so per-character mapping is exact.
                for l in c.to_lowercase() {
                    self.push_char(l, use_stemmer);
                }
            }
        }
        self.flush(use_stemmer);
    }

    /// [`Self::push_text`] without the stemmer: every `[a-z0-9]+` run is a token as is.
    pub(super) fn push_text_unstemmed(&mut self, text: &str) {
        // Only U+0130 and U+212A put an ASCII letter into a token from outside ASCII.
        // The mask path keeps the whole text, so its offsets must fit the `u32` spans
        // (a text of over 4 GiB would otherwise be cut off a character boundary).
        let plain = text.is_ascii() || !(text.contains('\u{130}') || text.contains('\u{212A}'));
        if plain && self.text.len() + text.len() <= u32::MAX as usize {
            self.push_plain_unstemmed(text);
        } else {
            self.push_any_unstemmed(text);
        }
    }

    /// [`Self::push_text_unstemmed`] for any text.
    ///
    /// The tokens are written as bytes into room made for them up front, with a table
    /// lookup per ASCII byte (pushing each byte onto the `String` checked the capacity
    /// every time). A non-ASCII character is never decoded: only two have an ASCII letter
    /// in their lowercase ([`ascii_in_lowercase`]), so any other is a separator and its
    /// bytes are stepped over. Room: a token byte never takes more than one input byte
    /// (those two characters give one letter for two or three bytes).
    pub(super) fn push_any_unstemmed(&mut self, text: &str) {
        // Offsets in `out` are relative to the end of `text` so far.
        let base = self.text.len();
        let mut out = std::mem::take(&mut self.bytes);
        out.clear();
        out.resize(text.len(), 0);
        let (mut n, mut start) = (0, 0);
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if b < 0x80 {
                let l = ROUGE_ASCII[usize::from(b)];
                if l != 0 {
                    out[n] = l;
                    n += 1;
                } else {
                    self.end_token(base + start, base + n);
                    start = n;
                }
                i += 1;
            } else {
                // `i` is at the first byte of a character (whole characters are stepped).
                let len = match b {
                    ..0xE0 => 2,
                    0xE0..0xF0 => 3,
                    _ => 4,
                };
                let end = (i + len).min(bytes.len());
                match ascii_in_lowercase(&bytes[i..end]) {
                    // "i\u{307}": the letter continues the token, the mark ends it.
                    Some(b'i') => {
                        out[n] = b'i';
                        n += 1;
                        self.end_token(base + start, base + n);
                        start = n;
                    }
                    Some(l) => {
                        out[n] = l;
                        n += 1;
                    }
                    None => {
                        self.end_token(base + start, base + n);
                        start = n;
                    }
                }
                i = end;
            }
        }
        self.end_token(base + start, base + n);
        // Only ASCII bytes were written; checking just these keeps a column's worth of
        // texts (see `RougeColumn`) linear.
        self.text
            .push_str(std::str::from_utf8(&out[..n]).expect("ASCII tokens"));
        self.bytes = out;
    }

    /// [`Self::push_text_unstemmed`] for a `text` without U+0130 and U+212A (so every
    /// non-ASCII character is a separator), without a branch per byte.
    ///
    /// The whole text is appended with its ASCII lowercased, separators included, and
    /// the tokens are the runs of `[a-z0-9]` in it: per block of 64 bytes, a mask of the
    /// token bytes (eight bytes at a time, [`swar`]; bytes of non-ASCII characters are
    /// never token bytes) and its edges, where a bit differs from the one before it.
    /// Only the edges are visited. Deciding token or separator byte by byte was a
    /// branch the processor mispredicted at nearly every token boundary.
    pub(super) fn push_plain_unstemmed(&mut self, text: &str) {
        let base = self.text.len();
        self.text.push_str(text);
        self.text[base..].make_ascii_lowercase();
        let (bytes, spans) = (&self.text.as_bytes()[base..], &mut self.spans);
        let (mut in_token, mut start, mut carry) = (false, 0, 0u64);
        for (at, block) in (0..).step_by(64).zip(bytes.chunks(64)) {
            let mut mask = 0u64;
            // The swar tests take bytes below 0x80: they see each byte's low seven bits,
            // and a byte with its high bit set is then ruled out.
            let token_bytes = |w: u64| {
                let low = w & !swar::HIGH;
                (swar::letters(low) | swar::digits(low)) & !w & swar::HIGH
            };
            let mut words = block.chunks_exact(8);
            for (k, w8) in words.by_ref().enumerate() {
                mask |= swar::gather(token_bytes(swar::word(w8))) << (8 * k);
            }
            let rest = words.remainder();
            if !rest.is_empty() {
                let mut w = [0u8; 8]; // zero bytes are separators
                w[..rest.len()].copy_from_slice(rest);
                let k = block.len() / 8;
                mask |= swar::gather(token_bytes(u64::from_le_bytes(w))) << (8 * k);
            }
            // A token starts where a token byte follows a separator (or the text's
            // start) and ends where a separator follows a token byte; past a short last
            // block the mask is 0, so a token running to the end ends there.
            let mut edges = mask ^ ((mask << 1) | carry);
            carry = mask >> 63;
            while edges != 0 {
                let p = at + edges.trailing_zeros() as usize;
                edges &= edges - 1;
                if in_token {
                    spans.push(((base + start) as u32, (base + p) as u32));
                } else {
                    start = p;
                }
                in_token = !in_token;
            }
        }
        if in_token {
            spans.push(((base + start) as u32, (base + bytes.len()) as u32));
        }
    }

    /// Records `text[start..end]` as a token when non-empty.
    #[inline]
    pub(super) fn end_token(&mut self, start: usize, end: usize) {
        if end > start {
            self.spans.push((start as u32, end as u32));
        }
    }

    pub(super) fn clear(&mut self) {
        self.text.clear();
        self.spans.clear();
        self.raw.clear();
    }

    #[inline]
    pub(super) fn push_char(&mut self, c: char, use_stemmer: bool) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            self.raw.push(c);
        } else {
            self.flush(use_stemmer);
        }
    }

    pub(super) fn flush(&mut self, use_stemmer: bool) {
        if self.raw.is_empty() {
            return;
        }
        let start = self.text.len();
        if use_stemmer && self.raw.len() > 3 {
            stem_into(&self.raw, &mut self.stem_scratch, &mut self.text);
        } else {
            self.text.push_str(&self.raw);
        }
        self.raw.clear();
        let tok = &self.text.as_bytes()[start..];
        if !tok.is_empty()
            && tok
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        {
            self.spans.push((start as u32, self.text.len() as u32));
        } else {
            self.text.truncate(start);
        }
    }
}

/// One text's tokens inside a [`TokenBuf`], which may hold the tokens of many texts (a
/// batch's column, see [`RougeColumn`]).
#[derive(Clone, Copy)]
pub(super) struct Tokens<'a> {
    pub(super) buf: &'a TokenBuf,
    pub(super) start: usize,
    pub(super) len: usize,
}

impl<'a> Tokens<'a> {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn token(&self, i: usize) -> &'a str {
        self.buf.token(self.start + i)
    }
}

impl TokenBuf {
    /// All the tokens, as one text's.
    pub(super) fn all(&self) -> Tokens<'_> {
        Tokens {
            buf: self,
            start: 0,
            len: self.spans.len(),
        }
    }
}

/// Maps token strings to dense ids shared by prediction and target.
pub(super) struct Interner<'a> {
    pub(super) ids: AHashMap<&'a str, u32>,
}

impl<'a> Interner<'a> {
    pub(super) fn new() -> Self {
        Interner {
            ids: AHashMap::new(),
        }
    }

    pub(super) fn intern_all(&mut self, toks: Tokens<'a>) -> Vec<u32> {
        (0..toks.len())
            .map(|i| {
                let next = self.ids.len() as u32;
                *self.ids.entry(toks.token(i)).or_insert(next)
            })
            .collect()
    }

    pub(super) fn len(&self) -> usize {
        self.ids.len()
    }
}

/// `rouge_score.tokenize.tokenize(text, stemmer)` (the `DefaultTokenizer`),
/// with NLTK's Porter stemmer when `use_stemmer`.
pub fn tokenize(text: &str, use_stemmer: bool) -> Vec<String> {
    let mut toks = TokenBuf::default();
    toks.push_text(text, use_stemmer);
    (0..toks.spans.len())
        .map(|i| toks.token(i).to_string())
        .collect()
}
