//! What a call used — tokens, dollars, time — as one value, carried from the reply to the
//! cache, the `_details` structs, the run's summary line and `judge_cache()`.

use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{ArrayRef, Float64Builder, Int64Builder};
use datafusion::arrow::datatypes::{DataType, Field};

use crate::llm::pricing::Price;
use crate::llm::request::ChatReply;

/// One call's usage (or several calls' together, see [`Usage::total`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Usage {
    pub prompt_tokens: Option<i64>,
    /// The part of `prompt_tokens` the provider served from its prompt cache.
    pub cached_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    /// What the call cost (the recorded cost for a cached answer, the estimate in a dry
    /// run); `None` when no price is known.
    pub cost_usd: Option<f64>,
    /// The time of the successful attempt, from sending to the whole body.
    pub latency_ms: Option<f64>,
}

impl Usage {
    /// A reply's usage, priced at `price` (`None`: unknown) times `discount` (batch mode's
    /// share of the online price; 1 online).
    pub fn of_reply(
        reply: &ChatReply,
        price: Option<Price>,
        discount: f64,
        latency_ms: Option<f64>,
    ) -> Usage {
        let cached = reply.cached_tokens.unwrap_or(0);
        let cost_usd = match (reply.prompt_tokens, reply.completion_tokens) {
            (Some(prompt), Some(completion)) => {
                price.map(|p| p.cost(prompt, cached, completion, discount))
            }
            _ => None,
        };
        Usage {
            prompt_tokens: reply.prompt_tokens,
            cached_tokens: Some(cached),
            completion_tokens: reply.completion_tokens,
            cost_usd,
            latency_ms,
        }
    }

    /// Prompt plus completion tokens, when both are known (what a token budget counts).
    pub fn tokens(&self) -> Option<u64> {
        match (self.prompt_tokens, self.completion_tokens) {
            (Some(p), Some(c)) => Some((p + c).max(0) as u64),
            _ => None,
        }
    }

    /// Several calls' usage together: each part added up, unknown where any call's is.
    pub fn total<'a>(parts: impl IntoIterator<Item = &'a Usage>) -> Usage {
        fn add<T: std::ops::Add<Output = T>>(a: Option<T>, b: Option<T>) -> Option<T> {
            Some(a? + b?)
        }
        parts.into_iter().fold(
            Usage {
                prompt_tokens: Some(0),
                cached_tokens: Some(0),
                completion_tokens: Some(0),
                cost_usd: Some(0.0),
                latency_ms: Some(0.0),
            },
            |t, u| Usage {
                prompt_tokens: add(t.prompt_tokens, u.prompt_tokens),
                cached_tokens: add(t.cached_tokens, u.cached_tokens),
                completion_tokens: add(t.completion_tokens, u.completion_tokens),
                cost_usd: add(t.cost_usd, u.cost_usd),
                latency_ms: add(t.latency_ms, u.latency_ms),
            },
        )
    }

    /// The usage fields of a `_details` struct, in their order there.
    pub fn fields() -> Vec<Field> {
        vec![
            Field::new("prompt_tokens", DataType::Int64, true),
            Field::new("completion_tokens", DataType::Int64, true),
            Field::new("latency_ms", DataType::Float64, true),
            Field::new("cached_tokens", DataType::Int64, true),
            Field::new("cost_usd", DataType::Float64, true),
        ]
    }
}

/// Replies received and their usage, added up as they arrive: what one model's calls of a
/// statement sent (a cascade reports its small and main model's apart, see
/// `judge::cascade`). Cached and shared answers are not replies and do not count.
#[derive(Debug)]
pub struct Spent(Mutex<(u64, Usage)>);

impl Default for Spent {
    fn default() -> Self {
        Spent(Mutex::new((0, Usage::total([]))))
    }
}

impl Spent {
    /// One reply's usage.
    pub fn add(&self, usage: &Usage) {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        s.0 += 1;
        s.1 = Usage::total([&s.1, usage]);
    }

    /// The replies so far and their usage together (its cost unknown if any reply's is).
    pub fn get(&self) -> (u64, Usage) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The usage columns of a `_details` struct ([`Usage::fields`]), built row by row.
#[derive(Default)]
pub struct UsageColumns {
    prompt: Int64Builder,
    completion: Int64Builder,
    latency: Float64Builder,
    cached: Int64Builder,
    cost: Float64Builder,
}

impl UsageColumns {
    /// Appends a row's usage (`None`: a NULL row, every field NULL).
    pub fn append(&mut self, usage: Option<&Usage>) {
        let u = usage.copied().unwrap_or_default();
        self.prompt.append_option(u.prompt_tokens);
        self.completion.append_option(u.completion_tokens);
        self.latency.append_option(u.latency_ms);
        self.cached.append_option(u.cached_tokens);
        self.cost.append_option(u.cost_usd);
    }

    /// The columns, in [`Usage::fields`] order.
    pub fn finish(mut self) -> Vec<ArrayRef> {
        vec![
            Arc::new(self.prompt.finish()),
            Arc::new(self.completion.finish()),
            Arc::new(self.latency.finish()),
            Arc::new(self.cached.finish()),
            Arc::new(self.cost.finish()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_add_up_and_stay_unknown_where_a_part_is() {
        let a = Usage {
            prompt_tokens: Some(10),
            cached_tokens: Some(4),
            completion_tokens: Some(2),
            cost_usd: Some(0.5),
            latency_ms: Some(3.0),
        };
        let b = Usage {
            cost_usd: None,
            ..a
        };
        let t = Usage::total([&a, &a]);
        assert_eq!(
            (t.prompt_tokens, t.cached_tokens, t.cost_usd, t.tokens()),
            (Some(20), Some(8), Some(1.0), Some(24))
        );
        assert_eq!(Usage::total([&a, &b]).cost_usd, None);
        assert_eq!(Usage::total([&a, &b]).latency_ms, Some(6.0));
    }
}
