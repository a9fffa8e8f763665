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
    let mut buf = Buf13a::default();
    let text = buf.run(line);
    for (i, tok) in pystr::split_whitespace(text).enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(tok);
    }
}

/// Reusable working memory of the 13a passes.
#[derive(Default)]
pub(crate) struct Buf13a {
    a: Vec<u8>,
    b: Vec<u8>,
}

impl Buf13a {
    /// Runs the 13a substitutions on `line` and returns the text before the final
    /// whitespace split (tokens are its Python-whitespace separated pieces).
    pub(crate) fn run(&mut self, line: &str) -> &str {
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
        let a = &mut self.a;
        let b = &mut self.b;
        a.clear();
        a.reserve(3 * src.len() + 8);
        a.extend_from_slice(b"   ");
        let mut has_dot_comma = false;
        let mut has_dash = false;
        for &c in src {
            if PASS1[c as usize] {
                a.extend_from_slice(&[b' ', c, b' ']);
            } else {
                has_dot_comma |= c == b'.' || c == b',';
                has_dash |= c == b'-';
                a.push(c);
            }
        }
        a.extend_from_slice(b"   ");

        // Passes 2-4 cannot fire without the characters they need; the earlier passes
        // never insert anything but spaces.
        if has_dot_comma {
            b.clear();
            b.reserve(2 * a.len() + 16);
            pass_nondigit_then_dot(a, b);
            a.clear();
            a.reserve(2 * b.len() + 16);
            pass_dot_then_nondigit(b, a);
        }
        if has_dash {
            b.clear();
            b.reserve(2 * a.len() + 16);
            pass_digit_then_dash(a, b);
            std::mem::swap(a, b);
        }

        // Only ASCII bytes were inserted, and only on character boundaries.
        std::str::from_utf8(a).expect("13a passes keep UTF-8 valid")
    }

    /// Runs the 13a tokenizer on `line` and appends the byte ranges of its tokens
    /// (into the text returned by [`Buf13a::text`]) to `spans` (cleared first).
    pub(crate) fn spans(&mut self, line: &str, spans: &mut Vec<(u32, u32)>) {
        spans.clear();
        let text = self.run(line);
        let bytes = text.as_bytes();
        let n = bytes.len();
        let mut i = 0;
        let mut start: Option<usize> = None;
        while i < n {
            let c = bytes[i];
            let (space, w) = if c < 0x80 {
                (pystr::ASCII_SPACE[c as usize], 1)
            } else {
                // `text` is valid UTF-8 and `i` is a char boundary.
                let ch = text[i..].chars().next().unwrap_or('\0');
                (pystr::is_space(ch), ch.len_utf8())
            };
            if space {
                if let Some(st) = start.take() {
                    spans.push((st as u32, i as u32));
                }
            } else if start.is_none() {
                start = Some(i);
            }
            i += w;
        }
        if let Some(st) = start {
            spans.push((st as u32, n as u32));
        }
    }

    /// The text the last [`Buf13a::spans`] call indexes into.
    pub(crate) fn text(&self) -> &[u8] {
        &self.a
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
            let mut buf = Buf13a::default();
            let mut spans = Vec::new();
            buf.spans(input, &mut spans);
            let toks: Vec<&str> = spans
                .iter()
                .map(|&(a, b)| std::str::from_utf8(&buf.text()[a as usize..b as usize]).unwrap())
                .collect();
            assert_eq!(toks.join(" "), *expected, "spans {input:?}");
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
