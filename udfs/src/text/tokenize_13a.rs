//! sacrebleu's default `13a` tokenizer (mteval-v13a), bit-exact with sacrebleu 2.6.0
//! (`sacrebleu/tokenizers/tokenizer_13a.py` followed by `tokenizer_re.py`).
//!
//! The Python runs four `re.sub` passes over the line. Every pattern is a fixed
//! two-character (or one-character) match whose *specific* characters are all ASCII:
//!
//! 1. `([\{-\~\[-\` -\&\(-\+\:-\@\/])` -> `' \1 '` — a per-character map.
//! 2. `([^0-9])([\.,])` -> `'\1 \2 '`
//! 3. `([\.,])([^0-9])` -> `' \1 \2'`
//! 4. `([0-9])(-)`      -> `'\1 \2 '`
//!
//! followed by `' '.join(line.split())` with Python's notion of whitespace
//! ([`pystr::is_space`], which differs from `char::is_whitespace` on U+001C..U+001F).
//!
//! # One scan instead of four passes
//!
//! The passes only ever *insert spaces*, so every token is a contiguous piece of the
//! (entity-decoded) input and can be reported as a byte span of it. Call *separators*
//! the pass-1 characters (which include the space) and all Python whitespace, and
//! *segments* the maximal runs of other characters. Then:
//!
//! * A pass-1 character other than the space becomes a one-character token: pass 1
//!   puts spaces around it, and it cannot take part in a match of passes 2-4 (it is
//!   not `.`, `,`, `-` or a digit, and what sits next to it is a space).
//! * Whitespace only separates tokens. In passes 2-4 a whitespace character plays
//!   exactly the role of a space: it is `[^0-9]`, and not `[\.,]` or `-`.
//! * So every segment is processed independently, as if surrounded by single spaces.
//!   A match never spans a separator: it would need `.`, `,`, `-` or a digit on both
//!   sides of it. A separator (or the space pass 1 put next to it) can only be the
//!   `[^0-9]` half of a match whose other half is the neighbouring segment character —
//!   the first character of a pass-2 match before a segment, or the second one of a
//!   pass-3 match after it (pass 3 "consumes" that space). Neither choice affects
//!   another segment: the scan resumes on a separator or pass-1 space, which starts
//!   no match of its own, so each segment is entered at a fresh scan position.
//! * Passes 2-4 need a `.`, `,` or `-`, so a segment without them is one token. The
//!   few segments with them are run through the original passes (on `' ' + seg + ' '`)
//!   and the spaces those insert give the token boundaries inside the segment (a
//!   segment contains no `' '` of its own, so every `' '` in the result was inserted).
//!
//! The passes work on UTF-8 bytes. That is exact: a UTF-8 multi-byte sequence never
//! contains an ASCII byte, so a match (which needs an ASCII `.`, `,`, `-` or digit at a
//! fixed offset) can only start or end on a character boundary, exactly where `re`
//! would find it; `[^0-9]` accepts any non-ASCII-digit character, and accepting just
//! its first or last byte changes neither what is emitted nor where the next match may
//! begin (no match can start on a continuation byte). The scans apply the same
//! leftmost, non-overlapping consumption as `re.sub`, so the results are byte-identical
//! to Python's. Python's `[0-9]` (a range, not `\d`) is ASCII-only, like
//! `u8::is_ascii_digit`.

use super::{pystr, swar};

/// Bytes matched by pass 1's character class: `{|}~`, `[\]^_` and backtick,
/// space to `&`, `(` to `+`, `:` to `@`, and `/`.
const fn is_pass1(b: u8) -> bool {
    matches!(b, b'{'..=b'~' | b'['..=b'`' | b' '..=b'&' | b'('..=b'+' | b':'..=b'@' | b'/')
}

/// Byte classes of the scan (see [`CLASS`]).
const PLAIN: u8 = 0;
/// ASCII Python whitespace other than `'\n'`: ends the current token.
const SPACE: u8 = 1;
/// A pass-1 character other than the space, `<` and `&`: a token of its own.
const PUNCT: u8 = 2;
/// `.`, `,` or `-`: part of a token, but its segment needs passes 2-4.
const DOT: u8 = 3;
/// UTF-8 lead byte of a possible non-ASCII Python whitespace character
/// (U+0085 and U+00A0: `C2`; U+1680: `E1`; U+2000.. U+205F: `E2`; U+3000: `E3`).
const LEAD: u8 = 4;
/// `<`, `&` and `'\n'`: may start a pre-processing replacement (`<skipped>`,
/// `&quot;`..., `-\n`); otherwise a [`PUNCT`] (`<`, `&`) or a [`SPACE`] (`'\n'`).
const SPECIAL: u8 = 5;

/// Class of every byte; bytes not listed (letters, digits, other UTF-8 bytes) are
/// [`PLAIN`].
const CLASS: [u8; 256] = {
    let mut t = [PLAIN; 256];
    let mut b = 0usize;
    while b < 256 {
        let c = b as u8;
        t[b] = if c == b'<' || c == b'&' || c == b'\n' {
            SPECIAL
        } else if c < 0x80 && pystr::ASCII_SPACE[b] {
            SPACE
        } else if is_pass1(c) {
            PUNCT
        } else if matches!(c, b'.' | b',' | b'-') {
            DOT
        } else if matches!(c, 0xC2 | 0xE1 | 0xE2 | 0xE3) {
            LEAD
        } else {
            PLAIN
        };
        b += 1;
    }
    t
};

/// Bit `k` set when `s[base + k]` is not [`PLAIN`], for the block `s[base..end]` of at
/// most 64 bytes.
///
/// The per-byte lookup in [`CLASS`] compiled to nine instructions a byte, half of the
/// scan. On x86-64 the block is classified 16 bytes at a time with range compares in
/// SSE2, which every x86-64 processor has ([`marks16`]), or, where the processor has
/// SSSE3, with two table lookups by nibble ([`marks_ssse3`]); elsewhere eight bytes at a
/// time in a `u64` ([`swar`]) where they are printable ASCII.
#[inline]
fn marks(s: &[u8], base: usize, end: usize) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: SSE2 is part of the x86-64 baseline, so every x86-64 processor has the
        // target feature `marks16` is compiled for.
        block_marks(s, base, end, |piece| unsafe { marks16(piece) })
    }
    #[cfg(not(target_arch = "x86_64"))]
    marks_swar(&s[base..end])
}

/// [`marks`] with [`marks16_ssse3`]: SSSE3 is in all x86-64 processors made since about
/// 2008 but not in the x86-64 baseline, so [`Buf13a::scan`] detects it at run time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
#[inline]
fn marks_ssse3(s: &[u8], base: usize, end: usize) -> u64 {
    block_marks(s, base, end, |piece| marks16_ssse3(piece))
}

/// [`marks`] of `s[base..end]` (at most 64 bytes) by `marks16`, which classifies the
/// first 16 bytes of the slice it is given.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn block_marks(s: &[u8], base: usize, end: usize, marks16: impl Fn(&[u8]) -> u32) -> u64 {
    let block = &s[base..end];
    let mut marks = 0u64;
    let mut pieces = block.chunks_exact(16);
    for (k, piece) in pieces.by_ref().enumerate() {
        marks |= u64::from(marks16(piece)) << (16 * k);
    }
    let rest = pieces.remainder().len();
    if rest > 0 {
        let done = block.len() - rest;
        // The last 16 bytes of `s` up to `end`, shifted to drop those already seen; a
        // shorter `s` padded with a PLAIN byte, which marks nothing.
        let last = if end >= 16 {
            marks16(&s[end - 16..end]) >> (16 - rest)
        } else {
            let mut piece = [b'a'; 16];
            piece[..rest].copy_from_slice(&block[done..]);
            marks16(&piece)
        };
        marks |= u64::from(last) << done;
    }
    marks
}

/// The bytes that are not [`PLAIN`] as a union of eight rectangles, each a set of high
/// nibbles times a set of low nibbles (`(high, low)` as bit sets of nibble values): a
/// byte is marked when some rectangle holds both of its nibbles. Bit `r` of
/// [`LOW_NIBBLE`]`[l]` / [`HIGH_NIBBLE`]`[h]` says that rectangle `r` has `l` / `h`, so
/// a byte is marked when the AND of its two table entries is not zero. Eight is the
/// most one byte of bits can hold; the rectangles may overlap. (A test compares the
/// result with [`CLASS`] for every byte value.)
const NIBBLE_RECTANGLES: [(u16, u16); 8] = {
    const fn set(nibbles: &[u8]) -> u16 {
        let mut bits = 0u16;
        let mut i = 0;
        while i < nibbles.len() {
            bits |= 1 << nibbles[i];
            i += 1;
        }
        bits
    }
    [
        // ' ', '@', '`'
        (set(&[0x2, 0x4, 0x6]), set(&[0x0])),
        // '"', 0xC2, 0xE2
        (set(&[0x2, 0xC, 0xE]), set(&[0x2])),
        // '!', '#', 0xE1, 0xE3
        (set(&[0x2, 0xE]), set(&[0x1, 0x3])),
        // '$', '%', '&', '('
        (set(&[0x2]), set(&[0x4, 0x5, 0x6, 0x8])),
        // '\t'..'\r', ')'..'-'
        (set(&[0x0, 0x2]), set(&[0x9, 0xA, 0xB, 0xC, 0xD])),
        // U+001C..U+001F, ','..'/', '<'..'?', '\\'..'_'
        (set(&[0x1, 0x2, 0x3, 0x5]), set(&[0xC, 0xD, 0xE, 0xF])),
        // '+'..'.', ';'..'>', '['..'^', '{'..'~'
        (set(&[0x2, 0x3, 0x5, 0x7]), set(&[0xB, 0xC, 0xD, 0xE])),
        // '*'..'/', ':'..'?'
        (set(&[0x2, 0x3]), set(&[0xA, 0xB, 0xC, 0xD, 0xE, 0xF])),
    ]
};

/// Per low nibble, the [`NIBBLE_RECTANGLES`] that have it, one bit each.
const LOW_NIBBLE: [u8; 16] = nibble_table(false);
/// Per high nibble, the [`NIBBLE_RECTANGLES`] that have it, one bit each.
const HIGH_NIBBLE: [u8; 16] = nibble_table(true);

const fn nibble_table(high: bool) -> [u8; 16] {
    let mut t = [0u8; 16];
    let mut r = 0;
    while r < NIBBLE_RECTANGLES.len() {
        let (h, l) = NIBBLE_RECTANGLES[r];
        let set = if high { h } else { l };
        let mut n = 0;
        while n < 16 {
            if set & (1 << n) != 0 {
                t[n] |= 1 << r;
            }
            n += 1;
        }
        r += 1;
    }
    t
}

/// [`marks`] of 16 bytes (the first 16 of `piece`) with SSSE3: each byte's two nibbles
/// look up [`LOW_NIBBLE`] and [`HIGH_NIBBLE`] (`pshufb`), and the byte is marked when the
/// two entries share a bit. Ten instructions for 16 bytes where [`marks16`] needs
/// about fifty.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
#[inline]
fn marks16_ssse3(piece: &[u8]) -> u32 {
    use std::arch::x86_64::*;
    let vector =
        |bytes: &[u8]| _mm_set_epi64x(swar::word(&bytes[8..]) as i64, swar::word(bytes) as i64);
    let v = vector(piece);
    let nibble = _mm_set1_epi8(0x0F);
    let low = _mm_and_si128(v, nibble);
    let high = _mm_and_si128(_mm_srli_epi16(v, 4), nibble);
    let rectangles = _mm_and_si128(
        _mm_shuffle_epi8(vector(&LOW_NIBBLE), low),
        _mm_shuffle_epi8(vector(&HIGH_NIBBLE), high),
    );
    let plain = _mm_cmpeq_epi8(rectangles, _mm_setzero_si128());
    !(_mm_movemask_epi8(plain) as u32) & 0xFFFF
}

/// [`marks`] of `block`: eight bytes at a time with [`swar`] where they are printable
/// ASCII (there the [`PLAIN`] bytes are exactly the letters, the digits and `'`), else
/// byte by byte.
#[cfg(any(test, not(target_arch = "x86_64")))]
fn marks_swar(block: &[u8]) -> u64 {
    let bytewise = |bytes: &[u8], at: usize| -> u64 {
        (at..)
            .zip(bytes)
            .map(|(k, &c)| u64::from(CLASS[c as usize] != PLAIN) << k)
            .fold(0, |a, b| a | b)
    };
    let mut marks = 0u64;
    let mut words = block.chunks_exact(8);
    for (k, w8) in words.by_ref().enumerate() {
        let w = swar::word(w8);
        marks |= if w & swar::HIGH == 0 && swar::printable(w) == swar::HIGH {
            let plain = swar::letters(w) | swar::digits(w) | swar::equal_to(w, b'\'');
            swar::gather(!plain & swar::HIGH) << (8 * k)
        } else {
            bytewise(w8, 8 * k)
        };
    }
    let done = block.len() - words.remainder().len();
    marks | bytewise(words.remainder(), done)
}

/// [`marks`] of 16 bytes (the first 16 of `piece`) with SSE2, for every byte value.
/// The bytes that are not [`PLAIN`]:
/// - printable ASCII other than letters, digits and `'`;
/// - the ASCII control characters that are Python whitespace, `\t`..`\r` and
///   U+001C..U+001F;
/// - the [`LEAD`] bytes `C2`, `E1`, `E2`, `E3`.
///
/// The range tests compare signed bytes, so the bytes from 0x80 up (negative) fall
/// in no ASCII range.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
#[inline]
fn marks16(piece: &[u8]) -> u32 {
    use std::arch::x86_64::*;
    let lo = swar::word(piece) as i64;
    let hi = swar::word(&piece[8..]) as i64;
    let v = _mm_set_epi64x(hi, lo);
    let between = |v: __m128i, lo: u8, hi: u8| {
        _mm_and_si128(
            _mm_cmpgt_epi8(v, _mm_set1_epi8(lo as i8 - 1)),
            _mm_cmplt_epi8(v, _mm_set1_epi8(hi as i8 + 1)),
        )
    };
    let is = |c: u8| _mm_cmpeq_epi8(v, _mm_set1_epi8(c as i8));
    let letters = between(_mm_or_si128(v, _mm_set1_epi8(0x20)), b'a', b'z');
    let plain = _mm_or_si128(_mm_or_si128(letters, between(v, b'0', b'9')), is(b'\''));
    let punct = _mm_andnot_si128(plain, between(v, b' ', b'~'));
    let control = _mm_or_si128(between(v, 0x09, 0x0D), between(v, 0x1C, 0x1F));
    let lead = _mm_or_si128(
        _mm_or_si128(is(0xC2), is(0xE1)),
        _mm_or_si128(is(0xE2), is(0xE3)),
    );
    let marked = _mm_or_si128(_mm_or_si128(punct, control), lead);
    _mm_movemask_epi8(marked) as u32
}

/// Byte length of the Python whitespace character starting at `s[i]` (a [`LEAD`]
/// byte), or 0 if the character there is not whitespace.
#[inline]
fn wide_space_len(s: &[u8], i: usize) -> usize {
    let b1 = s.get(i + 1).copied().unwrap_or(0);
    let b2 = s.get(i + 2).copied().unwrap_or(0);
    let space = match s[i] {
        0xC2 => return if matches!(b1, 0x85 | 0xA0) { 2 } else { 0 },
        0xE1 => b1 == 0x9A && b2 == 0x80,
        0xE2 => {
            (b1 == 0x80 && matches!(b2, 0x80..=0x8A | 0xA8 | 0xA9 | 0xAF))
                || (b1 == 0x81 && b2 == 0x9F)
        }
        _ => b1 == 0x80 && b2 == 0x80, // 0xE3
    };
    if space { 3 } else { 0 }
}

/// Whether the [`SPECIAL`] byte at `s[i]` starts (or, for `'\n'`, ends) a substring
/// that sacrebleu's pre-processing replaces. If no byte of a line does, all of that
/// pre-processing is the identity apart from `'\n'` -> `' '`, which changes no token
/// boundary: both are whitespace, and the replacements are found in the original line
/// (none of their patterns contains a space or `'\n'`, so the `'\n'` step cannot create
/// or destroy an entity match).
#[inline]
fn starts_replacement(s: &[u8], i: usize) -> bool {
    let t = &s[i..];
    match s[i] {
        b'<' => t.starts_with(b"<skipped>"),
        b'&' => {
            t.starts_with(b"&quot;")
                || t.starts_with(b"&amp;")
                || t.starts_with(b"&lt;")
                || t.starts_with(b"&gt;")
        }
        _ => i > 0 && s[i - 1] == b'-', // '\n'
    }
}

/// sacrebleu's language-independent pre-processing, as sequential `str.replace`
/// calls (Rust's `str::replace` has the same left-to-right, non-overlapping semantics).
fn preprocess(line: &str) -> String {
    let mut s = line.replace("<skipped>", "");
    if s.contains('\n') {
        s = s.replace("-\n", "").replace('\n', " ");
    }
    if s.contains('&') {
        s = s
            .replace("&quot;", "\"")
            .replace("&amp;", "&")
            .replace("&lt;", "<")
            .replace("&gt;", ">");
    }
    s
}

/// Tokenizes `line` exactly like sacrebleu 2.6.0's `Tokenizer13a()(line)` and returns
/// the tokens joined by single spaces (no leading/trailing space; `""` when there are
/// no tokens). Split the result on `' '` to get the token list.
///
/// Note: sacrebleu's BLEU calls the tokenizer on `sent.rstrip()`; that strip is *not*
/// part of the tokenizer and is done by the BLEU code (it matters, e.g. for `"a-\n"`).
pub fn tokenize_13a(line: &str) -> String {
    let mut out = String::with_capacity(line.len() + line.len() / 4 + 2);
    tokenize_13a_into(line, &mut out);
    out
}

/// Like [`tokenize_13a`] but appends the result to `out` (which is cleared first),
/// so callers can reuse one allocation across many rows.
pub fn tokenize_13a_into(line: &str, out: &mut String) {
    out.clear();
    let mut buf = Buf13a::default();
    let mut spans = Vec::new();
    let text = buf.spans(line, &mut spans);
    for (i, &(s, e)) in spans.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(&text[s as usize..e as usize]);
    }
}

/// Reusable working memory of the 13a tokenizer.
#[derive(Default)]
pub(crate) struct Buf13a {
    /// The pre-processed line, when pre-processing changed it.
    pre: String,
    /// Where passes 2-4 insert spaces in one segment (see [`Buf13a::dirty_segment`]).
    gaps: Vec<bool>,
}

impl Buf13a {
    /// Runs the 13a tokenizer on `line`, stores the byte ranges of its tokens in `spans`
    /// (cleared first) and returns the text they index into: `line` itself, or its
    /// pre-processed copy when `<skipped>`, `-\n` or an HTML entity occurs in it.
    pub(crate) fn spans<'a>(&'a mut self, line: &'a str, spans: &mut Vec<(u32, u32)>) -> &'a str {
        if self.scan(line.as_bytes(), true, spans) {
            return line;
        }
        self.pre = preprocess(line);
        let pre = std::mem::take(&mut self.pre);
        let done = self.scan(pre.as_bytes(), false, spans);
        debug_assert!(done);
        self.pre = pre;
        &self.pre
    }

    /// The single scan (see the module docs). With `raw`, gives up and returns `false`
    /// as soon as a pre-processing replacement is found.
    ///
    /// Works on blocks of 64 bytes: a branch-free pass marks the bytes that are not
    /// [`PLAIN`] in a bit mask, and only those are visited, so runs of ordinary
    /// characters cost no per-byte branches. Every non-[`PLAIN`] byte is a single
    /// ASCII byte or a UTF-8 lead byte, and a separator never covers one after its
    /// first byte (the rest of a multi-byte whitespace character are continuation
    /// bytes, which are [`PLAIN`]), so visiting the marked bytes in order is exactly
    /// the byte-by-byte scan.
    fn scan(&mut self, s: &[u8], raw: bool, spans: &mut Vec<(u32, u32)>) -> bool {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("ssse3") {
            // SAFETY: the processor has SSSE3, checked just above.
            return unsafe { self.scan_ssse3(s, raw, spans) };
        }
        self.scan_with(s, raw, spans, marks)
    }

    /// [`Buf13a::scan`] with [`marks_ssse3`], compiled for SSSE3 so that the
    /// classification is inlined into the loop (a call per block cost a tenth of the
    /// scan).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "ssse3")]
    fn scan_ssse3(&mut self, s: &[u8], raw: bool, spans: &mut Vec<(u32, u32)>) -> bool {
        self.scan_with(s, raw, spans, |s, base, end| marks_ssse3(s, base, end))
    }

    /// [`Buf13a::scan`] with the block classifier `marks` (see [`marks`]).
    #[inline(always)]
    fn scan_with(
        &mut self,
        s: &[u8],
        raw: bool,
        spans: &mut Vec<(u32, u32)>,
        marks: impl Fn(&[u8], usize, usize) -> u64,
    ) -> bool {
        spans.clear();
        // Start of the current segment, how many '.', ',' and '-' it holds, and where
        // the last of them is.
        let mut start = 0;
        let (mut dots, mut dot) = (0u32, 0usize);
        for base in (0..s.len()).step_by(64) {
            let mut marks = marks(s, base, s.len().min(base + 64));
            while marks != 0 {
                let i = base + marks.trailing_zeros() as usize;
                marks &= marks - 1;
                let c = s[i];
                // The space first: most marked bytes are spaces, and a compare predicts
                // better than the jump through a table that the match compiles to.
                let sep_len = if c == b' ' {
                    1
                } else {
                    match CLASS[c as usize] {
                        DOT => {
                            (dots, dot) = (dots + 1, i);
                            continue;
                        }
                        SPACE => 1,
                        LEAD => match wide_space_len(s, i) {
                            0 => continue,
                            len => len,
                        },
                        SPECIAL if raw && starts_replacement(s, i) => return false,
                        SPECIAL if c == b'\n' => 1,
                        _ => {
                            // PUNCT, or '<' / '&' (SPECIAL): a one-byte token.
                            self.segment(s, start, i, dots, dot, spans);
                            spans.push((i as u32, i as u32 + 1));
                            (start, dots) = (i + 1, 0);
                            continue;
                        }
                    }
                };
                self.segment(s, start, i, dots, dot, spans);
                (start, dots) = (i + sep_len, 0);
            }
        }
        self.segment(s, start, s.len(), dots, dot, spans);
        true
    }

    /// Emits the tokens of the segment `s[start..end]` (no separators inside), which
    /// holds `dots` bytes `.`, `,` or `-`, the last one at `dot`.
    ///
    /// A segment with exactly one of them is split here when it is one of the two
    /// shapes [`Buf13a::dirty_segment`] splits directly (same reasoning): a lone `-`
    /// (isolated when it follows a digit), or a `.` / `,` ending the segment.
    #[inline(always)]
    fn segment(
        &mut self,
        s: &[u8],
        start: usize,
        end: usize,
        dots: u32,
        dot: usize,
        spans: &mut Vec<(u32, u32)>,
    ) {
        // Most segments are one plain word: that case stays in the scan's loop.
        if dots == 0 {
            if start != end {
                spans.push((start as u32, end as u32));
            }
            return;
        }
        self.dotted_segment(s, start, end, dots, dot, spans);
    }

    /// [`Buf13a::segment`] of a segment with at least one `.`, `,` or `-`.
    #[inline(never)]
    fn dotted_segment(
        &mut self,
        s: &[u8],
        start: usize,
        end: usize,
        dots: u32,
        dot: usize,
        spans: &mut Vec<(u32, u32)>,
    ) {
        if dots == 1 {
            if s[dot] == b'-' {
                if dot > start && s[dot - 1].is_ascii_digit() {
                    spans.push((start as u32, dot as u32));
                    spans.push((dot as u32, dot as u32 + 1));
                    if dot + 1 < end {
                        spans.push((dot as u32 + 1, end as u32));
                    }
                } else {
                    spans.push((start as u32, end as u32));
                }
                return;
            }
            if dot + 1 == end {
                if dot > start {
                    spans.push((start as u32, dot as u32));
                }
                spans.push((dot as u32, end as u32));
                return;
            }
        }
        self.dirty_segment(s, start, end, spans);
    }

    /// A segment with `.`, `,` or `-`. Two common shapes are split directly; anything
    /// else runs passes 2-4 on `' ' + seg + ' '`, whose inserted spaces are the token
    /// boundaries.
    #[cold]
    fn dirty_segment(&mut self, s: &[u8], start: usize, end: usize, spans: &mut Vec<(u32, u32)>) {
        let seg = &s[start..end];
        let is_dot = |c: &u8| matches!(c, b'.' | b',');
        let last = seg.len() - 1;
        if !seg.iter().any(is_dot) {
            // Only `-`: passes 2 and 3 need a `.` or `,`, and pass 4 isolates every `-`
            // that follows a digit (a `-` is never the first half of a pass-4 match, so
            // the scan is always positioned at the digit). This is by far the most common
            // dirty shape ("x-y"), usually with no digit-dash pair at all.
            let mut tok = start;
            for i in 1..seg.len() {
                if seg[i] == b'-' && seg[i - 1].is_ascii_digit() {
                    spans.push((tok as u32, (start + i) as u32));
                    spans.push(((start + i) as u32, (start + i + 1) as u32));
                    tok = start + i + 1;
                }
            }
            if tok < end {
                spans.push((tok as u32, end as u32));
            }
            return;
        }
        if is_dot(&seg[last]) && !seg[..last].iter().any(|c| is_dot(c) || *c == b'-') {
            // `X.` with no `.`, `,` or `-` in a non-empty `X` (sentence ends, "word,"):
            // either pass 2 matches (last of X, `.`) when that character is not a digit,
            // or else pass 3 matches (`.`, padding space); both make `X` and `.` tokens,
            // and nothing else can match.
            if last > 0 {
                spans.push((start as u32, (end - 1) as u32));
            }
            spans.push(((end - 1) as u32, end as u32));
            return;
        }
        // Passes 2-4 on `' ' + seg + ' '` (P below), tracking only where they insert
        // spaces: `gap[i]` says whether a space lies between P[i] and P[i + 1]. That is
        // all a later pass can see of the spaces: none starts a match (a space is not a
        // digit, `.`, `,` or `-`), and two spaces in a row behave as one (a match takes
        // at most the first as its `[^0-9]`). The three passes once ran as written, on
        // two scratch strings (the test reference `tokens_by_passes`), at about 900
        // instructions for a segment.
        let m = seg.len();
        let p = |i: usize| if i == 0 || i > m { b' ' } else { seg[i - 1] };
        let gap = &mut self.gaps;
        gap.clear();
        gap.resize(m + 1, false);
        // Pass 2, `([^0-9])([\.,])` -> `\1 \2 `: spaces before and after the dot, which
        // the match consumes.
        let mut i = 0;
        while i < m {
            if !p(i).is_ascii_digit() && is_dot(&p(i + 1)) {
                (gap[i], gap[i + 1]) = (true, true);
                i += 2;
            } else {
                i += 1;
            }
        }
        // Pass 3, `([\.,])([^0-9])` -> ` \1 \2`: spaces around the dot; the match
        // consumes what follows it: a space pass 2 put there, else the next character.
        // (Each step reads `gap[i]` before any match has set it.)
        let mut i = 1;
        while i <= m {
            if is_dot(&p(i)) && (gap[i] || !p(i + 1).is_ascii_digit()) {
                let after = if gap[i] { 1 } else { 2 };
                (gap[i - 1], gap[i]) = (true, true);
                i += after;
            } else {
                i += 1;
            }
        }
        // Pass 4, `([0-9])(-)` -> `\1 \2 `: a digit directly followed by a dash.
        let mut i = 1;
        while i < m {
            if p(i).is_ascii_digit() && !gap[i] && p(i + 1) == b'-' {
                (gap[i], gap[i + 1]) = (true, true);
                i += 2;
            } else {
                i += 1;
            }
        }
        // A token boundary before seg[k] wherever a space was inserted there.
        let mut tok = start;
        for (k, &space) in gap.iter().enumerate().take(m).skip(1) {
            if space {
                spans.push((tok as u32, (start + k) as u32));
                tok = start + k;
            }
        }
        spans.push((tok as u32, end as u32));
    }
}

/// `re.sub(r'([^0-9])([\.,])', r'\1 \2 ', s)`
#[cfg(test)]
fn pass_nondigit_then_dot(src: &[u8], dst: &mut Vec<u8>) {
    let n = src.len();
    let mut i = 0;
    while i < n {
        let c = src[i];
        if i + 1 < n && !c.is_ascii_digit() && matches!(src[i + 1], b'.' | b',') {
            dst.extend_from_slice(&[c, b' ', src[i + 1], b' ']);
            i += 2;
        } else {
            dst.push(c);
            i += 1;
        }
    }
}

/// `re.sub(r'([\.,])([^0-9])', r' \1 \2', s)`
#[cfg(test)]
fn pass_dot_then_nondigit(src: &[u8], dst: &mut Vec<u8>) {
    let n = src.len();
    let mut i = 0;
    while i < n {
        let c = src[i];
        if matches!(c, b'.' | b',') && i + 1 < n && !src[i + 1].is_ascii_digit() {
            dst.extend_from_slice(&[b' ', c, b' ', src[i + 1]]);
            i += 2;
        } else {
            dst.push(c);
            i += 1;
        }
    }
}

/// `re.sub(r'([0-9])(-)', r'\1 \2 ', s)`
#[cfg(test)]
fn pass_digit_then_dash(src: &[u8], dst: &mut Vec<u8>) {
    let n = src.len();
    let mut i = 0;
    while i < n {
        let c = src[i];
        if c.is_ascii_digit() && i + 1 < n && src[i + 1] == b'-' {
            dst.extend_from_slice(&[c, b' ', b'-', b' ']);
            i += 2;
        } else {
            dst.push(c);
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_agree_with_the_class_table() {
        let kinds = [
            b' ', b'a', b'Z', b'5', b'.', b'\'', b'<', 0x7f, 0x00, 0xc2, 0x80,
        ];
        for b in 0u8..=255 {
            for &other in &kinds {
                for len in [8, 13, 16, 29, 47, 64] {
                    for k in 0..len {
                        let mut block = vec![other; len];
                        block[k] = b;
                        let want = (0..len)
                            .map(|j| u64::from(CLASS[block[j] as usize] != PLAIN) << j)
                            .fold(0, |a, b| a | b);
                        assert_eq!(marks(&block, 0, len), want, "{block:?}");
                        let mut longer = vec![other; 80];
                        longer[80 - len..].copy_from_slice(&block);
                        assert_eq!(marks(&longer, 80 - len, 80), want, "{block:?}");
                        assert_eq!(marks_swar(&block), want, "{block:?}");
                        #[cfg(target_arch = "x86_64")]
                        if std::arch::is_x86_feature_detected!("ssse3") {
                            // SAFETY: the processor has SSSE3.
                            let ssse3 = |s: &[u8], base, end| unsafe { marks_ssse3(s, base, end) };
                            assert_eq!(ssse3(&block, 0, len), want, "{block:?}");
                            assert_eq!(ssse3(&longer, 80 - len, 80), want, "{block:?}");
                        }
                    }
                }
            }
        }
    }

    // Expected strings were produced by running sacrebleu 2.6.0
    // (`sacrebleu.tokenizers.tokenizer_13a.Tokenizer13a()(s)`, Python 3.11.7).
    #[test]
    fn matches_sacrebleu() {
        let cases: &[(&str, &str)] = &[
            ("", ""),
            ("   ", ""),
            ("Hello, world.", "Hello , world ."),
            ("It wasn't surprising.", "It wasn't surprising ."),
            (
                "3.14, 1,000 and 5-6 or x-y.",
                "3.14 , 1,000 and 5 - 6 or x-y .",
            ),
            (".5 and 5. and ,5", ". 5 and 5 . and , 5"),
            ("a..b...c", "a . . b . . . c"),
            ("1.2.3", "1.2.3"),
            (
                "Tom&amp;Jerry &lt;b&gt; &quot;x&quot; &amp;lt;",
                "Tom & Jerry < b > \" x \" <",
            ),
            ("a <skipped> b", "a b"),
            ("<skip<skipped>ped>", "< skipped >"),
            ("line-\nbreak\nnext", "linebreak next"),
            ("tab\there\x1cfs", "tab here fs"),
            (
                "(hi) [x] {y} $5 @me #tag 100%",
                "( hi ) [ x ] { y } $ 5 @ me # tag 100 %",
            ),
            ("日本語。テスト、です.", "日本語。テスト、です ."),
            ("emoji🙂.ok,é.", "emoji🙂 . ok , é ."),
            ("\u{a0}nbsp\u{3000}ideo\u{200b}zw", "nbsp ideo\u{200b}zw"),
            ("x.,.y", "x . , . y"),
            ("2-3-4", "2 - 3 - 4"),
        ];
        for (input, expected) in cases {
            assert_eq!(tokenize_13a(input), *expected, "input {input:?}");
            let mut buf = Buf13a::default();
            let mut spans = Vec::new();
            let text = buf.spans(input, &mut spans);
            let toks: Vec<&str> = spans
                .iter()
                .map(|&(a, b)| &text[a as usize..b as usize])
                .collect();
            assert_eq!(toks.join(" "), *expected, "spans {input:?}");
        }
    }

    // The scan's byte classes must agree with Python's whitespace and pass-1 set for
    // every character.
    #[test]
    fn byte_classes_match_python() {
        for cp in 0..=0x10FFFFu32 {
            let Some(c) = char::from_u32(cp) else {
                continue;
            };
            let mut buf = [0u8; 4];
            let bytes = c.encode_utf8(&mut buf).as_bytes();
            let class = CLASS[bytes[0] as usize];
            if c.is_ascii() {
                let b = bytes[0];
                let want = if matches!(b, b'<' | b'&' | b'\n') {
                    SPECIAL
                } else if pystr::is_space(c) {
                    SPACE
                } else if is_pass1(b) {
                    PUNCT
                } else if matches!(b, b'.' | b',' | b'-') {
                    DOT
                } else {
                    PLAIN
                };
                assert_eq!(class, want, "{cp:#x}");
            } else if class == LEAD {
                let want = if pystr::is_space(c) { bytes.len() } else { 0 };
                assert_eq!(wide_space_len(bytes, 0), want, "{cp:#x}");
            } else {
                assert_eq!(class, PLAIN, "{cp:#x}");
                assert!(!pystr::is_space(c), "{cp:#x}");
            }
        }
    }

    /// The tokens of a segment by running passes 2-4 as written on `' ' + seg + ' '`
    /// (what [`Buf13a::dirty_segment`] did before it tracked only the inserted spaces).
    fn tokens_by_passes(seg: &[u8]) -> Vec<(u32, u32)> {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        a.push(b' ');
        a.extend_from_slice(seg);
        a.push(b' ');
        pass_nondigit_then_dot(&a, &mut b);
        a.clear();
        pass_dot_then_nondigit(&b, &mut a);
        b.clear();
        pass_digit_then_dash(&a, &mut b);
        // Every non-space byte of `b` is the next byte of the segment, in order.
        let (mut spans, mut k, mut tok) = (Vec::new(), 0u32, None);
        for &c in &b {
            if c == b' ' {
                if let Some(t) = tok.take() {
                    spans.push((t, k));
                }
            } else {
                tok.get_or_insert(k);
                k += 1;
            }
        }
        spans.extend(tok.map(|t| (t, k)));
        spans
    }

    proptest::proptest! {
        /// The split of a segment with `.`, `,` or `-` equals the three passes' output,
        /// on every shape a small alphabet makes (digits, letters, a two-byte letter).
        #[test]
        fn dirty_segments_split_as_the_passes_do(seg in "[a1.,\\-\\x{e9}]{1,14}") {
            let mut buf = Buf13a::default();
            let mut spans = Vec::new();
            buf.dirty_segment(seg.as_bytes(), 0, seg.len(), &mut spans);
            proptest::prop_assert_eq!(spans, tokens_by_passes(seg.as_bytes()), "{:?}", seg);
        }
    }

    #[test]
    fn python_whitespace() {
        assert!(pystr::is_space('\u{1c}'));
        assert!(!pystr::is_space('\u{200b}'));
        assert_eq!(pystr::rstrip("a b \u{1f}\n\u{3000}"), "a b");
        assert_eq!(
            pystr::split_whitespace(" a\u{85}b  ").collect::<Vec<_>>(),
            ["a", "b"]
        );
    }
}
