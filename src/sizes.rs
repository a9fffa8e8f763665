//! Sizes as people write them on a command line: `512m`, `2g`, `16k`, or bytes.

/// `512m` -> 536870912; the unit is k, m or g (with or without a trailing `b`), any case.
pub fn parse_bytes(s: &str) -> std::result::Result<usize, String> {
    let s = s.trim().to_ascii_lowercase();
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: usize = digits
        .parse()
        .map_err(|_| format!("invalid size {s:?}: expected e.g. 512m or 2g"))?;
    let factor: usize = match unit.trim_end_matches('b') {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        _ => return Err(format!("invalid size unit in {s:?}: use k, m or g")),
    };
    n.checked_mul(factor)
        .ok_or_else(|| format!("size {s:?} is too large"))
}
