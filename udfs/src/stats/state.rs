//! What the statistics aggregates share: reading their constant arguments, checking
//! argument types, and partial states as lists (distinct values with counts, label pairs with
//! counts), so every result is the same however rows are partitioned.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, ListArray, StringArray, UInt64Array,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields, Float64Type, UInt64Type};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::physical_expr::expressions::Literal;

use super::bootstrap::{DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES};

/// The constant arguments of an aggregate call (confidence, resamples, seed).
pub(crate) struct Constants<'a> {
    pub name: &'a str,
    pub args: &'a AccumulatorArgs<'a>,
}

impl Constants<'_> {
    fn constant(&self, i: usize) -> Result<Option<ScalarValue>> {
        match self.args.exprs.get(i) {
            None => Ok(None),
            Some(e) => match e.downcast_ref::<Literal>() {
                Some(l) if !l.value().is_null() => Ok(Some(l.value().clone())),
                _ => exec_err!("{}: argument {} must be a constant", self.name, i + 1),
            },
        }
    }

    pub fn f64_at(&self, i: usize, default: f64) -> Result<f64> {
        Ok(match self.constant(i)? {
            Some(v) => match v.cast_to(&DataType::Float64)? {
                ScalarValue::Float64(Some(x)) => x,
                _ => default,
            },
            None => default,
        })
    }

    pub fn u64_at(&self, i: usize, default: u64) -> Result<u64> {
        Ok(match self.constant(i)? {
            Some(v) => match v.cast_to(&DataType::UInt64)? {
                ScalarValue::UInt64(Some(x)) => x,
                _ => default,
            },
            None => default,
        })
    }

    /// A constant text argument, if given.
    pub fn str_at(&self, i: usize) -> Result<Option<String>> {
        Ok(match self.constant(i)? {
            Some(v) => match v.cast_to(&DataType::Utf8)? {
                ScalarValue::Utf8(Some(s)) => Some(s),
                _ => None,
            },
            None => None,
        })
    }

    pub fn confidence_at(&self, i: usize) -> Result<f64> {
        let c = self.f64_at(i, DEFAULT_CONFIDENCE)?;
        if !(c > 0.0 && c < 1.0) {
            return exec_err!("{}: confidence must be between 0 and 1, got {c}", self.name);
        }
        Ok(c)
    }

    pub fn resamples_at(&self, i: usize) -> Result<usize> {
        let r = self.u64_at(i, DEFAULT_RESAMPLES as u64)?;
        if !(1..=1_000_000).contains(&r) {
            return exec_err!("{}: resamples must be 1 to 1000000, got {r}", self.name);
        }
        Ok(r as usize)
    }
}

/// Checks a numeric aggregate's arguments (`values` value columns, at most `max_args` in
/// all) and coerces them: values and fractions to Float64, counts and seeds to UInt64.
pub(crate) fn coerce_numeric(
    name: &str,
    usage: &str,
    arg_types: &[DataType],
    values: usize,
    max_args: usize,
    fraction_at: Option<usize>,
) -> Result<Vec<DataType>> {
    let numeric = |t: &DataType| t.is_numeric() || t.is_null() || *t == DataType::Boolean;
    check_arity(
        name,
        usage,
        arg_types,
        values,
        max_args,
        arg_types.iter().all(numeric),
    )?;
    Ok((0..arg_types.len())
        .map(|i| {
            if i < values || Some(i) == fraction_at {
                DataType::Float64
            } else {
                DataType::UInt64
            }
        })
        .collect())
}

/// A plan error naming the call and its usage unless `arg_types` has `min..=max` arguments
/// and `types_ok`.
pub(crate) fn check_arity(
    name: &str,
    usage: &str,
    arg_types: &[DataType],
    min: usize,
    max: usize,
    types_ok: bool,
) -> Result<()> {
    if (min..=max).contains(&arg_types.len()) && types_ok {
        return Ok(());
    }
    let types: Vec<String> = arg_types.iter().map(|t| t.to_string()).collect();
    plan_err!("{name}({}) does not match {usage}", types.join(", "))
}

/// A state field holding a list of `t`.
pub(crate) fn list_field(args: &StateFieldsArgs, name: &str, t: DataType) -> FieldRef {
    Arc::new(Field::new(
        format!("{}[{name}]", args.name),
        DataType::List(Arc::new(Field::new("item", t, true))),
        true,
    ))
}

/// `Struct{mean, lower, upper, n}` of the interval aggregates.
pub(crate) fn interval_fields() -> Fields {
    Fields::from(vec![
        Field::new("mean", DataType::Float64, true),
        Field::new("lower", DataType::Float64, true),
        Field::new("upper", DataType::Float64, true),
        Field::new("n", DataType::UInt64, true),
    ])
}

pub(crate) fn floats(a: &ArrayRef) -> Result<Float64Array> {
    Ok(cast(a, &DataType::Float64)?
        .as_primitive::<Float64Type>()
        .clone())
}

pub(crate) fn list_f64(v: Vec<f64>) -> ScalarValue {
    ScalarValue::List(Arc::new(
        ListArray::from_iter_primitive::<Float64Type, _, _>([Some(
            v.into_iter().map(Some).collect::<Vec<_>>(),
        )]),
    ))
}

pub(crate) fn list_u64(v: Vec<u64>) -> ScalarValue {
    ScalarValue::List(Arc::new(
        ListArray::from_iter_primitive::<UInt64Type, _, _>([Some(
            v.into_iter().map(Some).collect::<Vec<_>>(),
        )]),
    ))
}

pub(crate) fn list_str(v: Vec<&str>) -> ScalarValue {
    let values = Arc::new(StringArray::from(v)) as ArrayRef;
    ScalarValue::List(Arc::new(ListArray::new(
        Arc::new(Field::new("item", DataType::Utf8, true)),
        datafusion::arrow::buffer::OffsetBuffer::from_lengths([values.len()]),
        values,
        None,
    )))
}

/// The non-NULL lists of a state column, flattened per partial state.
pub(crate) fn state_lists(a: &ArrayRef) -> Vec<ArrayRef> {
    let list = a.as_list::<i32>();
    (0..list.len())
        .filter(|&i| !list.is_null(i))
        .map(|i| list.value(i))
        .collect()
}

/// The partial states of list-valued state columns, aligned: per partial state, one list
/// per state column.
pub(crate) fn state_parts(states: &[ArrayRef]) -> Vec<Vec<ArrayRef>> {
    let lists: Vec<Vec<ArrayRef>> = states.iter().map(state_lists).collect();
    let parts = lists.iter().map(Vec::len).min().unwrap_or(0);
    (0..parts)
        .map(|i| lists.iter().map(|l| Arc::clone(&l[i])).collect())
        .collect()
}

pub(crate) fn interval(mean: Option<f64>, ci: Option<(f64, f64)>, n: u64) -> Result<ScalarValue> {
    let fields = interval_fields();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Float64Array::from(vec![mean])),
        Arc::new(Float64Array::from(vec![ci.map(|c| c.0)])),
        Arc::new(Float64Array::from(vec![ci.map(|c| c.1)])),
        Arc::new(UInt64Array::from(vec![Some(n)])),
    ];
    Ok(ScalarValue::Struct(Arc::new(
        datafusion::arrow::array::StructArray::new(fields, columns, None),
    )))
}
