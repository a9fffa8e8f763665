//! `ppi_mean_ci(judge_score, human_score [, confidence])`: prediction-powered inference of a
//! mean (Angelopoulos et al., Science 2023) with the power-tuned λ of PPI++ (Angelopoulos,
//! Duchi and Zrnic, 2024), as `ppi_py.ppi_mean_ci` and `ppi_mean_pointestimate` (PyPI
//! `ppi-python` 0.2.3) compute it.
//!
//! Rows with a human score are the labeled sample (Y = human, Ŷ = judge); rows without one
//! give their judge score as unlabeled data (Ŷu). With n labeled and N unlabeled rows:
//! λ = clip(cov(Y, Ŷ) / ((1 + n/N) · var(Ŷ ∪ Ŷu)), 0, 1) (population covariance, sample
//! variance of the pooled judge scores), θ = λ·mean(Ŷu) + mean(Y − λŶ), and the normal
//! interval θ ± z · √(var(λŶu)/N + var(Y − λŶ)/n) (population variances). All of it comes
//! from mergeable moments, so partitions combine.

use std::sync::LazyLock;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array, StructArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields, Float64Type};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, Documentation, Signature, Volatility,
};

use super::state::{Constants, coerce_numeric, floats, list_f64, list_field, state_lists};
use super::student_t::{MeanVar, t_quantile};
use crate::common::docs::STATISTICS;

/// Streaming moments of labeled pairs (Y, Ŷ): means, sums of squares and the co-moment,
/// merged by the pairwise formulas.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PairMoments {
    pub n: u64,
    pub mean_y: f64,
    pub mean_h: f64,
    pub m2_y: f64,
    pub m2_h: f64,
    pub c_yh: f64,
}

impl PairMoments {
    pub fn update(&mut self, y: f64, h: f64) {
        self.n += 1;
        let n = self.n as f64;
        let (dy, dh) = (y - self.mean_y, h - self.mean_h);
        self.mean_y += dy / n;
        self.mean_h += dh / n;
        self.m2_y += dy * (y - self.mean_y);
        self.m2_h += dh * (h - self.mean_h);
        self.c_yh += dy * (h - self.mean_h);
    }

    pub fn merge(&mut self, o: &PairMoments) {
        if o.n == 0 {
            return;
        }
        if self.n == 0 {
            *self = *o;
            return;
        }
        let (na, nb) = (self.n as f64, o.n as f64);
        let nf = na + nb;
        let (dy, dh) = (o.mean_y - self.mean_y, o.mean_h - self.mean_h);
        self.mean_y += dy * nb / nf;
        self.mean_h += dh * nb / nf;
        self.m2_y += o.m2_y + dy * dy * na * nb / nf;
        self.m2_h += o.m2_h + dh * dh * na * nb / nf;
        self.c_yh += o.c_yh + dy * dh * na * nb / nf;
        self.n += o.n;
    }

    /// The judge scores' moments alone.
    fn judge(&self) -> MeanVar {
        MeanVar {
            count: self.n,
            mean: self.mean_h,
            m2: self.m2_h,
        }
    }
}

/// The estimate: (λ, mean, lower, upper); `None` without labeled or unlabeled rows, or when
/// λ is undefined (every judge score equal).
pub fn ppi_mean(
    labeled: &PairMoments,
    unlabeled: &MeanVar,
    confidence: f64,
) -> Option<(f64, f64, f64, f64)> {
    if labeled.n == 0 || unlabeled.count == 0 {
        return None;
    }
    let (n, big_n) = (labeled.n as f64, unlabeled.count as f64);
    let mut pooled = labeled.judge();
    pooled.merge(unlabeled);
    let var_pooled = pooled.m2 / (pooled.count as f64 - 1.0);
    let lambda = (labeled.c_yh / n) / ((1.0 + n / big_n) * var_pooled);
    if !lambda.is_finite() {
        return None;
    }
    let lambda = lambda.clamp(0.0, 1.0);
    let mean = lambda * unlabeled.mean + (labeled.mean_y - lambda * labeled.mean_h);
    let imputed = lambda * lambda * (unlabeled.m2 / big_n) / big_n;
    let rectifier = ((labeled.m2_y + lambda * lambda * labeled.m2_h - 2.0 * lambda * labeled.c_yh)
        / n)
        .max(0.0)
        / n;
    let se = (imputed + rectifier).sqrt();
    let z = t_quantile((1.0 + confidence) / 2.0, f64::INFINITY);
    Some((lambda, mean, mean - z * se, mean + z * se))
}

fn result_fields() -> Fields {
    Fields::from(vec![
        Field::new("mean", DataType::Float64, true),
        Field::new("lower", DataType::Float64, true),
        Field::new("upper", DataType::Float64, true),
        Field::new("n_labeled", DataType::UInt64, true),
        Field::new("n_unlabeled", DataType::UInt64, true),
        Field::new("lambda", DataType::Float64, true),
    ])
}

static DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        STATISTICS,
        "Prediction-powered inference of a mean (PPI++, power-tuned): a judged average \
         corrected by the rows a human also scored. Rows with a human score are the labeled \
         sample, rows without one contribute their judge score. Returns Struct{mean, lower, \
         upper, n_labeled, n_unlabeled, lambda}; equal to ppi_py.ppi_mean_ci(Y, Yhat, \
         Yhat_unlabeled, alpha=1-confidence) and ppi_mean_pointestimate (ppi-python 0.2.3). \
         Works for 0/1 pass indicators too. Rows without a judge score are left out; NULL \
         without labeled or unlabeled rows or when every judge score is equal.",
        "ppi_mean_ci(judge_score, human_score [, confidence])",
    )
    .with_argument("judge_score", "The judge's score of the row.")
    .with_argument(
        "human_score",
        "The human's score, NULL for rows no human labeled.",
    )
    .with_argument(
        "confidence",
        "Optional: the interval's level, default 0.95.",
    )
    .build()
});

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct PpiMeanCiFunc {
    signature: Signature,
}

impl Default for PpiMeanCiFunc {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for PpiMeanCiFunc {
    fn name(&self) -> &str {
        "ppi_mean_ci"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        coerce_numeric(
            self.name(),
            "ppi_mean_ci(judge_score, human_score [, confidence])",
            arg_types,
            2,
            3,
            Some(2),
        )
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Struct(result_fields()))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![list_field(&args, "moments", DataType::Float64)])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let constants = Constants {
            name: self.name(),
            args: &args,
        };
        Ok(Box::new(PpiAcc {
            confidence: constants.confidence_at(2)?,
            labeled: PairMoments::default(),
            unlabeled: MeanVar::new(),
        }))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&DOC)
    }
}

#[derive(Debug)]
struct PpiAcc {
    confidence: f64,
    labeled: PairMoments,
    unlabeled: MeanVar,
}

impl Accumulator for PpiAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let (judge, human) = (floats(&values[0])?, floats(&values[1])?);
        for i in 0..judge.len() {
            if judge.is_null(i) {
                continue;
            }
            match human.is_null(i) {
                true => self.unlabeled.update(judge.value(i)),
                false => self.labeled.update(human.value(i), judge.value(i)),
            }
        }
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        for part in state_lists(&states[0]) {
            let v = part.as_primitive::<Float64Type>();
            if v.len() == 9 {
                self.labeled.merge(&PairMoments {
                    n: v.value(0) as u64,
                    mean_y: v.value(1),
                    mean_h: v.value(2),
                    m2_y: v.value(3),
                    m2_h: v.value(4),
                    c_yh: v.value(5),
                });
                self.unlabeled.merge(&MeanVar {
                    count: v.value(6) as u64,
                    mean: v.value(7),
                    m2: v.value(8),
                });
            }
        }
        Ok(())
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let (l, u) = (&self.labeled, &self.unlabeled);
        Ok(vec![list_f64(vec![
            l.n as f64,
            l.mean_y,
            l.mean_h,
            l.m2_y,
            l.m2_h,
            l.c_yh,
            u.count as f64,
            u.mean,
            u.m2,
        ])])
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        let estimate = ppi_mean(&self.labeled, &self.unlabeled, self.confidence);
        let pick = |f: fn(&(f64, f64, f64, f64)) -> f64| estimate.as_ref().map(f);
        let columns: Vec<ArrayRef> = vec![
            std::sync::Arc::new(Float64Array::from(vec![pick(|e| e.1)])),
            std::sync::Arc::new(Float64Array::from(vec![pick(|e| e.2)])),
            std::sync::Arc::new(Float64Array::from(vec![pick(|e| e.3)])),
            std::sync::Arc::new(UInt64Array::from(vec![Some(self.labeled.n)])),
            std::sync::Arc::new(UInt64Array::from(vec![Some(self.unlabeled.count)])),
            std::sync::Arc::new(Float64Array::from(vec![pick(|e| e.0)])),
        ];
        Ok(ScalarValue::Struct(std::sync::Arc::new(StructArray::new(
            result_fields(),
            columns,
            None,
        ))))
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }
}
