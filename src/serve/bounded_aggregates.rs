//! `array_agg` and `string_agg` for client statements, bounded while they accumulate.
//!
//! Their state grows with every row they take, inside the aggregate or window operator, in
//! loops that call no expression a memory check could sit behind: one group's list over a
//! billion rows, or a window whose each row's value holds every row before it (quadratic).
//! So for client statements these two are wrapped ([`register`]): before and after each
//! batch of input and each result, the wrapper asks whether the statement must stop (its
//! deadline, a cancel: [`evalsql_udfs::interrupt`]) and whether it passes its share of the
//! server's memory ([`super::memory::check`]), and one group's state may not pass
//! [`super::memory::MAX_CONCAT_BYTES`] (1 GB, what PostgreSQL allows one value). Everything
//! else is the wrapped function's: names, types, ordering, groups accumulators.

use std::fmt::Debug;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray};
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::expr::{
    AggregateFunction, AggregateFunctionParams, WindowFunctionParams,
};
use datafusion::logical_expr::function::{
    AccumulatorArgs, AggregateFunctionSimplification, StateFieldsArgs,
};
use datafusion::logical_expr::udf_eq::UdfEq;
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, EmitTo, Expr, GroupsAccumulator,
    Operator, ReversedUDAF, SetMonotonicity, Signature, StatisticsArgs,
};
use datafusion::prelude::SessionContext;
use evalsql_udfs::interrupt;

use super::memory::{MAX_CONCAT_BYTES, check};

/// The aggregates whose state a client's rows grow without bound.
const BOUNDED: [&str; 2] = ["array_agg", "string_agg"];

/// Registers the bounded versions on `ctx` under the names (and aliases) they wrap.
pub fn register(ctx: &SessionContext) -> Result<()> {
    for name in BOUNDED {
        let inner = ctx.udaf(name)?;
        ctx.register_udaf(AggregateUDF::new_from_shared_impl(Arc::new(Bounded {
            inner: Arc::clone(inner.inner()).into(),
        })));
    }
    Ok(())
}

/// Fails when the statement must stop or passes its share of memory with `more` bytes.
fn checkpoint(name: &str, more: usize) -> Result<()> {
    interrupt::check()?;
    check(name, more as u64)
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Bounded {
    inner: UdfEq<Arc<dyn AggregateUDFImpl>>,
}

fn bounded(inner: Arc<dyn AggregateUDFImpl>) -> Arc<dyn AggregateUDFImpl> {
    Arc::new(Bounded {
        inner: inner.into(),
    })
}

#[warn(clippy::missing_trait_methods)] // Delegates, so it implements every trait method.
impl AggregateUDFImpl for Bounded {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn schema_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.inner.schema_name(params)
    }
    fn human_display(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.inner.human_display(params)
    }
    fn window_function_schema_name(&self, params: &WindowFunctionParams) -> Result<String> {
        self.inner.window_function_schema_name(params)
    }
    fn display_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.inner.display_name(params)
    }
    fn window_function_display_name(&self, params: &WindowFunctionParams) -> Result<String> {
        self.inner.window_function_display_name(params)
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }
    fn return_field(&self, arg_fields: &[FieldRef]) -> Result<FieldRef> {
        self.inner.return_field(arg_fields)
    }
    fn is_nullable(&self) -> bool {
        self.inner.is_nullable()
    }
    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let name = self.inner.name().to_string();
        Ok(Box::new(BoundedAccumulator {
            inner: self.inner.accumulator(args)?,
            name,
        }))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }
    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }
    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        let name = self.inner.name().to_string();
        Ok(Box::new(BoundedGroups {
            inner: self.inner.create_groups_accumulator(args)?,
            name,
        }))
    }
    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let name = self.inner.name().to_string();
        Ok(Box::new(BoundedAccumulator {
            inner: self.inner.create_sliding_accumulator(args)?,
            name,
        }))
    }
    fn with_beneficial_ordering(
        self: Arc<Self>,
        beneficial_ordering: bool,
    ) -> Result<Option<Arc<dyn AggregateUDFImpl>>> {
        Ok(Arc::clone(&self.inner)
            .with_beneficial_ordering(beneficial_ordering)?
            .map(bounded))
    }
    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.inner.order_sensitivity()
    }
    fn simplify(&self) -> Option<AggregateFunctionSimplification> {
        self.inner.simplify()
    }
    fn simplify_expr_op_literal(
        &self,
        agg_function: &AggregateFunction,
        arg: &Expr,
        op: Operator,
        lit: &Expr,
        arg_is_left: bool,
    ) -> Result<Option<Expr>> {
        self.inner
            .simplify_expr_op_literal(agg_function, arg, op, lit, arg_is_left)
    }
    fn reverse_expr(&self) -> ReversedUDAF {
        match self.inner.reverse_expr() {
            ReversedUDAF::Reversed(udf) => ReversedUDAF::Reversed(Arc::new(
                AggregateUDF::new_from_shared_impl(bounded(Arc::clone(udf.inner()))),
            )),
            other => other,
        }
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }
    fn is_descending(&self) -> Option<bool> {
        self.inner.is_descending()
    }
    fn value_from_stats(&self, statistics_args: &StatisticsArgs) -> Option<ScalarValue> {
        self.inner.value_from_stats(statistics_args)
    }
    fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
        self.inner.default_value(data_type)
    }
    fn supports_null_handling_clause(&self) -> bool {
        self.inner.supports_null_handling_clause()
    }
    fn supports_within_group_clause(&self) -> bool {
        self.inner.supports_within_group_clause()
    }
    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.set_monotonicity(data_type)
    }
    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
}

/// One group's accumulator, checked around each step.
#[derive(Debug)]
struct BoundedAccumulator {
    inner: Box<dyn Accumulator>,
    name: String,
}

impl BoundedAccumulator {
    /// After a step that grew the state: one group's value is at most 1 GB.
    fn bounded(&self) -> Result<()> {
        let size = self.inner.size();
        if size > MAX_CONCAT_BYTES {
            return Err(DataFusionError::ResourcesExhausted(format!(
                "{}: one group's value would take {size} bytes, more than {MAX_CONCAT_BYTES}",
                self.name
            )));
        }
        checkpoint(&self.name, 0)
    }
}

impl Accumulator for BoundedAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        checkpoint(&self.name, 0)?;
        self.inner.update_batch(values)?;
        self.bounded()
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        // The value is about as large as the state it is made from.
        checkpoint(&self.name, self.inner.size())?;
        self.inner.evaluate()
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        checkpoint(&self.name, self.inner.size())?;
        self.inner.state()
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        checkpoint(&self.name, 0)?;
        self.inner.merge_batch(states)?;
        self.bounded()
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        checkpoint(&self.name, 0)?;
        self.inner.retract_batch(values)
    }
    fn supports_retract_batch(&self) -> bool {
        self.inner.supports_retract_batch()
    }
}

/// The accumulator of many groups, checked around each step.
struct BoundedGroups {
    inner: Box<dyn GroupsAccumulator>,
    name: String,
}

impl GroupsAccumulator for BoundedGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        checkpoint(&self.name, 0)?;
        self.inner
            .update_batch(values, group_indices, opt_filter, total_num_groups)?;
        checkpoint(&self.name, 0)
    }
    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        checkpoint(&self.name, self.inner.size())?;
        self.inner.evaluate(emit_to)
    }
    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        checkpoint(&self.name, self.inner.size())?;
        self.inner.state(emit_to)
    }
    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        checkpoint(&self.name, 0)?;
        self.inner
            .merge_batch(values, group_indices, total_num_groups)?;
        checkpoint(&self.name, 0)
    }
    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        checkpoint(&self.name, 0)?;
        self.inner.convert_to_state(values, opt_filter)
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
}
