//! `nltk.word_tokenize(text)` of NLTK 3.10.4 (language "english", `preserve_line=False`):
//! Punkt sentences, then `NLTKWordTokenizer().tokenize(sentence)` on each.
//!
//! The tokenizer is a fixed sequence of regex substitutions over the whole string. Steps
//! without look-around use the regex crate (same leftmost-first results as Python's
//! backtracking engines); the others are hand-written. Most of NLTK's patterns run on the
//! `regex` module, the contraction patterns on CPython's `re`; their `\w`, `\d`, `\s` and
//! case-insensitive matching differ and are taken from `super::punkt`'s helpers.

use std::borrow::Cow;
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
    let mut out = String::with_capacity(s.len() + 4);
    out.push_str(&s[..p]);
    out.push_str(if wide { " . " } else { " ." });
    out.push_str(&s[p + 1..closers_end]);
    out.push(' ');
    *text = out;
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

#[inline]
fn has_any(s: &str, set: &[u8]) -> bool {
    s.bytes().any(|b| set.contains(&b))
}

/// `NLTKWordTokenizer().tokenize(sentence)`, appending the tokens to `out`.
pub fn tokenize_sentence_into(sentence: &str, out: &mut TokenList) {
    let pt = &*PATTERNS;
    // Every substitution inserts ASCII only, so this holds throughout; passes whose
    // pattern needs a character the text lacks are skipped.
    let ascii = sentence.is_ascii();
    let mut t = sentence.to_string();

    // STARTING_QUOTES
    if !ascii || t.contains('`') {
        sub(&mut t, &pt.open_quotes, " ${0} ");
    }
    if t.starts_with('"') {
        t.replace_range(0..1, "``");
    }
    sub_lit(&mut t, "``", " `` ");
    if has_any(&t, b"\"'") {
        sub(&mut t, &pt.quote_after_open, "${1} `` ");
    }
    split_opening_apostrophes(&mut t);

    // PUNCTUATION
    split_final_period(&mut t, is_final_closer_wide, true);
    if has_any(&t, b":,") {
        sub(&mut t, &pt.colon_comma, " ${1} ${2}");
        split_final_colon_comma(&mut t);
    }
    if !ascii || has_any(&t, b".;@#$%&") {
        sub(&mut t, &pt.dots_symbols_dashes, " ${0} ");
    }
    split_final_period(&mut t, is_final_closer, false);
    if has_any(&t, b"?!") {
        sub(&mut t, &pt.question_exclaim, " ${0} ");
    }
    let apostrophe = t.contains('\'');
    if apostrophe {
        sub(&mut t, &pt.quote_space, "${1} ' ");
    }
    if has_any(&t, b"*[](){}<>") {
        sub(&mut t, &pt.star_brackets, " ${0} ");
    }

    // DOUBLE_DASHES
    sub_lit(&mut t, "--", " -- ");

    // ENDING_QUOTES, on the space-padded text
    let mut t = format!(" {t} ");
    if !ascii {
        sub(&mut t, &pt.close_quotes, " ${0} ");
    }
    sub_lit(&mut t, "''", " '' ");
    sub_lit(&mut t, "\"", " '' ");
    collapse_spaces(&mut t);
    let apostrophe = t.contains('\'');
    if apostrophe {
        sub(&mut t, &pt.clitic_s_m_d, "${1} ${2} ");
        sub(&mut t, &pt.clitic_ll_re_ve_nt, "${1} ${2} ");
    }

    let possible = contractions2_possible(t.as_bytes());
    for (k, (first, second, tail)) in CONTRACTIONS2.into_iter().enumerate() {
        if possible & (1 << k) != 0 {
            split_contraction(&mut t, false, first, second, tail);
        }
    }
    if apostrophe {
        for second in CONTRACTIONS3 {
            split_contraction(&mut t, true, "'t", second, Tail::Boundary);
        }
    }

    for token in pystr::split_whitespace(&t) {
        out.push(token);
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
    for (s, e) in punkt::sentence_spans(text) {
        tokenize_sentence_into(text.get(s..e).unwrap_or(""), out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
