//! Where judge and target settings come from: the environment, overridden per session by
//! `SET evalsql.judge.<key> = ...` / `SET evalsql.target.<key> = ...` (a DataFusion config
//! extension, [`JudgeOptions`]).
//!
//! One table, [`KEYS`], says for every key its type, default, description and who may set
//! it ([`Access`]); values are parsed once, at `SET`, and a wrong one fails there naming the
//! key, the value and what is allowed. [`JudgeSettings::resolve`] merges them with the
//! environment into what one call needs. API keys come only from the environment: a `SET`
//! statement can end up in a history file, a log or a BI tool's query list.
//!
//! Who the operator is: statements of the CLI and of `serve --init` may set anything. A
//! `serve` client's session ([`Restriction::Client`]) and a job a Ballista client submits
//! ([`Restriction::Remote`]) may not set operator-only keys, and may set the call limits only
//! below the operator's values, for their own queries.

use std::any::Any;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use datafusion::common::config::{ConfigEntry, ConfigExtension, ExtensionOptions};
use datafusion::common::{DataFusionError, Result, plan_err};
use datafusion::config::ConfigOptions;
use tokio::sync::Semaphore;

use crate::common::excerpt::{redact_url, redact_urls};
use crate::judge::engine::budget::{Budget, Ledger};
use crate::judge::engine::pricing::{self, Price};
use crate::judge::engine::request::{ApiKey, DEFAULT_AZURE_API_VERSION, Endpoint};
use crate::judge::engine::retry::{BackoffConfig, RetryPolicy};
use crate::judge::engine::tokens::Tokenizer;

/// Default bound on judge calls in flight per endpoint + model.
pub const DEFAULT_MAX_CONCURRENCY: usize = 16;
/// Default sampling seed: judgements should repeat, and a fixed seed helps where supported.
pub const DEFAULT_SEED: i64 = 42;
/// Default cap on the text of one request: far above a judged row, far below what would
/// make a single row expensive.
pub const DEFAULT_MAX_INPUT_BYTES: usize = 1 << 20;
/// Default bound on a judge reply's tokens: a score and a reason need far fewer, and the
/// bound makes an estimate's completion tokens a worst case.
pub const DEFAULT_MAX_COMPLETION_TOKENS: u32 = 512;
/// The most judgements of one row repeated judging asks for.
pub const MAX_SAMPLES: usize = 50;
/// Default overall time one call may take, attempts and waits between them included.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(600);

/// Who may set a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Any session: what its own queries ask of the judge (model, temperature, thresholds,
    /// rubric pins).
    Anyone,
    /// Any session; a client of a shared server only at or below the operator's value, and
    /// then it limits that client's own queries (never the process-wide limiter).
    Lower,
    /// The operator only: where calls and keys go, files written, limits every client
    /// shares.
    Operator,
    /// The operator, and the Ballista scheduler for the jobs it hands out (the live executor
    /// count).
    Cluster,
}

/// A key's type: how its value is parsed and what is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Url,
    /// A positive integer.
    Count,
    /// A non-negative integer (0 = none, where a budget).
    Budget,
    /// Seconds, a number above 0 (fractions allowed), at most a day.
    Seconds,
    /// A number from 0 to 2.
    Temperature,
    /// An integer or `none`.
    Seed,
    /// A file path or `off`.
    Cache,
    /// URL prefixes separated by commas, or `none`.
    Urls,
    /// Any finite number.
    Number,
    /// A rubric version, a positive integer.
    Version,
    /// A non-negative integer, 0 = no limit (a budget a client may only lower).
    Limit,
    /// Dollars: a non-negative number; as a budget, 0 = no limit.
    Dollars,
    /// A share from 0 to 1.
    Fraction,
    /// true or false.
    Flag,
    /// A token encoding: o200k_base, cl100k_base or approximate.
    Tokenizer,
    /// online or batch.
    Mode,
    /// mean, median or majority.
    Aggregate,
}

impl Kind {
    fn expected(self) -> &'static str {
        match self {
            Kind::Text => "text",
            Kind::Url => "a URL",
            Kind::Count => "expected a positive integer",
            Kind::Budget => "expected a non-negative integer",
            Kind::Seconds => "expected seconds, a number above 0 (at most 86400)",
            Kind::Temperature => "expected a number from 0 to 2",
            Kind::Seed => "expected an integer or 'none'",
            Kind::Cache => "a path or 'off'",
            Kind::Urls => "URL prefixes separated by commas, or 'none'",
            Kind::Number => "expected a number",
            Kind::Version => "expected a rubric version (a positive integer)",
            Kind::Limit => "expected a non-negative integer (0 = no limit)",
            Kind::Dollars => "expected a non-negative number of dollars",
            Kind::Fraction => "expected a number from 0 to 1",
            Kind::Flag => "expected true or false",
            Kind::Tokenizer => "expected o200k_base, cl100k_base or approximate",
            Kind::Mode => "expected 'online' or 'batch'",
            Kind::Aggregate => "expected 'mean', 'median' or 'majority'",
        }
    }

    fn parse(self, text: &str) -> Option<Value> {
        Some(match self {
            Kind::Text => Value::Text(text.to_string()),
            Kind::Url => {
                if !(text.starts_with("http://") || text.starts_with("https://")) {
                    return None;
                }
                Value::Text(text.to_string())
            }
            Kind::Count => Value::Int(text.parse::<u64>().ok().filter(|&n| n >= 1)?),
            Kind::Budget => Value::Int(text.parse::<u64>().ok()?),
            Kind::Seconds => Value::Float(
                text.parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)?,
            ),
            Kind::Temperature => Value::Float(
                text.parse::<f64>()
                    .ok()
                    .filter(|t| t.is_finite() && (0.0..=2.0).contains(t))?,
            ),
            Kind::Seed if is_none_word(text) => Value::Seed(None),
            Kind::Seed => Value::Seed(Some(text.parse().ok()?)),
            Kind::Cache if is_none_word(text) => Value::Path(None),
            Kind::Cache => Value::Path(Some(PathBuf::from(text))),
            Kind::Urls => Value::Urls(
                text.split(',')
                    .map(str::trim)
                    .filter(|u| !u.is_empty() && !is_none_word(u))
                    .map(str::to_string)
                    .collect(),
            ),
            Kind::Number => Value::Float(text.parse::<f64>().ok().filter(|n| n.is_finite())?),
            Kind::Version => Value::Int(text.parse::<u32>().ok().filter(|&v| v >= 1)?.into()),
            Kind::Limit => Value::Int(text.parse::<u64>().ok()?),
            Kind::Dollars => Value::Float(
                text.parse::<f64>()
                    .ok()
                    .filter(|d| d.is_finite() && *d >= 0.0)?,
            ),
            Kind::Fraction => Value::Float(
                text.parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite() && (0.0..=1.0).contains(f))?,
            ),
            Kind::Flag => Value::Bool(match text.to_ascii_lowercase().as_str() {
                "true" | "on" | "yes" | "1" => true,
                "false" | "off" | "no" | "0" => false,
                _ => return None,
            }),
            Kind::Tokenizer => {
                Tokenizer::named(text)?;
                Value::Text(text.to_ascii_lowercase())
            }
            Kind::Aggregate => {
                PanelAggregate::named(text)?;
                Value::Text(text.to_ascii_lowercase())
            }
            Kind::Mode => Value::Bool(match text.to_ascii_lowercase().as_str() {
                "batch" => true,
                "online" => false,
                _ => return None,
            }),
        })
    }

    /// Whether 0 means "no limit" (a client's lowered value compares as infinity).
    fn zero_is_unlimited(self) -> bool {
        matches!(self, Kind::Limit | Kind::Dollars)
    }
}

/// A parsed setting.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Text(String),
    Int(u64),
    Float(f64),
    Seed(Option<i64>),
    Path(Option<PathBuf>),
    Urls(Vec<String>),
    Bool(bool),
}

impl Value {
    /// The value as a number, for comparing limits.
    fn number(&self) -> Option<f64> {
        match self {
            Value::Int(n) => Some(*n as f64),
            Value::Float(x) => Some(*x),
            _ => None,
        }
    }
}

/// One settable key.
#[derive(Debug)]
pub struct Key {
    /// The namespace: `judge`, `target`, or both (the call limits).
    pub namespaces: &'static [&'static str],
    pub name: &'static str,
    kind: Kind,
    /// The default, as shown by `SHOW ALL` (empty: none, or from the environment).
    pub default: &'static str,
    pub description: &'static str,
    pub access: Access,
}

const JUDGE: &[&str] = &["judge"];
const TARGET: &[&str] = &["target"];
const BOTH: &[&str] = &["judge", "target"];

/// Every key, with its type, default, description and who may set it.
pub const KEYS: &[Key] = &[
    Key {
        namespaces: JUDGE,
        name: "model",
        kind: Kind::Text,
        default: "",
        access: Access::Anyone,
        description: "Judge model (EVALSQL_JUDGE_MODEL)",
    },
    Key {
        namespaces: JUDGE,
        name: "base_url",
        kind: Kind::Url,
        default: "",
        access: Access::Operator,
        description: "OpenAI-compatible API root, e.g. http://localhost:8000/v1 (OPENAI_BASE_URL)",
    },
    Key {
        namespaces: JUDGE,
        name: "azure_endpoint",
        kind: Kind::Url,
        default: "",
        access: Access::Operator,
        description: "Azure OpenAI resource endpoint (AZURE_OPENAI_ENDPOINT)",
    },
    Key {
        namespaces: JUDGE,
        name: "azure_deployment",
        kind: Kind::Text,
        default: "",
        access: Access::Anyone,
        description: "Azure OpenAI deployment (AZURE_OPENAI_DEPLOYMENT)",
    },
    Key {
        namespaces: JUDGE,
        name: "api_version",
        kind: Kind::Text,
        default: DEFAULT_AZURE_API_VERSION,
        access: Access::Anyone,
        description: "Azure OpenAI API version (OPENAI_API_VERSION)",
    },
    Key {
        namespaces: JUDGE,
        name: "threshold",
        kind: Kind::Number,
        default: "3",
        access: Access::Anyone,
        description: "Pass threshold of the 1-5 quality judges; evalsql.judge.<metric>.threshold for one judge (safety judges: the highest passing severity, default 3)",
    },
    Key {
        namespaces: TARGET,
        name: "model",
        kind: Kind::Text,
        default: "",
        access: Access::Anyone,
        description: "Model under test for generate() (EVALSQL_TARGET_MODEL)",
    },
    Key {
        namespaces: TARGET,
        name: "base_url",
        kind: Kind::Url,
        default: "",
        access: Access::Operator,
        description: "OpenAI-compatible API root of the model under test (EVALSQL_TARGET_BASE_URL)",
    },
    Key {
        namespaces: TARGET,
        name: "allowed_urls",
        kind: Kind::Urls,
        default: "",
        access: Access::Operator,
        description: "URL prefixes invoke_app may call, separated by commas, or 'none' (default: any; evalsql serve sets it from --app-url)",
    },
    Key {
        namespaces: BOTH,
        name: "temperature",
        kind: Kind::Temperature,
        default: "0",
        access: Access::Anyone,
        description: "Sampling temperature (default 0)",
    },
    Key {
        namespaces: BOTH,
        name: "seed",
        kind: Kind::Seed,
        default: "42",
        access: Access::Anyone,
        description: "Sampling seed, or 'none' (default 42)",
    },
    Key {
        namespaces: BOTH,
        name: "cache",
        kind: Kind::Cache,
        default: "",
        access: Access::Operator,
        description: "Cache file, or 'off' (EVALSQL_JUDGE_CACHE; default in the user cache dir; targets: the judge's)",
    },
    Key {
        namespaces: BOTH,
        name: "max_concurrency",
        kind: Kind::Count,
        default: "16",
        access: Access::Lower,
        description: "Calls in flight per endpoint + model, process-wide (default 16); a client of a shared server may only lower it for its own queries",
    },
    Key {
        namespaces: BOTH,
        name: "requests_per_minute",
        kind: Kind::Budget,
        default: "0",
        access: Access::Operator,
        description: "Requests-per-minute budget (0 = none)",
    },
    Key {
        namespaces: BOTH,
        name: "tokens_per_minute",
        kind: Kind::Budget,
        default: "0",
        access: Access::Operator,
        description: "Tokens-per-minute budget (0 = none)",
    },
    Key {
        namespaces: BOTH,
        name: "executors",
        kind: Kind::Count,
        default: "1",
        access: Access::Cluster,
        description: "Processes sharing these limits: the Ballista scheduler sets it to its live executors, each of which then takes 1/N of max_concurrency and the per-minute budgets (default 1)",
    },
    Key {
        namespaces: BOTH,
        name: "timeout",
        kind: Kind::Seconds,
        default: "120",
        access: Access::Lower,
        description: "Seconds one attempt may take (default 120)",
    },
    Key {
        namespaces: BOTH,
        name: "max_retries",
        kind: Kind::Budget,
        default: "6",
        access: Access::Lower,
        description: "Retries after the first attempt (default 6)",
    },
    Key {
        namespaces: BOTH,
        name: "max_response_bytes",
        kind: Kind::Count,
        default: "16777216",
        access: Access::Operator,
        description: "The largest response body read; a larger one makes the row an error (default 16 MiB)",
    },
    Key {
        namespaces: BOTH,
        name: "max_input_bytes",
        kind: Kind::Count,
        default: "1048576",
        access: Access::Lower,
        description: "The largest request text sent (rubric and inputs, or prompt); a larger row is an error, not a request (default 1 MiB)",
    },
    Key {
        namespaces: BOTH,
        name: "deadline",
        kind: Kind::Seconds,
        default: "600",
        access: Access::Lower,
        description: "Seconds one call may take in all, attempts and waits between them included; then the row is an error (default 600)",
    },
    Key {
        namespaces: JUDGE,
        name: "max_completion_tokens",
        kind: Kind::Count,
        default: "512",
        access: Access::Lower,
        description: "The most tokens a judge reply may have, sent with every request (default 512); also the worst case a budget reserves",
    },
    Key {
        namespaces: TARGET,
        name: "max_completion_tokens",
        kind: Kind::Limit,
        default: "0",
        access: Access::Lower,
        description: "The most tokens a generate() reply may have (0 = the model's own limit)",
    },
    Key {
        namespaces: BOTH,
        name: "price_input_per_mtok",
        kind: Kind::Dollars,
        default: "",
        access: Access::Operator,
        description: "Dollars per million prompt tokens of the session's model (default: EVALSQL_PRICES, then the built-in table)",
    },
    Key {
        namespaces: BOTH,
        name: "price_cached_input_per_mtok",
        kind: Kind::Dollars,
        default: "",
        access: Access::Operator,
        description: "Dollars per million prompt tokens served from the provider's prompt cache (default: the input price)",
    },
    Key {
        namespaces: BOTH,
        name: "price_output_per_mtok",
        kind: Kind::Dollars,
        default: "",
        access: Access::Operator,
        description: "Dollars per million completion tokens of the session's model",
    },
    Key {
        namespaces: JUDGE,
        name: "batch_discount",
        kind: Kind::Fraction,
        default: "0.5",
        access: Access::Operator,
        description: "What batch-mode calls cost as a share of online ones (default 0.5)",
    },
    Key {
        namespaces: JUDGE,
        name: "tokenizer",
        kind: Kind::Tokenizer,
        default: "",
        access: Access::Anyone,
        description: "Encoding that counts prompt tokens for estimates and budgets: o200k_base, cl100k_base or approximate (default: by the model's name)",
    },
    Key {
        namespaces: JUDGE,
        name: "dry_run",
        kind: Kind::Flag,
        default: "false",
        access: Access::Anyone,
        description: "Send nothing: every judge row is status 'skipped', error 'dry run', with its estimated tokens and cost_usd",
    },
    Key {
        namespaces: JUDGE,
        name: "samples",
        kind: Kind::Count,
        default: "1",
        access: Access::Lower,
        description: "Judge each row this many times with consecutive seeds (each its own call and cache entry): the score is the mean (the lower median for severities and flags); _details.samples and spread show them (1 to 50; a client of a shared server may only lower it)",
    },
    Key {
        namespaces: JUDGE,
        name: "panel",
        kind: Kind::Text,
        default: "",
        access: Access::Operator,
        description: "Judge each row with each of these models (names separated by commas), each through its own limiter and cache entries, and combine them by panel_aggregate; _details.panel lists them (operator-only: it chooses where calls go)",
    },
    Key {
        namespaces: JUDGE,
        name: "panel_aggregate",
        kind: Kind::Aggregate,
        default: "mean",
        access: Access::Anyone,
        description: "How a panel's scores combine: 'mean' (default), 'median' or 'majority' (the most common score, ties to the lower)",
    },
    Key {
        namespaces: JUDGE,
        name: "panel_min_ok",
        kind: Kind::Count,
        default: "",
        access: Access::Anyone,
        description: "Panel members that must succeed for a row to have a score (default: all)",
    },
    Key {
        namespaces: JUDGE,
        name: "mode",
        kind: Kind::Mode,
        default: "online",
        access: Access::Anyone,
        description: "'online' (a request per call) or 'batch' (calls not cached go through the provider's Batch API at its batch price and are waited for) (EVALSQL_JUDGE_MODE)",
    },
    Key {
        namespaces: JUDGE,
        name: "batch_wait",
        kind: Kind::Flag,
        default: "true",
        access: Access::Anyone,
        description: "Batch mode: wait for the batches; false returns at once with pending rows skipped ('pending in batch <id>'), picked up by a later run",
    },
    Key {
        namespaces: JUDGE,
        name: "batch_poll_interval",
        kind: Kind::Seconds,
        default: "30",
        access: Access::Operator,
        description: "Batch mode: seconds between looks at a batch's status (default 30)",
    },
    Key {
        namespaces: JUDGE,
        name: "batch_max_lines",
        kind: Kind::Count,
        default: "50000",
        access: Access::Operator,
        description: "Batch mode: the most requests in one batch file (default 50000, OpenAI's limit; files are also kept under 190 MB)",
    },
    Key {
        namespaces: JUDGE,
        name: "max_cost_usd",
        kind: Kind::Dollars,
        default: "0",
        access: Access::Lower,
        description: "Dollars the judge calls of one query may spend (0 = no limit); rows beyond it are skipped",
    },
    Key {
        namespaces: JUDGE,
        name: "max_calls",
        kind: Kind::Limit,
        default: "0",
        access: Access::Lower,
        description: "Judge calls one query may send (0 = no limit); rows beyond it are skipped",
    },
    Key {
        namespaces: JUDGE,
        name: "max_tokens",
        kind: Kind::Limit,
        default: "0",
        access: Access::Lower,
        description: "Prompt plus completion tokens the judge calls of one query may use (0 = no limit)",
    },
];

/// The keys every judge metric has: `evalsql.judge.<metric>.threshold` and `.version`.
const PER_METRIC: &[(&str, Kind, &str)] = &[
    ("threshold", Kind::Number, "Pass threshold of one judge"),
    (
        "version",
        Kind::Version,
        "Pinned rubric version of one judge",
    ),
];

/// A setting name as DataFusion's `SET` and `SHOW` read it: lower-cased with Unicode rules
/// (`str::to_lowercase`), so the Kelvin sign `K` (U+212A) is an ASCII `k`. Every
/// comparison of setting names goes through this one rule: checking a name under another
/// (ASCII) rule than the one that stores it would let `tO\u{212A}ENS_PER_MINUTE` pass a
/// check as an unknown key and then be set as `tokens_per_minute`.
pub fn setting_case(name: &str) -> String {
    name.to_lowercase()
}

/// What a full key (after `evalsql.`, e.g. `judge.model`, `judge.fluency.threshold`, any
/// case) is.
fn lookup(key: &str) -> Option<(Kind, Access)> {
    let key = setting_case(key);
    let (namespace, name) = key.split_once('.')?;
    if let Some(k) = KEYS
        .iter()
        .find(|k| k.name == name && k.namespaces.contains(&namespace))
    {
        return Some((k.kind, k.access));
    }
    if namespace != "judge" {
        return None;
    }
    let (metric, suffix) = name.rsplit_once('.')?;
    if metric.is_empty() || metric.contains('.') {
        return None;
    }
    PER_METRIC
        .iter()
        .find(|(s, _, _)| *s == suffix)
        .map(|(_, kind, _)| (*kind, Access::Anyone))
}

/// Whether only the operator may set `name` (a full setting name, e.g.
/// `evalsql.judge.base_url`, any case): `serve` refuses it from clients and a Ballista
/// scheduler refuses a job that sets it.
pub fn operator_only(name: &str) -> bool {
    let lower = setting_case(name);
    lower
        .strip_prefix("evalsql.")
        .and_then(lookup)
        .is_some_and(|(_, access)| matches!(access, Access::Operator | Access::Cluster))
}

/// Settings that choose the model the operator's key pays for: a client of `evalsql serve`
/// or a Ballista job may set them only to a model the operator allowed (`--allowed-model`).
pub const MODEL_SETTINGS: [&str; 3] = [
    "evalsql.judge.model",
    "evalsql.judge.azure_deployment",
    "evalsql.target.model",
];

/// Who is setting values in a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Restriction {
    /// The operator: the CLI, `serve --init`, the Ballista scheduler's own settings.
    #[default]
    Operator,
    /// A client of `evalsql serve`: operator-only keys are refused, limits only lowered.
    Client,
    /// A job submitted to a Ballista cluster (on the scheduler and the executors): as a
    /// client, except that the scheduler's executor count is accepted; operator-only keys are
    /// recorded, so the scheduler can refuse the job, and never used.
    Remote,
}

/// A session's own ceiling on calls in flight, made on first use and shared by every clone
/// of the session's options (every query of the session).
type SessionSlots = Arc<std::sync::OnceLock<Arc<Semaphore>>>;

/// One setting: its parsed value and the text it was given as.
#[derive(Debug, Clone, PartialEq)]
struct Setting {
    value: Value,
    text: String,
}

/// `SET evalsql.judge.*` / `evalsql.target.*` values of one session. Only what was set is
/// stored; the rest comes from the environment or defaults when a call is made.
#[derive(Debug, Clone, Default)]
pub struct JudgeOptions {
    /// Full key (after `evalsql.`) -> setting.
    values: BTreeMap<String, Setting>,
    restriction: Restriction,
    /// A client's own ceilings on calls in flight, per namespace (Lower keys set under a
    /// restriction): shared by the session's queries, never the process-wide limiter.
    caps: BTreeMap<String, (Setting, SessionSlots)>,
    /// Operator-only keys a remote job tried to set (never stored in `values`), and model
    /// keys set to a model outside `models`.
    refused: Vec<String>,
    /// The models a restricted session may switch to ([`MODEL_SETTINGS`]); `None`: any
    /// (`evalsql serve` checks its clients' `SET` statements itself).
    models: Option<Arc<Vec<String>>>,
    /// What the current query has spent against its budget; replaced by
    /// [`JudgeOptions::start_query`], shared by every clone until then.
    ledger: Arc<Ledger>,
}

impl PartialEq for JudgeOptions {
    fn eq(&self, other: &Self) -> bool {
        self.values == other.values
            && self.restriction == other.restriction
            && self.refused == other.refused
            && self.models == other.models
            && self.caps.len() == other.caps.len()
            && self
                .caps
                .iter()
                .zip(&other.caps)
                .all(|((k, (a, _)), (l, (b, _)))| k == l && a == b)
    }
}

impl ConfigExtension for JudgeOptions {
    const PREFIX: &'static str = "evalsql";
}

impl ExtensionOptions for JudgeOptions {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn cloned(&self) -> Box<dyn ExtensionOptions> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let key = setting_case(key);
        let full = format!("evalsql.{key}");
        let Some((kind, access)) = lookup(&key) else {
            return plan_err!("{}", unknown_key_message(&key));
        };
        // Who may set it is decided first: a refusal says nothing about the value.
        let lowering = match (self.restriction, access) {
            (Restriction::Operator, _) | (_, Access::Anyone) => false,
            (Restriction::Remote, Access::Cluster) => false,
            (Restriction::Remote, Access::Operator) => {
                self.refused.push(full.clone());
                return plan_err!("{}", refusal(&full));
            }
            (Restriction::Client, Access::Operator | Access::Cluster) => {
                return plan_err!("{}", refusal(&full));
            }
            (_, Access::Lower) => true,
        };
        let value = value.trim();
        if self.restriction != Restriction::Operator
            && let Some(models) = &self.models
            && MODEL_SETTINGS.contains(&full.as_str())
            && !value.is_empty()
            && !models.iter().any(|m| m == value)
        {
            let allowed = if models.is_empty() {
                "none: the operator's own models only".to_string()
            } else {
                models.join(", ")
            };
            if self.restriction == Restriction::Remote {
                self.refused.push(full.clone());
            }
            return plan_err!(
                "{full}: model {} is not among the models allowed here ({allowed}; the \
                 operator adds one with --allowed-model)",
                crate::common::truncate_for_error(value)
            );
        }
        let parsed = if value.is_empty() {
            None
        } else {
            Some(kind.parse(value).ok_or_else(|| {
                DataFusionError::Plan(format!(
                    "{full}: {}, got {}",
                    kind.expected(),
                    crate::common::truncate_for_error(&redact_urls(value))
                ))
            })?)
        };
        if lowering {
            return self.lower(&key, &full, parsed, value);
        }
        match parsed {
            None => {
                self.values.remove(&key);
            }
            Some(value_parsed) => {
                self.values.insert(
                    key,
                    Setting {
                        value: value_parsed,
                        text: value.to_string(),
                    },
                );
            }
        }
        Ok(())
    }

    fn entries(&self) -> Vec<ConfigEntry> {
        let mut out = Vec::new();
        for k in KEYS {
            for namespace in k.namespaces {
                let key = format!("{namespace}.{}", k.name);
                // What df_settings and SHOW print, to every client of a server: URLs
                // without their passwords or keys (the stored text stays as it was given).
                let value = self
                    .caps
                    .get(&key)
                    .map(|(s, _)| redact_urls(&s.text))
                    .or_else(|| self.values.get(&key).map(|s| redact_urls(&s.text)));
                out.push(ConfigEntry {
                    key: format!("evalsql.{key}"),
                    value,
                    description: k.description,
                });
            }
        }
        for (key, setting) in &self.values {
            // Per-metric keys: `judge.<metric>.threshold`, `judge.<metric>.version`.
            if key.matches('.').count() != 2 {
                continue;
            }
            let Some((_, _, description)) = PER_METRIC
                .iter()
                .find(|(suffix, _, _)| key.ends_with(&format!(".{suffix}")))
            else {
                continue;
            };
            out.push(ConfigEntry {
                key: format!("evalsql.{key}"),
                value: Some(redact_urls(&setting.text)),
                description,
            });
        }
        out
    }
}

fn unknown_key_message(key: &str) -> String {
    let full = format!("evalsql.{key}");
    let names = |namespace: &str| {
        KEYS.iter()
            .filter(|k| k.namespaces.contains(&namespace))
            .map(|k| k.name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match key.split_once('.') {
        Some(("judge", _)) => format!(
            "unknown setting {full}; evalsql.judge. takes {}, <metric>.threshold or \
             <metric>.version",
            names("judge")
        ),
        Some(("target", _)) => format!(
            "unknown setting {full}; evalsql.target. takes {}",
            names("target")
        ),
        _ => format!(
            "unknown setting {full}: evalsql settings live under evalsql.judge. and \
             evalsql.target."
        ),
    }
}

fn refusal(full: &str) -> String {
    format!(
        "SET {full} is not allowed here: the operator sets it (environment, command-line \
         flags or --init); a client of a shared server or a cluster job cannot change it"
    )
}

impl JudgeOptions {
    /// Starts a new query: budgets count from zero again.
    pub fn start_query(&mut self) {
        self.ledger = Arc::new(Ledger::default());
    }

    /// Options whose values come from a client of `evalsql serve`.
    pub fn restrict(&mut self, restriction: Restriction) {
        self.restriction = restriction;
    }

    /// Fresh options for the sessions of a Ballista cluster (jobs come from clients).
    pub fn remote() -> Self {
        Self {
            restriction: Restriction::Remote,
            ..Self::default()
        }
    }

    /// Under a restriction, [`MODEL_SETTINGS`] may name only these models (none: the
    /// operator's own models only); anything else is refused (and, for a remote job,
    /// recorded in [`JudgeOptions::refused`]).
    pub fn allow_models(&mut self, models: Arc<Vec<String>>) {
        self.models = Some(models);
    }

    /// Operator-only keys a remote job tried to set (see [`Restriction::Remote`]), and model
    /// keys it set to a model outside [`JudgeOptions::allow_models`].
    pub fn refused(&self) -> &[String] {
        &self.refused
    }

    /// Sets `key` as the operator, whatever the restriction (the Ballista scheduler's
    /// executor count).
    pub fn set_as_operator(&mut self, key: &str, value: &str) -> Result<()> {
        let restriction = std::mem::take(&mut self.restriction);
        let result = self.set(key, value);
        self.restriction = restriction;
        result
    }

    /// A Lower key set under a restriction: at most the operator's value; `max_concurrency`
    /// becomes this session's own ceiling.
    fn lower(&mut self, key: &str, full: &str, parsed: Option<Value>, text: &str) -> Result<()> {
        let (namespace, name) = key.split_once('.').expect("a known key has a namespace");
        let Some(new) = parsed else {
            self.caps.remove(key);
            return Ok(());
        };
        let unlimited = lookup(key).is_some_and(|(kind, _)| kind.zero_is_unlimited());
        // A budget of 0 is no budget: it compares as infinity on both sides.
        let limit = |n: f64| {
            if unlimited && n == 0.0 {
                f64::INFINITY
            } else {
                n
            }
        };
        let operator = self
            .values
            .get(key)
            .and_then(|s| s.value.number())
            .or_else(|| {
                KEYS.iter()
                    .find(|k| k.name == name && k.namespaces.contains(&namespace))
                    .and_then(|k| k.default.parse().ok())
            })
            .map_or(f64::INFINITY, limit);
        let wanted = new.number().map_or(f64::INFINITY, limit);
        if wanted > operator {
            return plan_err!(
                "{full}: a client may only lower it, and the server's value is {operator}; \
                 got {text}"
            );
        }
        let setting = Setting {
            value: new,
            text: text.to_string(),
        };
        if name == "max_concurrency" {
            self.caps.insert(
                format!("{namespace}.{name}"),
                (setting, SessionSlots::default()),
            );
        } else {
            self.values.insert(key.to_string(), setting);
        }
        Ok(())
    }

    fn value(&self, namespace: &str, name: &str) -> Option<&Value> {
        self.values
            .get(&format!("{namespace}.{name}"))
            .map(|s| &s.value)
    }

    fn text(&self, namespace: &str, name: &str) -> Option<String> {
        match self.value(namespace, name)? {
            Value::Text(t) => Some(t.clone()),
            _ => None,
        }
    }

    fn cap(&self, namespace: &str) -> Option<(usize, &SessionSlots)> {
        self.caps
            .get(&format!("{namespace}.max_concurrency"))
            .and_then(|(s, slots)| Some((s.value.number()? as usize, slots)))
    }
}

fn is_none_word(value: &str) -> bool {
    matches!(value.to_ascii_lowercase().as_str(), "none" | "off" | "null")
}

/// Everything one judge call needs, resolved from session settings and the environment.
#[derive(Debug, Clone)]
pub struct JudgeSettings {
    pub endpoint: Endpoint,
    pub model: String,
    /// How calls go out: limits, retries, sampling.
    pub limits: CallLimits,
    /// The cache file, `None` when the cache is off.
    pub cache: Option<PathBuf>,
    /// What the session's model costs (`None`: no price known for its name).
    pub price: Option<Price>,
    /// Whether `price` came from `SET` (then it holds whatever model answers).
    price_set: bool,
    /// What batch-mode calls cost as a share of online ones.
    pub batch_discount: f64,
    /// How prompt tokens are counted before a call.
    pub tokenizer: Tokenizer,
    /// Send nothing; estimate.
    pub dry_run: bool,
    /// Batch mode's settings; `None` online.
    pub batch: Option<BatchSettings>,
    /// Judgements per row (repeated judging).
    pub samples: usize,
    /// The panel's models (empty: the session's model alone), how their scores combine,
    /// and how many must succeed.
    pub panel: Vec<String>,
    pub panel_aggregate: PanelAggregate,
    pub panel_min_ok: Option<usize>,
    /// The limits of one query, and what it has spent.
    pub budget: Budget,
    pub ledger: Arc<Ledger>,
    threshold: Option<f64>,
    thresholds: BTreeMap<String, f64>,
    versions: BTreeMap<String, u32>,
}

/// How a panel's scores combine into a row's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PanelAggregate {
    Mean,
    /// The median (the lower one for severities and flags, which are whole numbers).
    Median,
    /// The most common score; ties go to the lower score.
    Majority,
}

impl PanelAggregate {
    pub fn named(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "mean" => Some(Self::Mean),
            "median" => Some(Self::Median),
            "majority" => Some(Self::Majority),
            _ => None,
        }
    }
}

/// How batch mode submits and waits.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchSettings {
    /// Wait for the batches (else return pending rows at once).
    pub wait: bool,
    pub poll_interval: Duration,
    /// The most lines in one batch file.
    pub max_lines: usize,
    /// The most bytes in one batch file.
    pub max_bytes: usize,
}

/// OpenAI's and Azure's batch files may be 200 MB; this stays clear of it.
pub const BATCH_MAX_BYTES: usize = 190_000_000;

/// Reads an environment variable, treating empty as unset.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment as an [`EnvLookup`].
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl JudgeSettings {
    /// Resolves the settings of a session (`options` may lack the extension: then only the
    /// environment counts). `function` names the SQL function in errors.
    pub fn from_config(function: &str, options: &ConfigOptions) -> Result<Self> {
        let session = options.extensions.get::<JudgeOptions>();
        Self::resolve(function, session, &process_env)
    }

    /// Resolves settings from session values (which win) and `env`.
    pub fn resolve(function: &str, session: Option<&JudgeOptions>, env: EnvLookup) -> Result<Self> {
        let set = |key: &str| session.and_then(|s| s.text("judge", key));
        let model_setting = set("model").or_else(|| env("EVALSQL_JUDGE_MODEL"));

        // SET wins over the environment; within each, Azure is chosen by its endpoint.
        let azure_endpoint = match (set("azure_endpoint"), set("base_url")) {
            (Some(e), _) => Some(e),
            (None, Some(_)) => None,
            (None, None) => env("AZURE_OPENAI_ENDPOINT"),
        };
        let (endpoint, model) = if let Some(azure) = azure_endpoint {
            let deployment = set("azure_deployment").or_else(|| env("AZURE_OPENAI_DEPLOYMENT"));
            let Some(key) = env("AZURE_OPENAI_API_KEY") else {
                return plan_err!(
                    "{function}: the Azure OpenAI judge needs AZURE_OPENAI_API_KEY (endpoint {})",
                    redact_url(&azure)
                );
            };
            let Some(model) = model_setting.clone().or_else(|| deployment.clone()) else {
                return plan_err!(
                    "{function}: the Azure OpenAI judge needs a deployment: set \
                     AZURE_OPENAI_DEPLOYMENT (or EVALSQL_JUDGE_MODEL, or SET \
                     evalsql.judge.azure_deployment = '...')"
                );
            };
            let api_version = set("api_version")
                .or_else(|| env("OPENAI_API_VERSION"))
                .unwrap_or_else(|| DEFAULT_AZURE_API_VERSION.to_string());
            (
                Endpoint::Azure {
                    endpoint: azure,
                    deployment,
                    api_version,
                    api_key: ApiKey::new(key),
                },
                model,
            )
        } else {
            let base_url = set("base_url").or_else(|| env("OPENAI_BASE_URL"));
            let api_key = env("OPENAI_API_KEY").map(ApiKey::new);
            match (&base_url, &api_key, &model_setting) {
                (None, None, _) => {
                    return plan_err!(
                        "{function}: no LLM judge is configured. Set OPENAI_API_KEY and \
                         EVALSQL_JUDGE_MODEL (plus OPENAI_BASE_URL for another \
                         OpenAI-compatible server), or AZURE_OPENAI_ENDPOINT, \
                         AZURE_OPENAI_API_KEY and AZURE_OPENAI_DEPLOYMENT; per session, \
                         SET evalsql.judge.base_url / evalsql.judge.model"
                    );
                }
                (_, _, None) => {
                    return plan_err!(
                        "{function}: no judge model is configured: set EVALSQL_JUDGE_MODEL \
                         (or SET evalsql.judge.model = '...')"
                    );
                }
                _ => {}
            }
            (
                Endpoint::OpenAi { base_url, api_key },
                model_setting.clone().unwrap_or_default(),
            )
        };

        let limits = CallLimits::read(session, "judge");
        let cache = cache_path(session, env);
        let mut thresholds = BTreeMap::new();
        let mut versions = BTreeMap::new();
        if let Some(s) = session {
            for (k, setting) in &s.values {
                let Some(rest) = k.strip_prefix("judge.") else {
                    continue;
                };
                match (&setting.value, rest.rsplit_once('.')) {
                    (Value::Float(t), Some((metric, "threshold"))) => {
                        thresholds.insert(metric.to_string(), *t);
                    }
                    (Value::Int(v), Some((metric, "version"))) => {
                        versions.insert(metric.to_string(), *v as u32);
                    }
                    _ => {}
                }
            }
        }
        let threshold = match session.and_then(|s| s.value("judge", "threshold")) {
            Some(Value::Float(t)) => Some(*t),
            _ => None,
        };
        let (price, price_set) = session_price(session, "judge", &model)
            .map_err(|e| DataFusionError::Plan(format!("{function}: {e}")))?;
        let number = |name: &str| match session.and_then(|s| s.value("judge", name)) {
            Some(v) => v.number(),
            None => None,
        };
        let tokenizer = match session.and_then(|s| s.text("judge", "tokenizer")) {
            Some(name) => Tokenizer::named(&name).unwrap_or(Tokenizer::Approximate),
            None => Tokenizer::for_model(&model),
        };
        let budget = Budget {
            max_cost_usd: number("max_cost_usd").filter(|&d| d > 0.0),
            max_calls: number("max_calls").filter(|&n| n > 0.0).map(|n| n as u64),
            max_tokens: number("max_tokens").filter(|&n| n > 0.0).map(|n| n as u64),
        };
        if budget.max_cost_usd.is_some() && price.is_none() {
            return plan_err!(
                "{function}: evalsql.judge.max_cost_usd needs the price of model {model}, which is not in the built-in table: SET evalsql.judge.price_input_per_mtok, evalsql.judge.price_cached_input_per_mtok and evalsql.judge.price_output_per_mtok, or name it in a prices file (EVALSQL_PRICES)"
            );
        }
        let samples = number("samples").map_or(1, |k| k as usize);
        if samples > MAX_SAMPLES {
            return plan_err!(
                "{function}: evalsql.judge.samples must be at most {MAX_SAMPLES}, got {samples}"
            );
        }
        if samples > 1 && limits.seed.is_none() {
            return plan_err!(
                "{function}: evalsql.judge.samples = {samples} judges each row with seeds one \
                 apart; it needs a seed (SET evalsql.judge.seed = 42)"
            );
        }
        let panel: Vec<String> = set("panel")
            .map(|p| {
                p.split(',')
                    .map(str::trim)
                    .filter(|m| !m.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let panel_aggregate = set("panel_aggregate")
            .and_then(|a| PanelAggregate::named(&a))
            .unwrap_or(PanelAggregate::Mean);
        let panel_min_ok = number("panel_min_ok").map(|n| n as usize);
        if let Some(k) = panel_min_ok
            && k > panel.len().max(1)
        {
            return plan_err!(
                "{function}: evalsql.judge.panel_min_ok = {k} is more than the panel's {} \
                 models",
                panel.len().max(1)
            );
        }
        Ok(Self {
            panel,
            panel_aggregate,
            panel_min_ok,
            endpoint,
            model,
            limits,
            cache,
            price,
            price_set,
            batch_discount: number("batch_discount").unwrap_or(0.5),
            tokenizer,
            dry_run: matches!(
                session.and_then(|s| s.value("judge", "dry_run")),
                Some(Value::Bool(true))
            ),
            batch: batch_settings(session, env)
                .map_err(|e| DataFusionError::Plan(format!("{function}: {e}")))?,
            samples,
            budget,
            ledger: session.map_or_else(Default::default, |s| Arc::clone(&s.ledger)),
            threshold,
            thresholds,
            versions,
        })
    }

    /// These settings for panel member `model`: the model (on Azure, the deployment of that
    /// name) and its price; everything else as the session's.
    pub fn for_model(&self, model: &str) -> JudgeSettings {
        let mut s = self.clone();
        s.model = model.to_string();
        if let Endpoint::Azure { deployment, .. } = &mut s.endpoint {
            *deployment = Some(model.to_string());
        }
        if !s.price_set {
            let file = pricing::prices_file().ok().flatten();
            s.price = pricing::lookup(file, model);
        }
        s.tokenizer = Tokenizer::for_model(model);
        s
    }

    /// The price of a call the endpoint says `reply_model` answered: the session's price,
    /// or, for a deployment whose own name has none, the reply model's.
    pub fn price_of(&self, reply_model: Option<&str>) -> Option<Price> {
        if self.price_set {
            return self.price;
        }
        self.price.or_else(|| {
            let file = pricing::prices_file().ok().flatten();
            reply_model.and_then(|m| pricing::lookup(file, m))
        })
    }

    /// The rubric version pinned for `metric` (`SET evalsql.judge.<metric>.version`).
    pub fn pinned_version(&self, metric: &str) -> Option<u32> {
        self.versions.get(metric).copied()
    }

    /// The pass threshold of a safety metric (the highest severity that passes): its own
    /// setting, else `default`. The global threshold is for the 1-5 quality scores only.
    pub fn own_threshold(&self, metric: &str, default: f64) -> f64 {
        self.thresholds.get(metric).copied().unwrap_or(default)
    }

    /// The pass threshold of `metric`: its own setting, else the global one, else `default`.
    pub fn threshold(&self, metric: &str, default: f64) -> f64 {
        self.thresholds
            .get(metric)
            .copied()
            .or(self.threshold)
            .unwrap_or(default)
    }

    /// The process-wide limiter key: calls to one endpoint for one model share a limit.
    pub fn limiter_key(&self) -> String {
        self.endpoint.limiter_key(&self.model)
    }

    /// The generation parameters that change a judgement, for the cache key.
    pub fn cache_params(&self) -> Vec<(String, String)> {
        let mut params = vec![
            ("endpoint".to_string(), self.endpoint.url(&self.model)),
            (
                "temperature".to_string(),
                format!("{:?}", self.limits.temperature),
            ),
        ];
        if let Some(seed) = self.limits.seed {
            params.push(("seed".to_string(), seed.to_string()));
        }
        params
    }
}

/// The judge cache file of a session (`None`: the cache is off): `SET evalsql.judge.cache`,
/// else `EVALSQL_JUDGE_CACHE`, else [`default_cache_path`].
pub fn cache_path(session: Option<&JudgeOptions>, env: EnvLookup) -> Option<PathBuf> {
    if let Some(Value::Path(p)) = session.and_then(|s| s.value("judge", "cache")) {
        return p.clone();
    }
    match env("EVALSQL_JUDGE_CACHE") {
        Some(v) if is_none_word(&v) => None,
        Some(v) => Some(PathBuf::from(v)),
        None => default_cache_path(),
    }
}

/// Batch mode's settings, when the session (else `EVALSQL_JUDGE_MODE`) asks for it.
fn batch_settings(
    session: Option<&JudgeOptions>,
    env: EnvLookup,
) -> std::result::Result<Option<BatchSettings>, String> {
    let get = |name: &str| session.and_then(|s| s.value("judge", name));
    let batch = match get("mode") {
        Some(Value::Bool(batch)) => *batch,
        _ => match env("EVALSQL_JUDGE_MODE") {
            None => false,
            Some(v) => match Kind::Mode.parse(v.trim()) {
                Some(Value::Bool(batch)) => batch,
                _ => {
                    return Err(format!(
                        "EVALSQL_JUDGE_MODE: expected 'online' or 'batch', got {}",
                        crate::common::truncate_for_error(&v)
                    ));
                }
            },
        },
    };
    if !batch {
        return Ok(None);
    }
    Ok(Some(BatchSettings {
        wait: !matches!(get("batch_wait"), Some(Value::Bool(false))),
        poll_interval: match get("batch_poll_interval") {
            Some(Value::Float(secs)) => Duration::from_secs_f64(*secs),
            _ => Duration::from_secs(30),
        },
        max_lines: get("batch_max_lines")
            .and_then(Value::number)
            .map_or(50_000, |n| n as usize),
        max_bytes: BATCH_MAX_BYTES,
    }))
}

/// The price of `model` in a session: the `SET` price keys of `namespace` (for whatever
/// model is called; the cached price defaults to the input price), else the prices file,
/// else the built-in table. The flag says it came from `SET`.
fn session_price(
    session: Option<&JudgeOptions>,
    namespace: &str,
    model: &str,
) -> std::result::Result<(Option<Price>, bool), String> {
    let get = |name: &str| session.and_then(|s| s.value(namespace, name)?.number());
    match (
        get("price_input_per_mtok"),
        get("price_cached_input_per_mtok"),
        get("price_output_per_mtok"),
    ) {
        (Some(input), cached, Some(output)) => {
            return Ok((
                Some(Price {
                    input,
                    cached_input: cached.unwrap_or(input),
                    output,
                }),
                true,
            ));
        }
        (None, None, None) => {}
        _ => {
            return Err(format!(
                "a price needs both evalsql.{namespace}.price_input_per_mtok and evalsql.{namespace}.price_output_per_mtok"
            ));
        }
    }
    let file = pricing::prices_file()?;
    Ok((pricing::lookup(file, model), false))
}

/// The call settings the judge and the targets share, read from one namespace's values
/// (`evalsql.judge.*` or `evalsql.target.*`), with their defaults.
#[derive(Debug, Clone)]
pub struct CallLimits {
    /// The process-wide ceiling on calls in flight per endpoint + model (this process's
    /// share of it, on a cluster).
    pub max_concurrency: usize,
    pub requests_per_minute: Option<u32>,
    pub tokens_per_minute: Option<u64>,
    pub retry: RetryPolicy,
    /// The longest one call may take, attempts and backoff included.
    pub deadline: Duration,
    /// The largest response body read.
    pub max_response_bytes: usize,
    /// The largest request text sent (instructions and inputs).
    pub max_input_bytes: usize,
    pub temperature: f64,
    pub seed: Option<i64>,
    /// The most tokens a reply may have (`None`: the model's own limit).
    pub max_completion_tokens: Option<u32>,
    /// The session's own ceiling on calls in flight (a client that lowered
    /// `max_concurrency`), on top of the process-wide limiter.
    pub session_slots: Option<Arc<Semaphore>>,
}

impl CallLimits {
    fn read(session: Option<&JudgeOptions>, namespace: &str) -> Self {
        let get = |name: &str| session.and_then(|s| s.value(namespace, name));
        let int = |name: &str| get(name).and_then(|v| v.number()).map(|n| n as u64);
        let mut retry = RetryPolicy {
            backoff: BackoffConfig::default(),
            ..RetryPolicy::default()
        };
        if let Some(Value::Float(secs)) = get("timeout") {
            retry.timeout = Duration::from_secs_f64(*secs);
        }
        if let Some(n) = int("max_retries") {
            retry.max_retries = n as usize;
        }
        // The limits are totals over the processes that share them (a Ballista cluster's
        // executors): this process takes its share, rounded down so the sum stays within
        // the total, and at least 1.
        let sharing = int("executors").filter(|&n| n >= 1).unwrap_or(1);
        let share = |total: u64| (total / sharing).max(1);
        // A client's own ceiling is a total over the executors too; its semaphore is made
        // on first use (the executor count arrives with the job) and shared by the session.
        let session_slots = session.and_then(|s| s.cap(namespace)).map(|(n, slots)| {
            Arc::clone(slots.get_or_init(|| Arc::new(Semaphore::new(share(n as u64) as usize))))
        });
        CallLimits {
            max_concurrency: share(int("max_concurrency").unwrap_or(DEFAULT_MAX_CONCURRENCY as u64))
                as usize,
            requests_per_minute: int("requests_per_minute")
                .filter(|&n| n > 0)
                .map(|n| share(n).min(u32::MAX as u64) as u32),
            tokens_per_minute: int("tokens_per_minute").filter(|&n| n > 0).map(share),
            retry,
            deadline: match get("deadline") {
                Some(Value::Float(secs)) => Duration::from_secs_f64(*secs),
                _ => DEFAULT_DEADLINE,
            },
            max_input_bytes: int("max_input_bytes")
                .map(|n| n.min(usize::MAX as u64) as usize)
                .unwrap_or(DEFAULT_MAX_INPUT_BYTES),
            max_response_bytes: int("max_response_bytes")
                .map(|n| n.min(usize::MAX as u64) as usize)
                .unwrap_or(crate::judge::engine::transport::DEFAULT_MAX_RESPONSE_BYTES),
            temperature: match get("temperature") {
                Some(Value::Float(t)) => *t,
                _ => 0.0,
            },
            seed: match get("seed") {
                Some(Value::Seed(s)) => *s,
                _ => Some(DEFAULT_SEED),
            },
            max_completion_tokens: match int("max_completion_tokens") {
                Some(0) => None,
                Some(n) => Some(n.min(u32::MAX as u64) as u32),
                None if namespace == "judge" => Some(DEFAULT_MAX_COMPLETION_TOKENS),
                None => None,
            },
            session_slots,
        }
    }
}

/// Settings of the targets: `generate` (the model under test) and `invoke_app`.
#[derive(Debug, Clone)]
pub struct TargetSettings {
    /// The model under test: its endpoint and name (`None` when not configured).
    pub model: Option<(Endpoint, String)>,
    /// How calls go out: limits, retries, sampling.
    pub limits: CallLimits,
    pub cache: Option<PathBuf>,
    /// URL prefixes `invoke_app` may call (`None`: any).
    pub allowed_urls: Option<Vec<String>>,
    /// The model under test's price (see [`session_price`]), or what is wrong with it.
    price: std::result::Result<(Option<Price>, bool), String>,
    /// The session is a dry run (`evalsql.judge.dry_run`): targets call nothing either.
    pub dry_run: bool,
}

impl TargetSettings {
    /// Resolves the target settings of a session.
    pub fn from_config(options: &ConfigOptions) -> Self {
        let session = options.extensions.get::<JudgeOptions>();
        Self::resolve(session, &process_env)
    }

    /// `SET evalsql.target.*` first, then `EVALSQL_TARGET_*`, then the judge's OpenAI
    /// settings (the session's judge base URL and model, `OPENAI_BASE_URL`,
    /// `OPENAI_API_KEY`, `EVALSQL_JUDGE_MODEL`).
    pub fn resolve(session: Option<&JudgeOptions>, env: EnvLookup) -> Self {
        let set = |key: &str| session.and_then(|s| s.text("target", key));
        let judge = |key: &str| session.and_then(|s| s.text("judge", key));
        // A key travels only to the endpoint configured beside it: the target's own URL gets
        // the target's key, the judge's URL the judge's key, and OpenAI's API either.
        let (base_url, api_key) =
            if let Some(url) = set("base_url").or_else(|| env("EVALSQL_TARGET_BASE_URL")) {
                (Some(url), env("EVALSQL_TARGET_API_KEY"))
            } else if let Some(url) = judge("base_url").or_else(|| env("OPENAI_BASE_URL")) {
                (Some(url), env("OPENAI_API_KEY"))
            } else {
                (
                    None,
                    env("EVALSQL_TARGET_API_KEY").or_else(|| env("OPENAI_API_KEY")),
                )
            };
        let api_key = api_key.map(ApiKey::new);
        let model = set("model")
            .or_else(|| env("EVALSQL_TARGET_MODEL"))
            .or_else(|| judge("model"))
            .or_else(|| env("EVALSQL_JUDGE_MODEL"));
        let model = match (model, base_url.is_some() || api_key.is_some()) {
            (Some(m), true) => Some((Endpoint::OpenAi { base_url, api_key }, m)),
            _ => None,
        };
        let limits = CallLimits::read(session, "target");
        let cache = match session.and_then(|s| s.value("target", "cache")) {
            Some(Value::Path(p)) => p.clone(),
            _ => cache_path(session, env),
        };
        let allowed_urls = match session.and_then(|s| s.value("target", "allowed_urls")) {
            Some(Value::Urls(urls)) => Some(urls.clone()),
            _ => None,
        };
        let price = match &model {
            Some((_, name)) => session_price(session, "target", name),
            None => Ok((None, false)),
        };
        TargetSettings {
            model,
            allowed_urls,
            limits,
            cache,
            price,
            dry_run: matches!(
                session.and_then(|s| s.value("judge", "dry_run")),
                Some(Value::Bool(true))
            ),
        }
    }

    /// Judge-style settings for calling the model under test, or the error saying what to set.
    pub fn model_settings(&self, function: &str) -> Result<JudgeSettings> {
        let Some((endpoint, model)) = self.model.clone() else {
            return plan_err!(
                "{function}: no model under test is configured: set EVALSQL_TARGET_MODEL and \
                 EVALSQL_TARGET_BASE_URL or EVALSQL_TARGET_API_KEY (or the judge's \
                 OPENAI_BASE_URL / OPENAI_API_KEY / EVALSQL_JUDGE_MODEL), or SET \
                 evalsql.target.model / evalsql.target.base_url"
            );
        };
        let (price, price_set) = self
            .price
            .clone()
            .map_err(|e| DataFusionError::Plan(format!("{function}: {e}")))?;
        Ok(JudgeSettings {
            tokenizer: Tokenizer::for_model(&model),
            endpoint,
            model,
            limits: self.limits.clone(),
            cache: self.cache.clone(),
            price,
            price_set,
            batch_discount: 0.5,
            dry_run: false,
            batch: None,
            samples: 1,
            panel: Vec::new(),
            panel_aggregate: PanelAggregate::Mean,
            panel_min_ok: None,
            budget: Budget::default(),
            ledger: Arc::default(),
            threshold: None,
            thresholds: BTreeMap::new(),
            versions: BTreeMap::new(),
        })
    }
}

/// The default cache file: `<user cache dir>/evalsql/judge-cache.sqlite`.
pub fn default_cache_path() -> Option<PathBuf> {
    let base = process_env("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| process_env("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .or_else(|| process_env("LOCALAPPDATA").map(PathBuf::from))?;
    Some(base.join("evalsql").join("judge-cache.sqlite"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn nothing_configured_names_the_variables() {
        let err = JudgeSettings::resolve("groundedness", None, &env_of(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("groundedness"), "{err}");
        assert!(err.contains("OPENAI_API_KEY"), "{err}");
        assert!(err.contains("EVALSQL_JUDGE_MODEL"), "{err}");
        assert!(err.contains("AZURE_OPENAI_ENDPOINT"), "{err}");
    }

    #[test]
    fn openai_from_env_and_session_overrides() {
        let env = env_of(&[
            ("OPENAI_API_KEY", "sk-test-123456789"),
            ("EVALSQL_JUDGE_MODEL", "gpt-4o-mini"),
            ("EVALSQL_JUDGE_CACHE", "off"),
        ]);
        let s = JudgeSettings::resolve("f", None, &env).unwrap();
        assert_eq!(s.model, "gpt-4o-mini");
        assert_eq!(s.limits.max_concurrency, DEFAULT_MAX_CONCURRENCY);
        assert_eq!(s.limits.seed, Some(DEFAULT_SEED));
        assert_eq!(s.cache, None);
        assert_eq!(
            s.endpoint.url(&s.model),
            "https://api.openai.com/v1/chat/completions"
        );

        let mut opts = JudgeOptions::default();
        opts.set("judge.model", "judge-2").unwrap();
        opts.set("judge.base_url", "http://127.0.0.1:9/v1").unwrap();
        opts.set("judge.max_concurrency", "32").unwrap();
        opts.set("judge.seed", "none").unwrap();
        opts.set("judge.threshold", "4").unwrap();
        opts.set("judge.fluency.threshold", "2").unwrap();
        let s = JudgeSettings::resolve("f", Some(&opts), &env).unwrap();
        assert_eq!(s.model, "judge-2");
        assert_eq!(s.limits.max_concurrency, 32);
        assert_eq!(s.limits.seed, None);
        assert_eq!(
            s.endpoint.url("x"),
            "http://127.0.0.1:9/v1/chat/completions"
        );
        assert_eq!(s.threshold("fluency", 3.0), 2.0);
        assert_eq!(s.threshold("coherence", 3.0), 4.0);

        // Limits shared by N processes: each takes 1/N, rounded down, at least 1.
        opts.set("judge.requests_per_minute", "100").unwrap();
        opts.set("judge.tokens_per_minute", "9").unwrap();
        opts.set("judge.executors", "3").unwrap();
        let s = JudgeSettings::resolve("f", Some(&opts), &env).unwrap();
        assert_eq!(s.limits.max_concurrency, 10);
        assert_eq!(s.limits.requests_per_minute, Some(33));
        assert_eq!(s.limits.tokens_per_minute, Some(3));
        opts.set("judge.executors", "64").unwrap();
        let s = JudgeSettings::resolve("f", Some(&opts), &env).unwrap();
        assert_eq!(s.limits.max_concurrency, 1);
        assert!(opts.set("judge.executors", "0").is_err());
    }

    #[test]
    fn azure_from_env() {
        let env = env_of(&[
            ("AZURE_OPENAI_ENDPOINT", "https://res.openai.azure.com/"),
            ("AZURE_OPENAI_API_KEY", "0123456789abcdef0123456789abcdef"),
            ("AZURE_OPENAI_DEPLOYMENT", "gpt4o-judge"),
        ]);
        let s = JudgeSettings::resolve("f", None, &env).unwrap();
        assert_eq!(s.model, "gpt4o-judge");
        assert!(
            s.endpoint
                .url(&s.model)
                .starts_with("https://res.openai.azure.com/openai/deployments/gpt4o-judge/")
        );
        // A session base_url switches to an OpenAI-compatible server.
        let mut opts = JudgeOptions::default();
        opts.set("judge.base_url", "http://localhost:1/v1").unwrap();
        opts.set("judge.model", "m").unwrap();
        let s = JudgeSettings::resolve("f", Some(&opts), &env).unwrap();
        assert!(matches!(s.endpoint, Endpoint::OpenAi { .. }));
    }

    #[test]
    fn clients_cannot_set_operator_keys_and_only_lower_limits() {
        let env = env_of(&[
            ("OPENAI_API_KEY", "sk-test-1"),
            ("EVALSQL_JUDGE_MODEL", "m"),
        ]);
        let mut opts = JudgeOptions::default();
        // The operator (CLI, serve --init) sets anything.
        opts.set("judge.max_concurrency", "8").unwrap();
        opts.set("judge.base_url", "http://127.0.0.1:9/v1").unwrap();
        opts.restrict(Restriction::Client);
        for key in [
            "judge.base_url",
            "JUDGE.AZURE_ENDPOINT",
            "judge.cache",
            "target.cache",
            "target.base_url",
            "target.allowed_urls",
            "judge.requests_per_minute",
            "target.tokens_per_minute",
            "judge.executors",
            "judge.max_response_bytes",
        ] {
            let err = opts
                .set(key, "http://attacker.example/v1")
                .unwrap_err()
                .to_string();
            assert!(err.contains("not allowed"), "{key}: {err}");
            assert!(operator_only(&format!("evalsql.{key}")), "{key}");
        }
        assert!(!operator_only("evalsql.judge.model"));
        assert!(!operator_only("evalsql.judge.fluency.threshold"));
        assert!(!operator_only("evalsql.judge.max_concurrency"));
        // Limits: only lower, and max_concurrency then binds this session alone.
        let err = opts
            .set("judge.max_concurrency", "9")
            .unwrap_err()
            .to_string();
        assert!(err.contains("only lower") && err.contains('8'), "{err}");
        assert!(opts.set("judge.max_retries", "7").is_err());
        assert!(opts.set("judge.deadline", "601").is_err());
        opts.set("judge.max_concurrency", "2").unwrap();
        opts.set("judge.max_retries", "1").unwrap();
        opts.set("judge.deadline", "2.5").unwrap();
        opts.set("judge.model", "other").unwrap();
        let s = JudgeSettings::resolve("f", Some(&opts), &env).unwrap();
        assert_eq!(
            s.limits.max_concurrency, 8,
            "the process-wide ceiling is the operator's"
        );
        assert_eq!(
            s.limits.session_slots.as_ref().unwrap().available_permits(),
            2
        );
        assert_eq!(s.limits.retry.max_retries, 1);
        assert_eq!(s.limits.deadline, Duration::from_millis(2500));
        assert_eq!(s.model, "other");
        assert_eq!(
            s.endpoint.url("m"),
            "http://127.0.0.1:9/v1/chat/completions"
        );
        // The same ceiling for every query of the session (clones share it).
        let again = JudgeSettings::resolve("f", Some(&opts.clone()), &env).unwrap();
        assert!(Arc::ptr_eq(
            s.limits.session_slots.as_ref().unwrap(),
            again.limits.session_slots.as_ref().unwrap()
        ));
        let shown = opts
            .entries()
            .into_iter()
            .find(|e| e.key == "evalsql.judge.max_concurrency")
            .unwrap();
        assert_eq!(shown.value.as_deref(), Some("2"));
    }

    #[test]
    fn restricted_sessions_switch_only_among_the_allowed_models() {
        // The operator sets any model; a cluster job only an allowed one.
        let mut opts = JudgeOptions::remote();
        opts.allow_models(Arc::new(vec!["small".into()]));
        opts.set_as_operator("judge.model", "operator-model")
            .unwrap();
        opts.set("judge.model", "small").unwrap();
        for key in ["judge.model", "JUDGE.AZURE_DEPLOYMENT", "target.model"] {
            let err = opts.set(key, "expensive").unwrap_err().to_string();
            assert!(err.contains("not among the models"), "{key}: {err}");
        }
        assert_eq!(
            opts.refused(),
            [
                "evalsql.judge.model",
                "evalsql.judge.azure_deployment",
                "evalsql.target.model"
            ]
        );
        assert_eq!(opts.text("judge", "model").as_deref(), Some("small"));
        // Clearing a model is not choosing one.
        opts.set("target.model", "").unwrap();
        // Without a list (serve checks its clients' SET itself), any model.
        let mut opts = JudgeOptions::remote();
        opts.set("judge.model", "expensive").unwrap();
        assert!(opts.refused().is_empty());
    }

    #[test]
    fn cluster_jobs_record_refused_keys_and_share_their_ceiling() {
        let env = env_of(&[
            ("OPENAI_API_KEY", "sk-test-1"),
            ("EVALSQL_JUDGE_MODEL", "m"),
        ]);
        let mut opts = JudgeOptions::remote();
        assert!(
            opts.set("judge.base_url", "http://attacker.example/v1")
                .is_err()
        );
        assert!(opts.set("judge.cache", "/tmp/x.sqlite").is_err());
        assert_eq!(
            opts.refused(),
            ["evalsql.judge.base_url", "evalsql.judge.cache"]
        );
        // The scheduler's executor count is taken; a job's own ceiling is a cluster total.
        opts.set("judge.max_concurrency", "4").unwrap();
        opts.set_as_operator("judge.executors", "2").unwrap();
        let s = JudgeSettings::resolve("f", Some(&opts), &env).unwrap();
        assert_eq!(s.limits.max_concurrency, 8);
        assert_eq!(s.limits.session_slots.unwrap().available_permits(), 2);
        assert_eq!(
            s.endpoint.url("m"),
            "https://api.openai.com/v1/chat/completions"
        );
    }

    #[test]
    fn a_target_key_goes_only_where_it_was_configured() {
        let key_of = |pairs: &'static [(&'static str, &'static str)]| {
            let s = TargetSettings::resolve(None, &env_of(pairs));
            let (endpoint, _) = s.model.expect("a model under test");
            match endpoint {
                Endpoint::OpenAi { base_url, api_key } => {
                    (base_url, api_key.map(|k| k.expose().to_string()))
                }
                Endpoint::Azure { .. } => unreachable!(),
            }
        };
        // The target's URL with only the judge's key: no key is sent there.
        assert_eq!(
            key_of(&[
                ("EVALSQL_TARGET_BASE_URL", "http://model-under-test/v1"),
                ("OPENAI_API_KEY", "sk-judge"),
                ("EVALSQL_TARGET_MODEL", "m"),
            ]),
            (Some("http://model-under-test/v1".into()), None)
        );
        assert_eq!(
            key_of(&[
                ("EVALSQL_TARGET_BASE_URL", "http://model-under-test/v1"),
                ("EVALSQL_TARGET_API_KEY", "sk-target"),
                ("OPENAI_API_KEY", "sk-judge"),
                ("EVALSQL_TARGET_MODEL", "m"),
            ]),
            (
                Some("http://model-under-test/v1".into()),
                Some("sk-target".into())
            )
        );
        // The judge's own endpoint with the judge's key; OpenAI's API with either.
        assert_eq!(
            key_of(&[
                ("OPENAI_BASE_URL", "http://judge/v1"),
                ("OPENAI_API_KEY", "sk-judge"),
                ("EVALSQL_TARGET_API_KEY", "sk-target"),
                ("EVALSQL_TARGET_MODEL", "m"),
            ]),
            (Some("http://judge/v1".into()), Some("sk-judge".into()))
        );
        assert_eq!(
            key_of(&[
                ("OPENAI_API_KEY", "sk-judge"),
                ("EVALSQL_TARGET_MODEL", "m")
            ]),
            (None, Some("sk-judge".into()))
        );
    }

    #[test]
    fn bad_settings_fail_at_set_time() {
        let mut opts = JudgeOptions::default();
        let err = opts
            .set("judge.max_concurrency", "0")
            .unwrap_err()
            .to_string();
        assert!(err.contains("evalsql.judge.max_concurrency"), "{err}");
        assert!(opts.set("judge.timeout", "-1").is_err());
        assert!(opts.set("judge.nonsense", "1").is_err());
        assert!(opts.set("other", "1").is_err());
        assert!(opts.set("judge.groundedness.threshold", "x").is_err());
        assert!(opts.set("judge.deadline", "0").is_err());
        assert!(opts.set("judge.base_url", "localhost:8000/v1").is_err());
        assert!(opts.set("judge.groundedness.version", "0").is_err());
        opts.set("judge.groundedness.threshold", "4").unwrap();
        assert!(
            opts.entries()
                .iter()
                .any(|e| e.key == "evalsql.judge.groundedness.threshold")
        );
    }

    /// DataFusion's SET lower-cases names with Unicode rules, so `K` (the Kelvin sign,
    /// U+212A) reaches the options as an ASCII `k`: every check must fold the same way.
    #[test]
    fn setting_names_fold_case_as_datafusion_does() {
        let kelvin = |name: &str| name.replace('k', "\u{212A}");
        assert_eq!(
            kelvin("evalsql.judge.tokens_per_minute").to_lowercase(),
            "evalsql.judge.tokens_per_minute"
        );
        let mut spelled = 0;
        for k in KEYS {
            for namespace in k.namespaces {
                let full = format!("evalsql.{namespace}.{}", k.name);
                let protected = matches!(k.access, Access::Operator | Access::Cluster);
                for name in [
                    kelvin(&full),
                    kelvin(&full.to_uppercase()),
                    full.to_uppercase(),
                ] {
                    assert_eq!(operator_only(&name), protected, "{name}");
                }
                if protected && full.contains('k') {
                    spelled += 1;
                    // A client's SET of the Kelvin spelling is refused, not taken as unknown.
                    let mut opts = JudgeOptions::default();
                    opts.restrict(Restriction::Client);
                    let key = kelvin(&full["evalsql.".len()..]);
                    let err = opts.set(&key, "1").unwrap_err().to_string();
                    assert!(err.contains("not allowed"), "{key}: {err}");
                }
            }
        }
        assert!(spelled >= 2, "no operator-only key has a k to spell");
        assert!(operator_only("evalsql.judge.to\u{212A}ens_per_minute"));
        assert!(operator_only("EVALSQL.TARGET.TO\u{212A}ENS_PER_MINUTE"));
        // The operator's SET of that spelling lands on the key.
        let mut opts = JudgeOptions::default();
        opts.set("judge.to\u{212A}ens_per_minute", "5").unwrap();
        assert!(
            opts.entries()
                .iter()
                .any(|e| e.key == "evalsql.judge.tokens_per_minute"
                    && e.value.as_deref() == Some("5"))
        );
    }

    /// What SHOW and information_schema.df_settings print (the entries) hides a URL's
    /// password and keys; the value the judge calls with keeps them.
    #[test]
    fn settings_views_mask_url_credentials() {
        let mut opts = JudgeOptions::default();
        let url = "https://user:hunter2@proxy.test/v1?api-key=k3y&Token=t0k&x=1";
        opts.set("judge.base_url", url).unwrap();
        opts.set(
            "target.allowed_urls",
            "http://app/run?sig=s1g, http://u:pw@app/x",
        )
        .unwrap();
        let entries = opts.entries();
        let shown = |key: &str| {
            entries
                .iter()
                .find(|e| e.key == key)
                .and_then(|e| e.value.clone())
                .unwrap()
        };
        assert_eq!(
            shown("evalsql.judge.base_url"),
            "https://user:***@proxy.test/v1?api-key=***&Token=***&x=1"
        );
        assert_eq!(
            shown("evalsql.target.allowed_urls"),
            "http://app/run?sig=***, http://u:***@app/x"
        );
        for e in &entries {
            let v = e.value.clone().unwrap_or_default();
            for secret in ["hunter2", "k3y", "t0k", "s1g", "pw@"] {
                assert!(!v.contains(secret), "{}: {v}", e.key);
            }
        }
        let env = env_of(&[("EVALSQL_JUDGE_MODEL", "m"), ("EVALSQL_JUDGE_CACHE", "off")]);
        let s = JudgeSettings::resolve("f", Some(&opts), &env).unwrap();
        let called = s.endpoint.url("m");
        assert!(called.starts_with(url), "{called}");
        // Error messages that quote a URL setting mask it too.
        let err = opts
            .set("judge.base_url", "ftp://user:hunter2@h/?key=k3y")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("hunter2") && !err.contains("k3y"), "{err}");
        let err = JudgeSettings::resolve(
            "f",
            None,
            &env_of(&[(
                "AZURE_OPENAI_ENDPOINT",
                "https://u:hunter2@res.example/?sig=k3y",
            )]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("https://u:***@res.example/?sig=***"), "{err}");
    }
}
