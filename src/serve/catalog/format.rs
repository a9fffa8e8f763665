//! PostgreSQL's `format(formatstr, VARIADIC args)`, which drivers' catalog SQL uses
//! (Metabase's field sync: `format('%I.%I', table_schema, table_name)`, `format('%s',
//! udt_name)`).
//!
//! Specifiers `%[position$][-][width]{s,I,L}` and `%%`, as PostgreSQL: `%s` the value as
//! text (NULL as nothing), `%I` a quoted identifier (NULL is an error), `%L` a quoted literal
//! (NULL as `NULL`); `width` may be `*` (the next argument; negative left-aligns). `%I`
//! quotes names that are not lower-case identifiers; unlike PostgreSQL it does not also
//! quote reserved words.

use std::sync::Arc;

use datafusion::arrow::array::StringBuilder;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use super::functions::arrays;

/// The `format` function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Format {
    signature: Signature,
}

impl Format {
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(Format {
            signature: Signature::variadic_any(Volatility::Immutable),
        })
    }
}

/// A value as PostgreSQL's text output writes it; None for NULL.
fn text(value: &ScalarValue) -> Option<String> {
    if value.is_null() {
        return None;
    }
    Some(match value {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => s.clone(),
        ScalarValue::Boolean(Some(b)) => if *b { "t" } else { "f" }.to_string(),
        other => other.to_string(),
    })
}

fn quote_ident(name: &str) -> String {
    let bare = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '$');
    if bare {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

fn quote_literal(value: &str) -> String {
    let quoted = value.replace('\'', "''");
    if value.contains('\\') {
        format!("E'{}'", quoted.replace('\\', "\\\\"))
    } else {
        format!("'{quoted}'")
    }
}

/// `fmt` with `args` (one row's values).
fn format_row(fmt: &str, args: &[ScalarValue]) -> Result<String> {
    let mut out = String::new();
    let mut chars = fmt.chars().peekable();
    let mut next_arg = 0;
    let number = |chars: &mut std::iter::Peekable<std::str::Chars>| {
        let mut digits = String::new();
        while let Some(c) = chars.peek().filter(|c| c.is_ascii_digit()) {
            digits.push(*c);
            chars.next();
        }
        digits
    };
    let arg = |n: usize| match args.get(n) {
        Some(a) => Ok(a),
        None => exec_err!("format: too few arguments for the format string {fmt:?}"),
    };
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'%') {
            chars.next();
            out.push('%');
            continue;
        }
        // position: digits followed by '$'
        let mut lookahead = chars.clone();
        let digits = number(&mut lookahead);
        if !digits.is_empty() && lookahead.peek() == Some(&'$') {
            lookahead.next();
            chars = lookahead;
            match digits.parse::<usize>() {
                Ok(p) if p >= 1 => next_arg = p - 1,
                _ => return exec_err!("format: bad argument position in {fmt:?}"),
            }
        }
        let mut left = chars.peek() == Some(&'-');
        if left {
            chars.next();
        }
        let mut width = 0usize;
        if chars.peek() == Some(&'*') {
            chars.next();
            let w = match text(arg(next_arg)?) {
                Some(w) => w.parse::<i64>().map_err(|_| {
                    datafusion::common::DataFusionError::Execution(format!(
                        "format: width argument {w:?} is not an integer"
                    ))
                })?,
                None => 0,
            };
            next_arg += 1;
            left |= w < 0;
            width = w.unsigned_abs() as usize;
        } else {
            let digits = number(&mut chars);
            if !digits.is_empty() {
                width = digits.parse().unwrap_or(usize::MAX);
            }
        }
        let value = arg(next_arg)?;
        next_arg += 1;
        let piece = match chars.next() {
            Some('s') => text(value).unwrap_or_default(),
            Some('I') => match text(value) {
                Some(name) => quote_ident(&name),
                None => return exec_err!("format: NULL cannot be formatted as an identifier"),
            },
            Some('L') => text(value).map_or_else(|| "NULL".to_string(), |v| quote_literal(&v)),
            Some(other) => return exec_err!("format: unrecognized conversion type %{other}"),
            None => return exec_err!("format: unterminated format specifier in {fmt:?}"),
        };
        let pad = width.saturating_sub(piece.chars().count());
        if left {
            out.push_str(&piece);
            out.extend(std::iter::repeat_n(' ', pad));
        } else {
            out.extend(std::iter::repeat_n(' ', pad));
            out.push_str(&piece);
        }
    }
    Ok(out)
}

impl ScalarUDFImpl for Format {
    fn name(&self) -> &str {
        "format"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args.first() {
            Some(DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null) => {
                Ok(DataType::Utf8)
            }
            _ => exec_err!("format: the first argument is the format string (text)"),
        }
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let (rows, arrays) = (args.number_rows, arrays(&args)?);
        let mut out = StringBuilder::new();
        for row in 0..rows {
            let values = arrays
                .iter()
                .map(|a| ScalarValue::try_from_array(a, row))
                .collect::<Result<Vec<_>>>()?;
            match values.split_first() {
                Some((fmt, rest)) => match text(fmt) {
                    Some(fmt) => out.append_value(format_row(&fmt, rest)?),
                    None => out.append_null(),
                },
                None => return exec_err!("format needs a format string"),
            }
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(fmt: &str, args: &[ScalarValue]) -> String {
        format_row(fmt, args).unwrap()
    }

    #[test]
    fn specifiers_as_postgresql() {
        let s = |v: &str| ScalarValue::from(v);
        assert_eq!(
            f("%s|%I|%L", &[s("a"), s("My T"), s("it's")]),
            "a|\"My T\"|'it''s'"
        );
        assert_eq!(f("%I.%I", &[s("public"), s("qa")]), "public.qa");
        assert_eq!(f("\"%s\".\"%s\"", &[s("x"), s("y")]), "\"x\".\"y\"");
        assert_eq!(f("%2$s %1$s %%", &[s("a"), s("b")]), "b a %");
        assert_eq!(f("[%5s][%-5s]", &[s("ab"), s("cd")]), "[   ab][cd   ]");
        assert_eq!(
            f("[%*s]", &[ScalarValue::Int64(Some(-4)), s("x")]),
            "[x   ]"
        );
        assert_eq!(
            f("%s|%L", &[ScalarValue::Utf8(None), ScalarValue::Utf8(None)]),
            "|NULL"
        );
        assert_eq!(f("%L", &[s("a\\b")]), "E'a\\\\b'");
        assert!(format_row("%s %s", &[s("a")]).is_err());
        assert!(format_row("%I", &[ScalarValue::Utf8(None)]).is_err());
        assert!(format_row("%x", &[s("a")]).is_err());
    }
}
