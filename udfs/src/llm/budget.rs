//! Budgets: what the judge calls of one query may spend (`SET evalsql.judge.max_cost_usd`,
//! `max_calls`, `max_tokens`).
//!
//! A call reserves its worst case before it is sent (its counted prompt tokens plus
//! `max_completion_tokens`, priced), and settles with the usage the endpoint reports, so
//! the total never passes the budget however many calls are in flight. A call that would
//! pass it is not sent: its row is skipped with an error that starts with
//! `budget exhausted`. Cached judgements cost nothing and are always returned.
//!
//! One [`Ledger`] per query: the CLI, `evalsql report` and `serve` start a fresh one for
//! every statement ([`crate::judge::start_query`]); a program that embeds the functions
//! without calling it gets one ledger for the whole session.

use std::collections::HashMap;
use std::sync::Mutex;

/// The limits of one query (`None`: no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Budget {
    pub max_cost_usd: Option<f64>,
    pub max_calls: Option<u64>,
    pub max_tokens: Option<u64>,
}

impl Budget {
    pub fn is_unlimited(&self) -> bool {
        self.max_cost_usd.is_none() && self.max_calls.is_none() && self.max_tokens.is_none()
    }
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Spent {
    cost: f64,
    calls: u64,
    tokens: u64,
    /// Reservations not yet settled or released.
    open: u64,
}

/// What one try at a reservation came to.
enum Attempt {
    Reserved(Reservation),
    Refused(String),
    Wait,
}

/// What one query has spent and reserved so far.
#[derive(Debug)]
pub struct Ledger {
    spent: Mutex<Spent>,
    /// Calls refused in this query, with why: every later use of the same call in the query
    /// (DataFusion may evaluate a function once per field read from its result) gets the
    /// same answer, so a row never mixes a refusal with a score.
    refused: Mutex<HashMap<String, String>>,
    /// Bumped whenever a reservation settles or is released: a call that did not fit waits
    /// for it while others are open, since they usually use less than their worst case.
    settled: tokio::sync::watch::Sender<u64>,
    /// Dollars and calls already handed to [`Ledger::take_unreported`].
    reported: Mutex<(f64, u64)>,
}

/// The worst case of one call, held until the call settles.
#[derive(Debug, Clone, Copy, PartialEq)]
#[must_use = "a reservation is settled or released"]
pub struct Reservation {
    cost: f64,
    tokens: u64,
}

impl Default for Ledger {
    fn default() -> Self {
        Self {
            spent: Mutex::default(),
            refused: Mutex::default(),
            settled: tokio::sync::watch::channel(0).0,
            reported: Mutex::default(),
        }
    }
}

impl Ledger {
    fn lock(&self) -> std::sync::MutexGuard<'_, Spent> {
        self.spent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserves the call `key` of at most `tokens` tokens and `cost` dollars (`None`: no
    /// price, allowed only without a dollar budget). A call that does not fit waits while
    /// other reservations are open (they settle below their worst case) and is refused,
    /// saying which limit, when none is; a call refused once stays refused for the query.
    pub async fn reserve_call(
        &self,
        key: &str,
        budget: &Budget,
        cost: Option<f64>,
        tokens: u64,
    ) -> Result<Reservation, String> {
        loop {
            // Subscribed before trying: a settlement after the try wakes the wait.
            let mut settled = self.settled.subscribe();
            match self.attempt(key, budget, cost, tokens, true) {
                Attempt::Reserved(r) => return Ok(r),
                Attempt::Refused(why) => return Err(why),
                Attempt::Wait => {
                    if settled.changed().await.is_err() {
                        return Err("budget exhausted: the query ended".into());
                    }
                }
            }
        }
    }

    /// As [`Ledger::reserve_call`], but refuses at once instead of waiting for open
    /// reservations: batch mode reserves a whole file's lines before any of them is sent,
    /// so nothing it waited for could settle.
    pub fn try_reserve_call(
        &self,
        key: &str,
        budget: &Budget,
        cost: Option<f64>,
        tokens: u64,
    ) -> Result<Reservation, String> {
        match self.attempt(key, budget, cost, tokens, false) {
            Attempt::Reserved(r) => Ok(r),
            Attempt::Refused(why) => Err(why),
            // Not produced without `wait`.
            Attempt::Wait => Err("budget exhausted".into()),
        }
    }

    /// One try at reserving `key`: a refusal is remembered for the query; with `wait`, a
    /// call that does not fit while others are open is told to wait instead.
    fn attempt(
        &self,
        key: &str,
        budget: &Budget,
        cost: Option<f64>,
        tokens: u64,
        wait: bool,
    ) -> Attempt {
        if let Some(why) = self.refusals().get(key) {
            return Attempt::Refused(why.clone());
        }
        match self.reserve(budget, cost, tokens) {
            Ok(r) => Attempt::Reserved(r),
            Err((_, open)) if wait && open > 0 => Attempt::Wait,
            Err((why, _)) => {
                self.refusals().insert(key.to_string(), why.clone());
                Attempt::Refused(why)
            }
        }
    }

    fn refusals(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.refused.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserves one call of at most `tokens` tokens and `cost` dollars, or says which limit
    /// it would pass and how many reservations are open.
    fn reserve(
        &self,
        budget: &Budget,
        cost: Option<f64>,
        tokens: u64,
    ) -> Result<Reservation, (String, u64)> {
        let mut spent = self.lock();
        let open = spent.open;
        if let Some(max) = budget.max_calls
            && spent.calls + 1 > max
        {
            return Err((
                format!(
                    "budget exhausted: evalsql.judge.max_calls = {max} calls were sent or are \
                     in flight; not sent"
                ),
                open,
            ));
        }
        if let Some(max) = budget.max_tokens
            && spent.tokens + tokens > max
        {
            return Err((
                format!(
                    "budget exhausted: evalsql.judge.max_tokens = {max}: {} tokens are used \
                     or reserved and this call may use up to {tokens}; not sent",
                    spent.tokens
                ),
                open,
            ));
        }
        let cost = cost.unwrap_or(0.0);
        if let Some(max) = budget.max_cost_usd
            && spent.cost + cost > max
        {
            return Err((
                format!(
                    "budget exhausted: evalsql.judge.max_cost_usd = {max}: ${:.6} is spent or \
                     reserved and this call may cost up to ${cost:.6}; not sent",
                    spent.cost
                ),
                open,
            ));
        }
        spent.calls += 1;
        spent.tokens += tokens;
        spent.cost += cost;
        spent.open += 1;
        Ok(Reservation { cost, tokens })
    }

    fn closed(&self, mut spent: std::sync::MutexGuard<'_, Spent>) {
        spent.open = spent.open.saturating_sub(1);
        drop(spent);
        self.settled.send_modify(|n| *n += 1);
    }

    /// Replaces a call's reservation with what it used (`None`: not reported, the
    /// reservation stands).
    pub fn settle(&self, r: Reservation, cost: Option<f64>, tokens: Option<u64>) {
        let mut spent = self.lock();
        if let Some(cost) = cost {
            spent.cost = (spent.cost - r.cost + cost).max(0.0);
        }
        if let Some(tokens) = tokens {
            spent.tokens = (spent.tokens + tokens).saturating_sub(r.tokens);
        }
        self.closed(spent);
    }

    /// Counts a call sent without a reservation (a query without a budget): what it used, so
    /// that what a query spent is known with or without one.
    pub fn record(&self, cost: Option<f64>, tokens: Option<u64>) {
        let mut spent = self.lock();
        spent.calls += 1;
        spent.cost += cost.unwrap_or(0.0);
        spent.tokens += tokens.unwrap_or(0);
    }

    /// Dollars and calls spent so far (reservations still open count at their worst case),
    /// and why a call was refused for the budget, if one was.
    pub fn spent(&self) -> (f64, u64, Option<String>) {
        let refused = self.refusals().values().next().cloned();
        let spent = self.lock();
        (spent.cost, spent.calls, refused)
    }

    /// Dollars and calls spent since the last call of this function (the first time: all
    /// of them). A Ballista task reports its judge calls to the scheduler this way: each of
    /// its operators that calls judges takes what is not reported yet when its stream ends,
    /// so the task's calls are counted once however many such operators it has.
    pub fn take_unreported(&self) -> (f64, u64) {
        let spent = *self.lock();
        let mut reported = self.reported.lock().unwrap_or_else(|e| e.into_inner());
        let new = (
            (spent.cost - reported.0).max(0.0),
            spent.calls.saturating_sub(reported.1),
        );
        *reported = (spent.cost, spent.calls);
        new
    }

    /// Gives back a reservation whose call was not sent.
    pub fn release(&self, r: Reservation) {
        let mut spent = self.lock();
        spent.calls = spent.calls.saturating_sub(1);
        spent.tokens = spent.tokens.saturating_sub(r.tokens);
        spent.cost = (spent.cost - r.cost).max(0.0);
        self.closed(spent);
    }

    /// Dollars spent or reserved so far.
    #[cfg(test)]
    fn cost(&self) -> f64 {
        self.lock().cost
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn unreported_spend_is_taken_once() {
        let ledger = super::Ledger::default();
        assert_eq!(ledger.take_unreported(), (0.0, 0));
        ledger.record(Some(0.5), Some(10));
        ledger.record(Some(0.25), None);
        assert_eq!(ledger.take_unreported(), (0.75, 2));
        assert_eq!(ledger.take_unreported(), (0.0, 0));
        ledger.record(None, None);
        assert_eq!(ledger.take_unreported(), (0.0, 1));
    }

    use super::*;

    #[test]
    fn reservations_never_pass_the_budget() {
        // A refused reservation in these tests has nothing open to wait for.
        let ledger = Ledger::default();
        let budget = Budget {
            max_cost_usd: Some(1.0),
            ..Budget::default()
        };
        let a = ledger.reserve(&budget, Some(0.6), 10).unwrap();
        // 0.6 reserved: another worst case of 0.6 would pass 1.0.
        let (err, _) = ledger.reserve(&budget, Some(0.6), 10).unwrap_err();
        assert!(
            err.starts_with("budget exhausted: evalsql.judge.max_cost_usd"),
            "{err}"
        );
        // The first call used less than its worst case: room for the second.
        ledger.settle(a, Some(0.2), Some(5));
        let b = ledger.reserve(&budget, Some(0.6), 10).unwrap();
        assert!((ledger.cost() - 0.8).abs() < 1e-12);
        ledger.release(b);
        assert!((ledger.cost() - 0.2).abs() < 1e-12);
    }

    #[test]
    fn calls_and_tokens_are_limits_too() {
        let ledger = Ledger::default();
        let calls = Budget {
            max_calls: Some(2),
            ..Budget::default()
        };
        let _a = ledger.reserve(&calls, None, 100).unwrap();
        let _b = ledger.reserve(&calls, None, 100).unwrap();
        let (err, _) = ledger.reserve(&calls, None, 100).unwrap_err();
        assert!(err.contains("max_calls = 2"), "{err}");

        let ledger = Ledger::default();
        let tokens = Budget {
            max_tokens: Some(250),
            ..Budget::default()
        };
        let a = ledger.reserve(&tokens, None, 200).unwrap();
        assert!(ledger.reserve(&tokens, None, 100).is_err());
        ledger.settle(a, None, Some(120));
        let _ = ledger.reserve(&tokens, None, 100).unwrap();
        assert!(Budget::default().is_unlimited());
    }

    #[tokio::test]
    async fn a_call_that_does_not_fit_waits_for_open_ones_then_stays_refused() {
        let ledger = std::sync::Arc::new(Ledger::default());
        let budget = Budget {
            max_cost_usd: Some(1.0),
            ..Budget::default()
        };
        let a = ledger
            .reserve_call("a", &budget, Some(0.6), 1)
            .await
            .unwrap();
        // "b" does not fit while "a" is open: it waits, and fits once "a" settles low.
        let waiting = {
            let ledger = std::sync::Arc::clone(&ledger);
            tokio::spawn(async move { ledger.reserve_call("b", &budget, Some(0.6), 1).await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        ledger.settle(a, Some(0.1), None);
        let b = waiting.await.unwrap().unwrap();
        ledger.settle(b, Some(0.1), None);
        // $0.2 spent, nothing open: "c" at $0.9 is refused at once, and stays refused in
        // this query even when it would fit.
        assert!(
            ledger
                .reserve_call("c", &budget, Some(0.9), 1)
                .await
                .is_err()
        );
        assert!(
            ledger
                .reserve_call("c", &budget, Some(0.1), 1)
                .await
                .is_err()
        );
        assert!(
            ledger
                .reserve_call("d", &budget, Some(0.1), 1)
                .await
                .is_ok()
        );
    }
}
