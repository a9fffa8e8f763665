//! The statistics aggregates over the kernels of this module:
//! `mean_ci`, `bootstrap_ci`, `paired_bootstrap_pvalue` and `cohen_kappa`.
//!
//! Partial states travel between partitions as lists (distinct values with counts, label
//! pairs with counts), so every result is the same however rows are partitioned.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, ListArray, StringArray, UInt64Array,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields, Float64Type, UInt64Type};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, Documentation, Signature, Volatility,
};
use datafusion::physical_expr::expressions::Literal;

use super::bootstrap::{
    BootstrapState, DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, DEFAULT_SEED, PairedBootstrapState,
};
use super::kappa::KappaState;
use super::student_t::MeanVar;
use crate::common::docs::STATISTICS;

/// Which statistic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Stat {
    MeanCi,
    BootstrapCi,
    PairedPValue,
    Kappa,
}

/// One of the statistics aggregates.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct StatFunc {
    stat: Stat,
    signature: Signature,
}

impl StatFunc {
    fn new(stat: Stat) -> Self {
        Self {
            stat,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
    pub fn mean_ci() -> Self {
        Self::new(Stat::MeanCi)
    }
    pub fn bootstrap_ci() -> Self {
        Self::new(Stat::BootstrapCi)
    }
    pub fn paired_bootstrap_pvalue() -> Self {
        Self::new(Stat::PairedPValue)
    }
    pub fn cohen_kappa() -> Self {
        Self::new(Stat::Kappa)
    }

    fn usage(&self) -> &'static str {
        match self.stat {
            Stat::MeanCi => "mean_ci(x [, confidence])",
            Stat::BootstrapCi => "bootstrap_ci(x [, confidence [, resamples [, seed]]])",
            Stat::PairedPValue => "paired_bootstrap_pvalue(a, b [, resamples [, seed]])",
            Stat::Kappa => "cohen_kappa(a, b)",
        }
    }
}

/// `Struct{mean, lower, upper, n}` of the interval aggregates.
fn interval_fields() -> Fields {
    Fields::from(vec![
        Field::new("mean", DataType::Float64, true),
        Field::new("lower", DataType::Float64, true),
        Field::new("upper", DataType::Float64, true),
        Field::new("n", DataType::UInt64, true),
    ])
}

static DOCS: LazyLock<[Documentation; 4]> = LazyLock::new(|| {
    [
        Documentation::builder(
            STATISTICS,
            "The Student-t confidence interval of the mean (sample standard deviation, n-1 \
             degrees of freedom): equals scipy.stats.t.interval(confidence, n-1, loc=mean, \
             scale=scipy.stats.sem(x)). Returns Struct{mean, lower, upper, n}; lower and upper \
             are NULL below 2 values. NULLs are left out; confidence defaults to 0.95.",
            "mean_ci(x [, confidence])",
        )
        .build(),
        Documentation::builder(
            STATISTICS,
            "A percentile bootstrap interval of the mean. Poisson bootstrap: each resample \
             weighs a value seen m times by a Poisson(m) draw seeded by a hash of (seed, \
             resample, value), so the result is identical however rows are partitioned or \
             ordered. Agrees with scipy.stats.bootstrap(method='percentile') within Monte-Carlo \
             error. Returns Struct{mean, lower, upper, n}. Defaults: confidence 0.95, 2000 \
             resamples, seed 42.",
            "bootstrap_ci(x [, confidence [, resamples [, seed]]])",
        )
        .build(),
        Documentation::builder(
            STATISTICS,
            "Two-sided paired bootstrap p-value for mean(a) - mean(b) over rows scored by both \
             systems (rows with a NULL side are left out): p = (1 + #{|d_i - d| >= |d|}) / (1 + \
             B) over the resampled differences d_i (Koehn 2004, Berg-Kirkpatrick et al. 2012), \
             1 when d = 0. Same Poisson bootstrap as bootstrap_ci. Defaults: 2000 resamples, \
             seed 42.",
            "paired_bootstrap_pvalue(a, b [, resamples [, seed]])",
        )
        .build(),
        Documentation::builder(
            STATISTICS,
            "Cohen's kappa between two raters' labels (integers, strings or booleans; numbers \
             compare by value), equal to sklearn.metrics.cohen_kappa_score. Rows with a NULL \
             label are left out; NULL when there is no row or both raters used a single label.",
            "cohen_kappa(a, b)",
        )
        .build(),
    ]
});

impl AggregateUDFImpl for StatFunc {
    fn name(&self) -> &str {
        match self.stat {
            Stat::MeanCi => "mean_ci",
            Stat::BootstrapCi => "bootstrap_ci",
            Stat::PairedPValue => "paired_bootstrap_pvalue",
            Stat::Kappa => "cohen_kappa",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let numeric = |t: &DataType| t.is_numeric() || t.is_null() || *t == DataType::Boolean;
        let (values, max_args) = match self.stat {
            Stat::MeanCi => (1, 2),
            Stat::BootstrapCi => (1, 4),
            Stat::PairedPValue => (2, 4),
            Stat::Kappa => (2, 2),
        };
        let ok = arg_types.len() >= values
            && arg_types.len() <= max_args
            && (self.stat == Stat::Kappa || arg_types.iter().all(numeric));
        if !ok {
            let types: Vec<String> = arg_types.iter().map(|t| t.to_string()).collect();
            return plan_err!(
                "{}({}) does not match {}",
                self.name(),
                types.join(", "),
                self.usage()
            );
        }
        Ok(arg_types
            .iter()
            .enumerate()
            .map(|(i, t)| match self.stat {
                Stat::Kappa => label_type(t, &arg_types[1 - i]),
                _ if i < values => DataType::Float64,
                // confidence is a fraction; resamples and seed are integers.
                Stat::BootstrapCi if i == 1 => DataType::Float64,
                Stat::MeanCi => DataType::Float64,
                _ => DataType::UInt64,
            })
            .collect())
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(match self.stat {
            Stat::MeanCi | Stat::BootstrapCi => DataType::Struct(interval_fields()),
            Stat::PairedPValue | Stat::Kappa => DataType::Float64,
        })
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let list = |name: &str, t: DataType| {
            Arc::new(Field::new(
                format!("{}[{name}]", args.name),
                DataType::List(Arc::new(Field::new("item", t, true))),
                true,
            ))
        };
        Ok(match self.stat {
            Stat::MeanCi => vec![list("count_mean_m2", DataType::Float64)],
            Stat::BootstrapCi => vec![
                list("values", DataType::Float64),
                list("counts", DataType::UInt64),
            ],
            Stat::PairedPValue => vec![
                list("a", DataType::Float64),
                list("b", DataType::Float64),
                list("counts", DataType::UInt64),
            ],
            Stat::Kappa => vec![
                list("a", DataType::Utf8),
                list("b", DataType::Utf8),
                list("counts", DataType::UInt64),
            ],
        })
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let constant = |i: usize| -> Result<Option<ScalarValue>> {
            match args.exprs.get(i) {
                None => Ok(None),
                Some(e) => match e.downcast_ref::<Literal>() {
                    Some(l) if !l.value().is_null() => Ok(Some(l.value().clone())),
                    _ => exec_err!("{}: argument {} must be a constant", self.name(), i + 1),
                },
            }
        };
        let f64_at = |i: usize, default: f64| -> Result<f64> {
            Ok(match constant(i)? {
                Some(v) => match v.cast_to(&DataType::Float64)? {
                    ScalarValue::Float64(Some(x)) => x,
                    _ => default,
                },
                None => default,
            })
        };
        let u64_at = |i: usize, default: u64| -> Result<u64> {
            Ok(match constant(i)? {
                Some(v) => match v.cast_to(&DataType::UInt64)? {
                    ScalarValue::UInt64(Some(x)) => x,
                    _ => default,
                },
                None => default,
            })
        };
        let confidence_at = |i: usize| -> Result<f64> {
            let c = f64_at(i, DEFAULT_CONFIDENCE)?;
            if !(c > 0.0 && c < 1.0) {
                return exec_err!(
                    "{}: confidence must be between 0 and 1, got {c}",
                    self.name()
                );
            }
            Ok(c)
        };
        let resamples_at = |i: usize| -> Result<usize> {
            let r = u64_at(i, DEFAULT_RESAMPLES as u64)?;
            if !(1..=1_000_000).contains(&r) {
                return exec_err!("{}: resamples must be 1 to 1000000, got {r}", self.name());
            }
            Ok(r as usize)
        };
        Ok(match self.stat {
            Stat::MeanCi => Box::new(MeanCiAcc {
                confidence: confidence_at(1)?,
                state: MeanVar::new(),
            }),
            Stat::BootstrapCi => Box::new(BootstrapAcc {
                confidence: confidence_at(1)?,
                state: BootstrapState::new(u64_at(3, DEFAULT_SEED)?, resamples_at(2)?),
            }),
            Stat::PairedPValue => Box::new(PairedAcc {
                state: PairedBootstrapState::new(u64_at(3, DEFAULT_SEED)?, resamples_at(2)?),
            }),
            Stat::Kappa => Box::new(KappaAcc {
                state: KappaState::new(),
            }),
        })
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(
            &DOCS[match self.stat {
                Stat::MeanCi => 0,
                Stat::BootstrapCi => 1,
                Stat::PairedPValue => 2,
                Stat::Kappa => 3,
            }],
        )
    }
}

/// Kappa labels: numbers by value (both sides as Float64 when both are numeric), otherwise
/// text.
fn label_type(t: &DataType, other: &DataType) -> DataType {
    if t.is_numeric() && (other.is_numeric() || other.is_null()) {
        DataType::Float64
    } else {
        DataType::Utf8
    }
}

fn floats(a: &ArrayRef) -> Result<Float64Array> {
    Ok(cast(a, &DataType::Float64)?
        .as_primitive::<Float64Type>()
        .clone())
}

fn list_f64(v: Vec<f64>) -> ScalarValue {
    ScalarValue::List(Arc::new(
        ListArray::from_iter_primitive::<Float64Type, _, _>([Some(
            v.into_iter().map(Some).collect::<Vec<_>>(),
        )]),
    ))
}

fn list_u64(v: Vec<u64>) -> ScalarValue {
    ScalarValue::List(Arc::new(
        ListArray::from_iter_primitive::<UInt64Type, _, _>([Some(
            v.into_iter().map(Some).collect::<Vec<_>>(),
        )]),
    ))
}

fn list_str(v: Vec<&str>) -> ScalarValue {
    let values = Arc::new(StringArray::from(v)) as ArrayRef;
    ScalarValue::List(Arc::new(ListArray::new(
        Arc::new(Field::new("item", DataType::Utf8, true)),
        datafusion::arrow::buffer::OffsetBuffer::from_lengths([values.len()]),
        values,
        None,
    )))
}

/// The non-NULL lists of a state column, flattened per partial state.
fn state_lists(a: &ArrayRef) -> Vec<ArrayRef> {
    let list = a.as_list::<i32>();
    (0..list.len())
        .filter(|&i| !list.is_null(i))
        .map(|i| list.value(i))
        .collect()
}

/// The partial states of list-valued state columns, aligned: per partial state, one list
/// per state column.
fn state_parts(states: &[ArrayRef]) -> Vec<Vec<ArrayRef>> {
    let lists: Vec<Vec<ArrayRef>> = states.iter().map(state_lists).collect();
    let parts = lists.iter().map(Vec::len).min().unwrap_or(0);
    (0..parts)
        .map(|i| lists.iter().map(|l| Arc::clone(&l[i])).collect())
        .collect()
}

fn interval(mean: Option<f64>, ci: Option<(f64, f64)>, n: u64) -> Result<ScalarValue> {
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

#[derive(Debug)]
struct BootstrapAcc {
    confidence: f64,
    state: BootstrapState,
}

impl Accumulator for BootstrapAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        for x in floats(&values[0])?.iter().flatten() {
            self.state.update(x);
        }
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        for part in state_parts(states) {
            let values = part[0].as_primitive::<Float64Type>();
            let counts = part[1].as_primitive::<UInt64Type>();
            for (v, c) in values.values().iter().zip(counts.values().iter()) {
                self.state.update_count(*v, *c);
            }
        }
        Ok(())
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let entries = self.state.entries();
        Ok(vec![
            list_f64(entries.iter().map(|e| e.0).collect()),
            list_u64(entries.iter().map(|e| e.1).collect()),
        ])
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        let n = self.state.rows();
        // Over the distinct values in ascending order: the same sum for any partitioning.
        let total: f64 = self
            .state
            .entries()
            .iter()
            .map(|(v, c)| v * *c as f64)
            .sum();
        let mean = (n > 0).then(|| total / n as f64);
        interval(mean, self.state.ci(self.confidence), n)
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.state.entries().len() * 16
    }
}

#[derive(Debug)]
struct PairedAcc {
    state: PairedBootstrapState,
}

impl Accumulator for PairedAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let (a, b) = (floats(&values[0])?, floats(&values[1])?);
        for (x, y) in a.iter().zip(b.iter()) {
            if let (Some(x), Some(y)) = (x, y) {
                self.state.update(x, y);
            }
        }
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        for part in state_parts(states) {
            let (a, b, c) = (
                part[0].as_primitive::<Float64Type>(),
                part[1].as_primitive::<Float64Type>(),
                part[2].as_primitive::<UInt64Type>(),
            );
            for i in 0..a.len() {
                self.state.update_count(a.value(i), b.value(i), c.value(i));
            }
        }
        Ok(())
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let entries = self.state.entries();
        Ok(vec![
            list_f64(entries.iter().map(|e| e.0).collect()),
            list_f64(entries.iter().map(|e| e.1).collect()),
            list_u64(entries.iter().map(|e| e.2).collect()),
        ])
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Float64(self.state.p_value()))
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.state.entries().len() * 24
    }
}

#[derive(Debug)]
struct KappaAcc {
    state: KappaState,
}

/// A label as text: numbers by value (`1`, `1.0` and `1e0` are one label), text as it is.
fn labels(a: &ArrayRef) -> Result<Vec<Option<String>>> {
    Ok(match a.data_type() {
        DataType::Float64 => a
            .as_primitive::<Float64Type>()
            .iter()
            .map(|v| v.map(|v| format!("{v}")))
            .collect(),
        _ => cast(a, &DataType::Utf8)?
            .as_string::<i32>()
            .iter()
            .map(|v| v.map(str::to_string))
            .collect(),
    })
}

impl Accumulator for KappaAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        for (a, b) in labels(&values[0])?.iter().zip(labels(&values[1])?.iter()) {
            if let (Some(a), Some(b)) = (a, b) {
                self.state.update(a, b);
            }
        }
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        for part in state_parts(states) {
            let (a, b, c) = (
                part[0].as_string::<i32>(),
                part[1].as_string::<i32>(),
                part[2].as_primitive::<UInt64Type>(),
            );
            for i in 0..a.len() {
                self.state.update_count(a.value(i), b.value(i), c.value(i));
            }
        }
        Ok(())
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let entries = self.state.entries();
        Ok(vec![
            list_str(entries.iter().map(|e| e.0).collect()),
            list_str(entries.iter().map(|e| e.1).collect()),
            list_u64(entries.iter().map(|e| e.2).collect()),
        ])
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Float64(self.state.kappa()))
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.state.entries().len() * 48
    }
}
