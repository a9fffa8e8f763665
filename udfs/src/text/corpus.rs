//! The machinery shared by corpus-level aggregates (`corpus_bleu`, `corpus_chrf`).
//!
//! A corpus score is a function of counts summed over all rows, so partial aggregates merge
//! by summing: the state of a group is the metric's counters plus the number of rows seen.
//! The [`GroupsAccumulator`] keeps one counter vector per group, which is what makes
//! `GROUP BY model` fast.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float64Builder, UInt64Array,
};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, UInt64Type};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, ColumnarValue, Documentation, EmitTo, GroupsAccumulator,
    Signature,
};

use crate::common::signature::{Param, coerce_params, user_defined};
use crate::common::{prepare_args, truncate_for_error};

/// Counts from which a corpus metric is computed; adding two is merging two sub-corpora.
pub trait CorpusStats: Clone + Default + Debug + Send + Sync + 'static {
    /// SQL name of the aggregate.
    const NAME: &'static str;
    /// Names of the counters, in [`CorpusStats::counters`] order (the aggregate state).
    const COUNTERS: &'static [&'static str];
    /// The function's documentation.
    fn documentation() -> &'static Documentation;
    /// Statistics of one hypothesis against its references (at least one).
    fn from_row(hypothesis: &str, references: &[&str]) -> Self;
    fn add(&mut self, other: &Self);
    fn counters(&self) -> Vec<u64>;
    fn from_counters(counters: &[u64]) -> Self;
    /// The corpus score of the accumulated counts.
    fn score(&self) -> f64;
}

/// `name(response, ground_truth)` aggregate over [`CorpusStats`] `S`.
pub struct CorpusFunc<S> {
    signature: Signature,
    _stats: PhantomData<fn() -> S>,
}

impl<S> Default for CorpusFunc<S> {
    fn default() -> Self {
        Self {
            // Coercion is ours (coerce_types): ground_truth may be a string or a list of them.
            signature: user_defined(),
            _stats: PhantomData,
        }
    }
}

impl<S: CorpusStats> Debug for CorpusFunc<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CorpusFunc")
            .field("name", &S::NAME)
            .finish()
    }
}

impl<S> PartialEq for CorpusFunc<S> {
    fn eq(&self, other: &Self) -> bool {
        self.signature == other.signature
    }
}

impl<S> Eq for CorpusFunc<S> {}

impl<S: CorpusStats> std::hash::Hash for CorpusFunc<S> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        S::NAME.hash(state);
        self.signature.hash(state);
    }
}

impl<S: CorpusStats> AggregateUDFImpl for CorpusFunc<S> {
    fn name(&self) -> &str {
        S::NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let usage = format!(
            "{}(response: String, ground_truth: String | List<String>)",
            S::NAME
        );
        coerce_params(S::NAME, &usage, arg_types, &[&[Param::Text, Param::Refs]])
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(S::COUNTERS
            .iter()
            .chain(std::iter::once(&"rows"))
            .map(|c| {
                Arc::new(Field::new(
                    format!("{}[{c}]", args.name),
                    DataType::UInt64,
                    true,
                ))
            })
            .collect())
    }

    fn accumulator(&self, _args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(CorpusAccumulator::<S>::default()))
    }

    fn groups_accumulator_supported(&self, _args: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(
        &self,
        _args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(CorpusGroupsAccumulator::<S>::default()))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(S::documentation())
    }
}

/// Calls `f(row, stats)` for every row that takes part: not filtered out, response and
/// references non-NULL. A row whose reference list holds no reference is an error.
fn for_each_row<S: CorpusStats>(
    values: &[ArrayRef],
    filter: Option<&BooleanArray>,
    mut f: impl FnMut(usize, S),
) -> Result<()> {
    let args: Vec<ColumnarValue> = values
        .iter()
        .map(|a| ColumnarValue::Array(Arc::clone(a)))
        .collect();
    let prepared = prepare_args(&args)?;
    let hyps = prepared.str(S::NAME, 0)?;
    let refs = prepared.refs(S::NAME, 1)?;
    let mut buf = Vec::new();
    for row in 0..values[0].len() {
        if filter.is_some_and(|f| !f.is_valid(row) || !f.value(row)) {
            continue;
        }
        let Some(hyp) = hyps.get(row) else { continue };
        if !refs.get_into(row, &mut buf) {
            continue;
        }
        if buf.is_empty() {
            return exec_err!(
                "{}: the references of response {} are an empty list; give at least one reference",
                S::NAME,
                truncate_for_error(hyp)
            );
        }
        f(row, S::from_row(hyp, &buf));
    }
    Ok(())
}

fn state_arrays<S: CorpusStats>(stats: &[S], rows: &[u64]) -> Vec<ArrayRef> {
    let mut columns: Vec<Vec<u64>> = vec![Vec::with_capacity(stats.len()); S::COUNTERS.len()];
    for s in stats {
        for (column, v) in columns.iter_mut().zip(s.counters()) {
            column.push(v);
        }
    }
    columns.push(rows.to_vec());
    columns
        .into_iter()
        .map(|c| Arc::new(UInt64Array::from(c)) as ArrayRef)
        .collect()
}

/// Reads row `row` of a state batch: counters and row count.
fn state_row<S: CorpusStats>(states: &[&UInt64Array], row: usize) -> (S, u64) {
    let n = S::COUNTERS.len();
    let counters: Vec<u64> = states[..n].iter().map(|a| a.value(row)).collect();
    (S::from_counters(&counters), states[n].value(row))
}

fn state_columns<'a>(states: &'a [ArrayRef]) -> Vec<&'a UInt64Array> {
    states
        .iter()
        .map(|a| a.as_primitive::<UInt64Type>())
        .collect()
}

fn score_or_null<S: CorpusStats>(stats: &S, rows: u64) -> Option<f64> {
    // Like avg(): no rows, no score.
    (rows > 0).then(|| stats.score())
}

#[derive(Debug, Default)]
struct CorpusAccumulator<S> {
    stats: S,
    rows: u64,
}

impl<S: CorpusStats> Accumulator for CorpusAccumulator<S> {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        for_each_row::<S>(values, None, |_, s| {
            self.stats.add(&s);
            self.rows += 1;
        })
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Float64(score_or_null(&self.stats, self.rows)))
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + S::COUNTERS.len() * 8
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(self
            .stats
            .counters()
            .into_iter()
            .chain(std::iter::once(self.rows))
            .map(|v| ScalarValue::UInt64(Some(v)))
            .collect())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let columns = state_columns(states);
        for row in 0..states[0].len() {
            let (s, rows) = state_row::<S>(&columns, row);
            self.stats.add(&s);
            self.rows += rows;
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
struct CorpusGroupsAccumulator<S> {
    stats: Vec<S>,
    rows: Vec<u64>,
}

impl<S: CorpusStats> CorpusGroupsAccumulator<S> {
    fn resize(&mut self, total_num_groups: usize) {
        self.stats.resize_with(total_num_groups, S::default);
        self.rows.resize(total_num_groups, 0);
    }
}

impl<S: CorpusStats> GroupsAccumulator for CorpusGroupsAccumulator<S> {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.resize(total_num_groups);
        for_each_row::<S>(values, opt_filter, |row, s| {
            let g = group_indices[row];
            self.stats[g].add(&s);
            self.rows[g] += 1;
        })
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let stats = emit_to.take_needed(&mut self.stats);
        let rows = emit_to.take_needed(&mut self.rows);
        let mut out = Float64Builder::with_capacity(stats.len());
        for (s, n) in stats.iter().zip(&rows) {
            out.append_option(score_or_null(s, *n));
        }
        Ok(Arc::new(out.finish()))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let stats = emit_to.take_needed(&mut self.stats);
        let rows = emit_to.take_needed(&mut self.rows);
        Ok(state_arrays(&stats, &rows))
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.resize(total_num_groups);
        let columns = state_columns(values);
        for (row, &g) in group_indices.iter().enumerate() {
            let (s, rows) = state_row::<S>(&columns, row);
            self.stats[g].add(&s);
            self.rows[g] += rows;
        }
        Ok(())
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let n = values[0].len();
        let mut stats = vec![S::default(); n];
        let mut rows = vec![0u64; n];
        for_each_row::<S>(values, opt_filter, |row, s| {
            stats[row] = s;
            rows[row] = 1;
        })?;
        Ok(state_arrays(&stats, &rows))
    }

    fn size(&self) -> usize {
        self.stats.capacity() * (std::mem::size_of::<S>() + S::COUNTERS.len() * 8)
            + self.rows.capacity() * 8
    }
}
