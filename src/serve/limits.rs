//! The resources one client statement may grow, and the checks that hold it to them.
//!
//! A statement arrives as text, is parsed, planned and run; each step is bounded so that no
//! client can take the process down for the others:
//!
//! - bytes: a message before login is small ([`PRE_LOGIN_MESSAGE_BYTES`]), any later message
//!   at most `--max-message-bytes`, a statement's text at most `--max-statement-bytes`;
//! - depth: a statement's expressions nest at most `--max-expression-depth` deep (sqlparser
//!   already stops nested parentheses at 50 levels; long chains of infix operators such as
//!   `1+1+…+1` or `a OR b OR …` are the deep trees it admits), and the server's threads have
//!   stacks large enough for any statement the limit admits ([`WORKER_STACK_BYTES`]);
//! - time: `--statement-timeout` ends a statement, its judge and target calls included, also
//!   where it computes without waiting ([`super::checkpoints`]; `levenshtein`, quadratic in
//!   its texts, is bounded per pair and computed in pieces);
//! - memory: DataFusion's pool (`--memory-limit`) for the operators that reserve memory, a
//!   byte limit (`--max-function-bytes`) on the functions whose output size an argument sets
//!   (`repeat`, `lpad`, `rpad`, `array_repeat`, `array_resize`, `range`, `generate_series`,
//!   `replace`), checked before they allocate, and the process's heap
//!   (`--max-process-memory`) for everything that grows values ([`super::memory`]);
//! - settings: `batch_size` and the concurrency settings only within bounds.

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, IntervalMonthDayNano};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, Statement, Visit, Visitor};
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use crate::guarded_udf::{CallGuard, guarded};

/// The most bytes a message may have before the client has logged in: a startup message,
/// SASL's messages and a password are a few hundred bytes; PostgreSQL's own startup packet
/// limit is 10,000.
pub const PRE_LOGIN_MESSAGE_BYTES: usize = 16 * 1024;

/// The stack of each of the server's threads. Planning and running a statement recurse over
/// its expression trees (DataFusion protects its main recursions with `stacker`, but not
/// every clone, drop and formatting of an expression); at `--max-expression-depth` 1,000 a
/// statement needs a few MiB. Only the pages touched are ever committed.
pub const WORKER_STACK_BYTES: usize = 64 * 1024 * 1024;

/// The server's limits on what one statement may grow.
#[derive(Debug, Clone)]
pub struct ServeLimits {
    /// `--statement-timeout`: a statement (planning, running, sending its rows) ends after
    /// this long with SQLSTATE 57014; `None`: no limit.
    pub statement_timeout: Option<Duration>,
    /// `--max-statement-bytes`: the longest statement text.
    pub max_statement_bytes: usize,
    /// `--max-message-bytes`: the longest protocol message after login.
    pub max_message_bytes: usize,
    /// `--max-expression-depth`: the deepest nesting of expressions in a statement.
    pub max_expression_depth: usize,
    /// `--max-nesting`: the deepest nesting of parentheses (calls, subqueries, groups).
    pub max_nesting: usize,
    /// `--max-connections`: connections open at once (more are refused with 53300).
    pub max_connections: usize,
    /// `--login-timeout`: how long a connection may take to log in before it is closed.
    pub login_timeout: Duration,
    /// `--idle-timeout`: a logged-in session waiting outside a transaction block this long is
    /// closed (SQLSTATE 57P05); `None`: never.
    pub idle_timeout: Option<Duration>,
    /// `--max-connections-per-user`: logged-in connections of one user (operators aside).
    pub max_connections_per_user: usize,
    /// `--reserved-connections`: slots only operators may take (none without operators).
    pub reserved_connections: usize,
    /// `--operator-user`: the users who may take the reserved slots.
    pub operator_users: Vec<String>,
    /// `--max-function-bytes`: the most bytes one call of a size-setting function may produce
    /// for one batch.
    pub max_function_bytes: usize,
    /// `--max-process-memory`: the heap the server may hold before client statements that
    /// grow values are refused (see [`super::memory`]).
    pub max_process_memory: usize,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            statement_timeout: Some(Duration::from_secs(3600)),
            max_statement_bytes: 1024 * 1024,
            max_message_bytes: 16 * 1024 * 1024,
            max_expression_depth: 1_000,
            max_nesting: 16,
            max_connections: 64,
            login_timeout: Duration::from_secs(5),
            idle_timeout: Some(Duration::from_secs(3600)),
            max_connections_per_user: 32,
            reserved_connections: 3,
            operator_users: Vec::new(),
            max_function_bytes: 64 * 1024 * 1024,
            max_process_memory: super::memory::default_limit(),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Statement size and depth

/// Refuses a statement text over the byte limit, before it is parsed.
pub fn check_statement_bytes(text: &str, limits: &ServeLimits) -> Result<(), String> {
    if text.len() > limits.max_statement_bytes {
        return Err(format!(
            "the statement has {} bytes, more than this server's limit of {} \
             (--max-statement-bytes)",
            text.len(),
            limits.max_statement_bytes
        ));
    }
    Ok(())
}

/// Refuses a statement whose parentheses nest deeper than the limit, before it is parsed:
/// `tokens` are the very tokens the parser is then given ([`super::statements`]).
///
/// Reading and planning nested SQL costs more than linear time upstream: sqlparser's
/// PostgreSQL dialect backtracks over nested function calls (each level about 1.7 times the
/// one inside it: 16 levels of `abs(…)` took 0.5 s in a debug build, 40 would take days),
/// and DataFusion's planner over nested scalar subqueries (about 1.8 times per level). No
/// later limit can stop that work once it has started, since it never yields; so the
/// nesting is measured on the tokens (linear: strings and comments are single tokens) and
/// refused first.
pub fn check_nesting(tokens: &[TokenWithSpan], limits: &ServeLimits) -> Result<(), String> {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for token in tokens {
        match token.token {
            Token::LParen | Token::LBracket => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            Token::RParen | Token::RBracket => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    if deepest > limits.max_nesting {
        return Err(format!(
            "the statement's parentheses nest {deepest} deep, more than this server's limit of \
             {} (--max-nesting)",
            limits.max_nesting
        ));
    }
    Ok(())
}

/// Refuses a parsed statement whose expressions nest deeper than the limit, before it is
/// planned.
pub fn check_expression_depth(statement: &Statement, limits: &ServeLimits) -> Result<(), String> {
    let depth = expression_depth(statement);
    if depth > limits.max_expression_depth {
        return Err(format!(
            "the statement's expressions nest {depth} deep, more than this server's limit of {} \
             (--max-expression-depth); a long chain such as a OR b OR … can often be written \
             as IN (…)",
            limits.max_expression_depth
        ));
    }
    Ok(())
}

/// The deepest nesting of expressions in `statement` (subqueries included).
pub fn expression_depth(statement: &Statement) -> usize {
    struct Depth {
        now: usize,
        max: usize,
    }
    impl Visitor for Depth {
        type Break = ();
        fn pre_visit_expr(&mut self, _: &SqlExpr) -> std::ops::ControlFlow<()> {
            self.now += 1;
            self.max = self.max.max(self.now);
            std::ops::ControlFlow::Continue(())
        }
        fn post_visit_expr(&mut self, _: &SqlExpr) -> std::ops::ControlFlow<()> {
            self.now -= 1;
            std::ops::ControlFlow::Continue(())
        }
    }
    let mut depth = Depth { now: 0, max: 0 };
    let _ = statement.visit(&mut depth);
    depth.max
}

// ---------------------------------------------------------------------------------------
// Settings a client may change only within bounds

/// The largest `datafusion.execution.batch_size` a client may set.
pub const MAX_CLIENT_BATCH_SIZE: usize = 65_536;

/// Settings whose value a client may set only within bounds: `Err` says why not. `server`
/// reads the server's own value of a key.
pub fn check_bounded_setting(
    name: &str,
    value: &str,
    server: &dyn Fn(&str) -> Option<String>,
) -> Result<(), String> {
    let ceiling = match name {
        "datafusion.execution.batch_size" => Some(MAX_CLIENT_BATCH_SIZE),
        "datafusion.execution.target_partitions"
        | "datafusion.execution.planning_concurrency"
        | "datafusion.execution.meta_fetch_concurrency"
        | "datafusion.execution.minimum_parallel_output_files"
        | "datafusion.execution.max_buffered_batches_per_output_file"
        | "datafusion.execution.parquet.maximum_parallel_row_group_writers"
        | "datafusion.execution.parquet.maximum_buffered_record_batches_per_stream" => {
            server(name).and_then(|v| v.parse().ok())
        }
        _ => return Ok(()),
    };
    let Some(ceiling) = ceiling else {
        return Ok(());
    };
    let given = value.trim().trim_matches(['\'', '"']);
    match given.parse::<usize>() {
        // 0 means "the core count" for the concurrency settings.
        Ok(n) if n >= 1 && n <= ceiling => Ok(()),
        _ => Err(format!(
            "SET {name} = {given}: a client may set it from 1 to {ceiling} on this server"
        )),
    }
}

// ---------------------------------------------------------------------------------------
// Functions whose output size an argument sets

/// Which bound a checked function computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Repeat,
    Pad,
    ArrayRepeat,
    ArrayResize,
    Range,
    Replace,
}

const CHECKED: [(&str, Kind); 8] = [
    ("repeat", Kind::Repeat),
    ("lpad", Kind::Pad),
    ("rpad", Kind::Pad),
    ("array_repeat", Kind::ArrayRepeat),
    ("array_resize", Kind::ArrayResize),
    ("range", Kind::Range),
    ("generate_series", Kind::Range),
    ("replace", Kind::Replace),
];

/// Registers the checked versions of the size-setting functions on `ctx`, under the names
/// (and aliases) of the functions they wrap. Table functions of the same names
/// (`generate_series(1, n)` in FROM) produce rows batch by batch and stay as they are.
pub fn register_checked_functions(ctx: &SessionContext, limit: usize) -> Result<()> {
    for (name, kind) in CHECKED {
        let inner = ctx.udf(name)?;
        let checked = guarded(&inner, Arc::new(MaxOutputBytes { kind, limit }));
        ctx.register_udf(checked.as_ref().clone());
    }
    let levenshtein = guarded(&ctx.udf("levenshtein")?, Arc::new(EditSteps));
    ctx.register_udf(levenshtein.as_ref().clone());
    Ok(())
}

/// The most steps (characters of one text times characters of the other) one
/// `levenshtein` pair may take: two texts of 10,000 characters, a fraction of a second.
/// PostgreSQL's `levenshtein` refuses texts over 255 characters.
pub const MAX_EDIT_STEPS: u64 = 100_000_000;

/// The steps of one piece of a batch between two interrupt checks.
const EDIT_STEPS_PER_PIECE: u64 = 10_000_000;

/// `levenshtein` takes time quadratic in its texts and computes a whole batch in one call:
/// a pair over [`MAX_EDIT_STEPS`] is refused, and a batch is computed in pieces of about
/// [`EDIT_STEPS_PER_PIECE`] so that a timeout or a cancel ends it between two.
#[derive(Debug)]
struct EditSteps;

impl CallGuard for EditSteps {
    fn check(&self, _name: &str, _args: &ScalarFunctionArgs) -> Result<()> {
        Ok(())
    }

    fn pieces(&self, args: &ScalarFunctionArgs) -> Result<Option<Vec<std::ops::Range<usize>>>> {
        let (rows, arrays) = call_arrays(&args.args, args.number_rows)?;
        let (a, b) = (char_lengths(&arrays[0]), char_lengths(&arrays[1]));
        let mut pieces = Vec::new();
        let (mut start, mut steps) = (0, 0u64);
        for row in 0..rows {
            let pair = a[row].saturating_mul(b[row]);
            if pair > MAX_EDIT_STEPS {
                return Err(DataFusionError::Execution(format!(
                    "levenshtein: texts of {} and {} characters take {pair} steps, more than \
                     this server's limit of {MAX_EDIT_STEPS} for one pair",
                    a[row], b[row]
                )));
            }
            if steps + pair > EDIT_STEPS_PER_PIECE && row > start {
                pieces.push(start..row);
                (start, steps) = (row, 0);
            }
            steps += pair;
        }
        pieces.push(start..rows);
        Ok((args.number_rows == rows).then_some(pieces))
    }
}

/// Characters of each text (NULL and non-text: 0).
fn char_lengths(array: &ArrayRef) -> Vec<u64> {
    per_text(array, |s| s.chars().count() as u64)
}

/// Refuses a call of a size-setting function whose output would pass `limit` bytes, before
/// the function allocates it.
#[derive(Debug)]
struct MaxOutputBytes {
    kind: Kind,
    limit: usize,
}

impl CallGuard for MaxOutputBytes {
    fn check(&self, name: &str, args: &ScalarFunctionArgs) -> Result<()> {
        let bytes = output_bound(self.kind, &args.args, args.number_rows)?;
        if bytes > self.limit as u128 {
            return Err(DataFusionError::Execution(format!(
                "{name}: the result would take {bytes} bytes, more than this server's limit of {} \
                 for one call (--max-function-bytes)",
                self.limit
            )));
        }
        super::memory::check(name, bytes as u64)
    }
}

/// An upper bound of the bytes a call produces for a batch of `rows` rows.
fn output_bound(kind: Kind, args: &[ColumnarValue], rows: usize) -> Result<u128> {
    let (rows, arrays) = call_arrays(args, rows)?;
    let mut total: u128 = 0;
    match kind {
        Kind::Repeat => {
            let (text, times) = (byte_lengths(&arrays[0])?, ints(&arrays[1])?);
            for i in 0..rows {
                total += text[i] as u128 * times[i].unwrap_or(0).max(0) as u128;
            }
        }
        Kind::Pad => {
            // The length counts characters, of up to 4 bytes each.
            let (text, length) = (byte_lengths(&arrays[0])?, ints(&arrays[1])?);
            for i in 0..rows {
                total += text[i] as u128 + 4 * length[i].unwrap_or(0).max(0) as u128;
            }
        }
        Kind::ArrayRepeat => {
            for (i, times) in ints(&arrays[1])?.into_iter().enumerate() {
                let times = times.unwrap_or(0).max(0) as u128;
                if times > 0 {
                    total += times * (value_bytes(&arrays[0], i) + 8);
                }
            }
        }
        Kind::ArrayResize => {
            for (i, size) in ints(&arrays[1])?.into_iter().enumerate() {
                let fill = arrays.get(2).map_or(16, |v| value_bytes(v, i) + 8);
                total += size.unwrap_or(0).max(0) as u128 * fill;
            }
        }
        Kind::Range => {
            for i in 0..rows {
                total += range_elements(&arrays, i)? * 8;
            }
        }
        Kind::Replace => {
            for i in 0..rows {
                total += replaced_bytes(&arrays, i);
            }
        }
    }
    Ok(total)
}

/// Byte length of each string (0 for NULL or a non-string).
fn byte_lengths(array: &ArrayRef) -> Result<Vec<u64>> {
    Ok(per_text(array, |s| s.len() as u64))
}

/// `measure` of each string of `array` (0 for NULL or a non-string).
fn per_text(array: &ArrayRef, measure: impl Fn(&str) -> u64) -> Vec<u64> {
    let n = array.len();
    match array.data_type() {
        DataType::Utf8 => (0..n)
            .map(|i| measure(array.as_string::<i32>().value(i)))
            .collect(),
        DataType::LargeUtf8 => (0..n)
            .map(|i| measure(array.as_string::<i64>().value(i)))
            .collect(),
        DataType::Utf8View => (0..n)
            .map(|i| measure(array.as_string_view().value(i)))
            .collect(),
        _ => vec![0; n],
    }
}

/// The rows a call is evaluated on (one when every argument is a scalar: the call is
/// evaluated once for the batch) and its arguments as arrays of that many rows.
fn call_arrays(args: &[ColumnarValue], rows: usize) -> Result<(usize, Vec<ArrayRef>)> {
    let rows = if args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_))) {
        1
    } else {
        rows
    };
    let arrays = args
        .iter()
        .map(|a| a.to_array(rows))
        .collect::<Result<Vec<_>>>()?;
    Ok((rows, arrays))
}

/// Each value as an i64 (NULL or not a number: None).
fn ints(array: &ArrayRef) -> Result<Vec<Option<i64>>> {
    let cast = cast(array, &DataType::Int64)?;
    let values = cast.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
    Ok((0..values.len())
        .map(|i| values.is_valid(i).then(|| values.value(i)))
        .collect())
}

fn text_at(array: &ArrayRef, i: usize) -> Option<&str> {
    if array.is_null(i) {
        return None;
    }
    match array.data_type() {
        DataType::Utf8 => Some(array.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => Some(array.as_string::<i64>().value(i)),
        DataType::Utf8View => Some(array.as_string_view().value(i)),
        _ => None,
    }
}

/// The bytes one value of `array` at row `i` takes (an upper bound for nested values).
fn value_bytes(array: &ArrayRef, i: usize) -> u128 {
    if let Some(text) = text_at(array, i) {
        return text.len() as u128;
    }
    match array.data_type().primitive_width() {
        Some(width) => width as u128,
        None => array
            .to_data()
            .slice(i, 1)
            .get_slice_memory_size()
            .unwrap_or(usize::MAX) as u128,
    }
}

/// The elements `range`/`generate_series` makes for row `i`: integers, dates or timestamps.
fn range_elements(arrays: &[ArrayRef], i: usize) -> Result<u128> {
    let at = |k: usize| ScalarValue::try_from_array(&arrays[k], i);
    let instant = |v: &ScalarValue| -> Option<i128> {
        const DAY: i128 = 86_400_000_000_000;
        Some(match v {
            ScalarValue::Int64(Some(x)) => *x as i128,
            ScalarValue::Date32(Some(d)) => *d as i128 * DAY,
            ScalarValue::Date64(Some(ms)) => *ms as i128 * 1_000_000,
            ScalarValue::TimestampSecond(Some(t), _) => *t as i128 * 1_000_000_000,
            ScalarValue::TimestampMillisecond(Some(t), _) => *t as i128 * 1_000_000,
            ScalarValue::TimestampMicrosecond(Some(t), _) => *t as i128 * 1_000,
            ScalarValue::TimestampNanosecond(Some(t), _) => *t as i128,
            _ => return None,
        })
    };
    let (start, stop, step) = match arrays.len() {
        1 => (Some(0), instant(&at(0)?), Some(1)),
        2 => (instant(&at(0)?), instant(&at(1)?), Some(1)),
        _ => {
            let step = match at(2)? {
                ScalarValue::Int64(Some(s)) => Some((s as i128).abs()),
                // The shortest a step can be: months of 28 days.
                ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano {
                    months,
                    days,
                    nanoseconds,
                })) => Some(
                    (months as i128).abs() * 28 * 86_400_000_000_000
                        + (days as i128).abs() * 86_400_000_000_000
                        + (nanoseconds as i128).abs(),
                ),
                ScalarValue::IntervalDayTime(Some(v)) => Some(
                    (v.days as i128).abs() * 86_400_000_000_000
                        + (v.milliseconds as i128).abs() * 1_000_000,
                ),
                ScalarValue::IntervalYearMonth(Some(m)) => {
                    Some((m as i128).abs() * 28 * 86_400_000_000_000)
                }
                _ => None,
            };
            (instant(&at(0)?), instant(&at(1)?), step)
        }
    };
    Ok(match (start, stop, step) {
        // A zero step is the function's own error.
        (Some(a), Some(b), Some(s)) if s > 0 => ((b - a).unsigned_abs() / s as u128) + 1,
        _ => 0,
    })
}

/// The bytes `replace(text, from, to)` makes for row `i`, counted without allocating.
fn replaced_bytes(arrays: &[ArrayRef], i: usize) -> u128 {
    let (Some(text), Some(from), Some(to)) = (
        text_at(&arrays[0], i),
        text_at(&arrays[1], i),
        text_at(&arrays[2], i),
    ) else {
        return 0;
    };
    if to.len() <= from.len() {
        return text.len() as u128;
    }
    // An empty pattern matches between every two characters and at both ends.
    let matches = if from.is_empty() {
        text.chars().count() + 1
    } else {
        text.matches(from).count()
    };
    text.len() as u128 + matches as u128 * (to.len() - from.len()) as u128
}

/// What one client statement of `evalsql serve` may grow; every default admits the SQL of
/// common BI drivers and 16 concurrent connections.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeLimitArgs {
    /// Seconds a statement may run (planning, judge calls and sending rows included) before
    /// it ends with SQLSTATE 57014; 0: no limit. A client may lower it for its connection
    /// with SET statement_timeout
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    statement_timeout: u64,
    /// The longest statement text a client may send, in bytes
    #[arg(long, value_name = "BYTES", default_value_t = 1024 * 1024)]
    max_statement_bytes: usize,
    /// The longest protocol message after login, in bytes (before login: 16 KiB)
    #[arg(long, value_name = "BYTES", default_value_t = 16 * 1024 * 1024)]
    max_message_bytes: usize,
    /// The deepest nesting of expressions in a statement (a chain a OR b OR ... counts one
    /// level per operator)
    #[arg(long, value_name = "N", default_value_t = 1_000)]
    max_expression_depth: usize,
    /// The deepest nesting of parentheses (function calls, subqueries, groups) in a statement
    #[arg(long, value_name = "N", default_value_t = 16)]
    max_nesting: usize,
    /// Connections open at once; more are refused with SQLSTATE 53300
    #[arg(long, value_name = "N", default_value_t = 64)]
    max_connections: usize,
    /// Seconds a connection may take from its first byte to logging in; it is closed then
    /// (a connection that never logs in holds a slot until this passes)
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    login_timeout: u64,
    /// Seconds a logged-in session may wait for its next statement outside a transaction
    /// block before it is closed with SQLSTATE 57P05; 0: never
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    idle_timeout: u64,
    /// Connections one user may hold at once; more get SQLSTATE 53300 (default: half of
    /// --max-connections). Operators (--operator-user) are not held to it
    #[arg(long, value_name = "N")]
    max_connections_per_user: Option<usize>,
    /// Connection slots only operators (--operator-user) may take, as PostgreSQL's
    /// superuser_reserved_connections; none are reserved when no operator is named
    #[arg(long, value_name = "N", default_value_t = 3)]
    reserved_connections: usize,
    /// A user (of --users, or EVALSQL_PG_USER) who may take the reserved connection slots;
    /// repeat for several
    #[arg(long, value_name = "NAME")]
    operator_user: Vec<String>,
    /// The most bytes one call of repeat, lpad, rpad, array_repeat, array_resize, range,
    /// generate_series or replace may produce for one batch of rows
    #[arg(long, value_name = "BYTES", default_value_t = 64 * 1024 * 1024)]
    max_function_bytes: usize,
    /// The most heap memory the server may hold before client statements that grow strings,
    /// lists or records are refused (SQLSTATE 53200); default: three quarters of the
    /// machine's memory
    #[arg(long, value_name = "BYTES")]
    max_process_memory: Option<usize>,
}

impl ServeLimitArgs {
    pub fn to_limits(&self) -> crate::serve::ServeLimits {
        crate::serve::ServeLimits {
            statement_timeout: (self.statement_timeout > 0)
                .then(|| std::time::Duration::from_secs(self.statement_timeout)),
            max_statement_bytes: self.max_statement_bytes,
            max_message_bytes: self.max_message_bytes,
            max_expression_depth: self.max_expression_depth,
            max_nesting: self.max_nesting,
            max_connections: self.max_connections.max(1),
            login_timeout: std::time::Duration::from_secs(self.login_timeout.max(1)),
            idle_timeout: (self.idle_timeout > 0)
                .then(|| std::time::Duration::from_secs(self.idle_timeout)),
            max_connections_per_user: self
                .max_connections_per_user
                .unwrap_or(self.max_connections / 2)
                .max(1),
            reserved_connections: self
                .reserved_connections
                .min(self.max_connections.saturating_sub(1)),
            operator_users: self.operator_user.clone(),
            max_function_bytes: self.max_function_bytes,
            max_process_memory: self
                .max_process_memory
                .unwrap_or_else(crate::serve::memory::default_limit),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_infix_chains() {
        let parse = |sql: &str| {
            datafusion::sql::sqlparser::parser::Parser::parse_sql(
                &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
                sql,
            )
            .unwrap()
            .remove(0)
        };
        let chain = format!("SELECT 1{}", "+1".repeat(99));
        assert_eq!(expression_depth(&parse(&chain)), 100);
        assert_eq!(expression_depth(&parse("SELECT 1")), 1);
        let limits = ServeLimits {
            max_expression_depth: 50,
            ..ServeLimits::default()
        };
        assert!(check_expression_depth(&parse(&chain), &limits).is_err());
    }

    #[test]
    fn nesting_counts_parentheses_outside_strings_and_comments() {
        let limits = ServeLimits {
            max_nesting: 3,
            ..ServeLimits::default()
        };
        let nesting = |sql: &str| {
            use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
            use datafusion::sql::sqlparser::tokenizer::Tokenizer;
            let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
                .tokenize_with_location()
                .unwrap();
            check_nesting(&tokens, &limits)
        };
        assert!(nesting("SELECT abs(abs(abs(1)))").is_ok());
        assert!(nesting("SELECT abs(abs(abs(abs(1))))").is_err());
        assert!(nesting("SELECT '((((((' -- ((((((\n").is_ok());
        assert!(nesting("SELECT 'a''((((((', E'\\'(((((('").is_ok());
        assert!(nesting("SELECT (SELECT (SELECT (SELECT (SELECT 1))))").is_err());
    }

    #[test]
    fn bounded_settings() {
        let server = |_: &str| Some("2".to_string());
        assert!(check_bounded_setting("datafusion.execution.batch_size", "65536", &server).is_ok());
        assert!(
            check_bounded_setting("datafusion.execution.batch_size", "65537", &server).is_err()
        );
        assert!(check_bounded_setting("datafusion.execution.batch_size", "0", &server).is_err());
        assert!(
            check_bounded_setting("datafusion.execution.target_partitions", "2", &server).is_ok()
        );
        assert!(
            check_bounded_setting("datafusion.execution.target_partitions", "'1000'", &server)
                .is_err()
        );
        assert!(check_bounded_setting("evalsql.judge.model", "x", &server).is_ok());
    }

    #[test]
    fn replace_counts_without_allocating() {
        let arrays: Vec<ArrayRef> = ["aaaa", "a", "bbb"]
            .iter()
            .map(|s| Arc::new(datafusion::arrow::array::StringArray::from(vec![*s])) as ArrayRef)
            .collect();
        assert_eq!(replaced_bytes(&arrays, 0), 12);
    }
}
