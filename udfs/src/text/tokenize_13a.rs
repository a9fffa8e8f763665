//! sacrebleu's default `13a` tokenizer (mteval-v13a), bit-exact with sacrebleu 2.6.0
//! (`sacrebleu/tokenizers/tokenizer_13a.py` followed by `tokenizer_re.py`).
//!
//! The Python runs four `re.sub` passes over the line. Every pattern is a fixed
//! two-character (or one-character) match whose *specific* characters are all ASCII,
//! so each pass is reproduced here as one left-to-right scan over the UTF-8 bytes:
//!
//! 1. `([\{-\~\[-\` -\&\(-\+\:-\@\/])` -> `' \1 '` — a per-character map.
//! 2. `([^0-9])([\.,])` -> `'\1 \2 '`
//! 3. `([\.,])([^0-9])` -> `' \1 \2'`
//! 4. `([0-9])(-)`      -> `'\1 \2 '`
//!
//! Why a byte scan is exact: a UTF-8 multi-byte sequence never contains an ASCII byte,
//! so a match (which needs an ASCII `.`, `,`, `-` or digit at a fixed offset) can only
//! start or end on a character boundary, exactly where `re` would find it; `[^0-9]`
//! accepts any non-ASCII-digit character, and accepting just its first or last byte
//! changes neither what is emitted nor where the next match may begin (no match can
//! start on a continuation byte). The scans apply the same leftmost, non-overlapping
//! consumption as `re.sub`, so the intermediate strings are byte-identical to
//! Python's. Python's `[0-9]` (a range, not `\d`) is ASCII-only, like
//! `u8::is_ascii_digit`.
//!
//! The final `' '.join(line.split())` uses Python's notion of whitespace
//! ([`pystr::is_space`]), which differs from `char::is_whitespace` on
//! U+001C..U+001F.

use std::borrow::Cow;

use super::pystr;

/// Bytes matched by pass 1's character class: `{|}~`, `[\]^_` and backtick,
/// space to `&`, `(` to `+`, `:` to `@`, and `/`.
const PASS1: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0usize;
    while b < 256 {
        t[b] = matches!(b as u8,
            b'{'..=b'~' | b'['..=b'`' | b' '..=b'&' | b'('..=b'+' | b':'..=b'@' | b'/');
        b += 1;
    }
    t
};

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

    // Language-independent part, as sequential `str.replace` calls (Rust's
    // `str::replace` has the same left-to-right, non-overlapping semantics).
    let mut s: Cow<'_, str> = Cow::Borrowed(line);
    if s.contains("<skipped>") {
        s = Cow::Owned(s.replace("<skipped>", ""));
    }
    if s.contains('\n') {
        let t = s.replace("-\n", "");
        s = Cow::Owned(t.replace('\n', " "));
    }
    if s.contains('&') {
        let t = s
            .replace("&quot;", "\"")
            .replace("&amp;", "&")
            .replace("&lt;", "<")
            .replace("&gt;", ">");
        s = Cow::Owned(t);
    }
    let src = s.as_bytes();

    // Pass 1 on f' {line} ' (the surrounding spaces matter: e.g. ".5" -> ". 5").
    let mut a: Vec<u8> = Vec::with_capacity(src.len() + src.len() / 2 + 8);
    a.extend_from_slice(b"   ");
    for &c in src {
        if PASS1[c as usize] {
            a.extend_from_slice(&[b' ', c, b' ']);
        } else {
            a.push(c);
        }
    }
    a.extend_from_slice(b"   ");

    // Passes 2-4 cannot fire without the characters they need; the earlier passes
    // never insert anything but spaces.
    let has_dot_comma = src.iter().any(|&c| c == b'.' || c == b',');
    let has_dash = src.contains(&b'-');
    let mut b: Vec<u8> = Vec::new();
    if has_dot_comma {
        b.reserve(a.len() + 16);
        pass_nondigit_then_dot(&a, &mut b);
        a.clear();
        pass_dot_then_nondigit(&b, &mut a);
    }
    if has_dash {
        b.clear();
        b.reserve(a.len() + 16);
        pass_digit_then_dash(&a, &mut b);
        std::mem::swap(&mut a, &mut b);
    }

    // Only ASCII bytes were inserted, and only on character boundaries.
    let text = std::str::from_utf8(&a).expect("13a passes keep UTF-8 valid");
    for (i, tok) in pystr::split_whitespace(text).enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(tok);
    }
}

/// `re.sub(r'([^0-9])([\.,])', r'\1 \2 ', s)`
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
