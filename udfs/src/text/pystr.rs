//! Python string semantics the reference implementations rely on.
//!
//! The references are Python programs (CPython 3.11); where Python's idea of whitespace,
//! lowercase or word character differs from Rust's, a metric must follow Python's to match.

/// Python's `str.isspace()` (what `str.split()` / `str.rstrip()` with no argument treat as
/// whitespace). Unlike [`char::is_whitespace`] it includes the ASCII information separators
/// U+001C..U+001F.
#[inline]
pub fn is_space(c: char) -> bool {
    match c as u32 {
        0x09..=0x0D | 0x1C..=0x20 => true,
        0x00..=0x7F => false,
        0x85 | 0xA0 | 0x1680 | 0x2000..=0x200A | 0x2028 | 0x2029 | 0x202F | 0x205F | 0x3000 => true,
        _ => false,
    }
}

/// [`is_space`] as a table over ASCII, for byte scans on hot paths.
pub const ASCII_SPACE: [bool; 128] = {
    let mut t = [false; 128];
    let mut b = 0usize;
    while b < 128 {
        t[b] = matches!(b as u8, 0x09..=0x0D | 0x1C..=0x20);
        b += 1;
    }
    t
};

/// `s.split()` with no argument: maximal runs of non-whitespace, no empty pieces.
#[inline]
pub fn split_whitespace(s: &str) -> impl Iterator<Item = &str> {
    s.split(is_space).filter(|t| !t.is_empty())
}

/// `s.rstrip()` with no argument.
#[inline]
pub fn rstrip(s: &str) -> &str {
    s.trim_end_matches(is_space)
}

/// Characters that CPython 3.11 leaves unchanged but Rust lowercases: cased letters added
/// after Unicode 14.0 (also not `str.isupper()` there, which Punkt relies on).
pub(crate) const PY311_NO_LOWER: [(u32, u32); 9] = [
    (0x1C89, 0x1C89),
    (0xA7CB, 0xA7CC),
    (0xA7CE, 0xA7CE),
    (0xA7D2, 0xA7D2),
    (0xA7D4, 0xA7D4),
    (0xA7DA, 0xA7DA),
    (0xA7DC, 0xA7DC),
    (0x10D50, 0x10D65),
    (0x16EA0, 0x16EB8),
];

/// How a character takes part in the Final_Sigma context test.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ctx {
    /// Case_Ignorable: skipped while looking for the neighbouring letter.
    Skip,
    /// Cased and not Case_Ignorable.
    Cased,
    /// Neither: ends the search, not cased.
    Other,
}

/// Characters whose Final_Sigma role in CPython 3.11 differs from Rust's.
const PY311_CTX: [(u32, u32, Ctx); 52] = [
    (0x295, 0x295, Ctx::Cased),
    (0x897, 0x897, Ctx::Other),
    (0xECE, 0xECE, Ctx::Other),
    (0x1ACF, 0x1ADD, Ctx::Other),
    (0x1AE0, 0x1AEB, Ctx::Other),
    (0x1C89, 0x1C8A, Ctx::Other),
    (0xA7CB, 0xA7CF, Ctx::Other),
    (0xA7D2, 0xA7D2, Ctx::Other),
    (0xA7D4, 0xA7D4, Ctx::Other),
    (0xA7DA, 0xA7DC, Ctx::Other),
    (0xA7F1, 0xA7F1, Ctx::Other),
    (0x10D4E, 0x10D4E, Ctx::Other),
    (0x10D50, 0x10D65, Ctx::Other),
    (0x10D69, 0x10D6D, Ctx::Other),
    (0x10D6F, 0x10D85, Ctx::Other),
    (0x10EC5, 0x10EC5, Ctx::Other),
    (0x10EFA, 0x10EFF, Ctx::Other),
    (0x11241, 0x11241, Ctx::Other),
    (0x113BB, 0x113C0, Ctx::Other),
    (0x113CE, 0x113CE, Ctx::Other),
    (0x113D0, 0x113D0, Ctx::Other),
    (0x113D2, 0x113D2, Ctx::Other),
    (0x113E1, 0x113E2, Ctx::Other),
    (0x1171E, 0x1171E, Ctx::Skip),
    (0x11B60, 0x11B60, Ctx::Other),
    (0x11B62, 0x11B64, Ctx::Other),
    (0x11B66, 0x11B66, Ctx::Other),
    (0x11DD9, 0x11DD9, Ctx::Other),
    (0x11F00, 0x11F01, Ctx::Other),
    (0x11F36, 0x11F3A, Ctx::Other),
    (0x11F40, 0x11F40, Ctx::Other),
    (0x11F42, 0x11F42, Ctx::Other),
    (0x11F5A, 0x11F5A, Ctx::Other),
    (0x13439, 0x13440, Ctx::Other),
    (0x13447, 0x13455, Ctx::Other),
    (0x1611E, 0x16129, Ctx::Other),
    (0x1612D, 0x1612F, Ctx::Other),
    (0x16D40, 0x16D42, Ctx::Other),
    (0x16D6B, 0x16D6C, Ctx::Other),
    (0x16EA0, 0x16EB8, Ctx::Other),
    (0x16EBB, 0x16ED3, Ctx::Other),
    (0x16FF2, 0x16FF3, Ctx::Other),
    (0x1DF25, 0x1DF2A, Ctx::Other),
    (0x1E030, 0x1E06D, Ctx::Other),
    (0x1E08F, 0x1E08F, Ctx::Other),
    (0x1E4EB, 0x1E4EF, Ctx::Other),
    (0x1E5EE, 0x1E5EF, Ctx::Other),
    (0x1E6E3, 0x1E6E3, Ctx::Other),
    (0x1E6E6, 0x1E6E6, Ctx::Other),
    (0x1E6EE, 0x1E6EF, Ctx::Other),
    (0x1E6F5, 0x1E6F5, Ctx::Other),
    (0x1E6FF, 0x1E6FF, Ctx::Other),
];

fn in_ranges<T>(table: &[(u32, u32, T)], c: char) -> Option<&T> {
    let cp = c as u32;
    let i = table.partition_point(|r| r.1 < cp);
    table.get(i).filter(|r| r.0 <= cp).map(|r| &r.2)
}

fn py311_no_lower(c: char) -> bool {
    let cp = c as u32;
    let i = PY311_NO_LOWER.partition_point(|r| r.1 < cp);
    PY311_NO_LOWER.get(i).is_some_and(|r| r.0 <= cp)
}

/// Final_Sigma role of `c` under CPython 3.11. std does not expose the
/// Cased / Case_Ignorable properties, so Rust's role is read off its own
/// sigma handling: "AΣc" keeps σ only if c is cased, "AΣcB" keeps σ if c is
/// cased or skipped.
fn sigma_ctx(c: char) -> Ctx {
    if let Some(&ctx) = in_ranges(&PY311_CTX, c) {
        return ctx;
    }
    let mut probe = String::with_capacity(12);
    probe.push('A');
    probe.push('\u{3A3}');
    probe.push(c);
    if probe.to_lowercase()[1..].starts_with('\u{3C3}') {
        return Ctx::Cased;
    }
    probe.push('B');
    if probe.to_lowercase()[1..].starts_with('\u{3C3}') {
        Ctx::Skip
    } else {
        Ctx::Other
    }
}

/// Whether the first non-skipped character yielded by `iter` is cased.
fn next_is_cased(iter: impl Iterator<Item = char>) -> bool {
    for c in iter {
        match sigma_ctx(c) {
            Ctx::Skip => continue,
            Ctx::Cased => return true,
            Ctx::Other => return false,
        }
    }
    false
}

/// `s.lower()` as computed by CPython 3.11.
pub fn lower(s: &str) -> String {
    if s.is_ascii() {
        return s.to_ascii_lowercase();
    }
    let mut out = String::with_capacity(s.len());
    lower_each(s, |c| out.push(c));
    out
}

/// Feeds the characters of [`lower`]`(s)` to `f` one by one, in order, without building
/// the string.
#[inline]
pub fn lower_each(s: &str, mut f: impl FnMut(char)) {
    for (i, c) in s.char_indices() {
        if c.is_ascii() {
            // Same as `to_lowercase` for ASCII; no exception applies below U+0080.
            f(c.to_ascii_lowercase());
        } else if c == '\u{3A3}' {
            // Final sigma: preceded by a cased letter and not followed by one
            // (ignoring case-ignorable characters in between).
            let is_final = next_is_cased(s[..i].chars().rev())
                && !next_is_cased(s[i + c.len_utf8()..].chars());
            f(if is_final { '\u{3C2}' } else { '\u{3C3}' });
        } else if py311_no_lower(c) {
            f(c);
        } else {
            c.to_lowercase().for_each(&mut f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_table_agrees_with_is_space() {
        for b in 0u8..128 {
            assert_eq!(ASCII_SPACE[b as usize], is_space(char::from(b)), "{b:#x}");
        }
    }

    #[test]
    fn python_split_counts_information_separators_as_space() {
        let got: Vec<_> = split_whitespace("a\u{1f}b\u{a0}c  d\u{200b}e").collect();
        assert_eq!(got, vec!["a", "b", "c", "d\u{200b}e"]);
        assert_eq!(split_whitespace(" \t\n").count(), 0);
        assert_eq!(rstrip("a \u{1c}\n"), "a");
    }

    #[test]
    fn python_lower_matches_cpython_311() {
        assert_eq!(lower("ΑΣ ΑΣ."), "ας ας.");
        assert_eq!(lower("Σ"), "σ");
        assert_eq!(lower("ΑΣ\u{301}Α"), "ασ\u{301}α");
        assert_eq!(lower("\u{A7CB}"), "\u{A7CB}");
        assert_eq!(lower("ß\u{130}"), "ßi\u{307}");
    }
}
