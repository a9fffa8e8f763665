//! `paired_bootstrap_pvalue(a, b [, resamples, seed])`: the paired bootstrap test of two
//! systems scored on the same rows.

use std::sync::LazyLock;

use datafusion::arrow::array::{ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::arrow::datatypes::{Float64Type, UInt64Type};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, Documentation, Signature, Volatility,
};

use super::bootstrap::{DEFAULT_SEED, PairedBootstrapState};
use super::state::{
    Constants, coerce_numeric, floats, list_f64, list_field, list_u64, state_parts,
};
use crate::common::docs::STATISTICS;

static DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        STATISTICS,
        "Two-sided paired bootstrap p-value for mean(a) - mean(b) over rows scored by both \
         systems (rows with a NULL side are left out): p = (1 + #{|d_i - d| >= |d|}) / (1 + \
         B) over the resampled differences d_i (Koehn 2004, Berg-Kirkpatrick et al. 2012), \
         1 when d = 0. Same Poisson bootstrap as bootstrap_ci. Defaults: 2000 resamples, \
         seed 42.",
        "paired_bootstrap_pvalue(a, b [, resamples [, seed]])",
    )
    .build()
});

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct PairedBootstrapPvalueFunc {
    signature: Signature,
}

impl Default for PairedBootstrapPvalueFunc {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for PairedBootstrapPvalueFunc {
    fn name(&self) -> &str {
        "paired_bootstrap_pvalue"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let usage = "paired_bootstrap_pvalue(a, b [, resamples [, seed]])";
        coerce_numeric(self.name(), usage, arg_types, 2, 4, None)
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![
            list_field(&args, "a", DataType::Float64),
            list_field(&args, "b", DataType::Float64),
            list_field(&args, "counts", DataType::UInt64),
        ])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let constants = Constants {
            name: self.name(),
            args: &args,
        };
        Ok(Box::new(PairedAcc {
            state: PairedBootstrapState::new(
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
