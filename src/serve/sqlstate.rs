//! PostgreSQL's error codes for the errors DataFusion and the parser raise.
//!
//! pgwire sends every error it does not know (DataFusion's, the parser's) as `XX000`
//! (internal_error). Drivers and BI tools branch on the code — an unknown table is
//! `42P01`, a syntax error `42601`, a cancel `57014` — so each error is classified here
//! once, on its way to the client; the message text stays what it was.

use datafusion::common::{DataFusionError, SchemaError};
use datafusion::sql::sqlparser::parser::ParserError;
use datafusion_postgres::pgwire;
use evalsql_udfs::interrupt::Interrupted;
use pgwire::error::{ErrorInfo, PgWireError};

/// The error with PostgreSQL's SQLSTATE for what it says; errors that already carry a
/// code keep it.
pub fn classify(error: PgWireError) -> PgWireError {
    let PgWireError::ApiError(inner) = &error else {
        return error;
    };
    // A statement its checkpoints stopped: PostgreSQL's words alone, as for a stop noticed
    // while waiting.
    if let Some(stop) = interrupted(inner.as_ref()) {
        return PgWireError::UserError(Box::new(ErrorInfo::new(
            "ERROR".into(),
            stop.code.into(),
            stop.message.into(),
        )));
    }
    let code = code_of(inner.as_ref());
    if code == "XX000" {
        return error;
    }
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".into(),
        code.into(),
        error.to_string(),
    )))
}

/// The error a failed login gets: PostgreSQL's own words with the name the client gave
/// (tools match this text), identical for a wrong password and an unknown user.
pub fn login_failed(user: &str) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".into(),
        "28P01".into(), // invalid_password
        format!("password authentication failed for user \"{user}\""),
    )))
}

/// The stop of a statement its checkpoints ended, anywhere in `error`'s chain of sources.
fn interrupted<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a Interrupted> {
    std::iter::successors(Some(error), |e| e.source()).find_map(|e| e.downcast_ref())
}

fn code_of(error: &(dyn std::error::Error + 'static)) -> &'static str {
    if error.downcast_ref::<ParserError>().is_some() {
        return "42601"; // syntax_error
    }
    match error.downcast_ref::<DataFusionError>() {
        Some(e) => datafusion_code(e),
        None => "XX000",
    }
}

fn datafusion_code(error: &DataFusionError) -> &'static str {
    use DataFusionError as E;
    match error {
        E::Context(_, inner) => datafusion_code(inner),
        E::Shared(inner) => datafusion_code(inner),
        E::Diagnostic(_, inner) => datafusion_code(inner),
        E::Collection(errors) => errors.first().map_or("XX000", datafusion_code),
        E::External(inner) => code_of(inner.as_ref()),
        E::SQL(..) => "42601", // syntax_error
        E::SchemaError(e, _) => match e.as_ref() {
            SchemaError::FieldNotFound { .. } => "42703", // undefined_column
            SchemaError::AmbiguousReference { .. } => "42702", // ambiguous_column
            SchemaError::DuplicateQualifiedField { .. }
            | SchemaError::DuplicateUnqualifiedField { .. } => "42701", // duplicate_column
        },
        E::Plan(message) => plan_code(message),
        E::NotImplemented(_) => "0A000",     // feature_not_supported
        E::ResourcesExhausted(_) => "53200", // out_of_memory
        E::IoError(_) | E::ObjectStore(_) => "58030", // io_error
        E::ArrowError(e, _) => arrow_code(e),
        E::Configuration(message) if message.contains("not found") => "42704", // undefined_object
        E::Configuration(_) => "22023", // invalid_parameter_value
        E::Execution(message) => execution_code(message),
        _ => "XX000",
    }
}

fn plan_code(message: &str) -> &'static str {
    let lower = message.to_lowercase();
    if lower.contains("table") && (lower.contains("not found") || lower.contains("does not exist"))
    {
        "42P01" // undefined_table
    } else if lower.contains("invalid function")
        || lower.contains("no function matches")
        || (lower.contains("function") && lower.contains("not found"))
    {
        "42883" // undefined_function
    } else if lower.contains("cannot coerce") || lower.contains("cannot infer common") {
        "42804" // datatype_mismatch
    } else if lower.contains("already exists") {
        "42P07" // duplicate_table
    } else {
        "42000" // syntax_error_or_access_rule_violation
    }
}

fn arrow_code(error: &datafusion::arrow::error::ArrowError) -> &'static str {
    use datafusion::arrow::error::ArrowError as A;
    match error {
        A::DivideByZero => "22012",                    // division_by_zero
        A::CastError(_) | A::ParseError(_) => "22P02", // invalid_text_representation
        A::ArithmeticOverflow(_) => "22003",           // numeric_value_out_of_range
        A::MemoryError(_) => "53200",                  // out_of_memory
        A::IoError(..) => "58030",                     // io_error
        _ => "XX000",
    }
}

fn execution_code(message: &str) -> &'static str {
    let lower = message.to_lowercase();
    if lower.contains("divide by zero") || lower.contains("division by zero") {
        "22012"
    } else if lower.contains("cast error") || lower.contains("cannot cast") {
        "22P02"
    } else if lower.contains("overflow") {
        "22003"
    } else if lower.contains("unrecognized configuration parameter") {
        "42704" // undefined_object: current_setting('no_such_setting') inside a query
    } else {
        "XX000"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn code(sql: &str) -> String {
        let ctx = SessionContext::new();
        let error = match ctx.sql(sql).await {
            Ok(df) => df.collect().await.err().expect("an error"),
            Err(e) => e,
        };
        match classify(PgWireError::ApiError(Box::new(error))) {
            PgWireError::UserError(info) => info.code,
            _ => "XX000".into(),
        }
    }

    #[tokio::test]
    async fn errors_get_postgresqls_codes() {
        assert_eq!(code("SELECT * FROM no_such_table").await, "42P01");
        assert_eq!(code("SELECT no_such_function(1)").await, "42883");
        assert_eq!(
            code("SELECT no_such_column FROM (SELECT 1 AS a)").await,
            "42703"
        );
        assert_eq!(code("SELEC 1").await, "42601");
        assert_eq!(code("SELECT 1/0").await, "22012");
        assert_eq!(code("SELECT CAST('x' AS INT)").await, "22P02");
        let unknown_setting = DataFusionError::Execution(
            "current_setting(): unrecognized configuration parameter \"nope\"".into(),
        );
        assert!(matches!(
            classify(PgWireError::ApiError(Box::new(unknown_setting))),
            PgWireError::UserError(i) if i.code == "42704"
        ));
    }

    #[test]
    fn parser_errors_are_syntax_errors() {
        let e = PgWireError::ApiError(Box::new(ParserError::ParserError("x".into())));
        assert!(matches!(classify(e), PgWireError::UserError(i) if i.code == "42601"));
    }
}
