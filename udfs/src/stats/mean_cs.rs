//! `mean_cs(x, lo, hi [, alpha])`: an anytime-valid confidence sequence for the mean of
//! values bounded in `[lo, hi]` — the predictable-mixture empirical-Bernstein sequence of
//! Waudby-Smith and Ramdas, "Estimating means of bounded random variables by betting"
//! (JRSS-B, 2024), as the `confseq` package computes it
//! (`predmix_empbern_twosided_cs(x_scaled, alpha, truncation=0.5)`), at the last value.
//!
//! A confidence interval holds at one sample size fixed in advance; checked again after
//! every new batch, its chance of a false alarm grows with every look. A confidence
//! *sequence* holds at all sample sizes at once: the chance that the true mean is ever
//! outside it, however often it is looked at, is at most `alpha`. That is what an alert
//! checked after every monitor run needs.
//!
//! The sequence depends on the order of the values (each bet is made on the values before
//! it). `mean_cs(x, lo, hi ORDER BY t)` fixes the order; without `ORDER BY` the values are
//! taken as they arrive, which over several partitions is not reproducible. The partial
//! state is every value with its ordering key (encoded so that bytes compare as the
//! `ORDER BY` does), so the result does not depend on how rows were partitioned.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BinaryArray, ListArray};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Float64Type};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, Documentation, Signature, Volatility,
};

use super::state::{
    Constants, check_arity, floats, interval, interval_fields, list_f64, list_field, state_parts,
};
use crate::common::docs::STATISTICS;

const USAGE: &str = "mean_cs(x, lo, hi [, alpha] [ORDER BY ...])";

/// The largest bet, as a fraction of the capital: `confseq`'s default for this sequence.
const TRUNCATION: f64 = 0.5;

static DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        STATISTICS,
        "An anytime-valid confidence sequence for the mean of values bounded in [lo, hi]: \
         the predictable-mixture empirical-Bernstein sequence of Waudby-Smith & Ramdas \
         (JRSS-B 2024), equal to confseq's predmix_empbern_twosided_cs((x - lo) / (hi - lo), \
         alpha, truncation=0.5) at the last value, scaled back to [lo, hi]. Unlike an \
         interval, it may be checked after every new value (every monitor run) without \
         raising the chance of a false alarm above alpha. Returns Struct{mean, lower, upper, \
         n}; NULLs are left out; a value outside [lo, hi] is an error. The sequence depends \
         on the order of the values: give it with ORDER BY inside the call.",
        USAGE,
    )
    .with_argument("x", "The values, each in [lo, hi].")
    .with_argument("lo", "Constant: the least value x can take.")
    .with_argument("hi", "Constant: the greatest value x can take.")
    .with_argument(
        "alpha",
        "Optional constant in (0, 1): the chance, over all checks together, that the \
         true mean is ever outside the sequence (default 0.05).",
    )
    .with_sql_example(
        "SELECT model, mean_cs(relevance, 1, 5 ORDER BY run_at)['upper'] \
         FROM monitors.answer_quality GROUP BY model",
    )
    .build()
});

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct MeanCsFunc {
    signature: Signature,
}

impl Default for MeanCsFunc {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for MeanCsFunc {
    fn name(&self) -> &str {
        "mean_cs"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let numeric = arg_types
            .iter()
            .all(|t| t.is_numeric() || t.is_null() || *t == DataType::Boolean);
        check_arity(self.name(), USAGE, arg_types, 3, 4, numeric)?;
        Ok(vec![DataType::Float64; arg_types.len()])
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Struct(interval_fields()))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![
            list_field(&args, "values", DataType::Float64),
            list_field(&args, "order_keys", DataType::Binary),
        ])
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        // The accumulator sorts what it holds itself; input in order is not needed.
        AggregateOrderSensitivity::SoftRequirement
    }

    fn with_beneficial_ordering(
        self: Arc<Self>,
        _input_is_ordered: bool,
    ) -> Result<Option<Arc<dyn AggregateUDFImpl>>> {
        // Ordered input or not, the accumulator sorts by its keys: the same function.
        Ok(Some(self))
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let constants = Constants {
            name: self.name(),
            args: &args,
        };
        let lo = constants.f64_at(1, f64::NAN)?;
        let hi = constants.f64_at(2, f64::NAN)?;
        if !(lo.is_finite() && hi.is_finite() && lo < hi) {
            return exec_err!("mean_cs: lo must be below hi, both finite; got [{lo}, {hi}]");
        }
        let alpha = constants.f64_at(3, 0.05)?;
        if !(alpha > 0.0 && alpha < 1.0) {
            return exec_err!("mean_cs: alpha must be between 0 and 1, got {alpha}");
        }
        let order = if args.order_bys.is_empty() {
            None
        } else {
            let fields = args
                .order_bys
                .iter()
                .map(|e| {
                    Ok(SortField::new_with_options(
                        e.expr.data_type(args.schema)?,
                        e.options,
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
            Some(RowConverter::new(fields)?)
        };
        Ok(Box::new(MeanCsAcc {
            lo,
            hi,
            alpha,
            arguments: args.exprs.len(),
            order,
            values: Vec::new(),
            keys: Vec::new(),
        }))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&DOC)
    }
}

#[derive(Debug)]
struct MeanCsAcc {
    lo: f64,
    hi: f64,
    alpha: f64,
    /// The call's own arguments; the `ORDER BY` columns come after them.
    arguments: usize,
    order: Option<RowConverter>,
    values: Vec<f64>,
    /// Per value, its ordering key (empty without `ORDER BY`).
    keys: Vec<Vec<u8>>,
}

impl MeanCsAcc {
    fn push(&mut self, x: f64, key: Vec<u8>) -> Result<()> {
        if !(self.lo..=self.hi).contains(&x) {
            return exec_err!(
                "mean_cs: the value {x} is outside [{}, {}], the bounds the call gives",
                self.lo,
                self.hi
            );
        }
        self.values.push(x);
        self.keys.push(key);
        Ok(())
    }

    /// The values in the call's order (ties and unordered values as they arrived).
    fn ordered(&self) -> Vec<f64> {
        let mut at: Vec<usize> = (0..self.values.len()).collect();
        if self.order.is_some() {
            at.sort_by(|a, b| self.keys[*a].cmp(&self.keys[*b]));
        }
        at.into_iter().map(|i| self.values[i]).collect()
    }
}

impl Accumulator for MeanCsAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let x = floats(&values[0])?;
        let rows = match &self.order {
            Some(converter) => Some(converter.convert_columns(&values[self.arguments..])?),
            None => None,
        };
        for i in 0..x.len() {
            if x.is_null(i) {
                continue;
            }
            let key = rows
                .as_ref()
                .map_or_else(Vec::new, |r| r.row(i).as_ref().to_vec());
            self.push(x.value(i), key)?;
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        for part in state_parts(states) {
            let x = part[0].as_primitive::<Float64Type>();
            let keys = part[1].as_binary::<i32>();
            for i in 0..x.len() {
                let key = if keys.len() == x.len() {
                    keys.value(i).to_vec()
                } else {
                    Vec::new()
                };
                self.push(x.value(i), key)?;
            }
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let keys = Arc::new(BinaryArray::from_iter_values(self.keys.iter())) as ArrayRef;
        let keys = ScalarValue::List(Arc::new(ListArray::new(
            Arc::new(Field::new("item", DataType::Binary, true)),
            OffsetBuffer::from_lengths([keys.len()]),
            keys,
            None,
        )));
        Ok(vec![list_f64(self.values.clone()), keys])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let n = self.values.len();
        if n == 0 {
            return interval(None, None, 0);
        }
        let x = self.ordered();
        let mean = x.iter().sum::<f64>() / n as f64;
        let (lower, upper) = two_sided(&x, self.lo, self.hi, self.alpha);
        interval(Some(mean), Some((lower, upper)), n as u64)
    }

    fn size(&self) -> usize {
        size_of_val(self)
            + self.values.capacity() * size_of::<f64>()
            + self.keys.capacity() * size_of::<Vec<u8>>()
            + self.keys.iter().map(Vec::capacity).sum::<usize>()
    }
}

/// The two-sided sequence at the last of `x` (values in `[lo, hi]`, in order).
pub fn two_sided(x: &[f64], lo: f64, hi: f64, alpha: f64) -> (f64, f64) {
    let mut s = Sequence::new(lo, hi, alpha);
    for v in x {
        s.push(*v);
    }
    s.bounds()
}

/// The two-sided sequence, value by value: each side is a one-sided sequence at
/// `alpha / 2` of the values scaled to `[0, 1]`, the upper one on `1 - x`; scaled back.
/// [`Sequence::bounds`] after every [`Sequence::push`] is the sequence at every time.
#[derive(Debug, Clone)]
pub struct Sequence {
    lo: f64,
    width: f64,
    lower: OneSided,
    upper: OneSided,
}

impl Sequence {
    pub fn new(lo: f64, hi: f64, alpha: f64) -> Self {
        Sequence {
            lo,
            width: hi - lo,
            lower: OneSided::new(alpha / 2.0),
            upper: OneSided::new(alpha / 2.0),
        }
    }

    /// Takes the next value (in `[lo, hi]`).
    pub fn push(&mut self, x: f64) {
        let scaled = (x - self.lo) / self.width;
        self.lower.push(scaled);
        self.upper.push(1.0 - scaled);
    }

    /// `(lower, upper)` after the values so far; `(lo, hi)` before any.
    pub fn bounds(&self) -> (f64, f64) {
        let lower = self.lower.bound();
        let upper = 1.0 - self.upper.bound();
        (self.lo + self.width * lower, self.lo + self.width * upper)
    }
}

/// The lower predictable-mixture empirical-Bernstein bound of values in `[0, 1]`, one
/// value at a time, with the reference's sums in its order (its cumulative sums are
/// sequential too, so the results agree to the last bits).
///
/// Each value's bet `lambda_t = min(0.5, sqrt(2 log(1/alpha) / (t log(1+t) sigma2_{t-1})))`
/// uses a variance estimate regularised towards 1/4 (one fake observation at mean 1/2);
/// the bound is `sum(lambda x) / sum(lambda) - (log(1/alpha) + sum(v psi(lambda))) /
/// sum(lambda)` with `v_t = (x_t - mean_{t-1})^2` (the plain running mean, 0 before the
/// first value) and `psi(l) = -log(1-l) - l`, floored at 0.
#[derive(Debug, Clone)]
struct OneSided {
    log_inv_alpha: f64,
    t: u64,
    /// The running sum, and the sum of squares about the regularised running mean.
    sum: f64,
    squares: f64,
    sigma2_before: f64,
    mean_before: f64,
    bets: f64,
    bets_x: f64,
    v_psi: f64,
}

impl OneSided {
    fn new(alpha: f64) -> Self {
        OneSided {
            log_inv_alpha: (1.0 / alpha).ln(),
            t: 0,
            sum: 0.0,
            squares: 0.0,
            sigma2_before: 0.25,
            mean_before: 0.0,
            bets: 0.0,
            bets_x: 0.0,
            v_psi: 0.0,
        }
    }

    fn push(&mut self, x: f64) {
        self.t += 1;
        let t = self.t as f64;
        let mut lambda =
            (2.0 * self.log_inv_alpha / (t * (1.0 + t).ln() * self.sigma2_before)).sqrt();
        if lambda.is_nan() {
            lambda = 0.0;
        }
        let lambda = lambda.min(TRUNCATION);
        self.sum += x;
        let mean_t = ((0.5 + self.sum) / (t + 1.0)).min(1.0);
        self.squares += (x - mean_t).powi(2);
        self.sigma2_before = (0.25 + self.squares) / (t + 1.0);
        let v = (x - self.mean_before).powi(2);
        self.mean_before = self.sum / t;
        let psi = -(1.0 - lambda).ln() - lambda;
        self.v_psi += v * psi;
        self.bets += lambda;
        self.bets_x += lambda * x;
    }

    fn bound(&self) -> f64 {
        if self.t == 0 {
            return 0.0;
        }
        let margin = (self.log_inv_alpha + self.v_psi) / self.bets;
        (self.bets_x / self.bets - margin).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_narrows_around_the_mean_and_stays_in_bounds() {
        let x: Vec<f64> = (0..2000).map(|i| [3.0, 4.0, 5.0, 4.0][i % 4]).collect();
        let (l100, u100) = two_sided(&x[..100], 1.0, 5.0, 0.05);
        let (l, u) = two_sided(&x, 1.0, 5.0, 0.05);
        assert!(1.0 <= l100 && l100 < l && l < 4.0 && 4.0 < u && u < u100 && u100 <= 5.0);
        // One value says little: the whole range.
        assert_eq!(two_sided(&[5.0], 1.0, 5.0, 0.05), (1.0, 5.0));
    }
}
