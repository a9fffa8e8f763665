//! Quoting text in messages: every error, reason and log line that quotes a value, a reply
//! or a response body goes through here, so text is cut the same way everywhere and nothing
//! that looks like a key is ever quoted.

/// `text` cut to at most `max_chars` characters, with `…` when cut.
pub fn truncate(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// `text` on one line (runs of white space folded to one space), cut to `max_chars`.
pub fn one_line(text: &str, max_chars: usize) -> String {
    truncate(
        &text.split_whitespace().collect::<Vec<_>>().join(" "),
        max_chars,
    )
}

/// `text` made safe to quote in an error: on one line, cut to `max_chars`, and with
/// anything that looks like a key replaced (see [`redact_secrets`]).
pub fn safe_excerpt(text: &str, max_chars: usize) -> String {
    one_line(&redact_secrets(text), max_chars)
}

/// Replaces key-like words with `***`: anything starting `sk-` and any run of 32 or more
/// key characters (Azure keys are 32 hex digits; bearer tokens are longer). Prose never has
/// such words, so the cost of a false positive is a starred-out hash in an error message.
pub fn redact_secrets(text: &str) -> String {
    let is_key_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        let start = rest.find(is_key_char).unwrap_or(rest.len());
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        let end = rest.find(|c: char| !is_key_char(c)).unwrap_or(rest.len());
        let word = &rest[..end];
        let looks_like_key = (word.starts_with("sk-") && word.len() > 3)
            || word.chars().filter(|c| c.is_ascii_alphanumeric()).count() >= 32;
        out.push_str(if looks_like_key { "***" } else { word });
        rest = &rest[end..];
    }
    out
}

/// A value in an error message: quoted, enough to recognise it, never a whole document.
pub fn quote_value(value: &str) -> String {
    const MAX_CHARS: usize = 80;
    let mut chars = value.chars();
    let head: String = chars.by_ref().take(MAX_CHARS).collect();
    if chars.next().is_some() {
        format!("{head:?}…")
    } else {
        format!("{head:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_short_single_lines_without_keys() {
        assert_eq!(truncate("héllo", 2), "hé…");
        assert_eq!(truncate("hé", 2), "hé");
        assert_eq!(one_line("a\n  b\tc", 10), "a b c");
        assert_eq!(safe_excerpt("key:\n sk-abc123 ok", 40), "key: *** ok");
        assert_eq!(quote_value("x\"y"), "\"x\\\"y\"");
        assert!(quote_value(&"z".repeat(200)).ends_with("\"…"));
    }
}
