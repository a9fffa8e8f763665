//! `bootstrap_ci(x [, confidence, resamples, seed])`: a percentile bootstrap interval of a mean
//! (the Poisson bootstrap of [`super::bootstrap`]).

use std::sync::LazyLock;

use datafusion::arrow::array::{ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::arrow::datatypes::{Float64Type, UInt64Type};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, Documentation, Signature, Volatility,
};

use super::bootstrap::{BootstrapState, DEFAULT_SEED};
use super::state::{
    Constants, coerce_numeric, floats, interval, interval_fields, list_f64, list_field, list_u64,
    state_parts,
};
use crate::common::docs::STATISTICS;

static DOC: LazyLock<Documentation> = LazyLock::new(|| {
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
    .build()
});

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct BootstrapCiFunc {
    signature: Signature,
}

impl Default for BootstrapCiFunc {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for BootstrapCiFunc {
    fn name(&self) -> &str {
        "bootstrap_ci"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let usage = "bootstrap_ci(x [, confidence [, resamples [, seed]]])";
        coerce_numeric(self.name(), usage, arg_types, 1, 4, Some(1))
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Struct(interval_fields()))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![
            list_field(&args, "values", DataType::Float64),
            list_field(&args, "counts", DataType::UInt64),
        ])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let constants = Constants {
            name: self.name(),
            args: &args,
        };
        Ok(Box::new(BootstrapAcc {
            confidence: constants.confidence_at(1)?,
            state: BootstrapState::new(
                constants.u64_at(3, DEFAULT_SEED)?,
                constants.resamples_at(2)?,
            ),
        }))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&DOC)
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
