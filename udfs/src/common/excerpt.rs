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

/// A URL as it may be shown (settings views, errors, logs): the password of its user
/// information (or a user name standing alone, often a token) and the values of query or
/// fragment parameters named like a credential ([`secret_parameter`]) replaced by `***`.
/// `https://user:pw@host/v1?api-key=k&x=1` shows as `https://user:***@host/v1?api-key=***&x=1`.
/// Only for showing: the URL a request goes to keeps its credentials.
pub fn redact_url(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    let mut rest = url;
    if let Some(scheme_end) = url.find("://").map(|i| i + 3) {
        out.push_str(&url[..scheme_end]);
        let authority_end = url[scheme_end..]
            .find(['/', '?', '#'])
            .map_or(url.len(), |i| scheme_end + i);
        let authority = &url[scheme_end..authority_end];
        match authority.rfind('@') {
            Some(at) => {
                match authority[..at].split_once(':') {
                    Some((user, _)) => out.push_str(&format!("{user}:***@")),
                    None => out.push_str("***@"),
                }
                out.push_str(&authority[at + 1..]);
            }
            None => out.push_str(authority),
        }
        rest = &url[authority_end..];
    }
    // The path as it is; then the query and the fragment, parameter by parameter.
    let path_end = rest.find(['?', '#']).unwrap_or(rest.len());
    out.push_str(&rest[..path_end]);
    let mut rest = &rest[path_end..];
    while let Some(sep) = rest.chars().next() {
        out.push(sep);
        let part_end = rest[1..].find('#').map_or(rest.len(), |i| i + 1);
        let part = &rest[1..part_end];
        let params: Vec<String> = part
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((name, value)) if !value.is_empty() && secret_parameter(name) => {
                    format!("{name}=***")
                }
                _ => param.to_string(),
            })
            .collect();
        out.push_str(&params.join("&"));
        rest = &rest[part_end..];
    }
    out
}

/// [`redact_url`] of each of the comma-separated URLs in `text` (a list of URL prefixes, say);
/// text without `://` is left as it is.
pub fn redact_urls(text: &str) -> String {
    text.split(',')
        .map(|piece| {
            if piece.contains("://") {
                redact_url(piece)
            } else {
                piece.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether a URL parameter named `name` (any case, `-` or `_`, percent-encoded or not)
/// carries a credential: `key`, `api-key`, `token`, `sig`, `signature`, `secret`,
/// `password`, `code` and names ending in one of them (`x-amz-signature`,
/// `subscription-key`, `access_token`).
pub fn secret_parameter(name: &str) -> bool {
    const SECRETS: &[&str] = &[
        "key",
        "apikey",
        "token",
        "sig",
        "signature",
        "secret",
        "password",
        "passwd",
        "pwd",
        "code",
        "auth",
        "authorization",
        "credential",
        "credentials",
    ];
    // Decode `%XX` (so `api%2Dkey` is `api-key`), lower-case, and compare the last word.
    let bytes = name.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |j: usize| bytes.get(j).and_then(|&b| (b as char).to_digit(16));
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(hi), Some(lo)) => {
                decoded.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                decoded.push(b);
                i += 1;
            }
        }
    }
    let name = String::from_utf8_lossy(&decoded).to_lowercase();
    let name = name.trim();
    let last = name
        .rsplit(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or(name);
    SECRETS.contains(&last) || SECRETS.contains(&name.replace(['-', '_', '.'], "").as_str())
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

    #[test]
    fn urls_are_shown_without_their_credentials() {
        for (url, shown) in [
            (
                "https://user:password@host/v1?api-key=k1&x=1",
                "https://user:***@host/v1?api-key=***&x=1",
            ),
            ("https://user:pw@host", "https://user:***@host"),
            ("https://tok3n@host/v1", "https://***@host/v1"),
            ("http://h:8080/v1", "http://h:8080/v1"),
            (
                "https://h/v1?API_KEY=a&Token=b&sig=c&Signature=d&secret=e&PASSWORD=f&code=g",
                "https://h/v1?API_KEY=***&Token=***&sig=***&Signature=***&secret=***&PASSWORD=***&code=***",
            ),
            (
                "https://h/?X-Amz-Signature=s&subscription-key=k&access_token=t&api%2Dkey=z",
                "https://h/?X-Amz-Signature=***&subscription-key=***&access_token=***&api%2Dkey=***",
            ),
            (
                "https://h/?model=gpt&keyword=x&decode=y&empty=&key=",
                "https://h/?model=gpt&keyword=x&decode=y&empty=&key=",
            ),
            (
                "https://u:p@h/p@x?key=1#token=2&a=b",
                "https://u:***@h/p@x?key=***#token=***&a=b",
            ),
            ("https://h/path:with@at", "https://h/path:with@at"),
            ("not a url?token=1", "not a url?token=***"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
        assert_eq!(
            redact_urls("http://a:p@h/x, http://h/y?sig=1,none"),
            "http://a:***@h/x, http://h/y?sig=***,none"
        );
    }
}
