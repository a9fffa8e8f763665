//! What the judge has done so far in this process, and the progress bar and summary line
//! the CLI shows on stderr.
//!
//! The judge functions bump process-wide counters ([`STATS`]); a [`Reporter`] thread reads
//! them. An "activity" starts when rows arrive and ends when every row received has an
//! outcome and nothing moved for a moment; then the bar is cleared and one summary line
//! (calls, cache hits, errors, tokens, time) is printed, then one line per judge cascade
//! that decided calls in it ([`CascadeTally`]: escalations, each model's requests and their
//! dollars against the main model alone). No key, URL or input text is ever part of what is
//! shown.

use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::llm::usage::Usage;

/// Process-wide judge counters.
#[derive(Debug, Default)]
pub struct JudgeStats {
    rows: AtomicU64,
    rows_done: AtomicU64,
    skipped: AtomicU64,
    errors: AtomicU64,
    cache_hits: AtomicU64,
    shared: AtomicU64,
    calls: AtomicU64,
    calls_in_flight: AtomicU64,
    retries: AtomicU64,
    prompt_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    completion_tokens: AtomicU64,
    /// Billionths of a dollar, of the calls with a known price.
    nano_usd: AtomicU64,
    /// Calls with usage but no known price.
    unpriced: AtomicU64,
    cache_errors: AtomicU64,
}

/// The counters every judge function reports to.
pub static STATS: JudgeStats = JudgeStats {
    rows: AtomicU64::new(0),
    rows_done: AtomicU64::new(0),
    skipped: AtomicU64::new(0),
    errors: AtomicU64::new(0),
    cache_hits: AtomicU64::new(0),
    shared: AtomicU64::new(0),
    calls: AtomicU64::new(0),
    calls_in_flight: AtomicU64::new(0),
    retries: AtomicU64::new(0),
    prompt_tokens: AtomicU64::new(0),
    cached_tokens: AtomicU64::new(0),
    completion_tokens: AtomicU64::new(0),
    nano_usd: AtomicU64::new(0),
    unpriced: AtomicU64::new(0),
    cache_errors: AtomicU64::new(0),
};

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Rows handed to judge functions.
    pub rows: u64,
    /// Rows with an outcome.
    pub rows_done: u64,
    /// Rows not judged because an input was NULL.
    pub skipped: u64,
    /// Rows whose judgement failed.
    pub errors: u64,
    /// Judgements read from the persistent cache.
    pub cache_hits: u64,
    /// Rows that shared another row's call (identical request in this process).
    pub shared: u64,
    /// HTTP attempts sent.
    pub calls: u64,
    pub calls_in_flight: u64,
    /// Attempts that were retried.
    pub retries: u64,
    pub prompt_tokens: u64,
    /// The part of `prompt_tokens` served from the provider's prompt cache.
    pub cached_tokens: u64,
    pub completion_tokens: u64,
    /// Dollars of the calls with a known price, in billionths.
    pub nano_usd: u64,
    /// Calls that reported usage but have no price.
    pub unpriced: u64,
}

impl StatsSnapshot {
    /// The counts between `earlier` and `self`.
    pub fn since(&self, earlier: &StatsSnapshot) -> StatsSnapshot {
        StatsSnapshot {
            rows: self.rows - earlier.rows,
            rows_done: self.rows_done - earlier.rows_done,
            skipped: self.skipped - earlier.skipped,
            errors: self.errors - earlier.errors,
            cache_hits: self.cache_hits - earlier.cache_hits,
            shared: self.shared - earlier.shared,
            calls: self.calls - earlier.calls,
            calls_in_flight: self.calls_in_flight,
            retries: self.retries - earlier.retries,
            prompt_tokens: self.prompt_tokens - earlier.prompt_tokens,
            cached_tokens: self.cached_tokens - earlier.cached_tokens,
            completion_tokens: self.completion_tokens - earlier.completion_tokens,
            nano_usd: self.nano_usd - earlier.nano_usd,
            unpriced: self.unpriced - earlier.unpriced,
        }
    }

    /// Whether every row received has an outcome and no call is out.
    pub fn idle(&self) -> bool {
        self.rows_done >= self.rows && self.calls_in_flight == 0
    }
}

impl JudgeStats {
    pub fn snapshot(&self) -> StatsSnapshot {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            rows: get(&self.rows),
            rows_done: get(&self.rows_done),
            skipped: get(&self.skipped),
            errors: get(&self.errors),
            cache_hits: get(&self.cache_hits),
            shared: get(&self.shared),
            calls: get(&self.calls),
            calls_in_flight: get(&self.calls_in_flight),
            retries: get(&self.retries),
            prompt_tokens: get(&self.prompt_tokens),
            cached_tokens: get(&self.cached_tokens),
            completion_tokens: get(&self.completion_tokens),
            nano_usd: get(&self.nano_usd),
            unpriced: get(&self.unpriced),
        }
    }

    pub(crate) fn rows_received(&self, n: u64) {
        self.rows.fetch_add(n, Ordering::Relaxed);
    }
    pub(crate) fn row_done(&self) {
        self.rows_done.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn skipped(&self) {
        self.skipped.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn cache_hit(&self) {
        self.cache_hits.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn shared_call(&self) {
        self.shared.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn call_started(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.calls_in_flight.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn call_finished(&self) {
        self.calls_in_flight.fetch_sub(1, Ordering::Relaxed);
    }
    pub(crate) fn retried(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }
    /// A judgement could not be committed to the cache: say so once per process (the row
    /// keeps its score; a later run would pay for that call again).
    pub(crate) fn cache_write_failed(&self, error: &str) {
        if self.cache_errors.fetch_add(1, Ordering::Relaxed) == 0 {
            eprintln!("warning: {error}; judgements are not being cached");
        }
    }
    /// One reply's usage and what it cost.
    pub(crate) fn usage(&self, usage: &Usage) {
        let n = |t: Option<i64>| t.unwrap_or(0).max(0) as u64;
        self.prompt_tokens
            .fetch_add(n(usage.prompt_tokens), Ordering::Relaxed);
        self.cached_tokens
            .fetch_add(n(usage.cached_tokens), Ordering::Relaxed);
        self.completion_tokens
            .fetch_add(n(usage.completion_tokens), Ordering::Relaxed);
        match usage.cost_usd {
            Some(usd) => {
                self.nano_usd
                    .fetch_add((usd * 1e9).round().max(0.0) as u64, Ordering::Relaxed);
            }
            None if usage.prompt_tokens.is_some() || usage.completion_tokens.is_some() => {
                self.unpriced.fetch_add(1, Ordering::Relaxed);
            }
            None => {}
        }
    }
}

/// One line about a finished activity, e.g. `judge: 1,000 rows in 3.2 s: 980 calls, ...`.
pub fn summary_line(d: &StatsSnapshot, elapsed: Duration) -> String {
    let dollars = match (d.nano_usd, d.unpriced) {
        (0, 0) => String::new(),
        (nano, 0) => format!("; ${:.4}", nano as f64 / 1e9),
        (0, n) => format!("; cost unknown ({} calls without a price)", thousands(n)),
        (nano, n) => format!(
            "; ${:.4} + {} calls without a price",
            nano as f64 / 1e9,
            thousands(n)
        ),
    };
    let cached = match d.cached_tokens {
        0 => String::new(),
        n => format!(" ({} prompt tokens cached)", thousands(n)),
    };
    format!(
        "judge: {} rows in {:.1} s: {} calls ({} retried), {} cache hits, {} shared, {} errors, \
         {} skipped; tokens {} prompt + {} completion{cached}{dollars}",
        thousands(d.rows_done),
        elapsed.as_secs_f64(),
        thousands(d.calls),
        thousands(d.retries),
        thousands(d.cache_hits),
        thousands(d.shared),
        thousands(d.errors),
        thousands(d.skipped),
        thousands(d.prompt_tokens),
        thousands(d.completion_tokens),
    )
}

/// What the cascades of one calibration did in this process (see `judge::cascade`): the
/// figures of the run's summary line and of `judge_cascades()`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CascadeTally {
    /// The calibrated metric (a fused group: its metrics, comma-separated), both models and
    /// what the calibration certified.
    pub metric: String,
    pub model: String,
    pub small_model: String,
    /// `None`: no threshold qualified, every row escalates.
    pub threshold: Option<f64>,
    pub agreement: f64,
    pub lower_bound: f64,
    pub sample_size: i64,
    /// Distinct calls the cascade decided (cached ones included; each once in a process)
    /// and how many it escalated.
    pub rows: u64,
    pub escalated: u64,
    /// Requests each model answered.
    pub small_calls: u64,
    pub main_calls: u64,
    /// What those requests cost (`None`: some had no price).
    pub cost_usd: Option<f64>,
    /// The main model alone: one request for each the small model answered first (its
    /// samples aside), priced at the main model's rates for the same tokens.
    pub main_alone_calls: u64,
    pub main_alone_usd: Option<f64>,
}

impl CascadeTally {
    /// The counts between `earlier` (none: the start) and `self`.
    pub fn since(&self, earlier: Option<&CascadeTally>) -> CascadeTally {
        let Some(e) = earlier else {
            return self.clone();
        };
        let minus = |a: Option<f64>, b: Option<f64>| Some(a? - b?);
        CascadeTally {
            rows: self.rows - e.rows,
            escalated: self.escalated - e.escalated,
            small_calls: self.small_calls - e.small_calls,
            main_calls: self.main_calls - e.main_calls,
            cost_usd: minus(self.cost_usd, e.cost_usd),
            main_alone_calls: self.main_alone_calls - e.main_alone_calls,
            main_alone_usd: minus(self.main_alone_usd, e.main_alone_usd),
            ..self.clone()
        }
    }

    /// `run`'s counts added to these (its calibration replaces these).
    fn add(&mut self, run: CascadeTally) {
        let plus = |a: Option<f64>, b: Option<f64>| Some(a? + b?);
        *self = CascadeTally {
            rows: self.rows + run.rows,
            escalated: self.escalated + run.escalated,
            small_calls: self.small_calls + run.small_calls,
            main_calls: self.main_calls + run.main_calls,
            cost_usd: plus(self.cost_usd, run.cost_usd),
            main_alone_calls: self.main_alone_calls + run.main_alone_calls,
            main_alone_usd: plus(self.main_alone_usd, run.main_alone_usd),
            ..run
        };
    }

    /// The summary line's, e.g. `judge cascade groundedness: 1,800 rows, 255 escalated ...`.
    pub fn line(&self) -> String {
        let threshold = match self.threshold {
            Some(t) => format!("at threshold {t:.3}"),
            None => "(no threshold qualified)".to_string(),
        };
        let dollars = match (self.cost_usd, self.main_alone_usd) {
            (Some(c), Some(m)) if m > 0.0 => {
                format!("; ${c:.4} against ${m:.4} ({:.0} %)", 100.0 * c / m)
            }
            (Some(c), Some(m)) => format!("; ${c:.4} against ${m:.4}"),
            _ => "; cost unknown (no price for a model)".to_string(),
        };
        format!(
            "judge cascade {}: {} rows, {} escalated ({:.1} %) {threshold} (calibration: \
             agreement {:.3}, lower bound {:.3}, {} rows); calls {} {} + {} {} against {} {} \
             alone{dollars}",
            self.metric,
            thousands(self.rows),
            thousands(self.escalated),
            if self.rows == 0 {
                0.0
            } else {
                100.0 * self.escalated as f64 / self.rows as f64
            },
            self.agreement,
            self.lower_bound,
            self.sample_size,
            thousands(self.small_calls),
            self.small_model,
            thousands(self.main_calls),
            self.model,
            thousands(self.main_alone_calls),
            self.model,
        )
    }
}

/// Each calibration's cascade figures in this process and the calls they counted (hashed),
/// by calibration key.
type Cascades = BTreeMap<String, (CascadeTally, HashSet<u64>)>;
static CASCADES: std::sync::Mutex<Cascades> = std::sync::Mutex::new(BTreeMap::new());

/// What the cascades did in this process so far, by calibration key.
pub fn cascade_tallies() -> BTreeMap<String, CascadeTally> {
    CASCADES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(k, (t, _))| (k.clone(), t.clone()))
        .collect()
}

/// Adds one cascade run's figures to its calibration's. `calls`: each call's key and whether
/// it escalated; a call counts once however many functions read it (`groundedness` and
/// `groundedness_details` of the same row read one judgement), so `run`'s `rows` and
/// `escalated` are replaced by the calls not counted before.
pub(crate) fn record_cascade<'a>(
    key: &str,
    mut run: CascadeTally,
    calls: impl IntoIterator<Item = (&'a str, bool)>,
) {
    let mut all = CASCADES.lock().unwrap_or_else(|e| e.into_inner());
    let (tally, seen) = all.entry(key.to_string()).or_insert_with(|| {
        let nothing = CascadeTally {
            cost_usd: Some(0.0),
            main_alone_usd: Some(0.0),
            ..CascadeTally::default()
        };
        (nothing, HashSet::new())
    });
    run.rows = 0;
    run.escalated = 0;
    for (call, escalated) in calls {
        let mut h = std::hash::DefaultHasher::new();
        call.hash(&mut h);
        if seen.insert(h.finish()) {
            run.rows += 1;
            run.escalated += u64::from(escalated);
        }
    }
    tally.add(run);
}

/// The cascade lines of what happened between `earlier` and `now`.
fn cascade_lines(
    now: &BTreeMap<String, CascadeTally>,
    earlier: &BTreeMap<String, CascadeTally>,
) -> Vec<String> {
    now.iter()
        .map(|(key, t)| t.since(earlier.get(key)))
        .filter(|d| d.rows > 0)
        .map(|d| d.line())
        .collect()
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// How long an activity runs before the bar appears, and how long the counters must stand
/// still before it counts as finished.
const BAR_AFTER: Duration = Duration::from_secs(2);
const IDLE_AFTER: Duration = Duration::from_millis(300);
const TICK: Duration = Duration::from_millis(100);

/// Watches [`STATS`] from a background thread; drop it (or call [`Reporter::finish`]) to
/// print the last summary.
#[derive(Debug)]
pub struct Reporter {
    /// Dropping it wakes the watcher at once (a sleeping watcher would delay exit by a tick).
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Reporter {
    /// Starts watching. `bar`: draw a progress bar (only honoured when stderr is a
    /// terminal); the summary line is printed either way.
    pub fn start(bar: bool) -> Reporter {
        let (stop, wake) = std::sync::mpsc::channel::<()>();
        let bar = bar && std::io::stderr().is_terminal();
        // Taken here, not in the thread: work that starts before the thread runs counts.
        let baseline = (STATS.snapshot(), cascade_tallies());
        let thread = std::thread::Builder::new()
            .name("evalsql-judge-progress".into())
            .spawn(move || watch(&wake, bar, baseline))
            .ok();
        Reporter {
            stop: Some(stop),
            thread,
        }
    }

    /// Prints the summary of any unfinished activity and stops watching.
    pub fn finish(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        self.shutdown();
    }
}

struct Activity {
    start: Instant,
    base: StatsSnapshot,
    cascades: BTreeMap<String, CascadeTally>,
    last_change: Instant,
    last: StatsSnapshot,
    bar: Option<ProgressBar>,
}

fn watch(
    wake: &std::sync::mpsc::Receiver<()>,
    draw_bar: bool,
    (mut baseline, mut cascades): (StatsSnapshot, BTreeMap<String, CascadeTally>),
) {
    let mut stopping = false;
    let mut activity: Option<Activity> = None;
    loop {
        let now = Instant::now();
        let snap = STATS.snapshot();
        if activity.is_none() && snap != baseline {
            // Started at most one tick ago.
            activity = Some(Activity {
                start: now - TICK,
                base: baseline,
                cascades: std::mem::take(&mut cascades),
                last_change: now,
                last: snap,
                bar: None,
            });
        }
        match activity.as_mut() {
            None => {}
            Some(a) => {
                if snap != a.last {
                    a.last = snap;
                    a.last_change = now;
                }
                let d = snap.since(&a.base);
                if draw_bar && a.bar.is_none() && now - a.start >= BAR_AFTER && !stopping {
                    a.bar = Some(new_bar());
                }
                if let Some(bar) = &a.bar {
                    bar.set_length(d.rows);
                    bar.set_position(d.rows_done);
                    bar.set_message(format!(
                        "calls {} · cache hits {} · errors {}",
                        thousands(d.calls),
                        thousands(d.cache_hits),
                        thousands(d.errors)
                    ));
                }
                let finished = snap.idle() && now - a.last_change >= IDLE_AFTER;
                if finished || stopping {
                    if let Some(bar) = a.bar.take() {
                        bar.finish_and_clear();
                    }
                    eprintln!("{}", summary_line(&d, a.last_change - a.start));
                    cascades = cascade_tallies();
                    for line in cascade_lines(&cascades, &a.cascades) {
                        eprintln!("{line}");
                    }
                    baseline = snap;
                    activity = None;
                }
            }
        }
        if stopping {
            return;
        }
        // Sleeps a tick, or wakes at once when the reporter is dropped.
        stopping = !matches!(
            wake.recv_timeout(TICK),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout)
        );
    }
}

fn new_bar() -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "judge [{elapsed_precise}] {wide_bar} {pos}/{len} rows · {msg} · ETA {eta}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_reads_well() {
        let d = StatsSnapshot {
            rows: 1200,
            rows_done: 1200,
            calls: 1003,
            retries: 3,
            cache_hits: 190,
            shared: 10,
            errors: 2,
            skipped: 5,
            prompt_tokens: 1_234_567,
            completion_tokens: 45_000,
            calls_in_flight: 0,
            ..StatsSnapshot::default()
        };
        assert_eq!(
            summary_line(&d, Duration::from_millis(3250)),
            "judge: 1,200 rows in 3.2 s: 1,003 calls (3 retried), 190 cache hits, 10 shared, \
             2 errors, 5 skipped; tokens 1,234,567 prompt + 45,000 completion"
        );
        let priced = StatsSnapshot {
            cached_tokens: 1_024,
            nano_usd: 1_234_500_000,
            ..d
        };
        assert!(
            summary_line(&priced, Duration::from_millis(3250)).ends_with(
                "tokens 1,234,567 prompt + 45,000 completion (1,024 prompt tokens cached); \
                 $1.2345"
            ),
            "{}",
            summary_line(&priced, Duration::from_millis(3250))
        );
        let unpriced = StatsSnapshot { unpriced: 3, ..d };
        assert!(
            summary_line(&unpriced, Duration::ZERO)
                .ends_with("; cost unknown (3 calls without a price)")
        );
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
    }

    #[test]
    fn a_cascade_line_gives_its_calls_and_dollars_against_the_main_model_alone() {
        let calibration = CascadeTally {
            metric: "groundedness".into(),
            model: "gpt-4o".into(),
            small_model: "gpt-4o-mini".into(),
            threshold: Some(0.8125),
            agreement: 0.955,
            lower_bound: 0.921,
            sample_size: 200,
            cost_usd: Some(0.0),
            main_alone_usd: Some(0.0),
            ..CascadeTally::default()
        };
        let earlier = calibration.clone();
        let mut now = calibration.clone();
        for run in [
            (1000, 150, 1000, 150, 0.3, 1.5),
            (800, 105, 800, 105, 0.25, 1.2),
        ] {
            now.add(CascadeTally {
                rows: run.0,
                escalated: run.1,
                small_calls: run.2,
                main_calls: run.3,
                cost_usd: Some(run.4),
                main_alone_calls: run.2,
                main_alone_usd: Some(run.5),
                ..calibration.clone()
            });
        }
        let d = now.since(Some(&earlier));
        assert_eq!(
            d.line(),
            "judge cascade groundedness: 1,800 rows, 255 escalated (14.2 %) at threshold 0.812 \
             (calibration: agreement 0.955, lower bound 0.921, 200 rows); calls 1,800 \
             gpt-4o-mini + 255 gpt-4o against 1,800 gpt-4o alone; $0.5500 against $2.7000 (20 %)"
        );
        // Only the calls since: an unchanged tally has none, so no line.
        let lines = cascade_lines(
            &BTreeMap::from([("k".to_string(), now.clone())]),
            &BTreeMap::from([("k".to_string(), now.clone())]),
        );
        assert!(lines.is_empty());
        let unpriced = CascadeTally {
            cost_usd: None,
            ..d.clone()
        };
        assert!(
            unpriced
                .line()
                .ends_with("; cost unknown (no price for a model)")
        );
        let none = CascadeTally {
            threshold: None,
            ..d
        };
        assert!(
            none.line()
                .contains("escalated (14.2 %) (no threshold qualified)")
        );
    }
}
