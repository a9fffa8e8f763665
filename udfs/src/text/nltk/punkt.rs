//! Punkt sentence splitting as `nltk.sent_tokenize(text, language="english")` does it in
//! NLTK 3.10.4: a `PunktTokenizer("english")` (a `PunktSentenceTokenizer` whose parameters
//! come from punkt_tab's `english/` files) called with `realign_boundaries=True`.
//! Inference only; the parameters are embedded from `udfs/data/punkt_english.txt`.
//!
//! NLTK compiles these patterns with the third-party `regex` module (through `nltk.redos`),
//! whose `\w`, `\d` and `\s` differ from both Rust's and CPython `re`'s; the look-around
//! patterns are hand-written scanners and the character classes are pinned below to the
//! reference's (`regex` 2026.11.19 under CPython 3.11 / Unicode 14). All offsets are bytes.

use std::borrow::Cow;
use std::sync::LazyLock;

use ahash::{AHashMap, AHashSet};
use regex::Regex;

use crate::text::pystr;

// ---------------------------------------------------------------------------------------
// Character classes of the reference engines.
// ---------------------------------------------------------------------------------------

/// Characters the `regex` module's `\w` has on top of the regex crate's `\w`.
const RX_WORD_EXTRA: [(u32, u32); 60] = [
    (0x558, 0x558),
    (0x58B, 0x58C),
    (0x5C8, 0x5C9),
    (0x88F, 0x88F),
    (0xB53, 0xB54),
    (0xC5C, 0xC5C),
    (0xCDC, 0xCDC),
    (0x1ACF, 0x1AF0),
    (0x208F, 0x208F),
    (0x209D, 0x209F),
    (0xA7CE, 0xA7CF),
    (0xA7D2, 0xA7D2),
    (0xA7D4, 0xA7D4),
    (0xA7DD, 0xA7DD),
    (0xA7E2, 0xA7E2),
    (0xA7F1, 0xA7F1),
    (0xAB6C, 0xAB6D),
    (0x107BB, 0x107BF),
    (0x10940, 0x10959),
    (0x10EC5, 0x10EC7),
    (0x10ECB, 0x10ECF),
    (0x10ED9, 0x10EEE),
    (0x10EF0, 0x10EFB),
    (0x11B0A, 0x11B0A),
    (0x11B60, 0x11B67),
    (0x11DB0, 0x11DDB),
    (0x11DE0, 0x11DE9),
    (0x11DF0, 0x11DF1),
    (0x1246F, 0x1246F),
    (0x12475, 0x1247F),
    (0x12550, 0x12686),
    (0x16EA0, 0x16EB8),
    (0x16EBB, 0x16ED3),
    (0x16FF2, 0x16FF6),
    (0x187F8, 0x187FF),
    (0x18CD6, 0x18CDA),
    (0x18D09, 0x18D20),
    (0x18D80, 0x18DF2),
    (0x18E00, 0x19191),
    (0x191A0, 0x191D2),
    (0x1B123, 0x1B128),
    (0x1B168, 0x1B168),
    (0x1D127, 0x1D128),
    (0x1D250, 0x1D252),
    (0x1D25B, 0x1D25C),
    (0x1D25F, 0x1D25F),
    (0x1D280, 0x1D281),
    (0x1D6A6, 0x1D6A6),
    (0x1DF1F, 0x1DF24),
    (0x1DF2B, 0x1DF81),
    (0x1DF90, 0x1DF96),
    (0x1DFCD, 0x1DFFF),
    (0x1E6C0, 0x1E6DE),
    (0x1E6E0, 0x1E6F5),
    (0x1E6FE, 0x1E6FF),
    (0x2B73A, 0x2B73F),
    (0x2B81E, 0x2B81E),
    (0x2CEA2, 0x2CEAD),
    (0x323B0, 0x33479),
    (0x3D000, 0x3FC3F),
];

/// The `regex` module's `\d` is the regex crate's `\d` plus these digits.
pub(crate) const RX_DIGIT_EXTRA: (u32, u32) = (0x11DE0, 0x11DE9);

/// Letters and numbers (by the regex crate's Unicode tables) that CPython 3.11's
/// `str.isalnum()`, hence `re`'s `\w`, does not know yet.
const RE_WORD_EXCLUDE: [(u32, u32); 43] = [
    (0x1C89, 0x1C8A),
    (0xA7CB, 0xA7CD),
    (0xA7DA, 0xA7DC),
    (0x105C0, 0x105F3),
    (0x10D40, 0x10D65),
    (0x10D6F, 0x10D85),
    (0x10EC2, 0x10EC4),
    (0x1123F, 0x11240),
    (0x11380, 0x11389),
    (0x1138B, 0x1138B),
    (0x1138E, 0x1138E),
    (0x11390, 0x113B5),
    (0x113B7, 0x113B7),
    (0x113D1, 0x113D1),
    (0x113D3, 0x113D3),
    (0x116D0, 0x116E3),
    (0x11BC0, 0x11BE0),
    (0x11BF0, 0x11BF9),
    (0x11F02, 0x11F02),
    (0x11F04, 0x11F10),
    (0x11F12, 0x11F33),
    (0x11F50, 0x11F59),
    (0x1342F, 0x1342F),
    (0x13441, 0x13446),
    (0x13460, 0x143FA),
    (0x16100, 0x1611D),
    (0x16130, 0x16139),
    (0x16D40, 0x16D6C),
    (0x16D70, 0x16D79),
    (0x18CFF, 0x18CFF),
    (0x1B132, 0x1B132),
    (0x1B155, 0x1B155),
    (0x1CCF0, 0x1CCF9),
    (0x1D2C0, 0x1D2D3),
    (0x1DF25, 0x1DF2A),
    (0x1E030, 0x1E06D),
    (0x1E4D0, 0x1E4EB),
    (0x1E4F0, 0x1E4F9),
    (0x1E5D0, 0x1E5ED),
    (0x1E5F0, 0x1E5FA),
    (0x2B739, 0x2B739),
    (0x2EBF0, 0x2EE5D),
    (0x31350, 0x323AF),
];

/// Lowercase in Rust's tables but not for CPython 3.11 `str.islower()` (which, in turn,
/// still counts U+0295 as lowercase).
const PY_LOWER_EXCLUDE: [(u32, u32); 11] = [
    (0x10FC, 0x10FC),
    (0x1C8A, 0x1C8A),
    (0xA7CD, 0xA7CD),
    (0xA7CF, 0xA7CF),
    (0xA7DB, 0xA7DB),
    (0xA7F1, 0xA7F4),
    (0xAB69, 0xAB69),
    (0x10D70, 0x10D85),
    (0x16EBB, 0x16ED3),
    (0x1DF25, 0x1DF2A),
    (0x1E030, 0x1E06D),
];

fn in_table(table: &[(u32, u32)], c: char) -> bool {
    let cp = c as u32;
    let i = table.partition_point(|&(_, hi)| hi < cp);
    i < table.len() && table[i].0 <= cp
}

fn rust_class_match(re: &Regex, c: char) -> bool {
    let mut buf = [0u8; 4];
    re.is_match(c.encode_utf8(&mut buf))
}

static RUST_WORD: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\A\w\z").unwrap());
static RUST_DIGIT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\A\d\z").unwrap());
static RUST_LETTER_NUMBER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\A[\p{L}\p{N}]\z").unwrap());

/// `\s` of the `regex` module: Unicode White_Space (unlike `str.isspace()`, it excludes
/// U+001C..U+001F).
#[inline]
pub(crate) fn rx_is_space(c: char) -> bool {
    c.is_whitespace()
}

/// `\w` of the `regex` module.
#[inline]
pub(crate) fn rx_is_word(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphanumeric() || c == '_';
    }
    rust_class_match(&RUST_WORD, c) || in_table(&RX_WORD_EXTRA, c)
}

/// `\d` of the `regex` module.
#[inline]
pub(crate) fn rx_is_digit(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_digit();
    }
    rust_class_match(&RUST_DIGIT, c) || (RX_DIGIT_EXTRA.0..=RX_DIGIT_EXTRA.1).contains(&(c as u32))
}

/// `\w` of CPython 3.11's `re` (`str.isalnum()` or `_`).
#[inline]
pub(crate) fn re_is_word(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphanumeric() || c == '_';
    }
    rust_class_match(&RUST_LETTER_NUMBER, c) && !in_table(&RE_WORD_EXCLUDE, c)
}

/// `c.isupper()` for one character under CPython 3.11.
#[inline]
pub(crate) fn py_is_upper(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_uppercase();
    }
    c.is_uppercase() && !in_table(&crate::text::pystr::PY311_NO_LOWER, c)
}

/// `c.islower()` for one character under CPython 3.11.
#[inline]
pub(crate) fn py_is_lower(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_lowercase();
    }
    c == '\u{295}' || (c.is_lowercase() && !in_table(&PY_LOWER_EXCLUDE, c))
}

#[inline]
fn char_at(s: &str, i: usize) -> Option<char> {
    s.get(i..).and_then(|t| t.chars().next())
}

/// Python's `text[s:e]` for byte offsets where `s` may exceed `e`.
#[inline]
fn slice(text: &str, s: usize, e: usize) -> &str {
    if s < e { &text[s..e] } else { "" }
}

// ---------------------------------------------------------------------------------------
// Parameters.
// ---------------------------------------------------------------------------------------

const ORTHO_BEG_UC: u8 = 1 << 1;
const ORTHO_MID_UC: u8 = 1 << 2;
const ORTHO_UNK_UC: u8 = 1 << 3;
const ORTHO_BEG_LC: u8 = 1 << 4;
const ORTHO_MID_LC: u8 = 1 << 5;
const ORTHO_UNK_LC: u8 = 1 << 6;
const ORTHO_UC: u8 = ORTHO_BEG_UC | ORTHO_MID_UC | ORTHO_UNK_UC;
const ORTHO_LC: u8 = ORTHO_BEG_LC | ORTHO_MID_LC | ORTHO_UNK_LC;

struct Params {
    abbrev_types: AHashSet<Cow<'static, str>>,
    /// First word type -> the second word types it forms a collocation with.
    collocations: AHashMap<Cow<'static, str>, Vec<Cow<'static, str>>>,
    sent_starters: AHashSet<Cow<'static, str>>,
    ortho_context: AHashMap<Cow<'static, str>, u8>,
}

static PARAMS: LazyLock<Params> =
    LazyLock::new(|| Params::parse(include_str!("../../../data/punkt_english.txt")));

/// Undoes the data file's `\xHH` / `\u{H..}` escapes.
fn unescape(s: &'static str) -> Cow<'static, str> {
    if !s.contains('\\') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let esc = &rest[i + 1..];
        let (hex, used) = if let Some(h) = esc.strip_prefix('x') {
            (&h[..2], 3)
        } else if let Some(h) = esc.strip_prefix("u{") {
            let end = h.find('}').expect("punkt data: unterminated \\u{");
            (&h[..end], 3 + end)
        } else {
            panic!("punkt data: bad escape in {s:?}");
        };
        let cp = u32::from_str_radix(hex, 16).expect("punkt data: bad hex escape");
        out.push(char::from_u32(cp).expect("punkt data: bad code point"));
        rest = &esc[used..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

impl Params {
    fn parse(data: &'static str) -> Params {
        let mut p = Params {
            abbrev_types: AHashSet::new(),
            collocations: AHashMap::new(),
            sent_starters: AHashSet::new(),
            ortho_context: AHashMap::with_capacity(20_400),
        };
        let mut section: Option<(&str, u8)> = None;
        for line in data.lines() {
            if let Some(header) = line.strip_prefix('@') {
                let (name, value) = header.split_once(' ').unwrap_or((header, "0"));
                section = Some((name, value.parse().expect("punkt data: bad flags")));
                continue;
            }
            let Some((name, flags)) = section else {
                continue; // preamble
            };
            match name {
                "abbrev_types" => {
                    p.abbrev_types.insert(unescape(line));
                }
                "sent_starters" => {
                    p.sent_starters.insert(unescape(line));
                }
                "collocations" => {
                    let (a, b) = line.split_once('\t').expect("punkt data: bad pair");
                    p.collocations
                        .entry(unescape(a))
                        .or_default()
                        .push(unescape(b));
                }
                "ortho_context" => {
                    p.ortho_context.insert(unescape(line), flags);
                }
                _ => panic!("punkt data: unknown section {name:?}"),
            }
        }
        p
    }

    #[inline]
    fn ortho(&self, typ: &str) -> u8 {
        self.ortho_context.get(typ).copied().unwrap_or(0)
    }

    #[inline]
    fn is_collocation(&self, a: &str, b: &str) -> bool {
        self.collocations
            .get(a)
            .is_some_and(|v| v.iter().any(|x| x == b))
    }
}

// ---------------------------------------------------------------------------------------
// PunktLanguageVars: the word splitter and the candidate-boundary scanner.
// ---------------------------------------------------------------------------------------

/// `_re_non_word_chars`: punctuation that cannot be inside a word.
#[inline]
fn is_non_word(c: char) -> bool {
    matches!(
        c,
        ')' | '"'
            | ';'
            | '}'
            | ']'
            | '*'
            | ':'
            | '@'
            | '\''
            | '('
            | '{'
            | '['
            | '\u{2018}'
            | '\u{2019}'
            | '\u{201C}'
            | '\u{201D}'
            | '\u{AB}'
            | '\u{BB}'
            | '?'
            | '!'
    )
}

/// Characters `_re_word_start` refuses as the first character of a word.
#[inline]
fn is_not_word_start(c: char) -> bool {
    matches!(
        c,
        '(' | '"'
            | '`'
            | '{'
            | '['
            | ':'
            | ';'
            | '&'
            | '#'
            | '*'
            | '@'
            | ')'
            | '}'
            | ']'
            | '-'
            | ','
    )
}

/// Length of `_re_multi_char_punct` (`-{2,}`, `\.{2,}` or `(?:\.\s){2,}\.`) matched at `i`.
fn multi_char_at(s: &str, i: usize) -> Option<usize> {
    let b = s.as_bytes();
    let run = |ch: u8| b[i..].iter().take_while(|&&x| x == ch).count();
    match b.get(i) {
        Some(b'-') => {
            let n = run(b'-');
            (n >= 2).then_some(n)
        }
        Some(b'.') => {
            let n = run(b'.');
            if n >= 2 {
                return Some(n);
            }
            // Spaced ellipsis: the greedy repetition backtracks to the last "." it can end on.
            let mut ends = Vec::new(); // offsets just past each ". " pair
            let mut j = i;
            while b.get(j) == Some(&b'.') {
                match char_at(s, j + 1) {
                    Some(c) if rx_is_space(c) => {
                        j += 1 + c.len_utf8();
                        ends.push(j);
                    }
                    _ => break,
                }
            }
            let k = ends.len();
            if k >= 2 && b.get(ends[k - 1]) == Some(&b'.') {
                Some(ends[k - 1] + 1 - i)
            } else if k >= 3 {
                Some(ends[k - 2] + 1 - i)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// The lookahead that ends a word token: whitespace, end, non-word punctuation,
/// multi-character punctuation, or a comma that is itself followed by one of those.
fn word_ends_at(s: &str, q: usize) -> bool {
    let Some(c) = char_at(s, q) else {
        return true;
    };
    if rx_is_space(c) || is_non_word(c) || multi_char_at(s, q).is_some() {
        return true;
    }
    if c == ',' {
        let r = q + 1;
        return match char_at(s, r) {
            None => true,
            Some(d) => rx_is_space(d) || is_non_word(d) || multi_char_at(s, r).is_some(),
        };
    }
    false
}

/// `PunktLanguageVars.word_tokenize` (the `findall` of `_word_tokenize_fmt`) on one line;
/// `f` returns false to stop early.
fn punkt_words<'a>(line: &'a str, mut f: impl FnMut(&'a str) -> bool) {
    let mut pos = 0;
    while let Some(c) = char_at(line, pos) {
        if rx_is_space(c) {
            pos += c.len_utf8();
            continue;
        }
        if let Some(n) = multi_char_at(line, pos) {
            if !f(&line[pos..pos + n]) {
                return;
            }
            pos += n;
            continue;
        }
        let mut q = pos + c.len_utf8();
        if !is_not_word_start(c) {
            // Lazy `\S+?`: stop at the first position where a word may end.
            while !word_ends_at(line, q) {
                q += char_at(line, q).map_or(1, char::len_utf8);
            }
        }
        if !f(&line[pos..q]) {
            return;
        }
        pos = q;
    }
}

/// One match of `period_context_re`: a `.`, `?` or `!` followed by non-word punctuation
/// or by whitespace and a further token.
#[derive(Clone, Copy)]
struct EndMatch {
    start: usize,
    /// End of the `after_tok` group.
    after_end: usize,
    /// Start of the `next_tok` group, when the lookahead took the whitespace branch.
    next_tok: Option<usize>,
}

impl EndMatch {
    #[inline]
    fn end(&self) -> usize {
        self.start + 1
    }
}

fn period_context_at(text: &str, p: usize) -> Option<EndMatch> {
    let c = char_at(text, p + 1)?;
    if is_non_word(c) {
        return Some(EndMatch {
            start: p,
            after_end: p + 1 + c.len_utf8(),
            next_tok: None,
        });
    }
    if !rx_is_space(c) {
        return None;
    }
    let rest = &text[p + 1..];
    let ws = rest.find(|c: char| !rx_is_space(c))?;
    let tok_start = p + 1 + ws;
    let tok_len = text[tok_start..]
        .find(rx_is_space)
        .unwrap_or(text.len() - tok_start);
    Some(EndMatch {
        start: p,
        after_end: tok_start + tok_len,
        next_tok: Some(tok_start),
    })
}

/// `string.whitespace` (ASCII only), as `_get_last_whitespace_index` uses.
#[inline]
fn is_ascii_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c')
}

/// `_match_potential_end_contexts`: each candidate boundary with the text Punkt judges it
/// on (the word before it, the mark, and what follows), with overlaps resolved the way
/// NLTK does.
fn potential_end_contexts(text: &str, mut f: impl FnMut(EndMatch, &str)) {
    let bytes = text.as_bytes();
    let mut prev_slice = (0usize, 0usize);
    let mut prev: Option<EndMatch> = None;
    for (p, &b) in bytes.iter().enumerate() {
        if !matches!(b, b'.' | b'?' | b'!') {
            continue;
        }
        let Some(m) = period_context_at(text, p) else {
            continue;
        };
        let before = &bytes[prev_slice.1..m.start];
        // Python's helper returns 0 both for "none" and for "at index 0".
        let idx = before.iter().rposition(|&x| is_ascii_ws(x)).unwrap_or(0);
        let start = if idx != 0 {
            idx + prev_slice.1 + 1
        } else {
            prev_slice.0
        };
        if let Some(pm) = prev
            && prev_slice.1 <= start
        {
            f(pm, &text[prev_slice.0..pm.after_end]);
        }
        prev = Some(m);
        prev_slice = (start, m.start);
    }
    if let Some(pm) = prev {
        f(pm, &text[prev_slice.0..pm.after_end]);
    }
}

// ---------------------------------------------------------------------------------------
// PunktToken and the two annotation passes.
// ---------------------------------------------------------------------------------------

struct Token<'a> {
    tok: &'a str,
    /// Lowercased, or `##number##` for numeric tokens.
    typ: String,
    period_final: bool,
    sentbreak: bool,
    abbr: bool,
    ellipsis: bool,
}

/// `_RE_NUMERIC` (`^-?[\.,]?\d[\d,\.-]*\.?$`) on a whole token.
fn is_numeric(s: &str) -> bool {
    let mut it = s.chars().peekable();
    if it.peek() == Some(&'-') {
        it.next();
    }
    if matches!(it.peek(), Some('.' | ',')) {
        it.next();
    }
    if !it.next().is_some_and(rx_is_digit) {
        return false;
    }
    it.all(|c| matches!(c, ',' | '.' | '-') || rx_is_digit(c))
}

impl<'a> Token<'a> {
    fn new(tok: &'a str, params: &Params) -> Token<'a> {
        let lower = pystr::lower(tok);
        let typ = if is_numeric(&lower) {
            "##number##".to_string()
        } else {
            lower
        };
        let mut t = Token {
            tok,
            typ,
            period_final: tok.ends_with('.'),
            sentbreak: false,
            abbr: false,
            ellipsis: false,
        };
        t.first_pass(params);
        t
    }

    /// `_first_pass_annotation`.
    fn first_pass(&mut self, params: &Params) {
        let tok = self.tok;
        if matches!(tok, "." | "?" | "!") {
            self.sentbreak = true;
        } else if tok.len() >= 2 && tok.bytes().all(|b| b == b'.') {
            self.ellipsis = true;
        } else if self.period_final && !tok.ends_with("..") {
            let base = pystr::lower(&tok[..tok.len() - 1]);
            let last = base.rsplit('-').next().unwrap_or("");
            if params.abbrev_types.contains(base.as_str()) || params.abbrev_types.contains(last) {
                self.abbr = true;
            } else {
                self.sentbreak = true;
            }
        }
    }

    fn type_no_period(&self) -> &str {
        let t = self.typ.as_str();
        if t.len() > 1 && t.ends_with('.') {
            &t[..t.len() - 1]
        } else {
            t
        }
    }

    fn type_no_sentperiod(&self) -> &str {
        if self.sentbreak {
            self.type_no_period()
        } else {
            &self.typ
        }
    }

    fn first_char(&self) -> char {
        self.tok.chars().next().unwrap_or(' ')
    }

    fn first_upper(&self) -> bool {
        py_is_upper(self.first_char())
    }

    fn first_lower(&self) -> bool {
        py_is_lower(self.first_char())
    }

    /// `_RE_INITIAL`: one non-digit word character and a period.
    fn is_initial(&self) -> bool {
        let mut it = self.tok.chars();
        matches!(
            (it.next(), it.next(), it.next()),
            (Some(c), Some('.'), None) if rx_is_word(c) && !rx_is_digit(c)
        )
    }
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Ortho {
    Starter,
    NotStarter,
    Unknown,
}

/// `_ortho_heuristic`: does the token look like the first word of a sentence?
fn ortho_heuristic(tok: &Token, params: &Params) -> Ortho {
    if matches!(tok.tok, ";" | ":" | "," | "." | "!" | "?") {
        return Ortho::NotStarter;
    }
    let ctx = params.ortho(tok.type_no_sentperiod());
    if tok.first_upper() && ctx & ORTHO_LC != 0 && ctx & ORTHO_MID_UC == 0 {
        return Ortho::Starter;
    }
    if tok.first_lower() && (ctx & ORTHO_UC != 0 || ctx & ORTHO_BEG_LC == 0) {
        return Ortho::NotStarter;
    }
    Ortho::Unknown
}

/// `_second_pass_annotation`: the final sentence-break decision for `t1` given the
/// (first-pass) token after it.
fn second_pass_sentbreak(t1: &Token, t2: &Token, params: &Params) -> bool {
    if !t1.period_final {
        return t1.sentbreak;
    }
    let typ = t1.type_no_period();
    let next_typ = t2.type_no_sentperiod();
    let is_initial = t1.is_initial();

    if params.is_collocation(typ, next_typ) {
        return false;
    }
    if (t1.abbr || t1.ellipsis) && !is_initial {
        if ortho_heuristic(t2, params) == Ortho::Starter {
            return true;
        }
        if t2.first_upper() && params.sent_starters.contains(next_typ) {
            return true;
        }
    }
    if is_initial || typ == "##number##" {
        let h = ortho_heuristic(t2, params);
        if h == Ortho::NotStarter {
            return false;
        }
        if h == Ortho::Unknown
            && is_initial
            && t2.first_upper()
            && params.ortho(next_typ) & ORTHO_LC == 0
        {
            return false;
        }
    }
    t1.sentbreak
}

/// `text_contains_sentbreak`: a break after any token but the last.
fn text_contains_sentbreak(text: &str, params: &Params) -> bool {
    let mut prev: Option<Token> = None;
    let mut found = false;
    for line in text.split('\n') {
        if !line.chars().any(|c| !pystr::is_space(c)) {
            continue;
        }
        punkt_words(line, |w| {
            let next = Token::new(w, params);
            if let Some(p) = &prev
                && second_pass_sentbreak(p, &next, params)
            {
                found = true;
                return false;
            }
            prev = Some(next);
            true
        });
        if found {
            return true;
        }
    }
    false
}

// ---------------------------------------------------------------------------------------
// Sentence spans.
// ---------------------------------------------------------------------------------------

/// `re_boundary_realignment` anchored at the start of `s`: closing quotes/brackets (lazily)
/// followed by whitespace, `--` or a line end. Returns (match end, length of the closing
/// run, i.e. of the match with trailing whitespace stripped).
fn boundary_realignment(s: &str) -> Option<(usize, usize)> {
    let is_closer = |c: char| {
        matches!(
            c,
            '"' | '\''
                | ')'
                | ']'
                | '}'
                | '\u{2018}'
                | '\u{2019}'
                | '\u{201C}'
                | '\u{201D}'
                | '\u{AB}'
                | '\u{BB}'
        )
    };
    let mut p = 0;
    loop {
        let c = char_at(s, p)?;
        if !is_closer(c) {
            return None;
        }
        p += c.len_utf8();
        match char_at(s, p) {
            None => return Some((p, p)),
            Some(d) if rx_is_space(d) => {
                let ws = s[p..]
                    .find(|c: char| !rx_is_space(c))
                    .unwrap_or(s.len() - p);
                return Some((p + ws, p));
            }
            Some(_) if s[p..].starts_with("--") => return Some((p, p)),
            Some(_) => {}
        }
    }
}

/// Byte spans `(start, end)` of the sentences of `text`, as
/// `PunktTokenizer("english").span_tokenize(text)` yields them (realigned).
pub fn sentence_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    sentence_spans_into(text, &mut spans);
    spans
}

/// [`sentence_spans`] into `spans` (cleared first), so that a caller that keeps the
/// vector allocates nothing per text.
pub fn sentence_spans_into(text: &str, spans: &mut Vec<(usize, usize)>) {
    let params = &*PARAMS;
    spans.clear();
    let mut last_break = 0;
    potential_end_contexts(text, |m, context| {
        if text_contains_sentbreak(context, params) {
            spans.push((last_break, m.end()));
            last_break = m.next_tok.unwrap_or(m.end());
        }
    });
    spans.push((last_break, pystr::rstrip(text).len()));

    // _realign_boundaries: pull closing punctuation after a break into the sentence.
    // In place: the sentence made from slices `i` and `i + 1` is written at `kept <= i`,
    // after both are read, so no slice is overwritten before it is read.
    let mut kept = 0;
    let mut realign = 0;
    for i in 0..spans.len() {
        let (s1, e1) = (spans[i].0 + realign, spans[i].1);
        let Some(&(s2, e2)) = spans.get(i + 1) else {
            if s1 < e1 {
                spans[kept] = (s1, e1);
                kept += 1;
            }
            continue;
        };
        if let Some((m_end, keep)) = boundary_realignment(slice(text, s2, e2)) {
            spans[kept] = (s1, s2 + keep);
            kept += 1;
            realign = m_end;
        } else {
            realign = 0;
            if s1 < e1 {
                spans[kept] = (s1, e1);
                kept += 1;
            }
        }
    }
    spans.truncate(kept);
}

/// `nltk.sent_tokenize(text, language="english")`.
pub fn sent_tokenize(text: &str) -> Vec<String> {
    sentence_spans(text)
        .into_iter()
        .map(|(s, e)| slice(text, s, e).to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values printed by `nltk.sent_tokenize` (nltk 3.10.4, punkt_tab english).
    fn check(text: &str, want: &[&str]) {
        assert_eq!(sent_tokenize(text), want, "{text:?}");
    }

    #[test]
    fn abbreviations_initials_numbers() {
        check(
            "Mr. Smith went to Washington. He arrived at 3 p.m. on Jan. 5.",
            &[
                "Mr. Smith went to Washington.",
                "He arrived at 3 p.m. on Jan. 5.",
            ],
        );
        check(
            "The U.S. Army won. It was 3.5 miles away! Really? Yes.",
            &[
                "The U.S. Army won.",
                "It was 3.5 miles away!",
                "Really?",
                "Yes.",
            ],
        );
        check(
            "It cost $4.50. The 2nd. one is here.\n\nNew para.",
            &["It cost $4.50.", "The 2nd.", "one is here.", "New para."],
        );
        check("e.g. this. E.g. That.", &["e.g.", "this.", "E.g.", "That."]);
    }

    #[test]
    fn realignment_and_ellipses() {
        check(
            "(How does it deal with this parenthesis?)  \"It should be part of the previous \
             sentence.\" \"(And the same with this one.)\" ('And this one!')",
            &[
                "(How does it deal with this parenthesis?)",
                "\"It should be part of the previous sentence.\"",
                "\"(And the same with this one.)\"",
                "('And this one!')",
            ],
        );
        check(
            "Very bad acting!!! I promise.",
            &["Very bad acting!!!", "I promise."],
        );
        check(
            "Johann S. Bach wrote it. i is lowercase... and so on. . . Next one.",
            &[
                "Johann S. Bach wrote it.",
                "i is lowercase... and so on.",
                ".",
                ".",
                "Next one.",
            ],
        );
    }

    #[test]
    fn odd_inputs() {
        // U+001C is not `\s` for the regex module but is stripped by str.rstrip().
        check(" Hello. \u{1c}", &[" Hello."]);
        check("Hello .! x", &["Hello .", "!", "x"]);
        check(
            "ΣΑΣ. İstanbul is big. ſo it is.",
            &["ΣΑΣ.", "İstanbul is big.", "ſo it is."],
        );
        assert!(sent_tokenize("").is_empty());
        assert!(sent_tokenize("  \n").is_empty());
    }

    #[test]
    fn parameters_loaded() {
        let p = &*PARAMS;
        assert_eq!(p.abbrev_types.len(), 156);
        assert!(p.abbrev_types.contains(". . "));
        assert_eq!(p.collocations.values().map(Vec::len).sum::<usize>(), 37);
        assert_eq!(p.sent_starters.len(), 39);
        assert_eq!(p.ortho_context.len(), 20366);
        assert_eq!(p.ortho("coverage"), 36);
        assert!(p.is_collocation("##number##", "international"));
    }
}
