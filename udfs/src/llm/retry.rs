//! When and how long to wait before retrying a judge call.
//!
//! Modelled on object_store's HTTP client (`client/retry.rs`, `client/backoff.rs`): a
//! [`BackoffConfig`] with jitter drawn from an injectable RNG, one function ([`classify`]) that
//! decides whether an outcome is worth retrying, and a [`RetryError`] that records attempts,
//! elapsed time and the last cause with secrets redacted. On top of that it honours the
//! server's own wish (`retry-after-ms`, `Retry-After` as seconds or an HTTP date).
//!
//! No I/O happens here: the transport asks [`RetryContext::next_delay`] after every failed
//! attempt and sleeps for what it is told.

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::excerpt::{redact_secrets, safe_excerpt, truncate};

/// The longest server-requested delay we obey. A `Retry-After` of minutes or hours (a daily
/// quota, a misconfigured proxy) would stall a whole query, so we cap it and let the bounded
/// attempt count decide when to give up.
pub const MAX_SERVER_DELAY: Duration = Duration::from_secs(60);

/// How many characters of a response body a reason or error may quote.
pub const MAX_BODY_CHARS: usize = 300;

/// Exponential backoff settings: the ceiling for retry `n` (0-based) is
/// `min(max, init * base^n)`, and the actual delay is drawn uniformly from `[0, ceiling]`
/// ("full jitter", which spreads out clients that failed together).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackoffConfig {
    /// The ceiling of the first retry's delay.
    pub init: Duration,
    /// The largest delay ever returned.
    pub max: Duration,
    /// The growth factor between consecutive ceilings.
    pub base: f64,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        Self {
            init: Duration::from_millis(500),
            max: Duration::from_secs(30),
            base: 2.0,
        }
    }
}

/// A source of random bits for jitter; injectable so tests are deterministic.
pub trait RandomSource: Send + Sync {
    /// The next 64 random bits.
    fn next_u64(&mut self) -> u64;

    /// A uniform value in `[0, 1]`.
    fn next_unit(&mut self) -> f64 {
        // 53 bits fill an f64 mantissa exactly; dividing by 2^53 - 1 makes 1.0 reachable so
        // a test RNG returning u64::MAX yields the ceiling itself.
        (self.next_u64() >> 11) as f64 / ((1u64 << 53) - 1) as f64
    }
}

/// SplitMix64 (Steele, Lea & Flood 2014): tiny, fast and good enough for jitter.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator with a fixed seed (for tests).
    pub fn seeded(seed: u64) -> Self {
        Self { state: seed }
    }

    /// A generator seeded differently in every call and every process, without a `rand`
    /// dependency: std's `RandomState` keys are random per process, and a counter separates
    /// generators made within one process.
    pub fn from_entropy() -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default();
        hasher.write_u64(nanos);
        Self::seeded(hasher.finish())
    }
}

impl RandomSource for SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Successive jittered backoff delays for one call.
pub struct Backoff {
    config: BackoffConfig,
    retries: u32,
    rng: Box<dyn RandomSource>,
}

impl fmt::Debug for Backoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backoff")
            .field("config", &self.config)
            .field("retries", &self.retries)
            .finish_non_exhaustive()
    }
}

impl Backoff {
    /// A backoff seeded from [`SplitMix64::from_entropy`].
    pub fn new(config: BackoffConfig) -> Self {
        Self::with_rng(config, Box::new(SplitMix64::from_entropy()))
    }

    /// A backoff drawing its jitter from `rng`.
    pub fn with_rng(config: BackoffConfig, rng: Box<dyn RandomSource>) -> Self {
        Self {
            config,
            retries: 0,
            rng,
        }
    }

    /// The ceiling (the largest possible delay) for retry number `retry` (0-based).
    pub fn ceiling(&self, retry: u32) -> Duration {
        let init = self.config.init.as_secs_f64();
        let max = self.config.max.as_secs_f64();
        // A base below 1 would shrink the delays; treat it as constant backoff.
        let base = if self.config.base.is_finite() {
            self.config.base.max(1.0)
        } else {
            1.0
        };
        let grown = init * base.powi(retry.min(i32::MAX as u32) as i32);
        secs_to_duration(grown.min(max))
    }

    /// The delay before the next retry; each call advances to the next ceiling.
    pub fn next_backoff(&mut self) -> Duration {
        let ceiling = self.ceiling(self.retries);
        self.retries = self.retries.saturating_add(1);
        ceiling.mul_f64(self.rng.next_unit().clamp(0.0, 1.0))
    }
}

fn secs_to_duration(secs: f64) -> Duration {
    if secs.is_nan() || secs <= 0.0 {
        Duration::ZERO
    } else {
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
    }
}

/// How hard to try one judge call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (so at most `max_retries + 1` attempts).
    pub max_retries: usize,
    /// Delays between attempts when the server does not name one.
    pub backoff: BackoffConfig,
    /// The timeout of a single attempt, enforced by the transport.
    pub timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        // Judge workloads hit rate limits routinely, so retry more than interactive clients do;
        // a judge reply is short, so two minutes per attempt is generous.
        Self {
            max_retries: 6,
            backoff: BackoffConfig::default(),
            timeout: Duration::from_secs(120),
        }
    }
}

/// What kind of failure an attempt, or a whole call, ended in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// An HTTP error status (the reason quotes the body).
    Status(u16),
    /// A 429 saying `insufficient_quota`: the account is out of credit.
    Quota,
    /// A 3xx: redirects are never followed, so a key never travels to another host.
    Redirect(u16),
    /// No complete response within the attempt's timeout.
    Timeout,
    /// Connecting, sending or receiving failed.
    Connection,
    /// The response body was larger than allowed.
    BodyTooLarge,
    /// A 2xx body that is not a usable reply.
    Parse,
    /// The call's overall deadline passed.
    Deadline,
}

/// What [`classify`] decided about one attempt's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disposition {
    /// What failed.
    pub failure: Failure,
    /// Whether another attempt might succeed.
    pub retryable: bool,
    /// A short, secret-free description of what happened.
    pub reason: String,
    /// The HTTP status, `None` for a transport error.
    pub status: Option<u16>,
    /// The delay the server asked for (`retry-after-ms` / `Retry-After`), uncapped.
    pub retry_after: Option<Duration>,
}

impl Disposition {
    /// Whether this outcome was a rate limit (which the adaptive limiter reacts to).
    pub fn is_throttle(&self) -> bool {
        self.status == Some(429) && self.retryable
    }
}

/// Classifies a failed attempt, reading the clock for `Retry-After` dates.
///
/// `status` is `None` for a transport error (connect, reset, timeout); `body` is then the
/// transport's error text. See [`classify_at`].
pub fn classify(status: Option<u16>, headers: &[(String, String)], body: &str) -> Disposition {
    classify_at(status, headers, body, SystemTime::now())
}

/// Classifies a failed attempt: transport errors, 408, 429 and 5xx are retryable; other
/// statuses are not, and neither is a 429 whose body says `insufficient_quota` (the account
/// is out of credit: waiting will not help).
pub fn classify_at(
    status: Option<u16>,
    headers: &[(String, String)],
    body: &str,
    now: SystemTime,
) -> Disposition {
    let retry_after = retry_after(headers, now);
    let Some(code) = status else {
        return Disposition {
            failure: Failure::Connection,
            retryable: true,
            reason: format!("transport error: {}", snippet(body)),
            status: None,
            retry_after,
        };
    };
    let error = api_error(body);
    let detail = error
        .as_ref()
        .and_then(|e| e.message.clone())
        .unwrap_or_else(|| body.trim().to_string());
    let mut reason = format!("HTTP {code}");
    if let Some(text) = status_text(code) {
        reason.push(' ');
        reason.push_str(text);
    }
    let quota = code == 429
        && error
            .as_ref()
            .is_some_and(|e| e.code_or_type("insufficient_quota"));
    if quota {
        reason.push_str(" (insufficient_quota: the account is out of credit)");
    }
    let detail = snippet(&detail);
    if !detail.is_empty() {
        reason.push_str(": ");
        reason.push_str(&detail);
    }
    let redirect = (300..=399).contains(&code);
    if redirect {
        // The target is not quoted: a Location may carry a token, and it is not followed.
        reason = format!("HTTP {code}: the endpoint redirects, and redirects are not followed");
    }
    let retryable = !quota && (code == 408 || code == 429 || (500..=599).contains(&code));
    Disposition {
        failure: if quota {
            Failure::Quota
        } else if redirect {
            Failure::Redirect(code)
        } else {
            Failure::Status(code)
        },
        retryable,
        reason,
        status: Some(code),
        retry_after,
    }
}

fn status_text(code: u16) -> Option<&'static str> {
    Some(match code {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => return None,
    })
}

/// The `error` object of an OpenAI-style error body.
struct ApiError {
    message: Option<String>,
    code: Option<String>,
    kind: Option<String>,
}

impl ApiError {
    fn code_or_type(&self, wanted: &str) -> bool {
        self.code.as_deref() == Some(wanted) || self.kind.as_deref() == Some(wanted)
    }
}

fn api_error(body: &str) -> Option<ApiError> {
    let value: serde_json::Value = serde_json::from_str(body.trim()).ok()?;
    let error = value.get("error")?;
    let field = |name: &str| error.get(name).and_then(|v| v.as_str()).map(str::to_string);
    Some(ApiError {
        message: field("message"),
        code: field("code"),
        kind: field("type"),
    })
}

/// The delay a server asked for: `retry-after-ms` (milliseconds, may be fractional) first,
/// then `Retry-After` as seconds (integer or decimal) or an HTTP date (IMF-fixdate). Header
/// names are case-insensitive; a date in the past gives zero; anything unparsable gives `None`.
pub fn retry_after(headers: &[(String, String)], now: SystemTime) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    };
    if let Some(ms) = header("retry-after-ms").and_then(parse_non_negative) {
        return Some(secs_to_duration(ms / 1000.0));
    }
    let value = header("retry-after")?;
    if let Some(secs) = parse_non_negative(value) {
        return Some(secs_to_duration(secs));
    }
    let at = parse_http_date(value)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A plain non-negative decimal number (`12`, `1.5`), nothing else (no signs, exponents or
/// `inf`, which `f64::from_str` would accept).
fn parse_non_negative(s: &str) -> Option<f64> {
    let ok = !s.is_empty()
        && s.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && s.bytes().filter(|&b| b == b'.').count() <= 1
        && s.bytes().any(|b| b.is_ascii_digit());
    if ok { s.parse().ok() } else { None }
}

/// Parses an IMF-fixdate (RFC 9110 §5.6.7), e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
pub fn parse_http_date(s: &str) -> Option<SystemTime> {
    const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let mut parts = s.split_ascii_whitespace();
    let weekday = parts.next()?.strip_suffix(',')?;
    let day = parts.next()?;
    let month = parts.next()?;
    let year = parts.next()?;
    let time = parts.next()?;
    if parts.next()? != "GMT" || parts.next().is_some() {
        return None;
    }
    if !DAYS.contains(&weekday) {
        return None;
    }
    let number = |s: &str, len: usize| -> Option<u32> {
        (s.len() == len && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?
    };
    let day = number(day, 2)?;
    let month = MONTHS.iter().position(|m| *m == month)? as u32 + 1;
    let year = number(year, 4)? as i64;
    let mut hms = time.split(':');
    let hour = number(hms.next()?, 2)?;
    let minute = number(hms.next()?, 2)?;
    let second = number(hms.next()?, 2)?;
    if hms.next().is_some() || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    if day == 0 || day > days_in_month(year, month) {
        return None;
    }
    let secs = days_from_civil(year, month, day) * 86_400
        + i64::from(hour) * 3600
        + i64::from(minute) * 60
        + i64::from(second);
    // Before 1970 is still a valid date, just long past.
    Some(match u64::try_from(secs) {
        Ok(secs) => UNIX_EPOCH + Duration::from_secs(secs),
        Err(_) => UNIX_EPOCH,
    })
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The retry state of one judge call: its policy, its backoff and when it started.
#[derive(Debug)]
pub struct RetryContext {
    policy: RetryPolicy,
    backoff: Backoff,
    start: Instant,
}

impl RetryContext {
    /// Starts a call now, with entropy-seeded jitter.
    pub fn new(policy: RetryPolicy) -> Self {
        Self::with_backoff(policy, Backoff::new(policy.backoff))
    }

    /// Starts a call now with a given backoff (for deterministic tests).
    pub fn with_backoff(policy: RetryPolicy, backoff: Backoff) -> Self {
        Self {
            policy,
            backoff,
            start: Instant::now(),
        }
    }

    /// The policy this call runs under.
    #[cfg(test)]
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// The wait before the next attempt, given that `attempt` attempts (1-based: 1 after the
    /// first) have been made and the last ended as `disposition`. `None` means stop: the
    /// outcome is not retryable or `max_retries` retries have been spent.
    ///
    /// The server's requested delay wins over the backoff, capped at [`MAX_SERVER_DELAY`].
    pub fn next_delay(&mut self, attempt: usize, disposition: &Disposition) -> Option<Duration> {
        if !disposition.retryable || attempt > self.policy.max_retries {
            return None;
        }
        Some(match disposition.retry_after {
            Some(wanted) => wanted.min(MAX_SERVER_DELAY),
            None => self.backoff.next_backoff(),
        })
    }

    /// The error to report once [`next_delay`](Self::next_delay) says stop.
    pub fn error(&self, attempts: usize, last: &Disposition) -> RetryError {
        RetryError::new(attempts, self.start.elapsed(), last)
    }
}

/// A judge call that finally failed: how often we tried, for how long, and the last cause.
///
/// It is built only from statuses, reasons and response bodies, and redacts anything that
/// looks like a key on top of that (OpenAI echoes part of a wrong key in its 401 message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryError {
    /// What failed last.
    pub failure: Failure,
    /// Attempts made, the first included.
    pub attempts: usize,
    /// Time from the first attempt to giving up.
    pub elapsed: Duration,
    /// The last HTTP status (`None` for a transport error).
    pub status: Option<u16>,
    /// Whether the last outcome was retryable (false: we stopped early on purpose).
    pub retryable: bool,
    /// The last cause, truncated and redacted.
    pub reason: String,
}

impl RetryError {
    /// Records a failure after `attempts` attempts over `elapsed`, caused last by `last`.
    pub fn new(attempts: usize, elapsed: Duration, last: &Disposition) -> Self {
        // Reasons from `classify` are already short; allow for the prefix it adds.
        Self {
            failure: last.failure,
            attempts,
            elapsed,
            status: last.status,
            retryable: last.retryable,
            reason: truncate(&redact_secrets(&last.reason), MAX_BODY_CHARS + 100),
        }
    }
}

impl fmt::Display for RetryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = if self.attempts == 1 { "" } else { "s" };
        write!(
            f,
            "judge call failed after {} attempt{plural} in {:.1}s",
            self.attempts,
            self.elapsed.as_secs_f64()
        )?;
        if !self.retryable {
            write!(f, " (not retryable)")?;
        }
        write!(f, ": {}", self.reason)
    }
}

impl std::error::Error for RetryError {}

/// A body or message made safe to quote: redacted, on one line, at most [`MAX_BODY_CHARS`].
pub fn snippet(text: &str) -> String {
    safe_excerpt(text, MAX_BODY_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct FixedRng(u64);

    impl RandomSource for FixedRng {
        fn next_u64(&mut self) -> u64 {
            self.0
        }
    }

    fn config() -> BackoffConfig {
        BackoffConfig {
            init: Duration::from_secs(1),
            max: Duration::from_secs(20),
            base: 3.0,
        }
    }

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn close(a: Duration, b: Duration) -> bool {
        a.abs_diff(b) < Duration::from_micros(10)
    }

    #[test]
    fn backoff_max_rng_gives_the_exponential_ceiling_capped_at_max() {
        let mut backoff = Backoff::with_rng(config(), Box::new(FixedRng(u64::MAX)));
        let expected = [1, 3, 9, 20, 20, 20];
        for secs in expected {
            let got = backoff.next_backoff();
            assert!(close(got, Duration::from_secs(secs)), "{got:?} != {secs}s");
        }
    }

    #[test]
    fn backoff_zero_rng_gives_zero_and_mid_rng_gives_half() {
        let mut zero = Backoff::with_rng(config(), Box::new(FixedRng(0)));
        assert!((0..5).all(|_| zero.next_backoff() == Duration::ZERO));
        let mut mid = Backoff::with_rng(config(), Box::new(FixedRng(u64::MAX / 2)));
        for secs in [0.5, 1.5, 4.5, 10.0, 10.0] {
            let got = mid.next_backoff();
            assert!(
                close(got, Duration::from_secs_f64(secs)),
                "{got:?} != {secs}"
            );
        }
    }

    #[test]
    fn backoff_is_deterministic_for_a_seed_and_stays_within_the_ceiling() {
        let run = |seed| {
            let mut b = Backoff::with_rng(config(), Box::new(SplitMix64::seeded(seed)));
            (0..30).map(|_| b.next_backoff()).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        let probe = Backoff::with_rng(config(), Box::new(FixedRng(0)));
        for (i, d) in run(7).into_iter().enumerate() {
            assert!(d <= probe.ceiling(i as u32), "retry {i}: {d:?}");
        }
    }

    #[test]
    fn backoff_survives_odd_configs() {
        let odd = BackoffConfig {
            init: Duration::from_secs(1),
            max: Duration::from_secs(5),
            base: f64::NAN,
        };
        let mut b = Backoff::with_rng(odd, Box::new(FixedRng(u64::MAX)));
        assert!((0..3).all(|_| close(b.next_backoff(), Duration::from_secs(1))));
        let huge = BackoffConfig {
            base: 1e300,
            ..config()
        };
        let mut b = Backoff::with_rng(huge, Box::new(FixedRng(u64::MAX)));
        for _ in 0..2000 {
            assert!(b.next_backoff() <= Duration::from_secs(20));
        }
    }

    #[test]
    fn splitmix_matches_the_reference_sequence() {
        // First outputs of SplitMix64 seeded with 1234567 (from the reference C code).
        let mut rng = SplitMix64::seeded(1234567);
        assert_eq!(rng.next_u64(), 6457827717110365317);
        assert_eq!(rng.next_u64(), 3203168211198807973);
        let a = SplitMix64::from_entropy().next_u64();
        let b = SplitMix64::from_entropy().next_u64();
        assert_ne!(a, b);
    }

    #[test]
    fn classification_table() {
        let quota = r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#;
        let quota_type_only = r#"{"error":{"message":"quota","type":"insufficient_quota"}}"#;
        let rate = r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#;
        let cases: &[(Option<u16>, &str, bool)] = &[
            (None, "connection reset by peer", true),
            (Some(408), "", true),
            (Some(429), rate, true),
            (Some(429), "not json", true),
            (Some(429), quota, false),
            (Some(429), quota_type_only, false),
            (Some(500), "", true),
            (Some(502), "<html>bad gateway</html>", true),
            (Some(503), "", true),
            (Some(504), "", true),
            (Some(599), "", true),
            (Some(400), r#"{"error":{"message":"bad schema"}}"#, false),
            (Some(401), "", false),
            (Some(403), "", false),
            (Some(404), "", false),
            (Some(409), "", false),
            (Some(422), "", false),
            // A quota error on a non-429 status is simply not retryable anyway.
            (Some(400), quota, false),
        ];
        for (status, body, retryable) in cases {
            let d = classify(*status, &[], body);
            assert_eq!(d.retryable, *retryable, "{status:?} {body}: {d:?}");
            assert_eq!(d.status, *status);
        }
    }

    #[test]
    fn reasons_are_short_and_informative() {
        let d = classify(
            Some(429),
            &[],
            r#"{"error":{"message":"Rate limit reached"}}"#,
        );
        assert_eq!(d.reason, "HTTP 429 Too Many Requests: Rate limit reached");
        assert!(d.is_throttle());
        let d = classify(
            Some(429),
            &[],
            r#"{"error":{"code":"insufficient_quota","message":"out"}}"#,
        );
        assert!(d.reason.contains("insufficient_quota"), "{}", d.reason);
        assert!(!d.is_throttle());
        let d = classify(None, &[], "operation timed out");
        assert_eq!(d.reason, "transport error: operation timed out");
        let d = classify(Some(500), &[], &"x ".repeat(5000));
        assert!(
            d.reason.chars().count() < MAX_BODY_CHARS + 50,
            "{}",
            d.reason
        );
        assert!(d.reason.ends_with('…'));
        let d = classify(Some(418), &[], "");
        assert_eq!(d.reason, "HTTP 418");
    }

    #[test]
    fn retry_after_variants() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<Duration>);
        let cases: &[Case] = &[
            (&[], None),
            (&[("Retry-After", "7")], Some(Duration::from_secs(7))),
            (
                &[("retry-after", " 2.5 ")],
                Some(Duration::from_millis(2500)),
            ),
            (&[("RETRY-AFTER", "0")], Some(Duration::ZERO)),
            (
                &[("retry-after-ms", "1500")],
                Some(Duration::from_millis(1500)),
            ),
            (
                &[("Retry-After-Ms", "20.5")],
                Some(Duration::from_micros(20_500)),
            ),
            // retry-after-ms is more precise, so it wins.
            (
                &[("retry-after", "10"), ("retry-after-ms", "250")],
                Some(Duration::from_millis(250)),
            ),
            // A garbled ms header falls back to Retry-After.
            (
                &[("retry-after-ms", "soon"), ("retry-after", "3")],
                Some(Duration::from_secs(3)),
            ),
            (
                &[("Retry-After", "Sun, 06 Nov 1994 08:50:07 GMT")],
                Some(Duration::from_secs(30)),
            ),
            (
                &[("Retry-After", "Sun, 06 Nov 1994 08:49:37 GMT")],
                Some(Duration::ZERO),
            ),
            (
                &[("Retry-After", "Sat, 05 Nov 1994 08:49:37 GMT")],
                Some(Duration::ZERO),
            ),
            (
                &[("Retry-After", "Fri, 01 Jan 1960 00:00:00 GMT")],
                Some(Duration::ZERO),
            ),
            (&[("Retry-After", "-5")], None),
            (&[("Retry-After", "1e3")], None),
            (&[("Retry-After", "inf")], None),
            (&[("Retry-After", "NaN")], None),
            (&[("Retry-After", "")], None),
            (&[("Retry-After", ".")], None),
            (&[("Retry-After", "1.2.3")], None),
            (&[("Retry-After", "tomorrow")], None),
            (&[("Retry-After", "Sun, 06 Nov 1994 08:49:37 UTC")], None),
            (&[("Retry-After", "Sun, 31 Feb 1994 08:49:37 GMT")], None),
            (&[("Retry-After", "Sun, 06 Nov 1994 24:00:00 GMT")], None),
            (&[("Retry-After", "Sun, 6 Nov 1994 08:49:37 GMT")], None),
            (&[("Retry-After", "Sunday, 06-Nov-94 08:49:37 GMT")], None),
            (&[("Retry-After", "Sun Nov  6 08:49:37 1994")], None),
            (&[("retry-after-ms", "-1")], None),
        ];
        for (headers, expected) in cases {
            assert_eq!(retry_after(&h(headers), now), *expected, "{headers:?}");
        }
    }

    #[test]
    fn http_dates_convert_exactly() {
        let at = |s| {
            parse_http_date(s)
                .unwrap()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs()
        };
        assert_eq!(at("Sun, 06 Nov 1994 08:49:37 GMT"), 784_111_777);
        assert_eq!(at("Thu, 01 Jan 1970 00:00:00 GMT"), 0);
        assert_eq!(at("Thu, 29 Feb 2024 23:59:59 GMT"), 1_709_251_199);
        assert_eq!(at("Fri, 31 Dec 2100 12:00:00 GMT"), 4_133_937_600);
        assert!(parse_http_date("Thu, 29 Feb 2023 00:00:00 GMT").is_none());
        assert!(parse_http_date("Thu, 29 Feb 2100 00:00:00 GMT").is_none());
        assert!(parse_http_date("Tue, 29 Feb 2000 00:00:00 GMT").is_some());
    }

    #[test]
    fn classify_reads_the_servers_delay() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let d = classify_at(Some(429), &h(&[("Retry-After", "12")]), "", now);
        assert_eq!(d.retry_after, Some(Duration::from_secs(12)));
        let d = classify_at(Some(503), &h(&[("x-other", "12")]), "", now);
        assert_eq!(d.retry_after, None);
    }

    fn policy(max_retries: usize) -> RetryPolicy {
        RetryPolicy {
            max_retries,
            backoff: config(),
            timeout: Duration::from_secs(30),
        }
    }

    fn disposition(retryable: bool, retry_after: Option<Duration>) -> Disposition {
        Disposition {
            failure: Failure::Status(503),
            retryable,
            reason: "HTTP 503".into(),
            status: Some(503),
            retry_after,
        }
    }

    #[test]
    fn next_delay_bounds_attempts_and_prefers_the_server() {
        let backoff = Backoff::with_rng(config(), Box::new(FixedRng(u64::MAX)));
        let mut ctx = RetryContext::with_backoff(policy(3), backoff);
        let plain = disposition(true, None);
        assert!(close(
            ctx.next_delay(1, &plain).unwrap(),
            Duration::from_secs(1)
        ));
        // The server's delay is taken as is and does not consume a backoff step.
        let asked = disposition(true, Some(Duration::from_secs(2)));
        assert_eq!(ctx.next_delay(2, &asked), Some(Duration::from_secs(2)));
        assert!(close(
            ctx.next_delay(3, &plain).unwrap(),
            Duration::from_secs(3)
        ));
        // Three retries spent: the fourth attempt was the last.
        assert_eq!(ctx.next_delay(4, &plain), None);
        assert_eq!(ctx.next_delay(4, &asked), None);
    }

    #[test]
    fn next_delay_stops_on_non_retryable_and_caps_server_delays() {
        let mut ctx = RetryContext::new(policy(5));
        assert_eq!(ctx.next_delay(1, &disposition(false, None)), None);
        let hour = disposition(true, Some(Duration::from_secs(3600)));
        assert_eq!(ctx.next_delay(1, &hour), Some(MAX_SERVER_DELAY));
        let mut none = RetryContext::new(policy(0));
        assert_eq!(none.next_delay(1, &disposition(true, None)), None);
    }

    #[test]
    fn retry_error_display_is_informative_and_secret_free() {
        let key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789";
        let azure_key = "0123456789abcdef0123456789abcdef";
        let body = format!(
            r#"{{"error":{{"message":"Incorrect API key provided: {key}. Also {azure_key}. {}","code":"invalid_api_key"}}}}"#,
            "padding ".repeat(200)
        );
        let d = classify(Some(401), &[], &body);
        let err = RetryError::new(1, Duration::from_millis(1234), &d);
        let text = err.to_string();
        assert!(
            text.starts_with("judge call failed after 1 attempt in 1.2s (not retryable): HTTP 401"),
            "{text}"
        );
        assert!(!text.contains(key) && !text.contains("sk-proj"), "{text}");
        assert!(!text.contains(azure_key), "{text}");
        assert!(text.contains("Incorrect API key provided: ***"), "{text}");
        assert!(text.chars().count() < 500, "{}", text.len());

        let d = disposition(true, None);
        let err = RetryError::new(7, Duration::from_secs(90), &d);
        assert_eq!(
            err.to_string(),
            "judge call failed after 7 attempts in 90.0s: HTTP 503"
        );
        // Even a reason that bypassed `classify` is redacted.
        let raw = Disposition {
            reason: format!("Bearer {key}"),
            ..d
        };
        assert!(
            !RetryError::new(1, Duration::ZERO, &raw)
                .to_string()
                .contains(key)
        );
    }

    #[test]
    fn redaction_leaves_prose_alone() {
        let prose = "The model gpt-4o-mini-2024-07-18 returned 503, try again later.";
        assert_eq!(redact_secrets(prose), prose);
        assert_eq!(redact_secrets("key sk-abc, ok"), "key ***, ok");
        assert_eq!(redact_secrets("émoji ✓ sk-x"), "émoji ✓ ***");
        assert_eq!(truncate("héllo", 2), "hé…");
        assert_eq!(truncate("hé", 2), "hé");
    }

    #[test]
    fn error_from_context_counts_elapsed_time() {
        let ctx = RetryContext::new(policy(1));
        let err = ctx.error(2, &disposition(true, None));
        assert_eq!(err.attempts, 2);
        assert!(err.elapsed < Duration::from_secs(3600));
        assert_eq!(ctx.policy().max_retries, 1);
    }
}
