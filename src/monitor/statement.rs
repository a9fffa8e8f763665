//! The monitor statements, parsed from sqlparser's tokens (never matched as text):
//!
//! ```sql
//! CREATE [OR REPLACE] MONITOR name
//!   EVERY '1 minute' [AFTER IDLE '30 seconds'] [SAMPLE 10 PERCENT] [BUDGET 5 USD PER DAY]
//! AS SELECT ...;
//! SHOW MONITORS;
//! ALTER MONITOR name PAUSE | RESUME | SET BUDGET x USD PER DAY | SET BUDGET NONE;
//! DROP MONITOR [IF EXISTS] name;
//! ```
//!
//! [`parse`] answers `None` for every other statement, which then goes on as SQL.

use std::time::Duration;

use datafusion::arrow::compute::kernels::cast_utils::parse_interval_month_day_nano;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

/// How long a trace waits for more spans before it counts as complete, unless said.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(30);

/// A monitor as defined by `CREATE MONITOR`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Definition {
    pub name: String,
    /// How often it runs.
    #[serde(with = "millis")]
    pub every: Duration,
    /// A trace is complete once no span of it arrived for this long.
    #[serde(with = "millis")]
    pub after_idle: Duration,
    /// The share of complete traces scored, in (0, 1]; 1 without `SAMPLE`.
    pub sample: f64,
    /// Judge spend of this monitor per UTC day, if bounded.
    pub budget_usd_per_day: Option<f64>,
    /// The query, as sqlparser prints what it parsed.
    pub query: String,
}

/// A statement about monitors.
#[derive(Debug, Clone, PartialEq)]
pub enum MonitorStatement {
    Create {
        or_replace: bool,
        definition: Definition,
    },
    Show,
    Alter {
        name: String,
        paused: bool,
    },
    /// `ALTER MONITOR name SET BUDGET x USD PER DAY | NONE`: the same version, another
    /// budget (what a run writes does not depend on it).
    SetBudget {
        name: String,
        budget: Option<f64>,
    },
    Drop {
        name: String,
        if_exists: bool,
    },
    CreateAlert {
        or_replace: bool,
        alert: AlertDefinition,
    },
    ShowAlerts,
    DropAlert {
        name: String,
        if_exists: bool,
    },
}

/// An alert as defined by `CREATE ALERT`:
///
/// ```sql
/// CREATE [OR REPLACE] ALERT name ON monitor
///   WHEN mean_cs(relevance, 1, 5)['upper'] < 3.5
///   OVER '1 hour' [GROUP BY model, ...]
///   [NOTIFY 'https://hooks.example/evalsql' [REPEAT '1 hour']];
/// ```
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AlertDefinition {
    pub name: String,
    pub monitor: String,
    /// The condition, an aggregate over the monitor's rows in the window, as sqlparser
    /// prints it (with `mean_cs` ordered by arrival where it named no order).
    pub condition: String,
    /// What the notification reports as the value: the left side of a comparison.
    pub value: Option<String>,
    #[serde(with = "millis")]
    pub window: Duration,
    pub group_by: Vec<String>,
    pub notify: Option<String>,
    /// How often a firing alert is notified again (never without it).
    pub repeat: Option<Duration>,
}

impl MonitorStatement {
    /// Whether the statement changes something (needs `--allow-monitors` over the wire).
    pub fn changes(&self) -> bool {
        !matches!(self, MonitorStatement::Show | MonitorStatement::ShowAlerts)
    }
}

/// `sql`, one statement, if it is about monitors; an error naming the problem when it is
/// one but malformed.
pub fn parse(sql: &str) -> Result<Option<MonitorStatement>, String> {
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize_with_location() else {
        return Ok(None);
    };
    parse_tokens(&tokens)
}

/// As [`parse`], from the statement's tokens (sqlparser's PostgreSQL tokenizer's); they are
/// copied only when the first word is one a monitor statement starts with.
pub fn parse_tokens(tokens: &[TokenWithSpan]) -> Result<Option<MonitorStatement>, String> {
    let first = tokens
        .iter()
        .find(|t| !matches!(t.token, Token::Whitespace(_)));
    let starts = matches!(
        first.map(|t| &t.token),
        Some(Token::Word(w)) if w.quote_style.is_none()
            && ["CREATE", "SHOW", "ALTER", "DROP"].iter().any(|k| w.value.eq_ignore_ascii_case(k))
    );
    if !starts {
        return Ok(None);
    }
    let dialect = PostgreSqlDialect {};
    let mut p = Parser::new(&dialect).with_tokens_with_locations(tokens.to_vec());
    let statement = if word(&mut p, "CREATE") {
        let or_replace = word(&mut p, "OR");
        if or_replace && !word(&mut p, "REPLACE") {
            return Ok(None);
        }
        if word(&mut p, "ALERT") {
            MonitorStatement::CreateAlert {
                or_replace,
                alert: create_alert(&mut p).map_err(|e| format!("CREATE ALERT: {e}"))?,
            }
        } else if word(&mut p, "MONITOR") {
            MonitorStatement::Create {
                or_replace,
                definition: create(&mut p).map_err(|e| format!("CREATE MONITOR: {e}"))?,
            }
        } else {
            return Ok(None);
        }
    } else if word(&mut p, "SHOW") {
        if word(&mut p, "MONITORS") {
            MonitorStatement::Show
        } else if word(&mut p, "ALERTS") {
            MonitorStatement::ShowAlerts
        } else {
            return Ok(None);
        }
    } else if word(&mut p, "ALTER") {
        if !word(&mut p, "MONITOR") {
            return Ok(None);
        }
        let name = name(&mut p).map_err(|e| format!("ALTER MONITOR: {e}"))?;
        if word(&mut p, "PAUSE") {
            MonitorStatement::Alter { name, paused: true }
        } else if word(&mut p, "RESUME") {
            MonitorStatement::Alter {
                name,
                paused: false,
            }
        } else if word(&mut p, "SET") {
            if !word(&mut p, "BUDGET") {
                return Err(format!("ALTER MONITOR {name} SET: expected BUDGET"));
            }
            let budget = if word(&mut p, "NONE") {
                None
            } else {
                Some(budget(&mut p).map_err(|e| format!("ALTER MONITOR {name}: {e}"))?)
            };
            MonitorStatement::SetBudget { name, budget }
        } else {
            return Err(format!(
                "ALTER MONITOR {name}: expected PAUSE, RESUME or SET BUDGET, found {}",
                p.peek_token()
            ));
        }
    } else if word(&mut p, "DROP") {
        let alert = word(&mut p, "ALERT");
        if !alert && !word(&mut p, "MONITOR") {
            return Ok(None);
        }
        let what = if alert { "DROP ALERT" } else { "DROP MONITOR" };
        let if_exists = word(&mut p, "IF");
        if if_exists && !word(&mut p, "EXISTS") {
            return Err(format!("{what} IF: expected EXISTS"));
        }
        let name = name(&mut p).map_err(|e| format!("{what}: {e}"))?;
        if alert {
            MonitorStatement::DropAlert { name, if_exists }
        } else {
            MonitorStatement::Drop { name, if_exists }
        }
    } else {
        return Ok(None);
    };
    while p.consume_token(&Token::SemiColon) {}
    match p.peek_token().token {
        Token::EOF => Ok(Some(statement)),
        other => Err(format!("unexpected {other} after the monitor statement")),
    }
}

/// The statements of a script, as text: cut at the semicolons sqlparser's tokenizer finds
/// outside parentheses (so not inside strings, comments or dollar quotes); a script it
/// cannot tokenize is one statement. Empty statements are left out.
pub fn split(sql: &str) -> Vec<&str> {
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize_with_location() else {
        return vec![sql];
    };
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(sql.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    // A location (1-based line, and column in characters) as a byte offset.
    let offset = |line: u64, column: u64| -> usize {
        let Some(&start) = line_starts.get((line as usize).saturating_sub(1)) else {
            return sql.len();
        };
        sql[start..]
            .char_indices()
            .nth((column as usize).saturating_sub(1))
            .map_or(sql.len(), |(i, _)| start + i)
    };
    let (mut out, mut depth, mut from) = (Vec::new(), 0i64, 0usize);
    for t in &tokens {
        match t.token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            Token::SemiColon if depth <= 0 => {
                let at = offset(t.span.start.line, t.span.start.column).max(from);
                out.push(&sql[from..at]);
                from = (at + 1).min(sql.len());
            }
            _ => {}
        }
    }
    out.push(&sql[from..]);
    out.retain(|s| !s.trim().is_empty());
    out
}

/// Consumes the next token if it is the word `w` (a keyword or not, any case).
fn word(p: &mut Parser, w: &str) -> bool {
    match &p.peek_token().token {
        Token::Word(x) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w) => {
            p.next_token();
            true
        }
        _ => false,
    }
}

/// A monitor's name: one identifier, as PostgreSQL folds it (lower case unless quoted), of
/// letters, digits and `_` (it names a table and a directory).
fn name(p: &mut Parser) -> Result<String, String> {
    let ident = p.parse_identifier().map_err(text)?;
    let name = match ident.quote_style {
        Some(_) => ident.value,
        None => ident.value.to_lowercase(),
    };
    if !valid_name(&name) {
        return Err(format!(
            "the name {name:?} must be letters, digits and _ (not first), at most 64"
        ));
    }
    Ok(name)
}

/// Whether `name` may name a monitor: letters, digits and `_`, not a digit first, at most
/// 64 (it is a table's name and a directory's).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
}

fn text(e: ParserError) -> String {
    e.to_string()
        .trim_start_matches("sql parser error: ")
        .to_string()
}

fn create(p: &mut Parser) -> Result<Definition, String> {
    let name = name(p)?;
    let (mut every, mut after_idle, mut sample, mut budget) = (None, None, None, None);
    loop {
        if word(p, "EVERY") {
            every = Some(duration(p, "EVERY")?);
        } else if word(p, "AFTER") {
            if !word(p, "IDLE") {
                return Err(format!(
                    "expected IDLE after AFTER, found {}",
                    p.peek_token()
                ));
            }
            after_idle = Some(duration(p, "AFTER IDLE")?);
        } else if word(p, "SAMPLE") {
            let percent = number(p, "SAMPLE")?;
            if !word(p, "PERCENT") {
                return Err(format!("expected PERCENT after SAMPLE {percent}"));
            }
            if !(percent > 0.0 && percent <= 100.0) {
                return Err(format!(
                    "SAMPLE {percent} PERCENT: the sample must be over 0 and at most 100 percent"
                ));
            }
            sample = Some(percent / 100.0);
        } else if word(p, "BUDGET") {
            budget = Some(self::budget(p)?);
        } else if word(p, "AS") {
            break;
        } else {
            return Err(format!(
                "expected EVERY, AFTER IDLE, SAMPLE, BUDGET or AS, found {}",
                p.peek_token()
            ));
        }
    }
    let every = every.ok_or("EVERY is required: how often the monitor runs")?;
    let query = p.parse_query().map_err(text)?;
    Ok(Definition {
        name,
        every,
        after_idle: after_idle.unwrap_or(DEFAULT_IDLE),
        sample: sample.unwrap_or(1.0),
        budget_usd_per_day: budget,
        query: query.to_string(),
    })
}

fn create_alert(p: &mut Parser) -> Result<AlertDefinition, String> {
    use datafusion::sql::sqlparser::ast::{BinaryOperator, Expr};
    let name = name(p)?;
    if !word(p, "ON") {
        return Err(format!("expected ON <monitor> after ALERT {name}"));
    }
    let monitor = self::name(p)?;
    if !word(p, "WHEN") {
        return Err(format!(
            "expected WHEN <condition>, found {}",
            p.peek_token()
        ));
    }
    let mut condition = p.parse_expr().map_err(text)?;
    order_mean_cs_by_arrival(&mut condition);
    let value = match &condition {
        Expr::BinaryOp { left, op, .. }
            if matches!(
                op,
                BinaryOperator::Lt
                    | BinaryOperator::LtEq
                    | BinaryOperator::Gt
                    | BinaryOperator::GtEq
                    | BinaryOperator::Eq
                    | BinaryOperator::NotEq
            ) =>
        {
            Some(left.to_string())
        }
        _ => None,
    };
    let (mut window, mut group_by, mut notify, mut repeat) = (None, Vec::new(), None, None);
    loop {
        if word(p, "OVER") {
            window = Some(duration(p, "OVER")?);
        } else if word(p, "GROUP") {
            if !word(p, "BY") {
                return Err("expected BY after GROUP".into());
            }
            loop {
                let column = p.parse_identifier().map_err(text)?;
                group_by.push(match column.quote_style {
                    Some(_) => column.value,
                    None => column.value.to_lowercase(),
                });
                if !p.consume_token(&Token::Comma) {
                    break;
                }
            }
        } else if word(p, "NOTIFY") {
            notify = Some(
                p.parse_literal_string()
                    .map_err(|_| "NOTIFY takes a quoted URL".to_string())?,
            );
        } else if word(p, "REPEAT") {
            repeat = Some(duration(p, "REPEAT")?);
        } else {
            break;
        }
    }
    let window = window.ok_or("OVER is required: the trailing window the condition looks at")?;
    if repeat.is_some() && notify.is_none() {
        return Err("REPEAT says how often to NOTIFY again; there is no NOTIFY".into());
    }
    Ok(AlertDefinition {
        name,
        monitor,
        condition: condition.to_string(),
        value,
        window,
        group_by,
        notify,
        repeat,
    })
}

/// Gives every `mean_cs(...)` call without an `ORDER BY` of its own the order of arrival,
/// `ORDER BY run_at, trace_id`: a confidence sequence is about a stream in its order.
fn order_mean_cs_by_arrival(e: &mut datafusion::sql::sqlparser::ast::Expr) {
    use datafusion::sql::sqlparser::ast::{
        Expr, FunctionArgumentClause, FunctionArguments, Ident, OrderByExpr, visit_expressions_mut,
    };
    let _ = visit_expressions_mut(e, |e| {
        if let Expr::Function(f) = e
            && f.name.to_string().eq_ignore_ascii_case("mean_cs")
            && let FunctionArguments::List(list) = &mut f.args
            && !list
                .clauses
                .iter()
                .any(|c| matches!(c, FunctionArgumentClause::OrderBy(_)))
        {
            list.clauses.push(FunctionArgumentClause::OrderBy(vec![
                OrderByExpr::from(Ident::new("run_at")),
                OrderByExpr::from(Ident::new("trace_id")),
            ]));
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// `x USD PER DAY`, after `BUDGET`.
fn budget(p: &mut Parser) -> Result<f64, String> {
    let usd = number(p, "BUDGET")?;
    if !(word(p, "USD") && word(p, "PER") && word(p, "DAY")) {
        return Err(format!("expected BUDGET {usd} USD PER DAY"));
    }
    if !(usd >= 0.0 && usd.is_finite()) {
        return Err(format!(
            "BUDGET {usd} USD PER DAY: a budget cannot be below 0"
        ));
    }
    Ok(usd)
}

/// A number, possibly negative (so that a negative budget is told as such).
fn number(p: &mut Parser, what: &str) -> Result<f64, String> {
    let negative = p.consume_token(&Token::Minus);
    let token = p.next_token();
    let Token::Number(n, _) = &token.token else {
        return Err(format!("{what} takes a number, found {token}"));
    };
    let n: f64 = n
        .parse()
        .map_err(|_| format!("{what}: {n} is not a number"))?;
    Ok(if negative { -n } else { n })
}

/// A quoted interval, `'1 minute'`, `'30 seconds'`, as SQL reads `INTERVAL '...'`: at least
/// one second, and no months (whose length varies).
fn duration(p: &mut Parser, what: &str) -> Result<Duration, String> {
    let s = p
        .parse_literal_string()
        .map_err(|_| format!("{what} takes a quoted interval such as '1 minute'"))?;
    let i = parse_interval_month_day_nano(&s).map_err(|e| format!("{what} '{s}': {e}"))?;
    if i.months != 0 {
        return Err(format!("{what} '{s}': months vary in length; say days"));
    }
    let nanos = i64::from(i.days) as i128 * 86_400_000_000_000 + i.nanoseconds as i128;
    if nanos < 1_000_000_000 {
        return Err(format!("{what} '{s}': must be at least 1 second"));
    }
    Ok(Duration::from_nanos(nanos.min(u64::MAX as i128) as u64))
}

/// Durations kept as milliseconds in a definition's JSON.
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alerts_parse_with_their_order_and_value() {
        let sql = "CREATE ALERT relevance_drop ON answer_quality \
                   WHEN mean_cs(relevance, 1, 5)['upper'] < 3.5 \
                   OVER '1 hour' GROUP BY model, \"Region\" \
                   NOTIFY 'https://hooks.example/evalsql' REPEAT '1 hour';";
        let Ok(Some(MonitorStatement::CreateAlert { or_replace, alert })) = parse(sql) else {
            panic!("{:?}", parse(sql));
        };
        assert!(!or_replace);
        assert_eq!(alert.monitor, "answer_quality");
        assert_eq!(
            alert.condition,
            "mean_cs(relevance, 1, 5 ORDER BY run_at, trace_id)['upper'] < 3.5"
        );
        assert_eq!(
            alert.value.as_deref(),
            Some("mean_cs(relevance, 1, 5 ORDER BY run_at, trace_id)['upper']")
        );
        assert_eq!(alert.window, Duration::from_secs(3600));
        assert_eq!(alert.group_by, ["model", "Region"]);
        assert_eq!(alert.repeat, Some(Duration::from_secs(3600)));
        // An order of its own is kept.
        let Ok(Some(MonitorStatement::CreateAlert { alert, .. })) = parse(
            "CREATE OR REPLACE ALERT a ON m WHEN mean_cs(x, 0, 1 ORDER BY t) IS NULL OVER '1 day'",
        ) else {
            panic!()
        };
        assert_eq!(alert.condition, "mean_cs(x, 0, 1 ORDER BY t) IS NULL");
        assert_eq!(alert.value, None);
        for (sql, says) in [
            ("CREATE ALERT a ON m WHEN avg(x) < 1", "OVER is required"),
            (
                "CREATE ALERT a WHEN avg(x) < 1 OVER '1 hour'",
                "expected ON",
            ),
            (
                "CREATE ALERT a ON m WHEN avg(x) < 1 OVER '1 hour' REPEAT '1 hour'",
                "no NOTIFY",
            ),
            (
                "CREATE ALERT a ON m WHEN avg(x) < 1 OVER '0 seconds'",
                "at least 1 second",
            ),
        ] {
            let e = parse(sql).unwrap_err();
            assert!(e.contains(says), "{sql}: {e}");
        }
        assert_eq!(parse("SHOW ALERTS"), Ok(Some(MonitorStatement::ShowAlerts)));
        assert_eq!(
            parse("DROP ALERT IF EXISTS a"),
            Ok(Some(MonitorStatement::DropAlert {
                name: "a".into(),
                if_exists: true
            }))
        );
    }

    #[test]
    fn scripts_split_at_their_statements() {
        let script = "CREATE TABLE t AS SELECT 'a;b' AS x; -- c;\nCREATE MONITOR m EVERY '2 seconds' \
                      AS SELECT trace_id FROM spans WHERE name = 'é;' ;\n\nSELECT (1);";
        let parts = split(script);
        assert_eq!(parts.len(), 3, "{parts:?}");
        assert_eq!(parts[0], "CREATE TABLE t AS SELECT 'a;b' AS x");
        assert!(
            parts[1].trim_start().starts_with("-- c;\nCREATE MONITOR m"),
            "{parts:?}"
        );
        assert!(parts[1].trim_end().ends_with("'é;'"), "{parts:?}");
        assert!(matches!(
            parse(parts[1]),
            Ok(Some(MonitorStatement::Create { .. }))
        ));
        assert_eq!(parts[2].trim(), "SELECT (1)");
    }

    #[test]
    fn the_example_parses_and_other_statements_pass_through() {
        let sql = "CREATE MONITOR answer_quality
              EVERY '1 minute' AFTER IDLE '30 seconds' SAMPLE 10 PERCENT BUDGET 5 USD PER DAY
            AS SELECT trace_id, model, relevance(input_text, output_text) AS relevance
               FROM spans WHERE operation_name = 'chat';";
        let Some(MonitorStatement::Create {
            or_replace: false,
            definition: d,
        }) = parse(sql).unwrap()
        else {
            panic!("{:?}", parse(sql));
        };
        assert_eq!(d.name, "answer_quality");
        assert_eq!(d.every, Duration::from_secs(60));
        assert_eq!(d.after_idle, Duration::from_secs(30));
        assert_eq!(d.sample, 0.1);
        assert_eq!(d.budget_usd_per_day, Some(5.0));
        assert_eq!(
            d.query,
            "SELECT trace_id, model, relevance(input_text, output_text) AS relevance \
             FROM spans WHERE operation_name = 'chat'"
        );
        let again: Definition = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
        assert_eq!(again, d);
        assert_eq!(
            parse("show monitors").unwrap(),
            Some(MonitorStatement::Show)
        );
        assert_eq!(
            parse("ALTER MONITOR Answer_Quality PAUSE").unwrap(),
            Some(MonitorStatement::Alter {
                name: "answer_quality".into(),
                paused: true
            })
        );
        assert_eq!(
            parse("DROP MONITOR IF EXISTS q").unwrap(),
            Some(MonitorStatement::Drop {
                name: "q".into(),
                if_exists: true
            })
        );
        for other in [
            "SELECT 1",
            "CREATE TABLE t (a int)",
            "SHOW ALL",
            "DROP TABLE monitor",
            "ALTER TABLE t RENAME TO u",
            "create or replace view v as select 1",
            "'unterminated",
        ] {
            assert_eq!(parse(other).unwrap(), None, "{other}");
        }
    }

    #[test]
    fn bad_definitions_say_what_is_wrong() {
        let q = "AS SELECT trace_id FROM spans";
        for (sql, says) in [
            (
                format!("CREATE MONITOR m EVERY '0 seconds' {q}"),
                "at least 1 second",
            ),
            (
                format!("CREATE MONITOR m EVERY '1 month' {q}"),
                "months vary",
            ),
            (format!("CREATE MONITOR m EVERY 'soon' {q}"), "EVERY 'soon'"),
            (format!("CREATE MONITOR m EVERY 5 {q}"), "quoted interval"),
            (format!("CREATE MONITOR m {q}"), "EVERY is required"),
            (
                format!("CREATE MONITOR m EVERY '1 minute' SAMPLE 120 PERCENT {q}"),
                "at most 100 percent",
            ),
            (
                format!("CREATE MONITOR m EVERY '1 minute' SAMPLE 0 PERCENT {q}"),
                "over 0",
            ),
            (
                format!("CREATE MONITOR m EVERY '1 minute' BUDGET -1 USD PER DAY {q}"),
                "cannot be below 0",
            ),
            (
                format!("CREATE MONITOR m EVERY '1 minute' BUDGET 5 EUR PER DAY {q}"),
                "USD PER DAY",
            ),
            (
                format!("CREATE MONITOR \"a-b\" EVERY '1 minute' {q}"),
                "letters, digits",
            ),
            (
                "CREATE MONITOR m EVERY '1 minute' AS".into(),
                "CREATE MONITOR",
            ),
            (
                "CREATE MONITOR m EVERY '1 minute' LIMIT 5".into(),
                "expected EVERY",
            ),
            ("ALTER MONITOR m STOP".into(), "PAUSE, RESUME or SET BUDGET"),
            ("SHOW MONITORS now".into(), "unexpected"),
        ] {
            let e = parse(&sql).expect_err(&sql);
            assert!(e.contains(says), "{sql}: {e}");
        }
    }
}
