//! `fdr_bh(p_value) OVER (...)`: Benjamini–Hochberg adjusted p-values (q-values) over the
//! window's rows, as `statsmodels.stats.multitest.multipletests(p, method='fdr_bh')[1]`
//! computes them: sort, scale the i-th smallest by n/i, take the running minimum from the
//! largest down, cap at 1. For many slices tested at once ("which slices really
//! regressed"), a q-value below 0.05 keeps the expected share of false discoveries under 5%.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, Float64Array};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{Result, exec_err, plan_err};
use datafusion::logical_expr::function::{PartitionEvaluatorArgs, WindowUDFFieldArgs};
use datafusion::logical_expr::{
    Documentation, PartitionEvaluator, Signature, Volatility, WindowUDFImpl,
};

use super::state::floats;
use crate::common::docs::STATISTICS;

/// The Benjamini–Hochberg adjustment of `p` (NULLs stay NULL and are not counted).
pub fn adjust(p: &[Option<f64>]) -> std::result::Result<Vec<Option<f64>>, f64> {
    let mut present: Vec<(usize, f64)> = Vec::with_capacity(p.len());
    for (i, v) in p.iter().enumerate() {
        if let Some(v) = v {
            if !(0.0..=1.0).contains(v) {
                return Err(*v);
            }
            present.push((i, *v));
        }
    }
    // Stable by value: ties get the same adjusted value whatever their order.
    present.sort_by(|a, b| a.1.total_cmp(&b.1));
    let n = present.len() as f64;
    let mut out = vec![None; p.len()];
    let mut running = f64::INFINITY;
    for (rank, &(i, v)) in present.iter().enumerate().rev() {
        // statsmodels: pvals_sorted / (arange(1, n+1) / n), running minimum from the end.
        let raw = v / ((rank + 1) as f64 / n);
        running = running.min(raw);
        out[i] = Some(running.min(1.0));
    }
    Ok(out)
}

static DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        STATISTICS,
        "Benjamini-Hochberg adjusted p-values (q-values) over the window's rows, a window \
         function: fdr_bh(p) OVER () over all rows, OVER (PARTITION BY family) per family of \
         tests. Equal to statsmodels multipletests(p, method='fdr_bh')[1]. NULL p-values stay \
         NULL and are not counted; a p-value outside [0, 1] is an error.",
        "fdr_bh(p_value) OVER (...)",
    )
    .with_argument("p_value", "A p-value, from 0 to 1.")
    .build()
});

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FdrBhFunc {
    signature: Signature,
}

impl Default for FdrBhFunc {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl WindowUDFImpl for FdrBhFunc {
    fn name(&self) -> &str {
        "fdr_bh"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        match arg_types {
            [t] if t.is_numeric() || t.is_null() => Ok(vec![DataType::Float64]),
            _ => {
                let types: Vec<String> = arg_types.iter().map(|t| t.to_string()).collect();
                plan_err!(
                    "fdr_bh({}) does not match fdr_bh(p_value) OVER (...)",
                    types.join(", ")
                )
            }
        }
    }

    fn partition_evaluator(
        &self,
        _args: PartitionEvaluatorArgs,
    ) -> Result<Box<dyn PartitionEvaluator>> {
        Ok(Box::new(FdrBhEvaluator))
    }

    fn field(&self, field_args: WindowUDFFieldArgs) -> Result<FieldRef> {
        Ok(Arc::new(Field::new(
            field_args.name(),
            DataType::Float64,
            true,
        )))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&DOC)
    }
}

#[derive(Debug)]
struct FdrBhEvaluator;

impl PartitionEvaluator for FdrBhEvaluator {
    fn evaluate_all(&mut self, values: &[ArrayRef], _num_rows: usize) -> Result<ArrayRef> {
        let p = floats(&values[0])?;
        let p: Vec<Option<f64>> = (0..p.len())
            .map(|i| (!p.is_null(i)).then(|| p.value(i)))
            .collect();
        match adjust(&p) {
            Ok(q) => Ok(Arc::new(Float64Array::from(q))),
            Err(bad) => exec_err!("fdr_bh: a p-value must be from 0 to 1, got {bad}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_statsmodels() {
        // multipletests([0.01, 0.04, 0.03, 0.2, 0.04], method='fdr_bh')[1]
        let q = adjust(&[
            Some(0.01),
            Some(0.04),
            Some(0.03),
            Some(0.2),
            None,
            Some(0.04),
        ])
        .unwrap();
        let want = [
            Some(0.05),
            Some(0.05),
            Some(0.05),
            Some(0.2),
            None,
            Some(0.05),
        ];
        for (g, w) in q.iter().zip(want) {
            match (g, w) {
                (Some(g), Some(w)) => assert!((g - w).abs() < 1e-15, "{g} vs {w}"),
                (None, None) => {}
                _ => panic!("{q:?}"),
            }
        }
        assert_eq!(adjust(&[Some(1.5)]), Err(1.5));
        assert_eq!(adjust(&[None]), Ok(vec![None]));
    }
}
