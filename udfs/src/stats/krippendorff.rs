//! `krippendorff_alpha(unit, rater, value [, level])`: Krippendorff's alpha over ratings in
//! long format (one row per rating), as `krippendorff.alpha(reliability_data,
//! level_of_measurement=level)` (PyPI `krippendorff` 0.9.0) computes it.
//!
//! α = 1 − Σ o·d / Σ e·d with the coincidence matrix o (o_vw = Σ_u (c_uv c_uw − [v=w] c_uv)
//! / (m_u − 1), m_u = max(ratings of unit u, 2)), the expected coincidences e_vw = (n_v n_w −
//! [v=w] n_v) / (n − 1) with n_v = Σ_w o_vw, and the level's distance d. Every distance is 0
//! on the diagonal, so Σ e·d = Σ_vw n_v n_w d_vw / (n − 1), and no V × V matrix is ever
//! built: interval and nominal sums are closed forms, ordinal and ratio walk the pairs of
//! distinct values with O(V) memory.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::LazyLock;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, FieldRef, Float64Type};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, Documentation, Signature, Volatility,
};

use super::state::{Constants, check_arity, list_f64, list_field, list_str, state_parts};
use crate::common::docs::STATISTICS;

/// Steven's level of measurement: which distance compares two values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Nominal,
    Ordinal,
    Interval,
    Ratio,
}

impl Level {
    pub fn named(name: &str) -> Option<Level> {
        match name.trim().to_ascii_lowercase().as_str() {
            "nominal" => Some(Level::Nominal),
            "ordinal" => Some(Level::Ordinal),
            "interval" => Some(Level::Interval),
            "ratio" => Some(Level::Ratio),
            _ => None,
        }
    }
}

/// Alpha of `units`, each the values its raters gave (as indices into `domain`, the sorted
/// distinct values). `None` where the reference raises: fewer than two distinct values, or
/// no unit rated at least twice.
pub fn alpha(units: &[Vec<usize>], domain: &[f64], level: Level) -> Option<f64> {
    let v = domain.len();
    if v <= 1 || units.iter().all(|u| u.len() <= 1) {
        return None;
    }
    // Per unit: its values' counts; n_v from the coincidences' row sums, which equal each
    // value's pairable count: Σ_w o_vw = Σ_u c_uv (m_u − 1)/(m_u − 1) over units with m_u ≥ 2.
    let mut n = vec![0.0f64; v];
    let mut per_unit: Vec<(Vec<(usize, f64)>, f64)> = Vec::with_capacity(units.len());
    for unit in units {
        let mut counts: BTreeMap<usize, f64> = BTreeMap::new();
        for &i in unit {
            *counts.entry(i).or_insert(0.0) += 1.0;
        }
        let m = unit.len();
        if m >= 2 {
            for (&i, &c) in &counts {
                n[i] += c;
            }
        }
        per_unit.push((counts.into_iter().collect(), m.max(2) as f64));
    }
    // Ordinal distances: (Σ_{k=i..j} n_k − (n_i + n_j)/2)², from prefix sums.
    let mut prefix = vec![0.0f64; v + 1];
    for i in 0..v {
        prefix[i + 1] = prefix[i] + n[i];
    }
    let d = |i: usize, j: usize| -> f64 {
        match level {
            Level::Nominal => (i != j) as u8 as f64,
            Level::Interval => (domain[i] - domain[j]).powi(2),
            Level::Ratio => {
                let s = domain[i] + domain[j];
                if s == 0.0 {
                    0.0
                } else {
                    ((domain[i] - domain[j]) / s).powi(2)
                }
            }
            Level::Ordinal => {
                let (lo, hi) = (i.min(j), i.max(j));
                (prefix[hi + 1] - prefix[lo] - (n[i] + n[j]) / 2.0).powi(2)
            }
        }
    };
    let mut observed = 0.0;
    for (counts, m) in &per_unit {
        let mut sum = 0.0;
        for (a, &(i, ci)) in counts.iter().enumerate() {
            for &(j, cj) in &counts[a + 1..] {
                sum += 2.0 * ci * cj * d(i, j);
            }
        }
        observed += sum / (m - 1.0);
    }
    let total: f64 = n.iter().sum();
    let pairs = match level {
        Level::Nominal => total * total - n.iter().map(|x| x * x).sum::<f64>(),
        Level::Interval => {
            let s1: f64 = n.iter().zip(domain).map(|(c, x)| c * x).sum();
            let s2: f64 = n.iter().zip(domain).map(|(c, x)| c * x * x).sum();
            2.0 * (total * s2 - s1 * s1)
        }
        Level::Ordinal | Level::Ratio => {
            let mut s = 0.0;
            for i in 0..v {
                if n[i] == 0.0 {
                    continue;
                }
                for j in i + 1..v {
                    s += 2.0 * n[i] * n[j] * d(i, j);
                }
            }
            s
        }
    };
    let expected = pairs / (total - 1.0);
    Some(1.0 - observed / expected)
}

static DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        STATISTICS,
        "Krippendorff's alpha, the agreement of any number of raters on units with missing \
         ratings allowed, over long-format rows (one per rating). level is 'nominal', \
         'ordinal', 'interval' (default) or 'ratio'. Equal to krippendorff.alpha(\
         reliability_data, level_of_measurement=level) (PyPI krippendorff 0.9.0). NULL \
         ratings are left out; NULL when fewer than two distinct values or no unit has two \
         ratings; a unit rated twice by one rater is an error.",
        "krippendorff_alpha(unit, rater, value [, level])",
    )
    .with_argument("unit", "What was rated (any type).")
    .with_argument("rater", "Who rated it (any type).")
    .with_argument(
        "value",
        "The rating: a number, or text for the nominal level.",
    )
    .with_argument(
        "level",
        "Optional: 'nominal', 'ordinal', 'interval' or 'ratio'.",
    )
    .build()
});

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct KrippendorffAlphaFunc {
    signature: Signature,
}

impl Default for KrippendorffAlphaFunc {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

const USAGE: &str = "krippendorff_alpha(unit, rater, value [, level])";

impl AggregateUDFImpl for KrippendorffAlphaFunc {
    fn name(&self) -> &str {
        "krippendorff_alpha"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        check_arity(self.name(), USAGE, arg_types, 3, 4, true)?;
        let value = if arg_types[2].is_numeric() || arg_types[2].is_null() {
            DataType::Float64
        } else {
            DataType::Utf8
        };
        let mut types = vec![DataType::Utf8, DataType::Utf8, value];
        if arg_types.len() == 4 {
            types.push(DataType::Utf8);
        }
        Ok(types)
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![
            list_field(&args, "units", DataType::Utf8),
            list_field(&args, "raters", DataType::Utf8),
            list_field(&args, "texts", DataType::Utf8),
            list_field(&args, "numbers", DataType::Float64),
        ])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let constants = Constants {
            name: self.name(),
            args: &args,
        };
        let level = match constants.str_at(3)? {
            None => Level::Interval,
            Some(name) => match Level::named(&name) {
                Some(l) => l,
                None => {
                    return exec_err!(
                        "krippendorff_alpha: level must be 'nominal', 'ordinal', 'interval' or \
                         'ratio', got {}",
                        crate::common::truncate_for_error(&name)
                    );
                }
            },
        };
        let numeric = args
            .expr_fields
            .get(2)
            .is_some_and(|f| *f.data_type() == DataType::Float64);
        if !numeric && level != Level::Nominal {
            return exec_err!(
                "krippendorff_alpha: text ratings have no order or distance; the '{}' level \
                 needs numbers (or use 'nominal')",
                format!("{level:?}").to_ascii_lowercase()
            );
        }
        Ok(Box::new(AlphaAcc {
            level,
            ratings: Vec::new(),
        }))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&DOC)
    }
}

/// One rating: unit, rater and the value (text for nominal text ratings, else a number).
#[derive(Debug, Clone, PartialEq)]
struct Rating {
    unit: String,
    rater: String,
    text: Option<String>,
    number: f64,
}

#[derive(Debug)]
struct AlphaAcc {
    level: Level,
    ratings: Vec<Rating>,
}

impl Accumulator for AlphaAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let unit = cast(&values[0], &DataType::Utf8)?;
        let rater = cast(&values[1], &DataType::Utf8)?;
        let (unit, rater) = (unit.as_string::<i32>(), rater.as_string::<i32>());
        let value = &values[2];
        for i in 0..value.len() {
            if unit.is_null(i) || rater.is_null(i) || value.is_null(i) {
                continue;
            }
            let (text, number) = match value.data_type() {
                DataType::Float64 => (None, value.as_primitive::<Float64Type>().value(i)),
                _ => {
                    let t = cast(&value.slice(i, 1), &DataType::Utf8)?;
                    (Some(t.as_string::<i32>().value(0).to_string()), 0.0)
                }
            };
            if text.is_none() && !number.is_finite() {
                continue;
            }
            self.ratings.push(Rating {
                unit: unit.value(i).to_string(),
                rater: rater.value(i).to_string(),
                text,
                number,
            });
        }
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        for part in state_parts(states) {
            let (units, raters, texts, numbers) = (
                part[0].as_string::<i32>(),
                part[1].as_string::<i32>(),
                part[2].as_string::<i32>(),
                part[3].as_primitive::<Float64Type>(),
            );
            for i in 0..units.len() {
                self.ratings.push(Rating {
                    unit: units.value(i).to_string(),
                    rater: raters.value(i).to_string(),
                    text: (!texts.is_null(i)).then(|| texts.value(i).to_string()),
                    number: numbers.value(i),
                });
            }
        }
        Ok(())
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let texts: Vec<Option<&str>> = self.ratings.iter().map(|r| r.text.as_deref()).collect();
        Ok(vec![
            list_str(self.ratings.iter().map(|r| r.unit.as_str()).collect()),
            list_str(self.ratings.iter().map(|r| r.rater.as_str()).collect()),
            ScalarValue::List(ScalarValue::new_list_nullable(
                &texts
                    .iter()
                    .map(|t| ScalarValue::Utf8(t.map(str::to_string)))
                    .collect::<Vec<_>>(),
                &DataType::Utf8,
            )),
            list_f64(self.ratings.iter().map(|r| r.number).collect()),
        ])
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        let mut seen: HashSet<(&str, &str)> = HashSet::new();
        for r in &self.ratings {
            if !seen.insert((r.unit.as_str(), r.rater.as_str())) {
                return exec_err!(
                    "krippendorff_alpha: unit {} has two ratings by rater {}",
                    crate::common::truncate_for_error(&r.unit),
                    crate::common::truncate_for_error(&r.rater)
                );
            }
        }
        // The value domain, sorted (numbers by value, text as strings), as numpy's unique.
        let (domain, index): (Vec<f64>, Vec<usize>) =
            if self.ratings.iter().any(|r| r.text.is_some()) {
                let mut labels: Vec<&str> = self
                    .ratings
                    .iter()
                    .filter_map(|r| r.text.as_deref())
                    .collect();
                labels.sort_unstable();
                labels.dedup();
                let at: HashMap<&str, usize> =
                    labels.iter().enumerate().map(|(i, l)| (*l, i)).collect();
                (
                    (0..labels.len()).map(|i| i as f64).collect(),
                    self.ratings
                        .iter()
                        .map(|r| at[r.text.as_deref().unwrap_or_default()])
                        .collect(),
                )
            } else {
                let mut values: Vec<f64> = self.ratings.iter().map(|r| r.number).collect();
                values.sort_by(f64::total_cmp);
                values.dedup();
                let index = self
                    .ratings
                    .iter()
                    .map(|r| values.partition_point(|x| *x < r.number))
                    .collect();
                (values, index)
            };
        let mut units: HashMap<&str, Vec<usize>> = HashMap::new();
        for (r, i) in self.ratings.iter().zip(index) {
            units.entry(r.unit.as_str()).or_default().push(i);
        }
        // Sorted by unit, so sums add up in one order however rows were partitioned.
        let mut units: Vec<(&str, Vec<usize>)> = units.into_iter().collect();
        units.sort_by(|a, b| a.0.cmp(b.0));
        let units: Vec<Vec<usize>> = units.into_iter().map(|(_, v)| v).collect();
        Ok(ScalarValue::Float64(alpha(&units, &domain, self.level)))
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.ratings.len() * 80
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wikipedia_example() {
        // Krippendorff's example (Wikipedia): 3 coders, 15 units, values 1-5, nominal
        // alpha 0.691 and interval alpha 0.811 (rounded as published).
        let data: [[Option<u8>; 15]; 3] = [
            [
                None,
                None,
                None,
                None,
                None,
                Some(3),
                Some(4),
                Some(1),
                Some(2),
                Some(1),
                Some(1),
                Some(3),
                Some(3),
                None,
                Some(3),
            ],
            [
                Some(1),
                None,
                Some(2),
                Some(1),
                Some(3),
                Some(3),
                Some(4),
                Some(3),
                None,
                None,
                None,
                None,
                None,
                None,
                None,
            ],
            [
                None,
                None,
                Some(2),
                Some(1),
                Some(3),
                Some(4),
                Some(4),
                None,
                Some(2),
                Some(1),
                Some(1),
                Some(3),
                Some(3),
                None,
                Some(4),
            ],
        ];
        let domain = [1.0, 2.0, 3.0, 4.0];
        let units: Vec<Vec<usize>> = (0..15)
            .map(|u| {
                data.iter()
                    .filter_map(|coder| coder[u].map(|v| v as usize - 1))
                    .collect()
            })
            .collect();
        let nominal = alpha(&units, &domain, Level::Nominal).unwrap();
        let interval = alpha(&units, &domain, Level::Interval).unwrap();
        assert!((nominal - 0.691).abs() < 5e-4, "{nominal}");
        assert!((interval - 0.811).abs() < 5e-4, "{interval}");
        assert_eq!(
            alpha(&[vec![0], vec![1]], &[1.0, 2.0], Level::Nominal),
            None
        );
        assert_eq!(alpha(&[vec![0, 0]], &[1.0], Level::Nominal), None);
    }
}
