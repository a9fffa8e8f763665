//! `mean_ci(x [, confidence])`: the Student-t interval of a mean, as scipy computes it.

use std::sync::LazyLock;

use datafusion::arrow::array::{ArrayRef, AsArray};
use datafusion::arrow::datatypes::Float64Type;
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, Documentation, Signature, Volatility,
};

use super::state::{
    Constants, coerce_numeric, floats, interval, interval_fields, list_f64, list_field, state_lists,
};
use super::student_t::MeanVar;
use crate::common::docs::STATISTICS;

static DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        STATISTICS,
        "The Student-t confidence interval of the mean (sample standard deviation, n-1 \
         degrees of freedom): equals scipy.stats.t.interval(confidence, n-1, loc=mean, \
         scale=scipy.stats.sem(x)). Returns Struct{mean, lower, upper, n}; lower and upper \
         are NULL below 2 values. NULLs are left out; confidence defaults to 0.95.",
        "mean_ci(x [, confidence])",
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
        coerce_numeric(
            self.name(),
            "mean_ci(x [, confidence])",
            arg_types,
            1,
            2,
            Some(1),
        )
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Struct(interval_fields()))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![list_field(&args, "count_mean_m2", DataType::Float64)])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let constants = Constants {
            name: self.name(),
            args: &args,
        };
        Ok(Box::new(MeanCiAcc {
            confidence: constants.confidence_at(1)?,
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
