//! What a call costs: per-million-token prices by model, and the dollars of one call.
//!
//! Where a price comes from, first match wins:
//! 1. the session: `SET evalsql.judge.price_input_per_mtok`, `price_cached_input_per_mtok`,
//!    `price_output_per_mtok` (the `evalsql.target.*` keys for `generate()`), for whatever
//!    model the session calls;
//! 2. the prices file named by `EVALSQL_PRICES` (see [`PricesFile`]);
//! 3. the built-in table, [`BUILT_IN`].
//!
//! A model name matches an entry when it is the entry's name, or the name followed by a
//! snapshot suffix that starts with a digit (`gpt-4o-2024-08-06` is `gpt-4o`; `gpt-4o-mini`
//! is not). Azure deployments have names of their own: the model named in the reply (Azure
//! reports the underlying model) is tried when the deployment's name is unknown.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde_json::Value;

/// Dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub input: f64,
    /// Prompt tokens the provider served from its prompt cache.
    pub cached_input: f64,
    pub output: f64,
}

impl Price {
    /// The dollars of one call: `prompt` includes `cached`, as the endpoints count them;
    /// `discount` multiplies the whole (0.5 in batch mode).
    pub fn cost(&self, prompt: i64, cached: i64, completion: i64, discount: f64) -> f64 {
        let prompt = prompt.max(0) as f64;
        let cached = (cached.max(0) as f64).min(prompt);
        let completion = completion.max(0) as f64;
        ((prompt - cached) * self.input + cached * self.cached_input + completion * self.output)
            / 1e6
            * discount
    }
}

/// The built-in prices, in US dollars per million tokens (input, cached input, output),
/// standard tier, as OpenAI's pricing page (https://openai.com/api/pricing) listed them in
/// August 2025. Azure OpenAI's global deployments charge the same for these models. Prices
/// change: a prices file or the `SET` keys override this table.
pub const BUILT_IN: &[(&str, f64, f64, f64)] = &[
    ("gpt-5", 1.25, 0.125, 10.0),
    ("gpt-5-mini", 0.25, 0.025, 2.0),
    ("gpt-5-nano", 0.05, 0.005, 0.40),
    ("gpt-4.1", 2.0, 0.50, 8.0),
    ("gpt-4.1-mini", 0.40, 0.10, 1.60),
    ("gpt-4.1-nano", 0.10, 0.025, 0.40),
    ("gpt-4o", 2.50, 1.25, 10.0),
    ("gpt-4o-mini", 0.15, 0.075, 0.60),
    ("o4-mini", 1.10, 0.275, 4.40),
    ("o3", 2.0, 0.50, 8.0),
    ("o3-mini", 1.10, 0.55, 4.40),
    ("o1", 15.0, 7.50, 60.0),
    ("gpt-4-turbo", 10.0, 10.0, 30.0),
    ("gpt-3.5-turbo", 0.50, 0.50, 1.50),
    // Azure's spelling of the same model.
    ("gpt-35-turbo", 0.50, 0.50, 1.50),
];

/// Whether `model` is `entry` or `entry` with a snapshot suffix (`-2024-08-06`, `-0613`).
fn matches(entry: &str, model: &str) -> bool {
    let model = model.to_ascii_lowercase();
    let entry = entry.to_ascii_lowercase();
    model == entry
        || model
            .strip_prefix(&entry)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
}

/// A prices file: a JSON object from model name to its prices per million tokens,
///
/// ```json
/// {"my-judge": {"input": 0.5, "cached_input": 0.25, "output": 1.5},
///  "gpt-4o":   {"input": 2.5, "output": 10}}
/// ```
///
/// `cached_input` defaults to `input` (a provider without prompt caching). Its entries
/// come before the built-in table; the same name rule applies.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PricesFile {
    entries: BTreeMap<String, Price>,
}

impl PricesFile {
    /// Reads the file's text; `path` names it in errors.
    pub fn parse(path: &str, text: &str) -> Result<Self, String> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| format!("prices file {path}: {e}"))?;
        let Some(object) = value.as_object() else {
            return Err(format!(
                "prices file {path}: expected a JSON object from model name to \
                 {{\"input\": .., \"cached_input\": .., \"output\": ..}}"
            ));
        };
        let mut entries = BTreeMap::new();
        for (model, prices) in object {
            let number = |key: &str| -> Result<Option<f64>, String> {
                match prices.get(key) {
                    None | Some(Value::Null) => Ok(None),
                    Some(v) => v
                        .as_f64()
                        .filter(|x| x.is_finite() && *x >= 0.0)
                        .map(Some)
                        .ok_or_else(|| {
                            format!(
                                "prices file {path}: {model}.{key} must be a non-negative \
                                 number of dollars per million tokens, got {v}"
                            )
                        }),
                }
            };
            let (Some(input), Some(output)) = (number("input")?, number("output")?) else {
                return Err(format!(
                    "prices file {path}: {model} needs \"input\" and \"output\" (dollars per \
                     million tokens)"
                ));
            };
            let cached_input = number("cached_input")?.unwrap_or(input);
            entries.insert(
                model.clone(),
                Price {
                    input,
                    cached_input,
                    output,
                },
            );
        }
        Ok(Self { entries })
    }

    fn find(&self, model: &str) -> Option<Price> {
        // Exact names first, then the longest matching entry.
        self.entries
            .iter()
            .filter(|(entry, _)| matches(entry, model))
            .max_by_key(|(entry, _)| entry.len())
            .map(|(_, p)| *p)
    }
}

/// The prices file of this process (`EVALSQL_PRICES`), read once; `Err` says what is wrong.
pub fn prices_file() -> Result<Option<&'static PricesFile>, String> {
    static FILE: OnceLock<Result<Option<PricesFile>, String>> = OnceLock::new();
    FILE.get_or_init(|| {
        let Some(path) = crate::common::process_env("EVALSQL_PRICES") else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("prices file {path} (EVALSQL_PRICES): {e}"))?;
        PricesFile::parse(&path, &text).map(Some)
    })
    .as_ref()
    .map(Option::as_ref)
    .map_err(Clone::clone)
}

/// The built-in price of `model`, if the table has it.
pub fn built_in(model: &str) -> Option<Price> {
    BUILT_IN
        .iter()
        .filter(|(entry, ..)| matches(entry, model))
        .max_by_key(|(entry, ..)| entry.len())
        .map(|&(_, input, cached_input, output)| Price {
            input,
            cached_input,
            output,
        })
}

/// The price of `model` from a prices file or the built-in table.
pub fn lookup(file: Option<&PricesFile>, model: &str) -> Option<Price> {
    file.and_then(|f| f.find(model)).or_else(|| built_in(model))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_snapshots_but_not_siblings() {
        assert!(matches("gpt-4o", "gpt-4o"));
        assert!(matches("gpt-4o", "GPT-4o-2024-08-06"));
        assert!(!matches("gpt-4o", "gpt-4o-mini"));
        assert!(matches("gpt-4o-mini", "gpt-4o-mini-2024-07-18"));
        assert!(!matches("o3", "o3-mini"));
        assert_eq!(built_in("gpt-4o-mini-2024-07-18").unwrap().input, 0.15);
        assert_eq!(built_in("gpt-4o-2024-11-20").unwrap().output, 10.0);
        assert_eq!(built_in("o3-mini").unwrap().input, 1.10);
        assert!(built_in("my-deployment").is_none());
        assert!(built_in("stub-judge").is_none());
    }

    #[test]
    fn cost_counts_cached_tokens_at_their_price() {
        let p = Price {
            input: 2.5,
            cached_input: 1.25,
            output: 10.0,
        };
        // 1,000 prompt tokens of which 400 cached, 100 completion.
        let dollars = p.cost(1000, 400, 100, 1.0);
        assert!((dollars - (600.0 * 2.5 + 400.0 * 1.25 + 100.0 * 10.0) / 1e6).abs() < 1e-15);
        assert!((p.cost(1000, 400, 100, 0.5) - dollars / 2.0).abs() < 1e-15);
        // More cached than prompt (a confused endpoint) never gives a negative cost.
        assert!(p.cost(10, 50, 0, 1.0) >= 0.0);
    }

    #[test]
    fn prices_files_are_checked() {
        let f = PricesFile::parse(
            "p.json",
            r#"{"my-judge": {"input": 1, "output": 2}, "gpt-4o": {"input": 3, "cached_input": 1, "output": 4}}"#,
        )
        .unwrap();
        assert_eq!(
            lookup(Some(&f), "my-judge"),
            Some(Price {
                input: 1.0,
                cached_input: 1.0,
                output: 2.0
            })
        );
        assert_eq!(lookup(Some(&f), "gpt-4o-2024-08-06").unwrap().input, 3.0);
        assert_eq!(lookup(Some(&f), "gpt-4o-mini").unwrap().input, 0.15);
        let bad = PricesFile::parse("p.json", r#"{"m": {"input": -1, "output": 2}}"#);
        assert!(bad.unwrap_err().contains("m.input"), "negative price");
        let missing = PricesFile::parse("p.json", r#"{"m": {"input": 1}}"#).unwrap_err();
        assert!(missing.contains("\"output\""), "{missing}");
        assert!(
            PricesFile::parse("p.json", "[1]")
                .unwrap_err()
                .contains("p.json")
        );
    }
}
