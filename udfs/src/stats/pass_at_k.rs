//! `pass_at_k(passed, k)` and `pass_hat_k(passed, k)`: over the n samples of one task of
//! which c passed, the chance that k samples drawn without replacement include a pass
//! (pass@k, the unbiased estimator of Chen et al. 2021, "Evaluating Large Language Models
//! Trained on Code": 1 − C(n−c, k) / C(n, k)), or are all passes (pass^k, as τ-bench reports
//! it: C(c, k) / C(n, k)). Group by task, then average over tasks with `avg`.

use std::sync::LazyLock;

use datafusion::arrow::array::{ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, FieldRef, UInt64Type};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, Documentation, Signature, Volatility,
};

use super::state::{Constants, check_arity, floats};
use crate::common::docs::STATISTICS;

/// pass@k = 1 − C(n−c, k)/C(n, k), computed as 1 − Π_{i=n−c+1}^{n} (1 − k/i) (Chen et al.'s
/// numerically stable form); `None` when n < k.
pub fn pass_at_k(n: u64, c: u64, k: u64) -> Option<f64> {
    if k == 0 || n < k {
        return None;
    }
    if n - c < k {
        return Some(1.0);
    }
    let product: f64 = (n - c + 1..=n).map(|i| 1.0 - k as f64 / i as f64).product();
    Some(1.0 - product)
}

/// pass^k = C(c, k)/C(n, k) = Π_{i=0}^{k−1} (c−i)/(n−i); `None` when n < k.
pub fn pass_hat_k(n: u64, c: u64, k: u64) -> Option<f64> {
    if k == 0 || n < k {
        return None;
    }
    if c < k {
        return Some(0.0);
    }
    Some((0..k).map(|i| (c - i) as f64 / (n - i) as f64).product())
}

fn documentation(text: &str, usage: &str) -> Documentation {
    Documentation::builder(STATISTICS, text, usage)
        .with_argument(
            "passed",
            "Whether a sample passed (boolean, or a number: nonzero passes).",
        )
        .with_argument(
            "k",
            "How many samples are drawn, a constant integer of at least 1.",
        )
        .build()
}

static DOC_AT: LazyLock<Documentation> = LazyLock::new(|| {
    documentation(
        "pass@k over the samples of one task (group by task): with n samples of which c \
         passed, 1 - C(n-c, k)/C(n, k), the unbiased estimator of Chen et al. (2021). NULL \
         rows are left out; NULL when n < k. Average over tasks with avg().",
        "pass_at_k(passed, k)",
    )
});

static DOC_HAT: LazyLock<Documentation> = LazyLock::new(|| {
    documentation(
        "pass^k over the samples of one task (group by task): the chance that k samples \
         drawn without replacement all pass, C(c, k)/C(n, k), as tau-bench reports \
         reliability. NULL rows are left out; NULL when n < k. Average over tasks with avg().",
        "pass_hat_k(passed, k)",
    )
});

/// `pass_at_k` (`hat = false`) or `pass_hat_k`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct PassAtKFunc {
    signature: Signature,
    hat: bool,
}

impl PassAtKFunc {
    pub fn new(hat: bool) -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
            hat,
        }
    }

    fn usage(&self) -> &'static str {
        if self.hat {
            "pass_hat_k(passed, k)"
        } else {
            "pass_at_k(passed, k)"
        }
    }
}

impl AggregateUDFImpl for PassAtKFunc {
    fn name(&self) -> &str {
        if self.hat { "pass_hat_k" } else { "pass_at_k" }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let ok = arg_types
            .iter()
            .all(|t| t.is_numeric() || t.is_null() || *t == DataType::Boolean);
        check_arity(self.name(), self.usage(), arg_types, 2, 2, ok)?;
        Ok(vec![DataType::Float64, DataType::Float64])
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![
            std::sync::Arc::new(datafusion::arrow::datatypes::Field::new(
                format!("{}_n", args.name),
                DataType::UInt64,
                true,
            )),
            std::sync::Arc::new(datafusion::arrow::datatypes::Field::new(
                format!("{}_c", args.name),
                DataType::UInt64,
                true,
            )),
        ])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let constants = Constants {
            name: self.name(),
            args: &args,
        };
        let k = constants.f64_at(1, f64::NAN)?;
        if !(k.is_finite() && k >= 1.0 && k.fract() == 0.0 && k <= u32::MAX as f64) {
            return exec_err!(
                "{}: k must be a whole number of at least 1, got {k}",
                self.name()
            );
        }
        Ok(Box::new(PassAcc {
            hat: self.hat,
            k: k as u64,
            n: 0,
            c: 0,
        }))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(if self.hat { &DOC_HAT } else { &DOC_AT })
    }
}

#[derive(Debug)]
struct PassAcc {
    hat: bool,
    k: u64,
    n: u64,
    c: u64,
}

impl Accumulator for PassAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        for passed in floats(&values[0])?.iter().flatten() {
            self.n += 1;
            if passed != 0.0 {
                self.c += 1;
            }
        }
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let (n, c) = (
            states[0].as_primitive::<UInt64Type>(),
            states[1].as_primitive::<UInt64Type>(),
        );
        for (n, c) in n.iter().zip(c.iter()) {
            self.n += n.unwrap_or(0);
            self.c += c.unwrap_or(0);
        }
        Ok(())
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![
            ScalarValue::UInt64(Some(self.n)),
            ScalarValue::UInt64(Some(self.c)),
        ])
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        let value = if self.hat {
            pass_hat_k(self.n, self.c, self.k)
        } else {
            pass_at_k(self.n, self.c, self.k)
        };
        Ok(ScalarValue::Float64(value))
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact value from binomial coefficients, as rationals in u128.
    fn comb(n: u64, k: u64) -> u128 {
        if k > n {
            return 0;
        }
        (0..k).fold(1u128, |acc, i| acc * u128::from(n - i) / u128::from(i + 1))
    }

    #[test]
    fn both_match_the_binomial_definitions() {
        for n in 1..=30u64 {
            for c in 0..=n {
                for k in 1..=n {
                    let exact_at = 1.0 - comb(n - c, k) as f64 / comb(n, k) as f64;
                    let exact_hat = comb(c, k) as f64 / comb(n, k) as f64;
                    let at = pass_at_k(n, c, k).unwrap();
                    let hat = pass_hat_k(n, c, k).unwrap();
                    assert!((at - exact_at).abs() < 1e-12, "pass@{k} n={n} c={c}");
                    assert!((hat - exact_hat).abs() < 1e-12, "pass^{k} n={n} c={c}");
                }
            }
        }
        assert_eq!(pass_at_k(3, 1, 4), None);
        assert_eq!(pass_hat_k(3, 3, 4), None);
        // k = 1 is the plain pass rate either way.
        assert_eq!(pass_at_k(10, 3, 1), Some(0.30000000000000004));
        assert!((pass_hat_k(10, 3, 1).unwrap() - 0.3).abs() < 1e-15);
    }
}
