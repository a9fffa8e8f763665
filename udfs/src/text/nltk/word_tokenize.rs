//! `nltk.word_tokenize(text)` of NLTK 3.10.4 (language "english", `preserve_line=False`):
//! Punkt sentences, then `NLTKWordTokenizer().tokenize(sentence)` on each.
//!
//! The tokenizer is a fixed sequence of regex substitutions over the whole string. Steps
//! without look-around use the regex crate (same leftmost-first results as Python's
//! backtracking engines); the others are hand-written. Most of NLTK's patterns run on the
//! `regex` module, the contraction patterns on CPython's `re`; their `\w`, `\d`, `\s` and
//! case-insensitive matching differ and are taken from `super::punkt`'s helpers.

use std::borrow::Cow;
use std::cell::Cell;
use std::sync::LazyLock;

use regex::Regex;

use super::TokenList;
use super::punkt::{self, RX_DIGIT_EXTRA, re_is_word, rx_is_space, rx_is_word};
use crate::text::pystr;

struct Patterns {
    /// STARTING_QUOTES 1: opening quotes and backtick runs.
    open_quotes: Regex,
    /// STARTING_QUOTES 4: `"` or `''` after a space or opening bracket.
    quote_after_open: Regex,
    /// PUNCTUATION 2: `:`/`,` before a non-digit.
    colon_comma: Regex,
    /// PUNCTUATION 4, 5 and 6 (disjoint single-pass paddings, merged).
    dots_symbols_dashes: Regex,
    /// PUNCTUATION 8.
    question_exclaim: Regex,
    /// PUNCTUATION 9: a lone `'` before a space.
    quote_space: Regex,
    /// PUNCTUATION 10 and PARENS_BRACKETS (disjoint paddings, merged).
    star_brackets: Regex,
    /// ENDING_QUOTES 1.
    close_quotes: Regex,
    /// ENDING_QUOTES 5.
    clitic_s_m_d: Regex,
    /// ENDING_QUOTES 6.
    clitic_ll_re_ve_nt: Regex,
}

static PATTERNS: LazyLock<Patterns> = LazyLock::new(|| {
    let re = |p: &str| Regex::new(p).unwrap();
    Patterns {
        open_quotes: re("[«“‘„]|`+"),
        quote_after_open: re(r#"([ (\[{<])("|'')"#),
        colon_comma: re(&format!(
            r"([:,])([^\d\x{{{:X}}}-\x{{{:X}}}])",
            RX_DIGIT_EXTRA.0, RX_DIGIT_EXTRA.1
        )),
        dots_symbols_dashes: re(r"\.{2,}|[;@#$%&\x{2012}-\x{2015}]"),
        question_exclaim: re(r"[?!]"),
        quote_space: re(r"([^'])' "),
        star_brackets: re(r"[*\]\[(){}<>]"),
        close_quotes: re("[»”’]"),
        clitic_s_m_d: re(r"([^' ])('[sS]|'[mM]|'[dD]|') "),
        clitic_ll_re_ve_nt: re(r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) "),
    }
});

/// Applies a regex substitution in place, keeping the string when nothing matched.
#[inline]
fn sub(text: &mut String, re: &Regex, rep: &str) {
    if let Cow::Owned(s) = re.replace_all(text, rep) {
        *text = s;
    }
}

/// Plain-string substitution (what `re.sub` does for a literal pattern).
#[inline]
fn sub_lit(text: &mut String, from: &str, to: &str) {
    if text.contains(from) {
        *text = text.replace(from, to);
    }
}

#[inline]
fn char_at(s: &str, i: usize) -> Option<char> {
    s.get(i..).and_then(|t| t.chars().next())
}

#[inline]
fn char_before(s: &str, i: usize) -> Option<char> {
    s[..i].chars().next_back()
}

/// `regex` module case-insensitive equality with an ASCII lowercase pattern letter
/// (only `s` has a non-ASCII partner there: U+017F).
#[inline]
fn rx_ieq(c: char, p: u8) -> bool {
    c.to_ascii_lowercase() == p as char || (p == b's' && c == '\u{17F}')
}

/// The same for CPython `re`, which also pairs `i` with U+0130 and U+0131.
#[inline]
fn re_ieq(c: char, p: u8) -> bool {
    c.to_ascii_lowercase() == p as char
        || (p == b's' && c == '\u{17F}')
        || (p == b'i' && matches!(c, '\u{130}' | '\u{131}'))
}

/// Length of `word` matched case-insensitively at `s[i..]` with `eq`, if it matches.
#[inline]
fn match_word(s: &str, i: usize, word: &str, eq: fn(char, u8) -> bool) -> Option<usize> {
    let mut it = s[i..].char_indices();
    for &p in word.as_bytes() {
        let (_, c) = it.next()?;
        if !eq(c, p) {
            return None;
        }
    }
    Some(it.next().map_or(s.len() - i, |(j, _)| j))
}

/// STARTING_QUOTES 5: `(?i)(?<!\w)(\')(?!(?:re|ve|ll|m|t|s|d|n)\b)(?=\w)` -> `' `.
fn split_opening_apostrophes(text: &mut String) {
    if !text.contains('\'') {
        return;
    }
    let s = text.as_str();
    let mut out = String::with_capacity(s.len() + 8);
    let mut last = 0;
    for (i, _) in s.match_indices('\'') {
        if char_before(s, i).is_some_and(rx_is_word) {
            continue;
        }
        let j = i + 1;
        if !char_at(s, j).is_some_and(rx_is_word) {
            continue;
        }
        let clitic = ["re", "ve", "ll", "m", "t", "s", "d", "n"].iter().any(|w| {
            match_word(s, j, w, rx_ieq).is_some_and(|n| !char_at(s, j + n).is_some_and(rx_is_word))
        });
        if clitic {
            continue;
        }
        out.push_str(&s[last..j]);
        out.push(' ');
        last = j;
    }
    if last > 0 {
        out.push_str(&s[last..]);
        *text = out;
    }
}

/// Closing characters of PUNCTUATION 1 (which includes the space).
#[inline]
fn is_final_closer_wide(c: char) -> bool {
    matches!(
        c,
        ']' | ')' | '}' | '>' | '"' | '\'' | '»' | '”' | '’' | ' '
    )
}

/// Closing characters of PUNCTUATION 7.
#[inline]
fn is_final_closer(c: char) -> bool {
    matches!(c, ']' | ')' | '}' | '>' | '"' | '\'')
}

/// PUNCTUATION 1 and 7: `([^\.])(\.)([closers]*)\s*$`. Only the last period can match
/// (nothing after it may be another period), and the closers then whitespace must run to
/// the end. Replaces the match with `prev + sep + "." + sep2 + closers + " "`.
fn split_final_period(text: &mut String, is_closer: fn(char) -> bool, wide: bool) {
    let s = text.as_str();
    let Some(p) = s.rfind('.') else {
        return;
    };
    let Some(prev) = char_before(s, p) else {
        return;
    };
    if prev == '.' {
        return;
    }
    let closers_end = p
        + 1
        + s[p + 1..]
            .find(|c: char| !is_closer(c))
            .unwrap_or(s.len() - p - 1);
    if !s[closers_end..].chars().all(rx_is_space) {
        return;
    }
    // `s[..p] + sep + s[p + 1..closers_end] + " "`, in place: only the closers move.
    text.truncate(closers_end);
    text.push(' ');
    text.replace_range(p..p + 1, if wide { " . " } else { " ." });
}

/// PUNCTUATION 3: `([:,])$` -> ` \1 `, where `$` also matches before a final newline.
fn split_final_colon_comma(text: &mut String) {
    let b = text.as_bytes();
    let n = b.len();
    let at = if n >= 1 && matches!(b[n - 1], b':' | b',') {
        n - 1
    } else if n >= 2 && b[n - 1] == b'\n' && matches!(b[n - 2], b':' | b',') {
        n - 2
    } else {
        return;
    };
    let c = b[at] as char;
    text.replace_range(at..at + 1, &format!(" {c} "));
}

/// How a CONTRACTIONS pattern must be followed: `\b` or `(?=\s)`.
#[derive(Clone, Copy)]
enum Tail {
    Boundary,
    Space,
}

/// CONTRACTIONS2: `(?i)\b(first)(second)<tail>`; CPython `re` semantics.
const CONTRACTIONS2: [(&str, &str, Tail); 8] = [
    ("can", "not", Tail::Boundary),
    ("d", "'ye", Tail::Boundary),
    ("gim", "me", Tail::Boundary),
    ("gon", "na", Tail::Boundary),
    ("got", "ta", Tail::Boundary),
    ("lem", "me", Tail::Boundary),
    ("more", "'n", Tail::Boundary),
    ("wan", "na", Tail::Space),
];

/// Bit `k` is set unless [`CONTRACTIONS2`]`[k]` certainly cannot match in `text` or in
/// anything the CONTRACTIONS2 substitutions make of it.
///
/// A match starts with the pattern's first two characters. Neither first letter is `s`
/// or `i`, so it is matched only by its two ASCII cases; the second character is too,
/// or it is `'`, or `i`, which [`re_ieq`] also pairs with U+0130/U+0131 (UTF-8 lead byte
/// 0xC4). So a match needs two adjacent bytes of that shape. The substitutions only
/// insert spaces (around pieces they keep), so they never make two bytes adjacent that
/// were not, and a pair absent before the first substitution stays absent.
fn contractions2_possible(text: &[u8]) -> u8 {
    let mut possible = 0u8;
    for w in text.windows(2) {
        let (a, b) = (w[0].to_ascii_lowercase(), w[1].to_ascii_lowercase());
        possible |= match (a, b) {
            (b'c', b'a') => 1 << 0,
            (b'd', b'\'') => 1 << 1,
            (b'g', b'i' | 0xC4) => 1 << 2,
            (b'g', b'o') => (1 << 3) | (1 << 4),
            (b'l', b'e') => 1 << 5,
            (b'm', b'o') => 1 << 6,
            (b'w', b'a') => 1 << 7,
            _ => 0,
        };
    }
    possible
}

/// [`contractions2_possible`] on ASCII text, where [`re_ieq`] is plain ASCII
/// case-insensitivity: bit `k` is set when the whole word of [`CONTRACTIONS2`]`[k]`
/// (first + second) occurs, in any case. Common English (`can`, `go`, `let`, `more`,
/// `was`) has the pairs the general test looks for, and each set bit costs a scan of
/// the text; whole words are rare.
fn contractions2_present_ascii(text: &[u8]) -> u8 {
    const WORDS: [&[u8]; 8] = [
        b"cannot", b"d'ye", b"gimme", b"gonna", b"gotta", b"lemme", b"more'n", b"wanna",
    ];
    /// `CAND[j][b]`: bit `k` set when byte `j` of `WORDS[k]` is `b` in either case. Every
    /// word has at least four bytes, so a position whose next four bytes leave no bit
    /// set starts none, and the scan looks at no other (a table per byte keeps the loop
    /// free of branches that common words like `can`, `more`, `was` would mispredict).
    const CAND: [[u8; 256]; 4] = {
        let mut t = [[0u8; 256]; 4];
        let mut k = 0;
        while k < WORDS.len() {
            let mut j = 0;
            while j < 4 {
                let b = WORDS[k][j];
                t[j][b.to_ascii_lowercase() as usize] |= 1 << k;
                t[j][b.to_ascii_uppercase() as usize] |= 1 << k;
                j += 1;
            }
            k += 1;
        }
        t
    };
    let mut present = 0u8;
    for (i, w) in text.windows(4).enumerate() {
        let mut cand = CAND[0][usize::from(w[0])]
            & CAND[1][usize::from(w[1])]
            & CAND[2][usize::from(w[2])]
            & CAND[3][usize::from(w[3])];
        while cand != 0 {
            let k = cand.trailing_zeros() as usize;
            cand &= cand - 1;
            if text
                .get(i..i + WORDS[k].len())
                .is_some_and(|w| w.eq_ignore_ascii_case(WORDS[k]))
            {
                present |= 1 << k;
            }
        }
    }
    present
}

/// CONTRACTIONS3: `(?i) ('t)(second)\b`.
const CONTRACTIONS3: [&str; 2] = ["is", "was"];

/// Splits every occurrence of `first`+`second` (case-insensitive, `re` rules) into
/// ` first second `, requiring before it a word boundary or (`lead_space`) a literal space
/// that belongs to the match, and `tail` after it.
///
/// Only some bytes can start a match, and the scan skips the others without decoding:
/// with `lead_space` a match starts with a space; otherwise with `first`'s first letter,
/// and when that letter is neither `s` nor `i` its only case-insensitive partners under
/// [`re_ieq`] are its two ASCII cases. Such bytes are always character boundaries.
fn split_contraction(text: &mut String, lead_space: bool, first: &str, second: &str, tail: Tail) {
    let s = text.as_str();
    let lead = if lead_space {
        b' '
    } else {
        first.as_bytes()[0]
    };
    let any_start = !lead_space && matches!(lead, b's' | b'i');
    let mut out: Option<String> = None;
    let mut last = 0;
    for (start, &b) in s.as_bytes().iter().enumerate() {
        if start < last {
            continue; // inside the previous match
        }
        if any_start {
            if !s.is_char_boundary(start) {
                continue;
            }
        } else if b.to_ascii_lowercase() != lead {
            continue;
        }
        let body = if lead_space { start + 1 } else { start };
        let Some(n1) = match_word(s, body, first, re_ieq) else {
            continue;
        };
        let Some(n2) = match_word(s, body + n1, second, re_ieq) else {
            continue;
        };
        // `\b` before a letter: no word character before it.
        if !lead_space && char_before(s, start).is_some_and(re_is_word) {
            continue;
        }
        let end = body + n1 + n2;
        let next = char_at(s, end);
        let ok_tail = match tail {
            Tail::Boundary => !next.is_some_and(re_is_word),
            Tail::Space => next.is_some_and(pystr::is_space),
        };
        if !ok_tail {
            continue;
        }
        let o = out.get_or_insert_with(|| String::with_capacity(s.len() + 8));
        o.push_str(&s[last..start]);
        o.push(' ');
        o.push_str(&s[body..body + n1]);
        o.push(' ');
        o.push_str(&s[body + n1..end]);
        o.push(' ');
        last = end;
    }
    if let Some(mut o) = out {
        o.push_str(&s[last..]);
        *text = o;
    }
}

/// ENDING_QUOTES 4: every run of (`regex`-module) whitespace becomes one space.
fn collapse_spaces(text: &mut String) {
    let s = text.as_str();
    let mut out = String::with_capacity(s.len());
    let mut in_space = false;
    for c in s.chars() {
        if rx_is_space(c) {
            if !in_space {
                out.push(' ');
            }
            in_space = true;
        } else {
            out.push(c);
            in_space = false;
        }
    }
    *text = out;
}

/// The regex passes on ASCII text, as byte scanners.
///
/// Azure hands only ASCII texts to `word_tokenize` (see `super::azure_tokens_into`), and
/// every substitution inserts ASCII, so the Treebank passes mostly see ASCII. There the
/// patterns' classes are plain byte sets, and each pass is a leftmost, non-overlapping
/// scan like `replace_all`'s: at each position either the pattern matches (its
/// alternatives tried in order) and the scan resumes after the match, or the byte is
/// copied. The regex crate needs its capture engine for the `${1}` replacements, which
/// profiles showed as most of BLEU's time on short sentences; these scans are a few
/// comparisons a byte. The property test `ascii_passes_equal_the_regexes` holds them to
/// the regexes.
mod ascii {
    /// Rewrites every leftmost non-overlapping match of a pattern in ASCII `text`:
    /// `at(s, i)` is the length of the match starting at `i`, if one does (never 0), and
    /// `emit` writes its replacement. Leaves the string as it is when nothing matched.
    #[inline]
    fn rewrite(
        text: &mut String,
        at: impl Fn(&[u8], usize) -> Option<usize>,
        emit: impl Fn(&mut Vec<u8>, &[u8]),
    ) {
        let s = text.as_bytes();
        let mut out: Option<Vec<u8>> = None;
        let (mut last, mut i) = (0, 0);
        while i < s.len() {
            match at(s, i) {
                Some(n) => {
                    let o = out.get_or_insert_with(|| {
                        let mut o = super::SPARE.take();
                        o.clear();
                        o.reserve(s.len() + 16);
                        o
                    });
                    o.extend_from_slice(&s[last..i]);
                    emit(o, &s[i..i + n]);
                    i += n;
                    last = i;
                }
                None => i += 1,
            }
        }
        if let Some(mut o) = out {
            o.extend_from_slice(&s[last..]);
            // ASCII in, ASCII inserted: always UTF-8.
            let new = String::from_utf8(o).expect("ASCII text stays ASCII");
            super::SPARE.set(std::mem::replace(text, new).into_bytes());
        }
    }

    /// `" " + match + " "`.
    fn pad(o: &mut Vec<u8>, m: &[u8]) {
        o.push(b' ');
        o.extend_from_slice(m);
        o.push(b' ');
    }

    /// `first byte + " " + the rest`: `${1} ${2}` and `${1} ${2} ` where the match ends
    /// in the space it keeps.
    fn split_after_first(o: &mut Vec<u8>, m: &[u8]) {
        o.push(m[0]);
        o.push(b' ');
        o.extend_from_slice(&m[1..]);
    }

    #[inline]
    fn byte(s: &[u8], i: usize) -> u8 {
        s.get(i).copied().unwrap_or(0)
    }

    /// STARTING_QUOTES 1 on ASCII: `` `+ `` -> ` $0 `.
    pub(super) fn open_quotes(t: &mut String) {
        rewrite(
            t,
            |s, i| (s[i] == b'`').then(|| s[i..].iter().take_while(|&&b| b == b'`').count()),
            pad,
        );
    }

    /// STARTING_QUOTES 4: `([ (\[{<])("|'')` -> `${1} `` `.
    pub(super) fn quote_after_open(t: &mut String) {
        rewrite(
            t,
            |s, i| {
                if !matches!(s[i], b' ' | b'(' | b'[' | b'{' | b'<') {
                    return None;
                }
                match (byte(s, i + 1), byte(s, i + 2)) {
                    (b'"', _) => Some(2),
                    (b'\'', b'\'') => Some(3),
                    _ => None,
                }
            },
            |o, m| {
                o.push(m[0]);
                o.extend_from_slice(b" `` ");
            },
        );
    }

    /// PUNCTUATION 2: `([:,])([^\d])` -> ` ${1} ${2}` (on ASCII `\d` is `[0-9]`).
    pub(super) fn colon_comma(t: &mut String) {
        rewrite(
            t,
            |s, i| {
                (matches!(s[i], b':' | b',') && i + 1 < s.len() && !s[i + 1].is_ascii_digit())
                    .then_some(2)
            },
            |o, m| {
                o.push(b' ');
                split_after_first(o, m);
            },
        );
    }

    /// PUNCTUATION 4-6: `\.{2,}|[;@#$%&]` -> ` $0 `.
    pub(super) fn dots_symbols(t: &mut String) {
        rewrite(
            t,
            |s, i| match s[i] {
                b'.' if byte(s, i + 1) == b'.' => {
                    Some(s[i..].iter().take_while(|&&b| b == b'.').count())
                }
                b';' | b'@' | b'#' | b'$' | b'%' | b'&' => Some(1),
                _ => None,
            },
            pad,
        );
    }

    /// A byte set as a table.
    const fn set_of(bytes: &[u8]) -> [bool; 256] {
        let mut t = [false; 256];
        let mut i = 0;
        while i < bytes.len() {
            t[bytes[i] as usize] = true;
            i += 1;
        }
        t
    }

    /// PUNCTUATION 8.
    pub(super) const QUESTION_EXCLAIM: [bool; 256] = set_of(b"?!");
    /// PUNCTUATION 10 and PARENS_BRACKETS.
    pub(super) const STAR_BRACKETS: [bool; 256] = set_of(b"*[](){}<>");

    /// Every byte of `set` -> ` $0 `.
    pub(super) fn pad_each(t: &mut String, set: &[bool; 256]) {
        rewrite(t, |s, i| set[usize::from(s[i])].then_some(1), pad);
    }

    /// PUNCTUATION 9: `([^'])' ` -> `${1} ' `.
    pub(super) fn quote_space(t: &mut String) {
        rewrite(
            t,
            |s, i| (s[i] != b'\'' && s.get(i + 1..i + 3) == Some(&b"' "[..])).then_some(3),
            split_after_first,
        );
    }

    /// ENDING_QUOTES 5: `([^' ])('[sS]|'[mM]|'[dD]|') ` -> `${1} ${2} `.
    pub(super) fn clitic_s_m_d(t: &mut String) {
        rewrite(
            t,
            |s, i| {
                if matches!(s[i], b'\'' | b' ') || byte(s, i + 1) != b'\'' {
                    return None;
                }
                let c = byte(s, i + 2);
                if matches!(c, b's' | b'S' | b'm' | b'M' | b'd' | b'D') && byte(s, i + 3) == b' ' {
                    Some(4)
                } else if c == b' ' {
                    Some(3)
                } else {
                    None
                }
            },
            split_after_first,
        );
    }

    /// ENDING_QUOTES 6: `([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) ` -> `${1} ${2} `.
    pub(super) fn clitic_ll_re_ve_nt(t: &mut String) {
        const CLITICS: [&[u8; 3]; 8] = [
            b"'ll", b"'LL", b"'re", b"'RE", b"'ve", b"'VE", b"n't", b"N'T",
        ];
        rewrite(
            t,
            |s, i| {
                if matches!(s[i], b'\'' | b' ') || byte(s, i + 4) != b' ' {
                    return None;
                }
                let g = &s[i + 1..i + 4];
                CLITICS.iter().any(|c| g == &c[..]).then_some(5)
            },
            split_after_first,
        );
    }

    /// ENDING_QUOTES 4 on ASCII: every run of whitespace (`\s`: space, `\t`-`\r`,
    /// and U+001C-U+001F are not in it) becomes one space.
    pub(super) fn collapse_spaces(t: &mut String) {
        let mut out = Vec::with_capacity(t.len());
        let mut in_space = false;
        for &b in t.as_bytes() {
            if matches!(b, b' ' | b'\t'..=b'\r') {
                if !in_space {
                    out.push(b' ');
                }
                in_space = true;
            } else {
                out.push(b);
                in_space = false;
            }
        }
        *t = String::from_utf8(out).expect("ASCII text stays ASCII");
    }
}

/// `NLTKWordTokenizer().tokenize(sentence)`, appending the tokens to `out`.
pub fn tokenize_sentence_into(sentence: &str, out: &mut TokenList) {
    tokenize_sentence_with(sentence, out, true);
}

/// [`tokenize_sentence_into`]; `scanners` picks the byte scanners of [`ascii`] for the
/// regex passes, the per-token ending of [`ending_per_token`] when the sentence is
/// ASCII, and the skipping of passes by [`Present`] (false: every regex pass over the
/// whole string, which the tests compare them with).
fn tokenize_sentence_with(sentence: &str, out: &mut TokenList, scanners: bool) {
    let pt = &*PATTERNS;
    // Every substitution inserts ASCII only, so this holds throughout; passes whose
    // pattern needs a character the text lacks are skipped.
    let ascii = sentence.is_ascii();
    let fast = ascii && scanners;
    // The passes below insert only spaces, backticks and (ENDING_QUOTES) apostrophes,
    // and never make `..`; so a pass whose pattern needs some other ASCII character, or
    // `..`, that the sentence lacks cannot match, whatever the passes before it did.
    // The tests' reference (`scanners` false) runs every pass, skipping none.
    let has = if scanners {
        Present::of(sentence.as_bytes())
    } else {
        Present::everything()
    };
    // Room for the spaces the passes insert, so that most sentences are not copied
    // again to grow.
    let mut t = TEXT.take();
    t.clear();
    t.reserve(sentence.len() + sentence.len() / 4 + 8);
    t.push_str(sentence);

    // STARTING_QUOTES
    if !ascii || has.any(b"`") {
        if fast {
            ascii::open_quotes(&mut t);
        } else {
            sub(&mut t, &pt.open_quotes, " ${0} ");
        }
    }
    let mut backticks = has.any(b"`");
    if t.starts_with('"') {
        t.replace_range(0..1, "``");
        backticks = true;
    }
    if !ascii || backticks {
        sub_lit(&mut t, "``", " `` ");
    }
    if has.any(b"\"'") {
        if fast {
            ascii::quote_after_open(&mut t);
        } else {
            sub(&mut t, &pt.quote_after_open, "${1} `` ");
        }
    }
    if has.any(b"'") {
        split_opening_apostrophes(&mut t);
    }

    // PUNCTUATION
    split_final_period(&mut t, is_final_closer_wide, true);
    if has.any(b":,") {
        if fast {
            ascii::colon_comma(&mut t);
        } else {
            sub(&mut t, &pt.colon_comma, " ${1} ${2}");
        }
        split_final_colon_comma(&mut t);
    }
    if !ascii || has.double_dot || has.any(b";@#$%&") {
        if fast {
            ascii::dots_symbols(&mut t);
        } else {
            sub(&mut t, &pt.dots_symbols_dashes, " ${0} ");
        }
    }
    split_final_period(&mut t, is_final_closer, false);
    if has.any(b"?!") {
        if fast {
            ascii::pad_each(&mut t, &ascii::QUESTION_EXCLAIM);
        } else {
            sub(&mut t, &pt.question_exclaim, " ${0} ");
        }
    }
    if has.any(b"'") {
        if fast {
            ascii::quote_space(&mut t);
        } else {
            sub(&mut t, &pt.quote_space, "${1} ' ");
        }
    }
    if has.any(b"*[](){}<>") {
        if fast {
            ascii::pad_each(&mut t, &ascii::STAR_BRACKETS);
        } else {
            sub(&mut t, &pt.star_brackets, " ${0} ");
        }
    }

    // DOUBLE_DASHES
    if !ascii || has.any(b"-") {
        sub_lit(&mut t, "--", " -- ");
    }

    if fast {
        ending_per_token(&t, out);
    } else {
        // ENDING_QUOTES, on the space-padded text
        let mut t = format!(" {t} ");
        ending(&mut t, ascii, false);
        for token in pystr::split_whitespace(&t) {
            out.push(token);
        }
    }
    TEXT.set(t);
}

thread_local! {
    /// The buffer of the sentence being tokenized, kept for the next sentence (a
    /// sentence allocated one, and often grew it once, when each had its own).
    static TEXT: Cell<String> = const { Cell::new(String::new()) };
    /// A spare buffer for [`ascii::rewrite`]: a rewrite writes the new text into it and
    /// keeps the text's old buffer as the next spare.
    static SPARE: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Which ASCII bytes a text holds (bit `b` of the 128), and whether it holds `..`.
struct Present {
    bits: [u64; 2],
    double_dot: bool,
}

impl Present {
    fn of(text: &[u8]) -> Self {
        // Two registers and masks rather than `bits[b >> 6] |= ...`: an indexed update
        // in memory makes each byte wait for the previous byte's store.
        let (mut lo, mut hi) = (0u64, 0u64);
        let mut prev_dot = false;
        let mut double_dot = false;
        for &b in text {
            let bit = (1u64 << (b & 63)) & u64::from(b < 0x80).wrapping_neg();
            let upper = u64::from(b >> 6 & 1).wrapping_neg();
            lo |= bit & !upper;
            hi |= bit & upper;
            let dot = b == b'.';
            double_dot |= dot & prev_dot;
            prev_dot = dot;
        }
        Present {
            bits: [lo, hi],
            double_dot,
        }
    }

    /// Every ASCII byte and `..` present: no pass is skipped.
    fn everything() -> Self {
        Present {
            bits: [u64::MAX; 2],
            double_dot: true,
        }
    }

    /// Whether any byte of `set` (ASCII) is present.
    #[inline]
    fn any(&self, set: &[u8]) -> bool {
        set.iter()
            .any(|&b| self.bits[usize::from(b >> 6) & 1] & (1 << (b & 63)) != 0)
    }
}

/// ENDING_QUOTES and the CONTRACTIONS passes on the space-padded text `t`, leaving it
/// to be split at (Python) whitespace. `fast` as in [`tokenize_sentence_with`].
fn ending(t: &mut String, ascii: bool, fast: bool) {
    let pt = &*PATTERNS;
    if !ascii {
        sub(t, &pt.close_quotes, " ${0} ");
    }
    sub_lit(t, "''", " '' ");
    sub_lit(t, "\"", " '' ");
    if fast {
        ascii::collapse_spaces(t);
    } else {
        collapse_spaces(t);
    }
    let apostrophe = t.contains('\'');
    if apostrophe {
        if fast {
            ascii::clitic_s_m_d(t);
            ascii::clitic_ll_re_ve_nt(t);
        } else {
            sub(t, &pt.clitic_s_m_d, "${1} ${2} ");
            sub(t, &pt.clitic_ll_re_ve_nt, "${1} ${2} ");
        }
    }

    let possible = if fast {
        contractions2_present_ascii(t.as_bytes())
    } else {
        contractions2_possible(t.as_bytes())
    };
    for (k, (first, second, tail)) in CONTRACTIONS2.into_iter().enumerate() {
        if possible & (1 << k) != 0 {
            split_contraction(t, false, first, second, tail);
        }
    }
    if apostrophe {
        for second in CONTRACTIONS3 {
            split_contraction(t, true, "'t", second, Tail::Boundary);
        }
    }
}

/// [`ending`] of the ASCII text `t` (not yet padded), one token at a time, then the
/// final split, appending the tokens to `out`.
///
/// After `format!(" {t} ")` and the whitespace collapse the text is its tokens (runs
/// of `regex`'s ASCII `\s`: space, `\t`-`\r`) each between single spaces, and no pass
/// of [`ending`] matches across a space: `''`, `"`, the clitics
/// (`[^' ]...' ` and the like) and the contraction words hold no space (a clitic
/// match ends in the token's trailing space and re-emits it; `(?=\s)` and `\b` at a
/// token's edge see the space). So the passes on the whole text equal the passes on
/// `" " + token + " "` for each token, concatenated. A token without `'`, `"`,
/// U+001C-U+001F (Python whitespace that `\s` lacks) and contraction word is then left
/// as it is and split nowhere: it is pushed as it is, and only the others take the
/// passes.
fn ending_per_token(t: &str, out: &mut TokenList) {
    /// `regex`'s ASCII `\s`.
    const SPACE: u8 = 1;
    /// Bytes a token must lack to be pushed as it is.
    const SPECIAL: u8 = 2;
    const CLASS: [u8; 256] = {
        let mut c = [0u8; 256];
        c[b' ' as usize] = SPACE;
        let mut b = b'\t';
        while b <= b'\r' {
            c[b as usize] = SPACE;
            b += 1;
        }
        c[b'\'' as usize] = SPECIAL;
        c[b'"' as usize] = SPECIAL;
        let mut b = 0x1C;
        while b <= 0x1F {
            c[b as usize] = SPECIAL;
            b += 1;
        }
        c
    };
    let contractions = contractions2_present_ascii(t.as_bytes()) != 0;
    let mut padded = String::new();
    let mut token = |tok: &str, special: bool| {
        if !special && !(contractions && contractions2_present_ascii(tok.as_bytes()) != 0) {
            out.push(tok);
            return;
        }
        padded.clear();
        padded.push(' ');
        padded.push_str(tok);
        padded.push(' ');
        ending(&mut padded, true, true);
        for piece in pystr::split_whitespace(&padded) {
            out.push(piece);
        }
    };
    let bytes = t.as_bytes();
    let mut start = 0;
    let mut flags = 0u8;
    for (i, &b) in bytes.iter().enumerate() {
        let class = CLASS[usize::from(b)];
        if class & SPACE != 0 {
            if start < i {
                token(&t[start..i], flags & SPECIAL != 0);
            }
            start = i + 1;
            flags = 0;
        } else {
            flags |= class;
        }
    }
    if start < bytes.len() {
        token(&t[start..], flags & SPECIAL != 0);
    }
}

/// `NLTKWordTokenizer().tokenize(sentence)`.
pub fn tokenize_sentence(sentence: &str) -> Vec<String> {
    let mut out = TokenList::default();
    tokenize_sentence_into(sentence, &mut out);
    out.iter().map(str::to_owned).collect()
}

/// `nltk.word_tokenize(text)`.
pub fn word_tokenize(text: &str) -> Vec<String> {
    let mut out = TokenList::default();
    word_tokenize_into(text, &mut out);
    out.iter().map(str::to_owned).collect()
}

/// [`word_tokenize`], appending the tokens to `out`.
pub fn word_tokenize_into(text: &str, out: &mut TokenList) {
    thread_local! {
        /// The sentence spans of the text being tokenized, kept for the next text.
        static SENTENCES: Cell<Vec<(usize, usize)>> = const { Cell::new(Vec::new()) };
    }
    let mut sentences = SENTENCES.take();
    punkt::sentence_spans_into(text, &mut sentences);
    for &(s, e) in &sentences {
        tokenize_sentence_into(text.get(s..e).unwrap_or(""), out);
    }
    SENTENCES.set(sentences);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::mutations::{Mutator, golden_texts};

    // Expected values printed by nltk 3.10.4 (`nltk.word_tokenize` / `NLTKWordTokenizer`).
    fn check(text: &str, want: &[&str]) {
        assert_eq!(word_tokenize(text), want, "{text:?}");
    }

    #[test]
    fn treebank_examples() {
        check(
            "Good muffins cost $3.88\nin New York.  Please buy me\ntwo of them.\nThanks.",
            &[
                "Good", "muffins", "cost", "$", "3.88", "in", "New", "York", ".", "Please", "buy",
                "me", "two", "of", "them", ".", "Thanks", ".",
            ],
        );
        check(
            "Mr. Smith's U.S. trip... cost $1,000.",
            &[
                "Mr.", "Smith", "'s", "U.S.", "trip", "...", "cost", "$", "1,000", ".",
            ],
        );
        check(
            "Visit http://example.com/a.b?x=1 now. E-mail a.b@c.com.",
            &[
                "Visit",
                "http",
                ":",
                "//example.com/a.b",
                "?",
                "x=1",
                "now",
                ".",
                "E-mail",
                "a.b",
                "@",
                "c.com",
                ".",
            ],
        );
    }

    #[test]
    fn quotes_and_clitics() {
        check(
            "\"They can't go,\" she said. 'Tis gonna be fine, isn't it?",
            &[
                "``", "They", "ca", "n't", "go", ",", "''", "she", "said", ".", "'", "Tis", "gon",
                "na", "be", "fine", ",", "is", "n't", "it", "?",
            ],
        );
        check(
            "``Quoted'' and 'single' quotes: it's 'ok'.",
            &[
                "``", "Quoted", "''", "and", "'", "single", "'", "quotes", ":", "it", "'s", "'",
                "ok", "'", ".",
            ],
        );
        check(
            "He's here; she'd've left @ 5:30, #1 & 50% off!",
            &[
                "He", "'s", "here", ";", "she'd", "'ve", "left", "@", "5:30", ",", "#", "1", "&",
                "50", "%", "off", "!",
            ],
        );
        check("The end.'\"\n", &["The", "end", ".", "'", "''"]);
    }

    #[test]
    fn contractions() {
        check(
            "I cannot believe you wanna leave--gimme a break... (OK) [really] {yes} <no>",
            &[
                "I", "can", "not", "believe", "you", "wan", "na", "leave", "--", "gim", "me", "a",
                "break", "...", "(", "OK", ")", "[", "really", "]", "{", "yes", "}", "<", "no",
                ">",
            ],
        );
        // 'twas is split at the apostrophe by STARTING_QUOTES before CONTRACTIONS3 runs.
        check(
            "more'n d'ye 'twas WANNA go?",
            &[
                "more", "'n", "d", "'ye", "'", "twas", "WAN", "NA", "go", "?",
            ],
        );
    }

    /// The whole-word pre-check spells out the words of CONTRACTIONS2.
    #[test]
    fn the_ascii_pre_check_knows_every_contraction() {
        for (k, (first, second, _)) in CONTRACTIONS2.into_iter().enumerate() {
            let word = format!("{first}{second}");
            assert_eq!(
                contractions2_present_ascii(word.as_bytes()),
                1 << k,
                "{word}"
            );
            let upper = format!("x {} x", word.to_uppercase());
            assert_eq!(
                contractions2_present_ascii(upper.as_bytes()),
                1 << k,
                "{upper}"
            );
        }
        assert_eq!(
            contractions2_present_ascii(b"can not go let more was want"),
            0
        );
    }

    proptest::proptest! {
        /// The table scan finds exactly the words a plain search finds.
        #[test]
        fn the_ascii_pre_check_equals_a_plain_search(
            pieces in proptest::collection::vec(proptest::sample::select(&[
                "can", "CanNot", "not", "d'", "D'YE", "ye", "gi", "mme", "gon", "NA", "got",
                "TA", "lem", "me", "more", "'n", "MORE'N", "wan", "na", "WANNA", "x", " ", "'",
            ][..]), 0..12),
        ) {
            let text = pieces.concat();
            let mut want = 0u8;
            for (k, (first, second, _)) in CONTRACTIONS2.into_iter().enumerate() {
                let word = format!("{first}{second}");
                if text.to_ascii_lowercase().contains(&word) {
                    want |= 1 << k;
                }
            }
            proptest::prop_assert_eq!(contractions2_present_ascii(text.as_bytes()), want, "{}", text);
        }
    }

    proptest::proptest! {
        /// The presence set holds exactly the ASCII bytes of the text, and `..`.
        #[test]
        fn presence_is_exact(text in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40)) {
            let has = Present::of(&text);
            for b in 0u8..0x80 {
                proptest::prop_assert_eq!(has.any(&[b]), text.contains(&b), "{}", b);
            }
            proptest::prop_assert_eq!(has.double_dot, text.windows(2).any(|w| w == b".."));
        }
    }

    /// Pieces that trigger the Treebank passes, for the generated sentences below.
    const PIECES: &[&str] = &[
        " ", "  ", "\n", "\t", "a", "B", "x1", "7", "42", ".", "..", "...", ",", ":", ";", "@",
        "#", "$", "%", "&", "?", "!", "*", "(", ")", "[", "]", "{", "}", "<", ">", "-", "--", "'",
        "''", "\"", "`", "``", "'s", "'S", "'m", "'d", "'D", "'ll", "'LL", "'re", "'RE", "'ve",
        "'VE", "n't", "N'T", "can", "not", "gon", "na", "wan", "'t", "is", "was", "d'ye", "more'n",
        "gimme", "lemme", "gotta", "_", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f", "\r",
    ];

    /// The scanners against the regexes on `sentence`, and the tokens.
    fn compare_passes(sentence: &str) -> Result<(), String> {
        let (mut fast, mut slow) = (TokenList::default(), TokenList::default());
        tokenize_sentence_with(sentence, &mut fast, true);
        tokenize_sentence_with(sentence, &mut slow, false);
        let (fast, slow): (Vec<&str>, Vec<&str>) = (fast.iter().collect(), slow.iter().collect());
        if fast == slow {
            Ok(())
        } else {
            Err(format!(
                "{sentence:?}: scanners {fast:?} != regexes {slow:?}"
            ))
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]
        /// The byte scanners give the regexes' tokens on ASCII sentences made of the
        /// pieces every pass looks for, and on arbitrary ASCII.
        #[test]
        fn ascii_passes_equal_the_regexes(
            pieces in proptest::collection::vec(proptest::sample::select(PIECES), 0..24),
            noise in "[ -~\n\t\x0b\x0c\r\x1c-\x1f]{0,30}",
        ) {
            let sentence: String = pieces.concat();
            proptest::prop_assert!(compare_passes(&sentence).is_ok(), "{}", compare_passes(&sentence).unwrap_err());
            proptest::prop_assert!(compare_passes(&noise).is_ok(), "{}", compare_passes(&noise).unwrap_err());
            let mixed = format!("{noise}{sentence}{noise}");
            proptest::prop_assert!(compare_passes(&mixed).is_ok(), "{}", compare_passes(&mixed).unwrap_err());
        }
    }

    /// The same on every ASCII golden text, whole and with pieces spliced in at seeded
    /// positions (the texts the golden tests pin, near-misses of them).
    #[test]
    fn ascii_passes_equal_the_regexes_on_mutated_golden_texts() {
        let mut mutator = Mutator::new(0x9E37_79B9_7F4A_7C15);
        let mut checked = 0;
        for t in golden_texts().iter().filter(|t| t.is_ascii()) {
            compare_passes(t).unwrap();
            for _ in 0..8 {
                compare_passes(&mutator.mutate(t, PIECES, 3)).unwrap();
                checked += 1;
            }
        }
        assert!(checked > 1000, "{checked}");
    }

    #[test]
    fn single_sentence_tokenizer() {
        assert_eq!(tokenize_sentence("\"Hi.\""), ["``", "Hi", ".", "''"]);
        assert_eq!(
            tokenize_sentence("It's 'x' . "),
            ["It", "'s", "'", "x", "'", "."]
        );
        assert_eq!(
            tokenize_sentence("a,b, c:d,\n"),
            ["a", ",", "b", ",", "c", ":", "d", ","]
        );
        assert_eq!(
            tokenize_sentence("don't stop 'tis."),
            ["do", "n't", "stop", "'", "tis", "."]
        );
        assert!(word_tokenize("").is_empty());
        assert!(word_tokenize(" \n\t").is_empty());
    }
}
