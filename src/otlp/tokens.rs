//! Bearer tokens of the OTLP listeners (`--otlp-tokens FILE`).
//!
//! The file holds one SHA-256 hash of a token per line (`name:hex`, or the hex alone; `#`
//! starts a comment), never a token: whoever reads it cannot send spans. `evalsql otlp-token
//! NAME` prints a new token (to give the exporter) and its line (for the file). A token is
//! 32 random bytes, so a plain hash is as strong as a slow one would be.

use std::path::Path;

use datafusion::common::{DataFusionError, Result};
use sha2::{Digest, Sha256};

/// The hashes a request's token is checked against.
#[derive(Debug, Default)]
pub struct Tokens {
    hashes: Vec<[u8; 32]>,
}

fn hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Tokens {
    pub fn load(path: &Path) -> Result<Tokens> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            DataFusionError::Configuration(format!("--otlp-tokens {}: {e}", path.display()))
        })?;
        let mut hashes = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let h = line.rsplit(':').next().unwrap_or(line).trim();
            let bytes: Option<Vec<u8>> = (h.len() == 64)
                .then(|| {
                    (0..32)
                        .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).ok())
                        .collect()
                })
                .flatten();
            match bytes {
                Some(b) => hashes.push(b.try_into().expect("32 bytes")),
                None => {
                    return Err(DataFusionError::Configuration(format!(
                        "--otlp-tokens {} line {}: not a SHA-256 hash in hex (make lines with \
                         `evalsql otlp-token NAME`)",
                        path.display(),
                        n + 1
                    )));
                }
            }
        }
        if hashes.is_empty() {
            return Err(DataFusionError::Configuration(format!(
                "--otlp-tokens {}: no token hashes in it",
                path.display()
            )));
        }
        Ok(Tokens { hashes })
    }

    /// Whether an `Authorization` header's value carries one of the tokens. Every hash is
    /// compared in full, whatever matches, so the time taken says nothing.
    pub fn admits(&self, authorization: Option<&[u8]>) -> bool {
        let Some(value) = authorization.and_then(|v| std::str::from_utf8(v).ok()) else {
            return false;
        };
        let Some((scheme, token)) = value.trim().split_once(' ') else {
            return false;
        };
        if !scheme.eq_ignore_ascii_case("bearer") {
            return false;
        }
        let h = hash(token.trim());
        let mut found = false;
        for known in &self.hashes {
            let diff = known
                .iter()
                .zip(h.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b));
            found |= diff == 0;
        }
        found
    }
}

/// A new token and the line of the tokens file that admits it.
pub fn new_token(name: &str) -> Result<(String, String)> {
    if name.contains([':', '\n', '\r']) {
        return Err(DataFusionError::Configuration(format!(
            "evalsql otlp-token: the name {name:?} may not contain ':' or a line break"
        )));
    }
    let mut raw = [0u8; 32];
    getrandom_v02::getrandom(&mut raw).map_err(|e| {
        DataFusionError::Execution(format!("evalsql otlp-token: no random bytes: {e}"))
    })?;
    let token = format!("evalsql_otlp_{}", hex(&raw));
    let line = format!("{name}:{}", hex(&hash(&token)));
    Ok((token, line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_admitted_by_its_line_only() {
        let (token, line) = new_token("app").unwrap();
        let (other, _) = new_token("other").unwrap();
        let dir = std::env::temp_dir().join(format!("evalsql-tokens-{}", std::process::id()));
        std::fs::write(&dir, format!("# tokens\n{line}\n")).unwrap();
        let tokens = Tokens::load(&dir).unwrap();
        std::fs::remove_file(&dir).unwrap();
        assert!(tokens.admits(Some(format!("Bearer {token}").as_bytes())));
        assert!(tokens.admits(Some(format!("bearer  {token} ").as_bytes())));
        for bad in [
            format!("Bearer {other}"),
            format!("Basic {token}"),
            token.clone(),
            "Bearer".into(),
            String::new(),
        ] {
            assert!(!tokens.admits(Some(bad.as_bytes())), "{bad}");
        }
        assert!(!tokens.admits(None));
        assert!(!tokens.admits(Some(&[0xff, 0xfe])));
    }
}
