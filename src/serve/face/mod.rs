//! How `evalsql serve` presents itself to PostgreSQL drivers and BI tools: the version they
//! parse (`version()`, the `server_version` startup parameter, `SHOW server_version_num`),
//! the settings they read (`SHOW`, `current_setting`, `pg_catalog.pg_settings`) and change
//! (`set_config`), savepoints, and duplicate output column names.
//!
//! Nothing here widens what a client may do: settings are read from the same entries
//! `information_schema.df_settings` prints (URLs without their passwords or keys), and
//! `set_config` is answered by running the equivalent `SET` through the connection's hooks,
//! the same checks a client's own `SET` passes (see [`hook`]).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use datafusion::common::config::ConfigOptions;
use datafusion::prelude::SessionContext;
use datafusion_postgres::pgwire;
use evalsql_udfs::setting_case;
use pgwire::api::ClientInfo;
use pgwire::api::auth::{DefaultServerParameterProvider, ServerParameterProvider};
use pgwire::types::format::FormatOptions;

pub mod columns;
pub mod functions;
pub mod hook;

/// The PostgreSQL release whose protocol and catalogs evalsql follows.
const PG_VERSION: &str = "16.6";
/// [`PG_VERSION`] as `server_version_num` gives it.
const PG_VERSION_NUM: &str = "160006";

/// `server_version`: PostgreSQL's number first (libpq, pgJDBC, Npgsql and asyncpg read the
/// leading digits), then what is really answering, as distributions add theirs
/// (`16.6 (Debian 16.6-1.pgdg120+1)`).
pub fn server_version() -> String {
    format!(
        "{PG_VERSION} (evalsql {}, DataFusion {})",
        env!("CARGO_PKG_VERSION"),
        datafusion::DATAFUSION_VERSION
    )
}

/// `version()`: PostgreSQL's shape, `PostgreSQL 16.6 (…) on x86_64-pc-linux-gnu, 64-bit`,
/// which SQLAlchemy's `.*PostgreSQL (\d+)\.?(\d+)?` and Grafana's parsers accept.
pub fn version_string() -> String {
    let platform = match std::env::consts::OS {
        "linux" => "pc-linux-gnu",
        "macos" => "apple-darwin",
        other => other,
    };
    format!(
        "PostgreSQL {} on {}-{platform}, {}-bit",
        server_version(),
        std::env::consts::ARCH,
        usize::BITS
    )
}

/// What the server says of itself for its whole life.
#[derive(Debug, Clone)]
pub struct ServerFace {
    /// No `--allow-writes`: every transaction is read-only.
    pub read_only: bool,
}

impl ServerFace {
    pub fn of(allow: &crate::policy::ClientAllowances) -> Self {
        Self {
            read_only: !allow.writes,
        }
    }
}

/// One connection's settings as PostgreSQL names them: the server's facts and a copy of
/// the client's own values (pgwire keeps those in the connection's metadata, which
/// functions cannot reach; [`hook::FaceHook`] copies them before each statement). A
/// session-config extension, so `pg_settings` finds it, and held by `current_setting`.
#[derive(Debug)]
pub struct PgSession {
    face: ServerFace,
    client: RwLock<HashMap<String, String>>,
}

/// A setting as `SHOW` and `pg_settings` give it.
#[derive(Debug, Clone, PartialEq)]
pub struct SettingRow {
    pub name: String,
    pub value: Option<String>,
    pub description: String,
    /// Who may change it: `internal` (nobody), `superuser` (the operator only), `user`.
    pub context: &'static str,
}

/// PostgreSQL's own settings: (name as PostgreSQL spells it, description).
const PG_SETTINGS: &[(&str, &str)] = &[
    (
        "application_name",
        "Sets the application name to be reported.",
    ),
    ("bytea_output", "Sets the output format for bytea."),
    (
        "client_encoding",
        "Sets the client's character set encoding.",
    ),
    (
        "DateStyle",
        "Sets the display format for date and time values.",
    ),
    (
        "default_transaction_deferrable",
        "Sets the default deferrable status of new transactions.",
    ),
    (
        "default_transaction_isolation",
        "Sets the transaction isolation level of each new transaction.",
    ),
    (
        "default_transaction_read_only",
        "Sets the default read-only status of new transactions (on unless the server allows writes).",
    ),
    (
        "extra_float_digits",
        "Sets the number of digits displayed for floating-point values.",
    ),
    (
        "in_hot_standby",
        "Shows whether hot standby is currently active.",
    ),
    (
        "integer_datetimes",
        "Shows whether datetimes are integer based.",
    ),
    (
        "IntervalStyle",
        "Sets the display format for interval values.",
    ),
    (
        "is_superuser",
        "Shows whether the current user is a superuser (no client is).",
    ),
    (
        "jit",
        "Allow JIT compilation (DataFusion compiles no queries).",
    ),
    (
        "lc_collate",
        "Shows the collation order locale (byte order).",
    ),
    (
        "lc_ctype",
        "Shows the character classification and case conversion locale.",
    ),
    (
        "max_identifier_length",
        "Shows the maximum identifier length.",
    ),
    (
        "search_path",
        "Sets the schema search order for names that are not schema-qualified.",
    ),
    (
        "server_encoding",
        "Shows the server (database) character set encoding.",
    ),
    ("server_version", "Shows the server version."),
    (
        "server_version_num",
        "Shows the server version as an integer.",
    ),
    ("session_authorization", "Shows the session user name."),
    (
        "standard_conforming_strings",
        "Causes '...' strings to treat backslashes literally.",
    ),
    (
        "statement_timeout",
        "Sets the maximum allowed duration of any statement.",
    ),
    (
        "TimeZone",
        "Sets the time zone for displaying and interpreting time stamps.",
    ),
    (
        "transaction_deferrable",
        "Whether to defer a read-only serializable transaction.",
    ),
    (
        "transaction_isolation",
        "Sets the current transaction's isolation level.",
    ),
    (
        "transaction_read_only",
        "Sets the current transaction's read-only status.",
    ),
];

/// PostgreSQL's spellings of multi-word names (`SHOW TIME ZONE`, ...), as the parts of a
/// `SHOW` are joined with dots.
fn canonical_alias(name: &str) -> &str {
    match name {
        "time.zone" | "time zone" => "timezone",
        "transaction.isolation.level" | "transaction isolation level" => "transaction_isolation",
        "session.authorization" | "session authorization" => "session_authorization",
        other => other,
    }
}

fn on_off(on: bool) -> String {
    if on { "on" } else { "off" }.to_string()
}

impl PgSession {
    pub fn new(face: ServerFace) -> Self {
        Self {
            face,
            client: RwLock::new(HashMap::new()),
        }
    }

    /// Takes the client's current values (its startup parameters and what `SET` stored).
    pub fn refresh(&self, metadata: &HashMap<String, String>) {
        if let Ok(mut client) = self.client.write() {
            client.clone_from(metadata);
        }
    }

    /// The value of PostgreSQL's setting `key` (lower case), if it is one.
    fn pg_value(&self, key: &str, options: &ConfigOptions) -> Option<String> {
        let client = self.client.read().ok()?;
        let format = FormatOptions::from_client_metadata(&client);
        let own = |k: &str| client.get(k).cloned();
        let read_only = on_off(self.face.read_only);
        Some(match key {
            "server_version" => server_version(),
            "server_version_num" => PG_VERSION_NUM.to_string(),
            "server_encoding" | "client_encoding" => "UTF8".to_string(),
            "standard_conforming_strings" | "integer_datetimes" => on_off(true),
            "is_superuser" | "in_hot_standby" | "jit" => on_off(false),
            "default_transaction_read_only" | "transaction_read_only" => read_only,
            // No transactions: every statement reads the tables as they are when it runs.
            "default_transaction_isolation" | "transaction_isolation" => "read committed".into(),
            "default_transaction_deferrable" | "transaction_deferrable" => on_off(false),
            "max_identifier_length" => "63".to_string(),
            // Strings compare byte by byte.
            "lc_collate" | "lc_ctype" => "C".to_string(),
            // What the row encoder uses (pgwire's format options).
            "datestyle" => format.date_style,
            "intervalstyle" => format.interval_style,
            "bytea_output" => format.bytea_output,
            "extra_float_digits" => format.extra_float_digits.to_string(),
            // The session's (SET TIME ZONE sets it too), else what the client was told.
            "timezone" => (options.execution.time_zone.clone())
                .or_else(|| own("timezone"))
                .unwrap_or_else(|| "UTC".to_string()),
            "application_name" => own("application_name").unwrap_or_default(),
            "search_path" => own("search_path").unwrap_or_else(|| "public".to_string()),
            "session_authorization" => own("user").unwrap_or_default(),
            "statement_timeout" => match own("statement_timeout_ms")
                .and_then(|ms| ms.parse::<u64>().ok())
                .filter(|&ms| ms > 0)
            {
                None => "0".to_string(),
                Some(ms) if ms % 1000 == 0 => format!("{}s", ms / 1000),
                Some(ms) => format!("{ms}ms"),
            },
            _ => return None,
        })
    }

    /// One setting by any of its names (case-insensitive, as PostgreSQL's): PostgreSQL's,
    /// then DataFusion's and evalsql's keys with the values `df_settings` shows. `None`:
    /// no such setting.
    pub fn lookup(&self, name: &str, options: &ConfigOptions) -> Option<SettingRow> {
        let key = setting_case(name.trim());
        let key = canonical_alias(&key);
        if let Some((pg_name, description)) = PG_SETTINGS
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(key))
        {
            return Some(SettingRow {
                name: pg_name.to_string(),
                value: self.pg_value(key, options),
                description: description.to_string(),
                context: pg_context(pg_name),
            });
        }
        options
            .entries()
            .into_iter()
            .find(|entry| entry.key == key)
            .map(from_entry)
    }

    /// Every setting, PostgreSQL's first (`SHOW ALL`, `pg_settings`).
    pub fn all(&self, options: &ConfigOptions) -> Vec<SettingRow> {
        let mut rows: Vec<SettingRow> = PG_SETTINGS
            .iter()
            .map(|(name, description)| SettingRow {
                name: name.to_string(),
                value: self.pg_value(&name.to_ascii_lowercase(), options),
                description: description.to_string(),
                context: pg_context(name),
            })
            .collect();
        let mut entries = options.entries();
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        rows.extend(entries.into_iter().map(from_entry));
        rows
    }
}

/// PostgreSQL's `context` of one of its settings here.
fn pg_context(name: &str) -> &'static str {
    match name {
        "application_name" | "bytea_output" | "DateStyle" | "extra_float_digits"
        | "IntervalStyle" | "search_path" | "statement_timeout" | "TimeZone" => "user",
        _ => "internal",
    }
}

fn from_entry(entry: datafusion::config::ConfigEntry) -> SettingRow {
    let context = if super::protected_setting(&entry.key) {
        "superuser"
    } else {
        "user"
    };
    SettingRow {
        name: entry.key,
        value: entry.value,
        description: entry.description.to_string(),
        context,
    }
}

/// The error PostgreSQL gives for an unknown setting (SQLSTATE 42704, undefined_object).
pub fn unrecognized(name: &str) -> String {
    format!(
        "unrecognized configuration parameter {}",
        evalsql_udfs::truncate_for_error(name)
    )
}

/// Gives `ctx` (a connection's session, or the server's base session) its PostgreSQL
/// face: the session extension `pg_settings` reads, `version()`, `current_setting()` and
/// `set_config()`. Returns the session for [`hook::FaceHook`].
pub fn install(ctx: &SessionContext, face: ServerFace) -> Arc<PgSession> {
    let session = Arc::new(PgSession::new(face));
    ctx.state_ref()
        .write()
        .config_mut()
        .set_extension(Arc::clone(&session));
    functions::register(ctx, &session);
    session
}

/// The parameters sent after login (`ParameterStatus`): pgwire's, with this server's
/// version, time zone and truthful `is_superuser` / `default_transaction_read_only`.
pub struct FaceParameters {
    inner: DefaultServerParameterProvider,
}

impl FaceParameters {
    /// `time_zone`: the operator's `datafusion.execution.time_zone`, if set.
    pub fn new(face: &ServerFace, time_zone: Option<String>) -> Self {
        let mut inner = DefaultServerParameterProvider::default();
        inner.server_version = server_version();
        inner.is_superuser = false;
        inner.default_transaction_read_only = face.read_only;
        inner.time_zone = time_zone.unwrap_or_else(|| "UTC".to_string());
        inner.date_style = FormatOptions::default().date_style;
        Self { inner }
    }
}

impl ServerParameterProvider for FaceParameters {
    fn server_parameters<C>(&self, client: &C) -> Option<HashMap<String, String>>
    where
        C: ClientInfo,
    {
        let mut parameters = self.inner.server_parameters(client)?;
        // A zone the client asked for is the session's, as PostgreSQL reports it.
        if let Some(zone) = crate::serve::sessions::startup_time_zone(client.metadata()) {
            parameters.insert("TimeZone".to_string(), zone);
        }
        Some(parameters)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_by_any_of_their_names() {
        let session = PgSession::new(ServerFace { read_only: true });
        let options = ConfigOptions::default();
        let value = |name: &str| session.lookup(name, &options).and_then(|r| r.value);
        assert_eq!(value("TIMEZONE").as_deref(), Some("UTC"));
        assert_eq!(
            session.lookup("time.zone", &options).unwrap().name,
            "TimeZone"
        );
        assert_eq!(
            value("transaction.isolation.level").as_deref(),
            Some("read committed")
        );
        assert_eq!(
            value("default_transaction_read_only").as_deref(),
            Some("on")
        );
        assert_eq!(value("server_version_num").as_deref(), Some(PG_VERSION_NUM));
        assert_eq!(
            value("DataFusion.Execution.Batch_Size").as_deref(),
            Some("8192")
        );
        assert!(session.lookup("no_such_setting", &options).is_none());
        let mut client = HashMap::new();
        client.insert("timezone".to_string(), "Asia/Tokyo".to_string());
        client.insert("statement_timeout_ms".to_string(), "2500".to_string());
        session.refresh(&client);
        assert_eq!(value("TimeZone").as_deref(), Some("Asia/Tokyo"));
        assert_eq!(value("statement_timeout").as_deref(), Some("2500ms"));
        let writable = PgSession::new(ServerFace { read_only: false });
        let read_only = writable.lookup("transaction_read_only", &options).unwrap();
        assert_eq!(read_only.value.as_deref(), Some("off"));
    }

    #[test]
    fn the_version_has_postgresqls_shape() {
        let version = version_string();
        let rest = version.strip_prefix("PostgreSQL 16.6 (evalsql ").unwrap();
        assert!(rest.contains(", DataFusion 55."), "{version}");
        assert!(version.ends_with("-bit"), "{version}");
        assert!(server_version().starts_with("16.6 ("));
    }
}
