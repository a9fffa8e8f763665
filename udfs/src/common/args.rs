//! One driver for Arrow dispatch, so no metric re-implements array plumbing.
//!
//! A text metric sees its arguments as [`StrArg`] (one string per row), [`RefsArg`] (one or
//! several reference strings per row) or [`BoolArg`], whatever the Arrow encoding (Utf8,
//! LargeUtf8, Utf8View, dictionaries, scalars); its kernel only ever sees `&str`.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float64Array, Float64Builder, LargeStringArray,
    ListArray, StringArray, StringViewArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Float64Type};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs};
use serde_json::Value;

use crate::common::signature::is_text;

/// Casts arguments whose encoding the accessors below do not read directly (dictionaries,
/// binary views, nulls, large lists, fixed-size lists) to one they do. Scalars become
/// one-row arrays so that every accessor is an array accessor.
pub fn prepare_args(args: &[ColumnarValue]) -> Result<PreparedArgs> {
    let all_scalar = args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_)));
    let mut columns = Vec::with_capacity(args.len());
    for arg in args {
        let (array, scalar) = match arg {
            ColumnarValue::Array(a) => (Arc::clone(a), false),
            ColumnarValue::Scalar(s) => (s.to_array_of_size(1)?, true),
        };
        columns.push(Column {
            array: normalise(array)?,
            scalar,
        });
    }
    Ok(PreparedArgs {
        columns,
        all_scalar,
    })
}

fn normalise(array: ArrayRef) -> Result<ArrayRef> {
    let target = match array.data_type() {
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Boolean
        | DataType::Float64 => {
            return Ok(array);
        }
        DataType::List(f) if matches!(f.data_type(), DataType::Utf8) => return Ok(array),
        DataType::Null => DataType::Utf8,
        DataType::Dictionary(_, value) => match value.as_ref() {
            DataType::Boolean => DataType::Boolean,
            DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(_, _) => {
                string_list_type()
            }
            _ => DataType::Utf8,
        },
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(_, _) => {
            string_list_type()
        }
        DataType::ListView(_) | DataType::LargeListView(_) => string_list_type(),
        _ => DataType::Utf8,
    };
    Ok(cast(&array, &target)?)
}

fn string_list_type() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true)))
}

#[derive(Debug)]
struct Column {
    array: ArrayRef,
    scalar: bool,
}

/// Arguments of one invocation, each readable by row.
#[derive(Debug)]
pub struct PreparedArgs {
    columns: Vec<Column>,
    all_scalar: bool,
}

impl PreparedArgs {
    /// True when every argument is a scalar: the result is then a scalar too.
    pub fn all_scalar(&self) -> bool {
        self.all_scalar
    }

    pub fn len(&self) -> usize {
        self.columns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.columns.is_empty()
    }

    /// Argument `i` read as one string per row.
    pub fn str(&self, function: &str, i: usize) -> Result<StrArg<'_>> {
        let c = &self.columns[i];
        let values = match c.array.data_type() {
            DataType::Utf8 => StrValues::Utf8(c.array.as_string::<i32>()),
            DataType::LargeUtf8 => StrValues::Large(c.array.as_string::<i64>()),
            DataType::Utf8View => StrValues::View(c.array.as_string_view()),
            other => {
                return exec_err!(
                    "{function}: argument {} must be a string, got {other}",
                    i + 1
                );
            }
        };
        Ok(StrArg {
            values,
            scalar: c.scalar,
        })
    }

    /// Argument `i` read as a list of reference strings per row (a plain string is a list of one).
    pub fn refs(&self, function: &str, i: usize) -> Result<RefsArg<'_>> {
        let c = &self.columns[i];
        match c.array.data_type() {
            DataType::List(_) => Ok(RefsArg::List {
                list: c.array.as_list::<i32>(),
                scalar: c.scalar,
            }),
            _ => Ok(RefsArg::Single(self.str(function, i)?)),
        }
    }

    /// Argument `i` read as a Float64 per row (the signature has cast it).
    pub fn f64(&self, function: &str, i: usize) -> Result<F64Arg<'_>> {
        let c = &self.columns[i];
        match c.array.data_type() {
            DataType::Float64 => Ok(F64Arg {
                values: c.array.as_primitive::<Float64Type>(),
                scalar: c.scalar,
            }),
            other => exec_err!(
                "{function}: argument {} must be a number, got {other}",
                i + 1
            ),
        }
    }

    /// Argument `i` read as a boolean per row.
    pub fn bool(&self, function: &str, i: usize) -> Result<BoolArg<'_>> {
        let c = &self.columns[i];
        match c.array.data_type() {
            DataType::Boolean => Ok(BoolArg {
                values: c.array.as_boolean(),
                scalar: c.scalar,
            }),
            other => exec_err!(
                "{function}: argument {} must be a boolean, got {other}",
                i + 1
            ),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum StrValues<'a> {
    Utf8(&'a StringArray),
    Large(&'a LargeStringArray),
    View(&'a StringViewArray),
}

/// One string argument: `get(row)` is the row's value, `None` for NULL.
#[derive(Debug, Clone, Copy)]
pub struct StrArg<'a> {
    values: StrValues<'a>,
    scalar: bool,
}

impl<'a> StrArg<'a> {
    #[inline]
    pub fn get(&self, row: usize) -> Option<&'a str> {
        let row = if self.scalar { 0 } else { row };
        match self.values {
            StrValues::Utf8(a) => a.is_valid(row).then(|| a.value(row)),
            StrValues::Large(a) => a.is_valid(row).then(|| a.value(row)),
            StrValues::View(a) => a.is_valid(row).then(|| a.value(row)),
        }
    }

    /// True when the same value applies to every row (a literal such as a fixed reference).
    pub fn is_scalar(&self) -> bool {
        self.scalar
    }
}

/// One Float64 argument.
#[derive(Debug, Clone, Copy)]
pub struct F64Arg<'a> {
    values: &'a Float64Array,
    scalar: bool,
}

impl F64Arg<'_> {
    #[inline]
    pub fn get(&self, row: usize) -> Option<f64> {
        let row = if self.scalar { 0 } else { row };
        self.values.is_valid(row).then(|| self.values.value(row))
    }
}

/// One boolean argument.
#[derive(Debug, Clone, Copy)]
pub struct BoolArg<'a> {
    values: &'a BooleanArray,
    scalar: bool,
}

impl BoolArg<'_> {
    #[inline]
    pub fn get(&self, row: usize) -> Option<bool> {
        let row = if self.scalar { 0 } else { row };
        self.values.is_valid(row).then(|| self.values.value(row))
    }
}

/// The reference argument of metrics that accept several references per row.
#[derive(Debug, Clone, Copy)]
pub enum RefsArg<'a> {
    Single(StrArg<'a>),
    List { list: &'a ListArray, scalar: bool },
}

impl<'a> RefsArg<'a> {
    /// Fills `out` with the row's references (NULL entries of a list are left out) and returns
    /// false when the row's reference is unknown: a NULL value, or a list of NULLs only. An
    /// empty list returns true with `out` empty (no reference given: the caller's error).
    pub fn get_into(&self, row: usize, out: &mut Vec<&'a str>) -> bool {
        out.clear();
        match self {
            RefsArg::Single(s) => match s.get(row) {
                Some(v) => {
                    out.push(v);
                    true
                }
                None => false,
            },
            RefsArg::List { list, scalar } => {
                let row = if *scalar { 0 } else { row };
                if list.is_null(row) {
                    return false;
                }
                let offsets = list.value_offsets();
                let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
                let values = list.values().as_string::<i32>();
                for j in start..end {
                    if values.is_valid(j) {
                        out.push(values.value(j));
                    }
                }
                end == start || !out.is_empty()
            }
        }
    }
}

/// Collects one Float64 per row (`None` = NULL); a scalar result when every argument was one.
pub fn float64_rows(
    all_scalar: bool,
    number_rows: usize,
    mut f: impl FnMut(usize) -> Result<Option<f64>>,
) -> Result<ColumnarValue> {
    if all_scalar {
        return Ok(ColumnarValue::Scalar(ScalarValue::Float64(f(0)?)));
    }
    let mut out = Float64Builder::with_capacity(number_rows);
    for row in 0..number_rows {
        out.append_option(f(row)?);
    }
    Ok(ColumnarValue::Array(Arc::new(out.finish())))
}

/// Shortens a value for an error message: enough to recognise it, never a whole document.
pub fn truncate_for_error(value: &str) -> String {
    super::excerpt::quote_value(value)
}

/// The whole invocation of a `f(response, ground_truth) -> Float64` metric: NULL in either
/// argument gives NULL, otherwise `kernel(response, ground_truth)`.
pub fn invoke_text_pair(
    function: &str,
    args: &[ColumnarValue],
    number_rows: usize,
    kernel: impl Fn(&str, &str) -> f64,
) -> Result<ColumnarValue> {
    let prepared = prepare_args(args)?;
    let response = prepared.str(function, 0)?;
    let truth = prepared.str(function, 1)?;
    float64_rows(prepared.all_scalar(), number_rows, |row| {
        Ok(match (response.get(row), truth.get(row)) {
            (Some(r), Some(t)) => Some(kernel(r, t)),
            _ => None,
        })
    })
}

/// The whole invocation of `f(response, ground_truth [, flag])` where `ground_truth` is one
/// reference or a list of them: NULL in any argument gives NULL, an empty reference list is
/// an error naming the function and the response.
pub fn invoke_text_refs(
    function: &str,
    args: &[ColumnarValue],
    number_rows: usize,
    flag_default: bool,
    kernel: impl Fn(&str, &[&str], bool) -> f64,
) -> Result<ColumnarValue> {
    let prepared = prepare_args(args)?;
    let response = prepared.str(function, 0)?;
    let refs = prepared.refs(function, 1)?;
    let flag = if prepared.len() > 2 {
        Some(prepared.bool(function, 2)?)
    } else {
        None
    };
    let mut buf = Vec::new();
    float64_rows(prepared.all_scalar(), number_rows, |row| {
        let flag = match flag {
            None => flag_default,
            Some(f) => match f.get(row) {
                Some(v) => v,
                None => return Ok(None),
            },
        };
        let Some(hyp) = response.get(row) else {
            return Ok(None);
        };
        if !refs.get_into(row, &mut buf) {
            return Ok(None);
        }
        if buf.is_empty() {
            return exec_err!(
                "{function}: the references of response {} are an empty list; give at least one reference",
                truncate_for_error(hyp)
            );
        }
        Ok(Some(kernel(hyp, &buf, flag)))
    })
}

/// Every row of `array` as a JSON value, through Arrow's JSON writer (which leaves NULLs
/// out: a NULL row, or a NULL field, is absent). Structs, lists and maps become objects
/// and arrays, exactly as the JSON reader would have read them.
pub fn json_values(array: &ArrayRef) -> Result<Vec<Option<serde_json::Value>>> {
    use datafusion::arrow::array::RecordBatch;
    use datafusion::arrow::datatypes::Schema;
    use datafusion::arrow::json::LineDelimitedWriter;
    use datafusion::common::DataFusionError;

    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new(
            "v",
            array.data_type().clone(),
            true,
        )])),
        vec![Arc::clone(array)],
    )?;
    let mut writer = LineDelimitedWriter::new(Vec::new());
    writer.write(&batch)?;
    writer.finish()?;
    let text = writer.into_inner();
    let mut out = Vec::with_capacity(array.len());
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let mut obj: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(line).map_err(|e| DataFusionError::External(Box::new(e)))?;
        out.push(obj.remove("v"));
    }
    if out.len() != array.len() {
        return exec_err!("cannot encode a {} column as JSON", array.data_type());
    }
    Ok(out)
}

/// The arguments of a call as arrays of its row count (scalars repeated; unlike
/// `ColumnarValue::values_to_arrays`, right when every argument is a scalar).
pub fn argument_arrays(args: &ScalarFunctionArgs) -> Result<Vec<ArrayRef>> {
    args.args
        .iter()
        .map(|a| a.to_array(args.number_rows))
        .collect()
}

/// The arguments of one call: arrays of the call's rows, except that a scalar argument (a
/// literal such as a fixed set of judgements) stays one row, read and parsed once — never
/// repeated per row.
#[derive(Debug)]
pub struct CallRows {
    /// Every argument was a scalar: the result is one scalar ([`columnar_result`]).
    pub all_scalar: bool,
    /// Rows of the result.
    pub rows: usize,
    pub arrays: Vec<ArrayRef>,
    scalar: Vec<bool>,
}

impl CallRows {
    /// The index into argument `i`'s array for result row `row`.
    #[inline]
    pub fn at(&self, i: usize, row: usize) -> usize {
        if self.scalar[i] { 0 } else { row }
    }

    /// Whether argument `i` is one value for every row.
    pub fn is_scalar(&self, i: usize) -> bool {
        self.scalar[i]
    }
}

/// The arguments of a call, scalars kept as one row (see [`CallRows`]).
pub fn rows_of(args: &ScalarFunctionArgs) -> Result<CallRows> {
    let scalar: Vec<bool> = args
        .args
        .iter()
        .map(|a| matches!(a, ColumnarValue::Scalar(_)))
        .collect();
    let all_scalar = scalar.iter().all(|s| *s);
    let rows = if all_scalar { 1 } else { args.number_rows };
    let arrays = args
        .args
        .iter()
        .map(|a| match a {
            ColumnarValue::Scalar(s) => s.to_array_of_size(1),
            ColumnarValue::Array(a) => Ok(Arc::clone(a)),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(CallRows {
        all_scalar,
        rows,
        arrays,
        scalar,
    })
}

/// A result array, as a scalar when every argument was one.
pub fn columnar_result(all_scalar: bool, array: ArrayRef) -> Result<ColumnarValue> {
    if all_scalar {
        Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
            &array, 0,
        )?))
    } else {
        Ok(ColumnarValue::Array(array))
    }
}

/// One JSON argument per row: text parsed (`Err` with the reason, naming `what` and the
/// value), anything else (structs, lists, maps) through Arrow's JSON writer. NULL is `None`.
pub fn json_rows(
    array: &ArrayRef,
    what: &str,
) -> Result<Vec<Option<std::result::Result<Value, String>>>> {
    if is_text(array.data_type()) {
        let text = cast(array, &DataType::Utf8)?;
        return Ok(text
            .as_string::<i32>()
            .iter()
            .map(|t| {
                t.map(|t| {
                    serde_json::from_str(t)
                        .map_err(|e| format!("{what} {} is not JSON: {e}", truncate_for_error(t)))
                })
            })
            .collect());
    }
    Ok(json_values(array)?.into_iter().map(|v| v.map(Ok)).collect())
}

/// Every row of `array` as text: strings as they are, anything else (structs, lists,
/// numbers) as JSON. NULL stays NULL.
pub fn texts(array: &ArrayRef) -> Result<Vec<Option<String>>> {
    if matches!(array.data_type(), DataType::Null) {
        return Ok(vec![None; array.len()]);
    }
    if is_text(array.data_type()) {
        let utf8 = cast(array, &DataType::Utf8)?;
        return Ok(utf8
            .as_string::<i32>()
            .iter()
            .map(|v| v.map(str::to_string))
            .collect());
    }
    json_texts(array)
}

/// Every row of `array` as JSON text.
fn json_texts(array: &ArrayRef) -> Result<Vec<Option<String>>> {
    Ok(json_values(array)?
        .into_iter()
        .map(|v| {
            v.map(|v| match v {
                Value::String(s) => s,
                other => other.to_string(),
            })
        })
        .collect())
}
