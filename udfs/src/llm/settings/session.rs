//! What `SET` sees: one session's `evalsql.*` values ([`JudgeOptions`], a DataFusion config
//! extension), who may set what ([`Restriction`]), and [`Read`], through which a statement
//! reads them back by key with the key table's defaults.

use std::any::Any;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use datafusion::common::config::{ConfigEntry, ConfigExtension, ExtensionOptions};
use datafusion::common::{DataFusionError, Result, plan_err};
use tokio::sync::Semaphore;

use super::keys::{Access, KEYS, Key, MODEL_SETTINGS, PER_METRIC, Value, lookup, setting_case};
use crate::common::excerpt::redact_urls;
use crate::llm::budget::Ledger;

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
pub(crate) type SessionSlots = Arc<std::sync::OnceLock<Arc<Semaphore>>>;

/// One setting: its parsed value and the text it was given as.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Setting {
    pub(crate) value: Value,
    pub(crate) text: String,
}

/// `SET evalsql.judge.*` / `evalsql.target.*` values of one session. Only what was set is
/// stored; the rest comes from the environment or defaults when a call is made.
#[derive(Debug, Clone, Default)]
pub struct JudgeOptions {
    /// Full key (after `evalsql.`) -> setting.
    pub(crate) values: BTreeMap<String, Setting>,
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
    pub(crate) ledger: Arc<Ledger>,
}

impl JudgeOptions {
    /// Who the session's statements come from.
    pub fn restriction(&self) -> Restriction {
        self.restriction
    }
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
            (_, Access::Lower | Access::Raise) => true,
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
    /// The dollar budget of one query this session set (`evalsql.judge.max_cost_usd`), if
    /// any (0 is none).
    pub fn max_cost_usd(&self) -> Option<f64> {
        Read::new(Some(self), "judge")
            .number(&super::keys::MAX_COST_USD)
            .filter(|&d| d > 0.0)
    }

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
                    .and_then(|k| k.default_value()?.number())
            })
            .map_or(f64::INFINITY, limit);
        let wanted = new.number().map_or(f64::INFINITY, limit);
        let raise = lookup(key).is_some_and(|(_, access)| access == Access::Raise);
        if raise && wanted < operator {
            return plan_err!(
                "{full}: a client may only raise it, and the server's value is {operator}; \
                 got {text}"
            );
        }
        if !raise && wanted > operator {
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

    pub(crate) fn cap(&self, namespace: &str) -> Option<(usize, &SessionSlots)> {
        self.caps
            .get(&format!("{namespace}.max_concurrency"))
            .and_then(|(s, slots)| Some((s.value.number()? as usize, slots)))
    }
}

/// One namespace's settings of a statement, read by key: the session's value, else the
/// key's default from the table (a key whose default is empty reads as unset: its value
/// comes from the environment or is absent, as the key's description says).
#[derive(Clone, Copy)]
pub struct Read<'a> {
    session: Option<&'a JudgeOptions>,
    namespace: &'static str,
}

impl<'a> Read<'a> {
    pub fn new(session: Option<&'a JudgeOptions>, namespace: &'static str) -> Self {
        Self { session, namespace }
    }

    pub fn namespace(&self) -> &'static str {
        self.namespace
    }

    /// What the session set, if it did.
    pub(crate) fn set(&self, key: &Key) -> Option<&'a Value> {
        debug_assert!(
            key.namespaces.contains(&self.namespace),
            "evalsql.{}.{} is not a key",
            self.namespace,
            key.name
        );
        self.session?
            .values
            .get(&format!("{}.{}", self.namespace, key.name))
            .map(|s| &s.value)
    }

    /// The session's value, else the default.
    fn value(&self, key: &Key) -> Option<Value> {
        self.set(key).cloned().or_else(|| key.default_value())
    }

    /// A text key: the session's value, else `env` (the environment variable beside it),
    /// else the default.
    pub fn text_or(&self, key: &Key, env: Option<String>) -> Option<String> {
        match self.set(key) {
            Some(Value::Text(t)) => Some(t.clone()),
            _ => env.or_else(|| match key.default_value() {
                Some(Value::Text(t)) => Some(t),
                _ => None,
            }),
        }
    }

    /// A text key: the session's value, else the default.
    pub fn text(&self, key: &Key) -> Option<String> {
        self.text_or(key, None)
    }

    /// A numeric key.
    pub fn number(&self, key: &Key) -> Option<f64> {
        self.value(key)?.number()
    }

    /// An integer key (a count, budget or limit).
    pub fn int(&self, key: &Key) -> Option<u64> {
        match self.value(key)? {
            Value::Int(n) => Some(n),
            _ => None,
        }
    }

    /// A duration in seconds.
    pub fn seconds(&self, key: &Key) -> Option<Duration> {
        match self.value(key)? {
            Value::Float(secs) => Some(Duration::from_secs_f64(secs)),
            _ => None,
        }
    }

    /// A true/false key (and `mode`: true is batch).
    pub fn flag(&self, key: &Key) -> Option<bool> {
        match self.value(key)? {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// A seed: `Some(None)` when set to none.
    pub fn seed(&self, key: &Key) -> Option<Option<i64>> {
        match self.value(key)? {
            Value::Seed(s) => Some(s),
            _ => None,
        }
    }

    /// A path or off, as the session set it.
    pub fn path(&self, key: &Key) -> Option<Option<PathBuf>> {
        match self.set(key)? {
            Value::Path(p) => Some(p.clone()),
            _ => None,
        }
    }

    /// A list of URL prefixes, as the session set it.
    pub fn urls(&self, key: &Key) -> Option<Vec<String>> {
        match self.set(key)? {
            Value::Urls(u) => Some(u.clone()),
            _ => None,
        }
    }
}
