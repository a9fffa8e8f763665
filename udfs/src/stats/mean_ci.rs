//! `mean_ci(x [, confidence [, cluster]])`: the Student-t interval of a mean, as scipy
//! computes it; with `cluster`, with cluster-robust standard errors, as statsmodels does.

use std::sync::LazyLock;

use std::collections::HashMap;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::arrow::datatypes::{Float64Type, UInt64Type};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, Documentation, Signature, Volatility,
};

use super::state::{
    Constants, coerce_numeric, floats, interval, interval_fields, list_f64, list_field, list_str,
    list_u64, state_lists, state_parts,
};
use super::student_t::{MeanVar, t_quantile};
use crate::common::docs::STATISTICS;

static DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        STATISTICS,
        "The Student-t confidence interval of the mean (sample standard deviation, n-1 \
         degrees of freedom): equals scipy.stats.t.interval(confidence, n-1, loc=mean, \
         scale=scipy.stats.sem(x)). Returns Struct{mean, lower, upper, n}; lower and upper \
         are NULL below 2 values. NULLs are left out; confidence defaults to 0.95. With a \
         cluster column (questions drawn several per document, turns of one conversation), \
         the standard error is cluster-robust, se^2 = G/(G-1) * sum_g (sum_{i in g} (x_i - \
         mean))^2 / N^2, with G-1 degrees of freedom: equal to statsmodels OLS(x, \
         ones).fit(cov_type='cluster', use_t=True).conf_int(); lower and upper are NULL \
         with one cluster.",
        "mean_ci(x [, confidence [, cluster]])",
    )
    .with_argument(
        "cluster",
        "Optional: the cluster of each row (any type; rows with a NULL cluster are left out).",
    )
    .build()
});

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct MeanCiFunc {
    signature: Signature,
}

impl Default for MeanCiFunc {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for MeanCiFunc {
    fn name(&self) -> &str {
        "mean_ci"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        const USAGE: &str = "mean_ci(x [, confidence [, cluster]])";
        if arg_types.len() == 3 {
            // The cluster may be of any type: clusters are told apart as text.
            let mut types = coerce_numeric(self.name(), USAGE, &arg_types[..2], 1, 2, Some(1))?;
            types.push(DataType::Utf8);
            return Ok(types);
        }
        coerce_numeric(self.name(), USAGE, arg_types, 1, 2, Some(1))
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Struct(interval_fields()))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        if args.input_fields.len() == 3 {
            return Ok(vec![
                list_field(&args, "clusters", DataType::Utf8),
                list_field(&args, "counts", DataType::UInt64),
                list_field(&args, "sums", DataType::Float64),
            ]);
        }
        Ok(vec![list_field(&args, "count_mean_m2", DataType::Float64)])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let constants = Constants {
            name: self.name(),
            args: &args,
        };
        let confidence = constants.confidence_at(1)?;
        if args.exprs.len() == 3 {
            return Ok(Box::new(ClusterMeanCiAcc {
                confidence,
                clusters: HashMap::new(),
            }));
        }
        Ok(Box::new(MeanCiAcc {
            confidence,
            state: MeanVar::new(),
        }))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&DOC)
    }
}

#[derive(Debug)]
struct MeanCiAcc {
    confidence: f64,
    state: MeanVar,
}

impl Accumulator for MeanCiAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        for x in floats(&values[0])?.iter().flatten() {
            self.state.update(x);
        }
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        for part in state_lists(&states[0]) {
            let v = part.as_primitive::<Float64Type>();
            if v.len() == 3 {
                self.state.merge(&MeanVar {
                    count: v.value(0) as u64,
                    mean: v.value(1),
                    m2: v.value(2),
                });
            }
        }
        Ok(())
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let s = &self.state;
        Ok(vec![list_f64(vec![s.count as f64, s.mean, s.m2])])
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        let s = &self.state;
        let mean = (s.count > 0).then_some(s.mean);
        interval(mean, s.ci(self.confidence), s.count)
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }
}

/// The cluster-robust interval's state: per cluster, its rows and their sum.
#[derive(Debug)]
struct ClusterMeanCiAcc {
    confidence: f64,
    clusters: HashMap<String, (u64, f64)>,
}

/// The mean and its cluster-robust interval from per-cluster (rows, sum): with N rows in G
/// clusters, se² = G/(G−1) · Σ_g (S_g − n_g·x̄)² / N² and a Student-t quantile with G − 1
/// degrees of freedom (statsmodels' `cov_type='cluster'` with `use_t=True`; its small-sample
/// factor (N−1)/(N−K) is 1 for a mean).
pub fn cluster_ci(
    clusters: &[(u64, f64)],
    confidence: f64,
) -> (Option<f64>, Option<(f64, f64)>, u64) {
    let n: u64 = clusters.iter().map(|c| c.0).sum();
    if n == 0 {
        return (None, None, 0);
    }
    let mean = clusters.iter().map(|c| c.1).sum::<f64>() / n as f64;
    let g = clusters.len();
    if g < 2 {
        return (Some(mean), None, n);
    }
    let squares: f64 = clusters
        .iter()
        .map(|&(count, sum)| {
            let r = sum - count as f64 * mean;
            r * r
        })
        .sum();
    let se = (g as f64 / (g - 1) as f64 * squares).sqrt() / n as f64;
    if se == 0.0 {
        return (Some(mean), Some((mean, mean)), n);
    }
    let t = t_quantile((1.0 + confidence) / 2.0, (g - 1) as f64);
    (Some(mean), Some((mean - t * se, mean + t * se)), n)
}

impl Accumulator for ClusterMeanCiAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let x = floats(&values[0])?;
        let cluster = cast(&values[2], &DataType::Utf8)?;
        let cluster = cluster.as_string::<i32>();
        for i in 0..x.len() {
            if x.is_null(i) || cluster.is_null(i) {
                continue;
            }
            let entry = self
                .clusters
                .entry(cluster.value(i).to_string())
                .or_insert((0, 0.0));
            entry.0 += 1;
            entry.1 += x.value(i);
        }
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        for part in state_parts(states) {
            let (keys, counts, sums) = (
                part[0].as_string::<i32>(),
                part[1].as_primitive::<UInt64Type>(),
                part[2].as_primitive::<Float64Type>(),
            );
            for i in 0..keys.len() {
                let entry = self
                    .clusters
                    .entry(keys.value(i).to_string())
                    .or_insert((0, 0.0));
                entry.0 += counts.value(i);
                entry.1 += sums.value(i);
            }
        }
        Ok(())
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let mut entries: Vec<(&String, &(u64, f64))> = self.clusters.iter().collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        Ok(vec![
            list_str(entries.iter().map(|e| e.0.as_str()).collect()),
            list_u64(entries.iter().map(|e| e.1.0).collect()),
            list_f64(entries.iter().map(|e| e.1.1).collect()),
        ])
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        // Sorted, so the sums add up in the same order however rows were partitioned.
        let mut entries: Vec<(&String, &(u64, f64))> = self.clusters.iter().collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        let clusters: Vec<(u64, f64)> = entries.into_iter().map(|e| *e.1).collect();
        let (mean, ci, n) = cluster_ci(&clusters, self.confidence);
        interval(mean, ci, n)
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.clusters.len() * 64
    }
}
