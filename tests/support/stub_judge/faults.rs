//! The faults the stub injects: by directive in the last user message (`[[fault:500x2]]`)
//! or at random with a seeded stream ([`StubConfig::fault_rate`]).

use super::*;

/// A fault the stub can inject. `name()` is the directive spelling: `[[fault:NAME]]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// `429`: 429 with `Retry-After: 0` and an OpenAI rate-limit error body.
    RateLimited,
    /// `429ms`: 429 with `retry-after-ms: 20` (and no `Retry-After`).
    RateLimitedMs,
    /// `429date`: 429 with `Retry-After: <HTTP-date one second in the past>`.
    RateLimitedDate,
    /// `quota`: 429 with an `insufficient_quota` error body and no retry header (not retryable).
    Quota,
    /// `500`: internal server error (retryable).
    ServerError,
    /// `503`: service unavailable (retryable).
    Unavailable,
    /// `400`: bad request (not retryable).
    BadRequest,
    /// `401`: invalid API key (not retryable).
    Unauthorized,
    /// `hang`: sleep `StubConfig::hang`, then reply normally.
    Hang,
    /// `reset`: drop the TCP connection abruptly (RST) without any response.
    Reset,
    /// `malformed`: 200 with the truncated non-JSON body `{"choices": [`.
    Malformed,
    /// `nocontent`: 200 with `message.content: null` and `finish_reason: "content_filter"`.
    NoContent,
}

impl Fault {
    /// Every fault kind.
    pub const ALL: [Fault; 12] = [
        Fault::RateLimited,
        Fault::RateLimitedMs,
        Fault::RateLimitedDate,
        Fault::Quota,
        Fault::ServerError,
        Fault::Unavailable,
        Fault::BadRequest,
        Fault::Unauthorized,
        Fault::Hang,
        Fault::Reset,
        Fault::Malformed,
        Fault::NoContent,
    ];

    /// The kinds drawn by random faults (all retryable).
    pub const RANDOM: [Fault; 6] = [
        Fault::RateLimited,
        Fault::RateLimitedMs,
        Fault::ServerError,
        Fault::Unavailable,
        Fault::Reset,
        Fault::Malformed,
    ];

    /// The directive spelling (`429`, `429ms`, `429date`, `quota`, `500`, `503`, `400`, `401`,
    /// `hang`, `reset`, `malformed`, `nocontent`).
    pub fn name(self) -> &'static str {
        match self {
            Fault::RateLimited => "429",
            Fault::RateLimitedMs => "429ms",
            Fault::RateLimitedDate => "429date",
            Fault::Quota => "quota",
            Fault::ServerError => "500",
            Fault::Unavailable => "503",
            Fault::BadRequest => "400",
            Fault::Unauthorized => "401",
            Fault::Hang => "hang",
            Fault::Reset => "reset",
            Fault::Malformed => "malformed",
            Fault::NoContent => "nocontent",
        }
    }

    /// Parses a directive spelling (exact, case-sensitive).
    pub fn parse(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The HTTP status the client sees, `None` for `reset` (no response at all).
    pub fn status(self) -> Option<u16> {
        match self {
            Fault::RateLimited | Fault::RateLimitedMs | Fault::RateLimitedDate | Fault::Quota => {
                Some(429)
            }
            Fault::ServerError => Some(500),
            Fault::Unavailable => Some(503),
            Fault::BadRequest => Some(400),
            Fault::Unauthorized => Some(401),
            Fault::Hang | Fault::Malformed | Fault::NoContent => Some(200),
            Fault::Reset => None,
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The argument of `[[name:ARG]]` in `text` (first occurrence; ARG ends at the first `]]`).
pub(super) fn directive_arg<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("[[{name}:");
    let start = text.find(&open)? + open.len();
    let rest = &text[start..];
    let end = rest.find("]]")?;
    Some(&rest[..end])
}

pub(super) fn has_directive(text: &str) -> bool {
    ["fault", "score", "reply"]
        .iter()
        .any(|d| directive_arg(text, d).is_some())
}

/// `[[fault:KIND]]` → (KIND, None); `[[fault:KINDxN]]` → (KIND, Some(N)).
pub(super) fn parse_fault_directive(text: &str) -> Option<(Fault, Option<u64>)> {
    let arg = directive_arg(text, "fault")?.trim();
    if let Some(f) = Fault::parse(arg) {
        return Some((f, None));
    }
    let (kind, n) = arg.rsplit_once('x')?;
    Some((Fault::parse(kind)?, Some(n.parse().ok()?)))
}

pub(super) fn random_fault_for(seed: u64, draw: u64, rate: f64) -> Option<Fault> {
    let h = splitmix64(seed ^ splitmix64(draw.wrapping_add(0x5EED)));
    let u = (h >> 11) as f64 / (1u64 << 53) as f64;
    if u < rate {
        let pick = splitmix64(h) % Fault::RANDOM.len() as u64;
        Some(Fault::RANDOM[pick as usize])
    } else {
        None
    }
}

pub(super) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

pub(super) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
