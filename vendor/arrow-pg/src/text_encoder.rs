//! PostgreSQL's text format for records and arrays.
//!
//! A struct is written as PostgreSQL's `record_out` writes a row value and a list as its
//! `array_out` writes an array: a NULL field of a record is nothing at all (`(1,f,)`), a NULL
//! element of an array is `NULL` (`{a,NULL}`), a field or element is double-quoted exactly when
//! PostgreSQL quotes it, and each one is in its own type's text form (a float8 `1` as `1`,
//! `Infinity`, booleans `t` / `f`, timestamps as PostgreSQL prints them), nested to any depth
//! (arrays of records, records of arrays and records). The binary format is not written here.

use std::error::Error;
use std::fmt::Write;
use std::str::FromStr;
use std::sync::Arc;

#[cfg(not(feature = "datafusion"))]
use arrow::{
    array::{timezone::Tz, *},
    datatypes::*,
    temporal_conversions::{as_date, as_time},
};
use bytes::{BufMut, BytesMut};
use chrono::{DateTime, Datelike, FixedOffset, NaiveDate, NaiveDateTime, TimeZone, Timelike, Utc};
#[cfg(feature = "datafusion")]
use datafusion::arrow::{
    array::{timezone::Tz, *},
    datatypes::*,
    temporal_conversions::{as_date, as_time},
};
use pg_interval::Interval as PgInterval;
use pgwire::api::results::FieldInfo;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::types::ToSqlText;
use pgwire::types::format::FormatOptions;
use postgres_types::{IsNull, ToSql, Type, to_sql_checked};

use crate::encoder::Encoder;
use crate::error::ToSqlError;

/// Encodes row `idx` of a struct or list column in PostgreSQL's text format.
pub(crate) fn encode_text<T: Encoder>(
    encoder: &mut T,
    arr: &Arc<dyn Array>,
    idx: usize,
    pg_field: &FieldInfo,
) -> PgWireResult<()> {
    let mut text = String::new();
    if write_value(arr.as_ref(), idx, pg_field.format_options(), &mut text)? {
        encoder.encode_field(&Some(PgText(text)), pg_field)
    } else {
        encoder.encode_field(&None::<PgText>, pg_field)
    }
}

/// The text of a value, complete (quoted and escaped already), sent as it is.
#[derive(Debug)]
struct PgText(String);

impl ToSqlText for PgText {
    fn to_sql_text(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
        _format_options: &FormatOptions,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        out.put_slice(self.0.as_bytes());
        Ok(IsNull::No)
    }
}

impl ToSql for PgText {
    fn to_sql(
        &self,
        ty: &Type,
        _out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        Err(format!("the text form of a {ty} value cannot be sent in binary format").into())
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

fn error(message: String) -> PgWireError {
    PgWireError::ApiError(ToSqlError::from(message))
}

/// Appends the text of element `idx` of `arr` to `out`, and says whether it is not NULL
/// (nothing is written for a NULL).
fn write_value(
    arr: &dyn Array,
    idx: usize,
    options: &FormatOptions,
    out: &mut String,
) -> PgWireResult<bool> {
    if arr.is_null(idx) || arr.data_type() == &DataType::Null {
        return Ok(false);
    }
    let extra = options.extra_float_digits;
    match arr.data_type() {
        DataType::Boolean => out.push(if arr.as_boolean().value(idx) {
            't'
        } else {
            'f'
        }),
        DataType::Int8 => push(out, arr.as_primitive::<Int8Type>().value(idx)),
        DataType::Int16 => push(out, arr.as_primitive::<Int16Type>().value(idx)),
        DataType::Int32 => push(out, arr.as_primitive::<Int32Type>().value(idx)),
        DataType::Int64 => push(out, arr.as_primitive::<Int64Type>().value(idx)),
        DataType::UInt8 => push(out, arr.as_primitive::<UInt8Type>().value(idx)),
        DataType::UInt16 => push(out, arr.as_primitive::<UInt16Type>().value(idx)),
        DataType::UInt32 => push(out, arr.as_primitive::<UInt32Type>().value(idx)),
        DataType::UInt64 => push(out, arr.as_primitive::<UInt64Type>().value(idx)),
        DataType::Float16 => {
            let v = arr.as_primitive::<Float16Type>().value(idx).to_f32();
            push_float(out, v as f64, format!("{v:e}"), FLT_DIG, extra)
        }
        DataType::Float32 => {
            let v = arr.as_primitive::<Float32Type>().value(idx);
            push_float(out, v as f64, format!("{v:e}"), FLT_DIG, extra)
        }
        DataType::Float64 => {
            let v = arr.as_primitive::<Float64Type>().value(idx);
            push_float(out, v, format!("{v:e}"), DBL_DIG, extra)
        }
        DataType::Decimal128(_, scale) => push_decimal(
            out,
            &arr.as_primitive::<Decimal128Type>().value(idx).to_string(),
            *scale,
        ),
        DataType::Decimal256(_, scale) => push_decimal(
            out,
            &arr.as_primitive::<Decimal256Type>().value(idx).to_string(),
            *scale,
        ),
        DataType::Utf8 => out.push_str(arr.as_string::<i32>().value(idx)),
        DataType::LargeUtf8 => out.push_str(arr.as_string::<i64>().value(idx)),
        DataType::Utf8View => out.push_str(arr.as_string_view().value(idx)),
        DataType::Binary => push_bytea(out, arr.as_binary::<i32>().value(idx), options)?,
        DataType::LargeBinary => push_bytea(out, arr.as_binary::<i64>().value(idx), options)?,
        DataType::BinaryView => push_bytea(out, arr.as_binary_view().value(idx), options)?,
        DataType::FixedSizeBinary(_) => {
            push_bytea(out, arr.as_fixed_size_binary().value(idx), options)?
        }
        DataType::Date32 => {
            let days = arr.as_primitive::<Date32Type>().value(idx);
            let date = as_date::<Date32Type>(days as i64)
                .ok_or_else(|| error(format!("date32 value {days} is out of range")))?;
            push_date(out, date, options)?
        }
        DataType::Date64 => {
            let ms = arr.as_primitive::<Date64Type>().value(idx);
            let date = DateTime::from_timestamp_millis(ms)
                .ok_or_else(|| error(format!("date64 value {ms} is out of range")))?;
            push_date(out, date.date_naive(), options)?
        }
        DataType::Time32(_) | DataType::Time64(_) => push_time(out, arr, idx)?,
        DataType::Timestamp(unit, tz) => {
            push_timestamp(out, arr, idx, *unit, tz.as_deref(), options)?
        }
        DataType::Interval(_) | DataType::Duration(_) => {
            let interval = interval_value(arr, idx)?;
            out.push_str(&pgwire_text(&interval, &Type::INTERVAL, options)?)
        }
        DataType::Struct(_) => write_record(arr.as_struct(), idx, options, out)?,
        DataType::List(_) => write_array(arr.as_list::<i32>().value(idx).as_ref(), options, out)?,
        DataType::LargeList(_) => {
            write_array(arr.as_list::<i64>().value(idx).as_ref(), options, out)?
        }
        DataType::FixedSizeList(_, _) => {
            write_array(arr.as_fixed_size_list().value(idx).as_ref(), options, out)?
        }
        DataType::Dictionary(_, _) => {
            let (values, key) = dictionary_entry(arr, idx)?;
            return write_value(values.as_ref(), key, options, out);
        }
        other => {
            return Err(error(format!(
                "Unsupported Datatype {other} inside a record or an array"
            )));
        }
    }
    Ok(true)
}

fn push(out: &mut String, value: impl std::fmt::Display) {
    // Writing to a String cannot fail.
    let _ = write!(out, "{value}");
}

/// `record_out`: `(` fields `)`, a NULL field empty, a field quoted when it is empty or holds
/// `"` `\` `(` `)` `,` or white space, with `"` and `\` doubled inside the quotes.
fn write_record(
    arr: &StructArray,
    idx: usize,
    options: &FormatOptions,
    out: &mut String,
) -> PgWireResult<()> {
    out.push('(');
    let mut field = String::new();
    for (i, column) in arr.columns().iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        field.clear();
        if write_value(column.as_ref(), idx, options, &mut field)? {
            push_record_field(out, &field);
        }
    }
    out.push(')');
    Ok(())
}

/// `array_out`: `{` elements `}`, a NULL element `NULL`, an element quoted when it is empty,
/// is `NULL` in any case, or holds `"` `\` `{` `}` `,` or white space, with `"` and `\`
/// backslash-escaped inside the quotes; a list element is a sub-array, as in PostgreSQL's
/// multidimensional arrays.
fn write_array(values: &dyn Array, options: &FormatOptions, out: &mut String) -> PgWireResult<()> {
    let sub_arrays = matches!(
        values.data_type(),
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(_, _)
    );
    out.push('{');
    let mut element = String::new();
    for i in 0..values.len() {
        if i > 0 {
            out.push(',');
        }
        element.clear();
        if !write_value(values, i, options, &mut element)? {
            out.push_str("NULL");
        } else if sub_arrays {
            out.push_str(&element);
        } else {
            push_array_element(out, &element);
        }
    }
    out.push('}');
    Ok(())
}

/// White space as PostgreSQL's `isspace` / `scanner_isspace` see it.
fn is_pg_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c')
}

fn push_record_field(out: &mut String, field: &str) {
    let quote = field.is_empty()
        || field
            .chars()
            .any(|c| matches!(c, '"' | '\\' | '(' | ')' | ',') || is_pg_space(c));
    if !quote {
        out.push_str(field);
        return;
    }
    out.push('"');
    for c in field.chars() {
        if c == '"' || c == '\\' {
            out.push(c);
        }
        out.push(c);
    }
    out.push('"');
}

fn push_array_element(out: &mut String, element: &str) {
    let quote = element.is_empty()
        || element.eq_ignore_ascii_case("NULL")
        || element
            .chars()
            .any(|c| matches!(c, '"' | '\\' | '{' | '}' | ',') || is_pg_space(c));
    if !quote {
        out.push_str(element);
        return;
    }
    out.push('"');
    for c in element.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

const FLT_DIG: i32 = 6;
const DBL_DIG: i32 = 15;

/// `float4out` / `float8out`: with `extra_float_digits` > 0 (PostgreSQL's default) the shortest
/// digits that read back exactly (`shortest`, Rust's `{:e}` of the value), else `%.{DIG +
/// extra}g`; fixed notation for a decimal exponent in [-4, 6) (float4) or [-4, 15) (float8),
/// and for `%g` in [-4, precision); otherwise `1.5e+20`. `NaN`, `Infinity`, `-Infinity`, `-0`.
fn push_float(out: &mut String, value: f64, shortest: String, dig: i32, extra: i8) {
    if value.is_nan() {
        return out.push_str("NaN");
    }
    if value.is_infinite() {
        return out.push_str(if value > 0.0 { "Infinity" } else { "-Infinity" });
    }
    let (exponential, fixed_below) = if extra > 0 {
        (shortest, dig)
    } else {
        let precision = (dig + extra as i32).max(1);
        (
            format!("{:.*e}", (precision - 1) as usize, value),
            precision,
        )
    };
    let (mantissa, exp) = exponential
        .split_once('e')
        .unwrap_or((exponential.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if value.is_sign_negative() {
        out.push('-');
    }
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let digits = digits.trim_end_matches('0');
    if digits.is_empty() {
        return out.push('0');
    }
    if (-4..fixed_below).contains(&exp) {
        if exp < 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(digits);
        } else {
            let whole = exp as usize + 1;
            if digits.len() <= whole {
                out.push_str(digits);
                out.extend(std::iter::repeat_n('0', whole - digits.len()));
            } else {
                out.push_str(&digits[..whole]);
                out.push('.');
                out.push_str(&digits[whole..]);
            }
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let sign = if exp < 0 { '-' } else { '+' };
        push(out, format_args!("e{sign}{:02}", exp.unsigned_abs()));
    }
}

/// `numeric_out` of an unscaled integer and its scale: every digit of the scale (`12.30`).
fn push_decimal(out: &mut String, unscaled: &str, scale: i8) {
    let (negative, digits) = match unscaled.strip_prefix('-') {
        Some(digits) => (true, digits),
        None => (false, unscaled),
    };
    if negative {
        out.push('-');
    }
    if scale <= 0 {
        out.push_str(digits);
        if digits != "0" {
            out.extend(std::iter::repeat_n('0', scale.unsigned_abs() as usize));
        }
        return;
    }
    let scale = scale as usize;
    if digits.len() <= scale {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', scale - digits.len()));
        out.push_str(digits);
    } else {
        let whole = digits.len() - scale;
        out.push_str(&digits[..whole]);
        out.push('.');
        out.push_str(&digits[whole..]);
    }
}

/// The text pgwire writes for a scalar of type `ty` (as the value alone in a column).
fn pgwire_text<T: ToSqlText>(
    value: &T,
    ty: &Type,
    options: &FormatOptions,
) -> PgWireResult<String> {
    let mut buf = BytesMut::new();
    value
        .to_sql_text(ty, &mut buf, options)
        .map_err(PgWireError::ApiError)?;
    String::from_utf8(buf.to_vec()).map_err(|e| PgWireError::ApiError(Box::new(e)))
}

fn push_bytea(out: &mut String, bytes: &[u8], options: &FormatOptions) -> PgWireResult<()> {
    out.push_str(&pgwire_text(&bytes, &Type::BYTEA, options)?);
    Ok(())
}

/// Whether DateStyle writes ISO 8601 (`ISO, MDY`; pgwire falls back to ISO too).
fn iso_date_style(options: &FormatOptions) -> bool {
    let style = options.date_style.split(',').next().unwrap_or_default();
    !matches!(
        style.trim().to_ascii_lowercase().as_str(),
        "sql" | "german" | "postgres"
    )
}

/// A date as `date_out` writes it in ISO: `2024-05-06`, `0044-03-15 BC`.
fn push_iso_date(out: &mut String, date: NaiveDate) -> &'static str {
    let year = date.year();
    let (year, era) = if year <= 0 {
        (1 - year, " BC")
    } else {
        (year, "")
    };
    push(
        out,
        format_args!("{year:04}-{:02}-{:02}", date.month(), date.day()),
    );
    era
}

fn push_date(out: &mut String, date: NaiveDate, options: &FormatOptions) -> PgWireResult<()> {
    if iso_date_style(options) {
        let era = push_iso_date(out, date);
        out.push_str(era);
    } else {
        out.push_str(&pgwire_text(&date, &Type::DATE, options)?);
    }
    Ok(())
}

/// `HH:MM:SS` and the microseconds without trailing zeros (`07:08:09.5`), as PostgreSQL.
fn push_clock(out: &mut String, time: &impl Timelike) {
    push(
        out,
        format_args!(
            "{:02}:{:02}:{:02}",
            time.hour(),
            time.minute(),
            time.second()
        ),
    );
    let micros = (time.nanosecond() % 1_000_000_000) / 1_000;
    if micros > 0 {
        let fraction = format!("{micros:06}");
        out.push('.');
        out.push_str(fraction.trim_end_matches('0'));
    }
}

fn push_time(out: &mut String, arr: &dyn Array, idx: usize) -> PgWireResult<()> {
    let time = match arr.data_type() {
        DataType::Time32(TimeUnit::Second) => {
            as_time::<Time32SecondType>(arr.as_primitive::<Time32SecondType>().value(idx) as i64)
        }
        DataType::Time32(TimeUnit::Millisecond) => as_time::<Time32MillisecondType>(
            arr.as_primitive::<Time32MillisecondType>().value(idx) as i64,
        ),
        DataType::Time64(TimeUnit::Microsecond) => {
            as_time::<Time64MicrosecondType>(arr.as_primitive::<Time64MicrosecondType>().value(idx))
        }
        DataType::Time64(TimeUnit::Nanosecond) => {
            as_time::<Time64NanosecondType>(arr.as_primitive::<Time64NanosecondType>().value(idx))
        }
        other => return Err(error(format!("Unsupported time type {other}"))),
    };
    let time = time.ok_or_else(|| error("time value out of range".to_string()))?;
    push_clock(out, &time);
    Ok(())
}

fn push_timestamp(
    out: &mut String,
    arr: &dyn Array,
    idx: usize,
    unit: TimeUnit,
    tz: Option<&str>,
    options: &FormatOptions,
) -> PgWireResult<()> {
    let utc = match unit {
        TimeUnit::Second => {
            DateTime::from_timestamp(arr.as_primitive::<TimestampSecondType>().value(idx), 0)
        }
        TimeUnit::Millisecond => DateTime::from_timestamp_millis(
            arr.as_primitive::<TimestampMillisecondType>().value(idx),
        ),
        TimeUnit::Microsecond => DateTime::from_timestamp_micros(
            arr.as_primitive::<TimestampMicrosecondType>().value(idx),
        ),
        TimeUnit::Nanosecond => Some(DateTime::from_timestamp_nanos(
            arr.as_primitive::<TimestampNanosecondType>().value(idx),
        )),
    }
    .ok_or_else(|| error("timestamp value out of range".to_string()))?
    .naive_utc();
    match tz {
        None => push_naive_timestamp(out, utc, options),
        Some(tz) => {
            let tz = Tz::from_str(tz).map_err(|e| PgWireError::ApiError(Box::new(e)))?;
            let local = Utc
                .from_utc_datetime(&utc)
                .with_timezone(&tz)
                .fixed_offset();
            push_timestamptz(out, local, options)
        }
    }
}

/// `timestamp_out` in ISO: `2024-05-06 07:08:09`, `2024-05-06 07:08:09.25`.
fn push_naive_timestamp(
    out: &mut String,
    value: NaiveDateTime,
    options: &FormatOptions,
) -> PgWireResult<()> {
    if !iso_date_style(options) {
        out.push_str(&pgwire_text(&value, &Type::TIMESTAMP, options)?);
        return Ok(());
    }
    let era = push_iso_date(out, value.date());
    out.push(' ');
    push_clock(out, &value.time());
    out.push_str(era);
    Ok(())
}

/// `timestamptz_out` in ISO: `2024-05-06 07:08:09+00`, `...+05:30`, `...-03:00:15`.
fn push_timestamptz(
    out: &mut String,
    value: DateTime<FixedOffset>,
    options: &FormatOptions,
) -> PgWireResult<()> {
    if !iso_date_style(options) {
        out.push_str(&pgwire_text(&value, &Type::TIMESTAMPTZ, options)?);
        return Ok(());
    }
    let local = value.naive_local();
    let era = push_iso_date(out, local.date());
    out.push(' ');
    push_clock(out, &local.time());
    let offset = value.offset().local_minus_utc();
    let sign = if offset < 0 { '-' } else { '+' };
    let offset = offset.unsigned_abs();
    push(out, format_args!("{sign}{:02}", offset / 3600));
    if offset % 3600 != 0 {
        push(out, format_args!(":{:02}", offset % 3600 / 60));
        if offset % 60 != 0 {
            push(out, format_args!(":{:02}", offset % 60));
        }
    }
    out.push_str(era);
    Ok(())
}

/// An interval or duration as the PostgreSQL interval arrow-pg sends for it.
fn interval_value(arr: &dyn Array, idx: usize) -> PgWireResult<PgInterval> {
    Ok(match arr.data_type() {
        DataType::Interval(IntervalUnit::YearMonth) => {
            PgInterval::new(arr.as_primitive::<IntervalYearMonthType>().value(idx), 0, 0)
        }
        DataType::Interval(IntervalUnit::DayTime) => {
            let (days, millis) =
                IntervalDayTimeType::to_parts(arr.as_primitive::<IntervalDayTimeType>().value(idx));
            PgInterval::new(0, days, millis as i64 * 1000)
        }
        DataType::Interval(IntervalUnit::MonthDayNano) => {
            let (months, days, nanos) = IntervalMonthDayNanoType::to_parts(
                arr.as_primitive::<IntervalMonthDayNanoType>().value(idx),
            );
            PgInterval::new(months, days, nanos / 1000)
        }
        DataType::Duration(TimeUnit::Second) => PgInterval::new(
            0,
            0,
            arr.as_primitive::<DurationSecondType>().value(idx) * 1_000_000,
        ),
        DataType::Duration(TimeUnit::Millisecond) => PgInterval::new(
            0,
            0,
            arr.as_primitive::<DurationMillisecondType>().value(idx) * 1_000,
        ),
        DataType::Duration(TimeUnit::Microsecond) => PgInterval::new(
            0,
            0,
            arr.as_primitive::<DurationMicrosecondType>().value(idx),
        ),
        DataType::Duration(TimeUnit::Nanosecond) => PgInterval::new(
            0,
            0,
            arr.as_primitive::<DurationNanosecondType>().value(idx) / 1_000,
        ),
        other => return Err(error(format!("Unsupported interval type {other}"))),
    })
}

/// The values of a dictionary array and the index of row `idx` among them.
fn dictionary_entry(arr: &dyn Array, idx: usize) -> PgWireResult<(ArrayRef, usize)> {
    macro_rules! entry {
        ($($key:ty),*) => {
            $(if let Some(dict) = arr.as_any().downcast_ref::<DictionaryArray<$key>>() {
                return Ok((dict.values().clone(), dict.keys().value(idx).as_usize()));
            })*
        };
    }
    entry!(
        Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type
    );
    Err(error(format!(
        "Unsupported dictionary type {}",
        arr.data_type()
    )))
}
