//! The process-wide, adaptive bound on judge calls in flight, plus RPM/TPM pacing.
//!
//! One [`AdaptiveLimiter`] exists per endpoint + model ([`limiter_for`]) and is shared by every
//! partition, query and session in the process, so `max_concurrency` means what it says no
//! matter how many queries run at once.
//!
//! * **Concurrency.** The limit starts at the ceiling, halves (down to 1) when a call is
//!   throttled (HTTP 429) and grows back by one after `limit` successes (additive increase,
//!   multiplicative decrease, as in TCP). Waiters are served first come, first served.
//! * **Rates.** Optional requests-per-minute and tokens-per-minute budgets are token buckets
//!   that hold one minute's budget and refill continuously, the way OpenAI describes its own
//!   limits. [`AdaptiveLimiter::acquire`] reserves from both and sleeps until they allow.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::llm::policy::CallLimits;

/// The largest ceiling we accept; far above any real endpoint's concurrency.
pub const MAX_CEILING: usize = 1 << 16;

/// A snapshot of a limiter's counters, for tests.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimiterStats {
    /// The latest `max_concurrency`.
    pub ceiling: usize,
    /// The current adaptive limit (1 ..= ceiling).
    pub limit: usize,
    /// Permits currently held (including holders still waiting for RPM/TPM budget).
    pub in_flight: usize,
    /// The most permits ever held at once.
    pub peak_in_flight: usize,
    /// Permits granted so far.
    pub acquired: u64,
    /// Calls reported as throttled.
    pub throttled: u64,
    /// Calls reported as succeeded.
    pub succeeded: u64,
}

/// Bounds concurrent judge calls adaptively and paces them to RPM/TPM budgets.
///
/// A permit is granted only while fewer than `limit` are held. Permits already out when the
/// limit drops stay valid until dropped (a call in progress cannot be recalled), so right
/// after a cut `in_flight` may exceed `limit`; nobody new is let in until it is below again.
///
/// Cloning is cheap and shares the limiter.
#[derive(Debug, Clone)]
pub struct AdaptiveLimiter {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Hands out concurrency slots in FIFO order. Its total permits (available + held) are
    /// always `limit + debt`.
    semaphore: Arc<Semaphore>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    ceiling: usize,
    limit: usize,
    /// Permits that were out when the limit shrank and must be forgotten, not returned, when
    /// they come back. Invariant: `debt > 0` implies the semaphore has no available permits.
    debt: usize,
    in_flight: usize,
    peak_in_flight: usize,
    /// Bumped on every decrease; a throttle reported by a permit granted before the latest
    /// decrease is ignored, so a burst of 429s from one congested moment halves once.
    epoch: u64,
    /// Successes since the limit last changed.
    streak: usize,
    acquired: u64,
    throttled: u64,
    succeeded: u64,
    requests: Option<TokenBucket>,
    tokens: Option<TokenBucket>,
}

impl AdaptiveLimiter {
    /// A limiter allowing `ceiling` calls in flight (clamped to `1..=MAX_CEILING`) and the
    /// given per-minute budgets (`None` or 0: unlimited).
    pub fn new(ceiling: usize, rpm: Option<u32>, tpm: Option<u64>) -> Self {
        let ceiling = ceiling.clamp(1, MAX_CEILING);
        let now = Instant::now();
        let state = State {
            ceiling,
            limit: ceiling,
            debt: 0,
            in_flight: 0,
            peak_in_flight: 0,
            epoch: 0,
            streak: 0,
            acquired: 0,
            throttled: 0,
            succeeded: 0,
            requests: TokenBucket::per_minute(rpm.map(u64::from), now),
            tokens: TokenBucket::per_minute(tpm, now),
        };
        Self {
            inner: Arc::new(Inner {
                semaphore: Arc::new(Semaphore::new(ceiling)),
                state: Mutex::new(state),
            }),
        }
    }

    /// Waits for a concurrency slot, then for RPM/TPM budget for one request of about
    /// `estimated_tokens` tokens, and returns the slot. Dropping the [`Permit`] releases it;
    /// dropping this future while it waits gives back anything it took.
    ///
    /// The slot is taken first so that rate budget is only reserved by a call that is about to
    /// be sent; it is held while pacing, which is harmless because under a rate limit the rate,
    /// not concurrency, is what binds.
    pub async fn acquire(&self, estimated_tokens: u64) -> Permit {
        let slot = Arc::clone(&self.inner.semaphore)
            .acquire_owned()
            .await
            .expect("the limiter never closes its semaphore");
        let (epoch, ready_at) = {
            let mut state = self.inner.lock();
            state.in_flight += 1;
            state.peak_in_flight = state.peak_in_flight.max(state.in_flight);
            state.acquired += 1;
            let now = Instant::now();
            let mut wait = Duration::ZERO;
            if let Some(bucket) = state.requests.as_mut() {
                wait = wait.max(bucket.reserve(1, now));
            }
            if let Some(bucket) = state.tokens.as_mut() {
                wait = wait.max(bucket.reserve(estimated_tokens, now));
            }
            (state.epoch, now + wait)
        };
        // Built before sleeping, so cancellation during the sleep still releases the slot.
        let permit = Permit {
            inner: Arc::clone(&self.inner),
            slot: Some(slot),
            epoch,
            reported: false,
        };
        if ready_at > Instant::now() {
            tokio::time::sleep_until(ready_at).await;
        }
        permit
    }

    /// Adopts a new ceiling (the latest `max_concurrency`, clamped to `1..=MAX_CEILING`).
    ///
    /// An unthrottled limiter (limit at the old ceiling) moves straight to the new one; a
    /// throttled one keeps its lower limit, clamped to the new ceiling, and regrows towards it.
    pub fn set_ceiling(&self, ceiling: usize) {
        let ceiling = ceiling.clamp(1, MAX_CEILING);
        let mut state = self.inner.lock();
        let limit = if state.limit == state.ceiling {
            ceiling
        } else {
            state.limit.min(ceiling)
        };
        state.ceiling = ceiling;
        self.inner.set_limit(&mut state, limit);
    }

    /// Adopts new per-minute budgets (`None` or 0: unlimited). A budget that already existed
    /// keeps what it had accumulated, up to the new capacity.
    pub fn set_rates(&self, rpm: Option<u32>, tpm: Option<u64>) {
        let mut state = self.inner.lock();
        let now = Instant::now();
        TokenBucket::reconfigure(&mut state.requests, rpm.map(u64::from), now);
        TokenBucket::reconfigure(&mut state.tokens, tpm, now);
    }

    /// Applies the latest settings: ceiling and both budgets.
    pub fn configure(&self, ceiling: usize, rpm: Option<u32>, tpm: Option<u64>) {
        self.set_ceiling(ceiling);
        self.set_rates(rpm, tpm);
    }

    /// The current adaptive limit.
    #[cfg(test)]
    pub fn limit(&self) -> usize {
        self.inner.lock().limit
    }

    /// Permits currently held.
    #[cfg(test)]
    pub fn in_flight(&self) -> usize {
        self.inner.lock().in_flight
    }

    /// All counters at once.
    #[cfg(test)]
    pub fn stats(&self) -> LimiterStats {
        let state = self.inner.lock();
        LimiterStats {
            ceiling: state.ceiling,
            limit: state.limit,
            in_flight: state.in_flight,
            peak_in_flight: state.peak_in_flight,
            acquired: state.acquired,
            throttled: state.throttled,
            succeeded: state.succeeded,
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // No code panics while holding the lock, so a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves the limit, keeping the semaphore's total at `limit + debt`.
    fn set_limit(&self, state: &mut State, limit: usize) {
        let limit = limit.clamp(1, state.ceiling);
        if limit < state.limit {
            // Take what is free now; the rest is taken as held permits come back.
            let cut = state.limit - limit;
            let taken = self.semaphore.forget_permits(cut);
            state.debt += cut - taken;
        } else if limit > state.limit {
            // Cancelling debt is growing: those permits will be returned instead of forgotten.
            let grow = limit - state.limit;
            let cancelled = grow.min(state.debt);
            state.debt -= cancelled;
            self.semaphore.add_permits(grow - cancelled);
        }
        if limit != state.limit {
            state.streak = 0;
        }
        state.limit = limit;
    }
}

/// A concurrency slot (RAII): dropping it lets the next waiter in.
///
/// Report the call's fate with [`throttled`](Self::throttled) or
/// [`succeeded`](Self::succeeded) so the limit can adapt; only the first report counts.
#[derive(Debug)]
pub struct Permit {
    inner: Arc<Inner>,
    slot: Option<OwnedSemaphorePermit>,
    epoch: u64,
    reported: bool,
}

impl Permit {
    /// The call was rate limited (HTTP 429): halve the limit, unless it was already cut since
    /// this permit was granted (the 429s of one burst count once).
    pub fn throttled(&mut self) {
        if std::mem::replace(&mut self.reported, true) {
            return;
        }
        let mut state = self.inner.lock();
        state.throttled += 1;
        if self.epoch == state.epoch {
            state.epoch += 1;
            let halved = (state.limit / 2).max(1);
            self.inner.set_limit(&mut state, halved);
        }
    }

    /// The call succeeded: after `limit` successes the limit grows by one, up to the ceiling.
    pub fn succeeded(&mut self) {
        if std::mem::replace(&mut self.reported, true) {
            return;
        }
        let mut state = self.inner.lock();
        state.succeeded += 1;
        if state.limit >= state.ceiling {
            state.streak = 0;
            return;
        }
        state.streak += 1;
        if state.streak >= state.limit {
            let grown = state.limit + 1;
            self.inner.set_limit(&mut state, grown);
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let Some(slot) = self.slot.take() else {
            return;
        };
        let mut state = self.inner.lock();
        state.in_flight -= 1;
        if state.debt > 0 {
            // Shrinking: this slot disappears instead of going back to the pool.
            state.debt -= 1;
            slot.forget();
        } else {
            drop(slot);
        }
    }
}

/// A budget of `capacity` units per minute, refilled continuously.
///
/// The level may go negative: [`reserve`](Self::reserve) always books the full cost at once
/// and tells the caller how long to wait, so reservations are served in the order they were
/// made and nobody polls. A cost above the whole capacity (a prompt larger than the TPM
/// budget) waits only for a full bucket, then goes; the excess stays as debt that delays the
/// calls after it. So it never starves, and the average rate still matches the budget.
#[derive(Debug, Clone)]
struct TokenBucket {
    capacity: f64,
    per_second: f64,
    level: f64,
    updated: Instant,
}

impl TokenBucket {
    fn per_minute(budget: Option<u64>, now: Instant) -> Option<Self> {
        let capacity = budget.filter(|&b| b > 0)? as f64;
        Some(Self {
            capacity,
            per_second: capacity / 60.0,
            level: capacity,
            updated: now,
        })
    }

    fn reconfigure(slot: &mut Option<Self>, budget: Option<u64>, now: Instant) {
        let fresh = Self::per_minute(budget, now);
        *slot = match (slot.take(), fresh) {
            (Some(mut old), Some(mut fresh)) => {
                old.refill(now);
                fresh.level = old.level.min(fresh.capacity);
                Some(fresh)
            }
            (_, fresh) => fresh,
        };
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.level = (self.level + elapsed * self.per_second).min(self.capacity);
        self.updated = now;
    }

    /// Books `cost` units and returns how long the caller must wait before using them.
    fn reserve(&mut self, cost: u64, now: Instant) -> Duration {
        self.refill(now);
        let cost = cost as f64;
        let needed = cost.min(self.capacity);
        let wait = if self.level >= needed {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((needed - self.level) / self.per_second)
        };
        self.level -= cost;
        wait
    }
}

/// The process-wide limiter for `key` (endpoint + model). The first call creates it; every
/// call applies its settings, so the latest `SET evalsql.judge.max_concurrency` (and RPM/TPM)
/// wins for everyone sharing the endpoint.
pub fn limiter_for(key: &str, limits: &CallLimits) -> Arc<AdaptiveLimiter> {
    let (ceiling, rpm, tpm) = (
        limits.max_concurrency,
        limits.requests_per_minute,
        limits.tokens_per_minute,
    );
    static REGISTRY: OnceLock<Mutex<HashMap<String, Arc<AdaptiveLimiter>>>> = OnceLock::new();
    let mut registry = REGISTRY
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(limiter) = registry.get(key) {
        limiter.configure(ceiling, rpm, tpm);
        return Arc::clone(limiter);
    }
    let limiter = Arc::new(AdaptiveLimiter::new(ceiling, rpm, tpm));
    registry.insert(key.to_string(), Arc::clone(&limiter));
    limiter
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Call limits with these limiter settings, the rest as an unset session's.
    fn limits(ceiling: usize, rpm: Option<u32>, tpm: Option<u64>) -> CallLimits {
        CallLimits {
            max_concurrency: ceiling,
            requests_per_minute: rpm,
            tokens_per_minute: tpm,
            ..crate::llm::settings::resolve::call_limits(None, "judge")
        }
    }
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::task::JoinSet;

    /// Lets every runnable task run (paused clock: no time passes).
    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn in_flight_never_exceeds_the_limit_under_200_tasks() {
        let limiter = AdaptiveLimiter::new(16, None, None);
        let worst = Arc::new(AtomicUsize::new(0));
        let mut tasks = JoinSet::new();
        for i in 0..200u64 {
            let limiter = limiter.clone();
            let worst = Arc::clone(&worst);
            tasks.spawn(async move {
                let mut permit = limiter.acquire(100).await;
                let stats = limiter.stats();
                assert!(stats.in_flight <= stats.limit, "{stats:?}");
                worst.fetch_max(stats.in_flight, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1 + i * 7 % 23)).await;
                permit.succeeded();
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
        let stats = limiter.stats();
        assert_eq!(stats.in_flight, 0);
        assert_eq!(stats.peak_in_flight, 16);
        assert_eq!(worst.load(Ordering::SeqCst), 16);
        assert_eq!((stats.acquired, stats.succeeded), (200, 200));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn in_flight_stays_bounded_on_a_threaded_runtime_with_throttles() {
        let limiter = AdaptiveLimiter::new(8, None, None);
        let mut tasks = JoinSet::new();
        for i in 0..200usize {
            let limiter = limiter.clone();
            tasks.spawn(async move {
                let mut permit = limiter.acquire(1).await;
                // Throttles only ever lower the limit below the ceiling.
                assert!(limiter.in_flight() <= 8);
                tokio::task::yield_now().await;
                if i % 17 == 0 {
                    permit.throttled();
                } else {
                    permit.succeeded();
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
        let stats = limiter.stats();
        assert_eq!(stats.in_flight, 0);
        assert!(stats.peak_in_flight <= 8);
        assert!((1..=8).contains(&stats.limit));
        assert_eq!(stats.acquired, 200);
    }

    #[tokio::test(start_paused = true)]
    async fn throttles_halve_and_successes_regrow() {
        let limiter = AdaptiveLimiter::new(8, None, None);
        for expected in [4, 2, 1, 1] {
            limiter.acquire(0).await.throttled();
            assert_eq!(limiter.limit(), expected);
        }
        // +1 after `limit` successes: 1 → 2 after 1, → 3 after 2 more, → 4 after 3 more.
        let mut successes = 0;
        for target in 2..=8 {
            while limiter.limit() < target {
                limiter.acquire(0).await.succeeded();
                successes += 1;
            }
        }
        assert_eq!(successes, 1 + 2 + 3 + 4 + 5 + 6 + 7);
        for _ in 0..20 {
            limiter.acquire(0).await.succeeded();
        }
        assert_eq!(limiter.limit(), 8, "never above the ceiling");
        assert_eq!(limiter.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_throttles_halves_once() {
        let limiter = AdaptiveLimiter::new(8, None, None);
        let mut permits = Vec::new();
        for _ in 0..4 {
            permits.push(limiter.acquire(0).await);
        }
        for p in &mut permits {
            p.throttled();
        }
        assert_eq!(limiter.limit(), 4);
        assert_eq!(limiter.stats().throttled, 4);
        // Reporting twice counts once.
        permits[0].throttled();
        permits[0].succeeded();
        assert_eq!(limiter.stats().throttled, 4);
        assert_eq!(limiter.stats().succeeded, 0);
        drop(permits);
        // A permit granted after the cut may cut again.
        limiter.acquire(0).await.throttled();
        assert_eq!(limiter.limit(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn shrinking_with_permits_out_admits_nobody_until_below_the_limit() {
        let limiter = AdaptiveLimiter::new(4, None, None);
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(limiter.acquire(0).await);
        }
        held[0].throttled();
        assert_eq!((limiter.limit(), limiter.in_flight()), (2, 4));

        let admitted = Arc::new(AtomicUsize::new(0));
        let waiter = {
            let limiter = limiter.clone();
            let admitted = Arc::clone(&admitted);
            tokio::spawn(async move {
                let _p = limiter.acquire(0).await;
                admitted.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(1)).await;
            })
        };
        for expected_in_flight in [3, 2] {
            held.pop();
            settle().await;
            assert_eq!(admitted.load(Ordering::SeqCst), 0);
            assert_eq!(limiter.in_flight(), expected_in_flight);
        }
        held.pop();
        settle().await;
        assert_eq!(admitted.load(Ordering::SeqCst), 1);
        assert_eq!(limiter.in_flight(), 2);
        waiter.await.unwrap();
        drop(held);
        assert_eq!(limiter.in_flight(), 0);
        // Exactly `limit` slots remain: two can be held, the third waits.
        let _a = limiter.acquire(0).await;
        let _b = limiter.acquire(0).await;
        let third = tokio::time::timeout(Duration::from_secs(5), limiter.acquire(0)).await;
        assert!(third.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn ceiling_changes_reach_waiting_tasks() {
        let limiter = AdaptiveLimiter::new(2, None, None);
        let held = [limiter.acquire(0).await, limiter.acquire(0).await];
        let admitted = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(tokio::sync::Notify::new());
        let mut waiters = JoinSet::new();
        for _ in 0..3 {
            let (limiter, admitted, release) =
                (limiter.clone(), Arc::clone(&admitted), Arc::clone(&release));
            waiters.spawn(async move {
                let _p = limiter.acquire(0).await;
                admitted.fetch_add(1, Ordering::SeqCst);
                release.notified().await;
            });
        }
        settle().await;
        assert_eq!(admitted.load(Ordering::SeqCst), 0);

        limiter.set_ceiling(5);
        settle().await;
        assert_eq!(admitted.load(Ordering::SeqCst), 3);
        assert_eq!(limiter.stats().in_flight, 5);
        assert_eq!(limiter.stats().limit, 5);

        // Lowering the ceiling below what is out: nobody new until all but one are back.
        limiter.set_ceiling(1);
        assert_eq!(limiter.limit(), 1);
        let late = {
            let limiter = limiter.clone();
            tokio::spawn(async move { drop(limiter.acquire(0).await) })
        };
        drop(held);
        release.notify_waiters();
        while let Some(done) = waiters.join_next().await {
            done.unwrap();
        }
        late.await.unwrap();
        assert_eq!(limiter.in_flight(), 0);
        let _one = limiter.acquire(0).await;
        assert!(
            tokio::time::timeout(Duration::from_secs(1), limiter.acquire(0))
                .await
                .is_err()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttled_limiter_keeps_its_lower_limit_under_a_new_ceiling() {
        let limiter = AdaptiveLimiter::new(8, None, None);
        limiter.acquire(0).await.throttled();
        limiter.set_ceiling(16);
        assert_eq!((limiter.stats().ceiling, limiter.limit()), (16, 4));
        limiter.set_ceiling(2);
        assert_eq!(limiter.limit(), 2);
        limiter.set_ceiling(0);
        assert_eq!(
            limiter.limit(),
            1,
            "a ceiling of 0 still lets calls through"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn rpm_paces_requests_after_the_first_minutes_budget() {
        let limiter = AdaptiveLimiter::new(100, Some(60), None);
        let start = Instant::now();
        let mut times = Vec::new();
        for _ in 0..65 {
            drop(limiter.acquire(0).await);
            times.push(start.elapsed());
        }
        assert!(
            times[..60].iter().all(|t| *t == Duration::ZERO),
            "{times:?}"
        );
        for (i, t) in times[60..].iter().enumerate() {
            let expected = Duration::from_secs(i as u64 + 1);
            assert!(
                t.abs_diff(expected) < Duration::from_millis(5),
                "{i}: {t:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn rpm_pacing_is_first_come_first_served_across_tasks() {
        let limiter = AdaptiveLimiter::new(4, Some(6), None); // one every 10 s after 6
        let start = Instant::now();
        let mut tasks = JoinSet::new();
        for _ in 0..10 {
            let limiter = limiter.clone();
            tasks.spawn(async move {
                let p = limiter.acquire(0).await;
                let t = start.elapsed();
                drop(p);
                t
            });
        }
        let mut times = Vec::new();
        while let Some(t) = tasks.join_next().await {
            times.push(t.unwrap());
        }
        times.sort();
        let secs: Vec<u64> = times
            .iter()
            .map(|t| t.as_secs_f64().round() as u64)
            .collect();
        assert_eq!(secs, [0, 0, 0, 0, 0, 0, 10, 20, 30, 40]);
    }

    #[tokio::test(start_paused = true)]
    async fn tpm_lets_an_oversized_request_through_and_charges_the_excess() {
        let limiter = AdaptiveLimiter::new(4, None, Some(6000)); // 100 tokens a second
        let start = Instant::now();
        // Larger than the whole budget: goes as soon as the bucket is full (now)...
        drop(limiter.acquire(9000).await);
        assert_eq!(start.elapsed(), Duration::ZERO);
        // ...and the 3000-token excess delays the next call: (3000 + 100) / 100 s.
        drop(limiter.acquire(100).await);
        assert!(start.elapsed().abs_diff(Duration::from_secs(31)) < Duration::from_millis(5));
        // An oversized request waits for a full bucket at most: 60 s from empty.
        let before = start.elapsed();
        drop(limiter.acquire(1_000_000).await);
        let waited = start.elapsed() - before;
        assert!(waited.abs_diff(Duration::from_secs(60)) < Duration::from_millis(5));
    }

    #[tokio::test(start_paused = true)]
    async fn rpm_and_tpm_both_bind() {
        let limiter = AdaptiveLimiter::new(4, Some(600), Some(600)); // 10 req/s, 10 tok/s
        let start = Instant::now();
        drop(limiter.acquire(600).await);
        drop(limiter.acquire(10).await); // RPM fine, TPM needs 1 s
        assert!(start.elapsed().abs_diff(Duration::from_secs(1)) < Duration::from_millis(5));
        limiter.set_rates(None, None);
        drop(limiter.acquire(1_000_000).await);
        assert!(start.elapsed().abs_diff(Duration::from_secs(1)) < Duration::from_millis(5));
    }

    #[tokio::test(start_paused = true)]
    async fn cancelled_waiters_give_back_what_they_took() {
        let limiter = AdaptiveLimiter::new(1, Some(1), None);
        drop(limiter.acquire(0).await); // uses the only request of this minute
        // Holds the slot while pacing; cancelling must return it.
        let paced = tokio::time::timeout(Duration::from_secs(1), limiter.acquire(0)).await;
        assert!(paced.is_err());
        assert_eq!(limiter.in_flight(), 0);
        // Waiting for the slot itself, then cancelled.
        limiter.set_rates(None, None);
        let held = limiter.acquire(0).await;
        let queued = tokio::time::timeout(Duration::from_secs(1), limiter.acquire(0)).await;
        assert!(queued.is_err());
        drop(held);
        drop(limiter.acquire(0).await);
        assert_eq!(limiter.stats().in_flight, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn registry_shares_one_limiter_per_key_and_applies_the_latest_settings() {
        let key = "https://example.test/v1|registry-test-model";
        let a = limiter_for(key, &limits(8, None, None));
        let b = limiter_for(key, &limits(3, Some(60), None));
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.stats().ceiling, 3);
        assert_eq!(a.limit(), 3);
        let other = limiter_for(
            "https://example.test/v1|another-model",
            &limits(8, None, None),
        );
        assert!(!Arc::ptr_eq(&a, &other));
        assert_eq!(other.limit(), 8);
        // The RPM budget set by the second call is in force for holders of the first Arc.
        let start = Instant::now();
        for _ in 0..61 {
            drop(a.acquire(0).await);
        }
        assert!(start.elapsed() >= Duration::from_millis(990));
    }

    #[test]
    fn bucket_reconfiguration_keeps_the_accumulated_level() {
        let now = Instant::now();
        let mut bucket = TokenBucket::per_minute(Some(600), now);
        assert!(TokenBucket::per_minute(Some(0), now).is_none());
        assert_eq!(bucket.as_mut().unwrap().reserve(500, now), Duration::ZERO);
        TokenBucket::reconfigure(&mut bucket, Some(60), now);
        let b = bucket.as_ref().unwrap();
        assert_eq!((b.capacity, b.level), (60.0, 60.0));
        TokenBucket::reconfigure(&mut bucket, Some(6000), now);
        assert_eq!(bucket.as_ref().unwrap().level, 60.0);
        TokenBucket::reconfigure(&mut bucket, None, now);
        assert!(bucket.is_none());
    }
}
