//! The process's memory as a bound on client statements (`--max-process-memory`).
//!
//! DataFusion's pool (`--memory-limit`) sees what its operators reserve, not the arrays
//! functions return. The size-setting functions are checked one call at a time
//! (`--max-function-bytes`, in [`super::limits`]), but one value referenced many times was
//! not: `r || r || … || r`, `concat(r, r, …)`, a thousand `upper(r)` or `SELECT r, r, …` over
//! a 64 MiB `r` allocate one copy per reference until the process is killed, taking every
//! connection with it. So for client statements:
//!
//! - `||` on strings and binaries ([`ConcatOperator`]) and `concat`, `concat_ws`,
//!   `array_concat`, `array_append`, `array_prepend` ([`register_checked_concats`]) compute
//!   the size of what they would produce first, and refuse when it passes
//!   [`MAX_CONCAT_BYTES`] or would take the process's heap ([`crate::memory::allocated`])
//!   past the limit;
//! - every other expression that produces strings, binaries, lists or records is followed by
//!   a check that the heap is still under the limit ([`MemoryChecks`], an analyzer rule,
//!   and [`MemoryCheck`], the function it wraps them in): a statement that grows memory past
//!   it stops at its next such expression, with SQLSTATE 53200;
//! - a row is not encoded for the wire when its values would take the heap past the limit
//!   (a hook of the vendored arrow-pg, [`install`]).
//!
//! Each refusal ends that statement only; the arrays it held are freed with it. The limit
//! is set above DataFusion's pool, so statements the pool admits are not refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, LargeBinaryBuilder};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, DataFusionError, Result, ScalarValue};
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ReturnFieldArgs,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::prelude::SessionContext;

use crate::guarded_udf::{CallGuard, guarded};
use crate::serve::catalog::plans::rewrite_expressions;

/// The most bytes one call of a concatenating function or `||` may produce for one batch:
/// what PostgreSQL allows one value (1 GB). It keeps any single array, and so what the
/// expression after it allocates from it, far below the process limit.
pub const MAX_CONCAT_BYTES: usize = 1 << 30;

static LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// The memory pool's default size for the server: half of the machine's memory (4 GiB where
/// it cannot be read).
pub fn default_memory_limit() -> usize {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("MemTotal:"))
                .and_then(|rest| {
                    rest.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<usize>()
                        .ok()
                })
        })
        .map(|kib| kib * 1024 / 2)
        .unwrap_or(4 << 30)
}

/// The server's limit on the heap, by default three quarters of the machine's memory
/// (above the pool's half, so what the pool admits is not refused).
pub fn default_limit() -> usize {
    default_memory_limit().saturating_mul(3) / 2
}

/// Sets the limit and installs the row check in the wire encoder.
pub fn install(limit: usize) {
    LIMIT.store(limit, Ordering::Relaxed);
    datafusion_postgres::arrow_pg::row_encoder::set_row_guard(|bytes| {
        check_row(bytes as u64).map_err(|e| e.to_string())
    });
}

/// How far past the limit the heap may go before any statement that checks is refused,
/// whatever it holds (a quarter of the limit): memory no statement is charged with (caches,
/// connections) can take the process past its limit too.
fn hard_limit(limit: usize) -> u64 {
    (limit as u64).saturating_add(limit as u64 / 4)
}

/// Refuses the current statement when holding `more` bytes besides what the heap holds now
/// would pass the limit and the statement is the one growing: it holds (with `more`) more
/// than its share, the limit divided among the statements running. A statement under its
/// share goes on, up to [`hard_limit`]. Outside a statement (nothing charged), passing the
/// limit is enough.
pub fn check(what: &str, more: u64) -> Result<()> {
    let limit = LIMIT.load(Ordering::Relaxed);
    let held = crate::memory::allocated() as u64;
    let total = held.saturating_add(more);
    if total <= limit as u64 {
        return Ok(());
    }
    let running = super::sessions::running_statements().max(1);
    let share = limit as u64 / running as u64;
    let refusal = match evalsql_udfs::interrupt::charged() {
        Some(charged) => {
            let own = (charged.max(0) as u64).saturating_add(more);
            match over(what, own, share, limit, running, held, total, more) {
                Some(refusal) => refusal,
                None => return Ok(()),
            }
        }
        None => format!(
            "{what}: the server's memory would pass its limit of {limit} bytes \
             (--max-process-memory; {held} held, {more} more needed)"
        ),
    };
    Err(DataFusionError::ResourcesExhausted(refusal))
}

/// Why a statement holding `own` bytes (with `more`) is refused, if it is: more than its
/// share, or the heap past [`hard_limit`].
#[allow(clippy::too_many_arguments)]
fn over(
    what: &str,
    own: u64,
    share: u64,
    limit: usize,
    running: usize,
    held: u64,
    total: u64,
    more: u64,
) -> Option<String> {
    if own > share {
        Some(format!(
            "{what}: this statement would hold {own} bytes, more than its share of the \
             server's memory ({share} bytes: the limit of {limit} (--max-process-memory) \
             among {running} running statement(s); {held} held in all)"
        ))
    } else if total > hard_limit(limit) {
        Some(format!(
            "{what}: the server's memory would pass its limit of {limit} bytes by a \
             quarter (--max-process-memory; {held} held, {more} more needed)"
        ))
    } else {
        None
    }
}

/// The check of a row about to be written to the wire, outside any statement's task: the
/// row's bytes are weighed alone, against a statement's share and the hard limit, so a
/// small answer is not refused because another statement has taken the heap to the limit
/// (that statement is refused at its own next check).
fn check_row(bytes: u64) -> Result<()> {
    let what = "a row of the result";
    let limit = LIMIT.load(Ordering::Relaxed);
    let held = crate::memory::allocated() as u64;
    let total = held.saturating_add(bytes);
    if total <= limit as u64 {
        return Ok(());
    }
    let running = super::sessions::running_statements().max(1);
    let share = limit as u64 / running as u64;
    match over(what, bytes, share, limit, running, held, total, bytes) {
        Some(refusal) => Err(DataFusionError::ResourcesExhausted(refusal)),
        None => Ok(()),
    }
}

/// The rows a call produces: one when every argument is a scalar (evaluated once).
fn batch_rows(args: &ScalarFunctionArgs) -> usize {
    if args
        .args
        .iter()
        .all(|a| matches!(a, ColumnarValue::Scalar(_)))
    {
        1
    } else {
        args.number_rows
    }
}

/// An upper bound of what concatenating `args` produces for `rows` rows: their sizes.
fn call_bytes(args: &[ColumnarValue], rows: usize) -> u64 {
    args.iter().map(|a| value_bytes(a, rows)).sum()
}

/// An upper bound of the bytes a batch of `rows` rows of `value` takes.
fn value_bytes(value: &ColumnarValue, rows: usize) -> u64 {
    match value {
        ColumnarValue::Array(array) => array.get_array_memory_size() as u64,
        ColumnarValue::Scalar(scalar) => (scalar.size() as u64).saturating_mul(rows as u64),
    }
}

/// The check of a concatenating call: the sum of its arguments' sizes is a bound of what it
/// produces.
#[derive(Debug)]
struct ConcatBytes;

impl CallGuard for ConcatBytes {
    fn check(&self, name: &str, args: &ScalarFunctionArgs) -> Result<()> {
        concat_check(name, call_bytes(&args.args, batch_rows(args)))
    }
}

fn concat_check(name: &str, bytes: u64) -> Result<()> {
    if bytes > MAX_CONCAT_BYTES as u64 {
        return Err(DataFusionError::ResourcesExhausted(format!(
            "{name}: the result would take up to {bytes} bytes, more than {MAX_CONCAT_BYTES} \
             for one call"
        )));
    }
    check(name, bytes)
}

const CONCATS: [&str; 5] = [
    "concat",
    "concat_ws",
    "array_concat",
    "array_append",
    "array_prepend",
];

/// Registers the checked versions of the concatenating functions on `ctx`, under their
/// names and aliases, and [`MemoryCheck`] and [`ConcatOperator`].
pub fn register_checked_concats(ctx: &SessionContext) -> Result<()> {
    for name in CONCATS {
        let inner = ctx.udf(name)?;
        ctx.register_udf(guarded(&inner, Arc::new(ConcatBytes)).as_ref().clone());
    }
    ctx.register_udf(ScalarUDF::new_from_impl(MemoryCheck::default()));
    ctx.register_udf(ScalarUDF::new_from_impl(MemoryCheck::each_row()));
    ctx.register_udf(ScalarUDF::new_from_impl(ConcatOperator::default()));
    ctx.add_analyzer_rule(Arc::new(MemoryChecks));
    Ok(())
}

/// `evalsql_memory_check(x)`: `x`, once the heap is found under the limit. Its column
/// name is `x`'s.
///
/// Its second form, `evalsql_memory_check_each_row(x)` ([`MemoryCheck::each_row`]), is for
/// a value that does not depend on the row (its arguments are constants). Planning folds
/// constants, and the operator then repeats the folded value on every row of each batch:
/// `SELECT range(1, 1000000)` over a thousand rows is 8 GB made in one allocation, after
/// any check inside the expression. That form is volatile, so it is not folded with its
/// argument: when it runs it knows how many rows the value will be repeated on, and refuses
/// before that happens.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct MemoryCheck {
    signature: Signature,
    each_row: bool,
}

impl Default for MemoryCheck {
    fn default() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
            each_row: false,
        }
    }
}

impl MemoryCheck {
    /// The check of a constant repeated on every row (see the type's documentation).
    pub fn each_row() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Volatile),
            each_row: true,
        }
    }
}

const MEMORY_CHECK: &str = "evalsql_memory_check";
const REPEATED_CHECK: &str = "evalsql_memory_check_each_row";

impl ScalarUDFImpl for MemoryCheck {
    fn name(&self) -> &str {
        if self.each_row {
            REPEATED_CHECK
        } else {
            MEMORY_CHECK
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        Ok(args[0].schema_name().to_string())
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types[0].clone())
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        Ok(Arc::clone(&args.arg_fields[0]))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let [value]: [ColumnarValue; 1] = args.args.try_into().map_err(|_| {
            DataFusionError::Internal(format!("{} takes one argument", self.name()))
        })?;
        match &value {
            ColumnarValue::Scalar(scalar) if self.each_row => check(
                "a value repeated on every row",
                (scalar.size() as u64).saturating_mul(rows as u64),
            )?,
            _ => check("the statement", 0)?,
        }
        Ok(value)
    }
}

/// `plan` with each [`MemoryCheck`] over a constant, in what projections, aggregates and
/// windows compute per row, made its [`MemoryCheck::each_row`] form.
fn check_repeated_constants(plan: LogicalPlan) -> Result<LogicalPlan> {
    use datafusion::common::tree_node::TreeNode;
    let repeated = Arc::new(ScalarUDF::new_from_impl(MemoryCheck::each_row()));
    plan.transform_up_with_subqueries(|node| {
        if !matches!(
            node,
            LogicalPlan::Projection(_) | LogicalPlan::Aggregate(_) | LogicalPlan::Window(_)
        ) {
            return Ok(Transformed::no(node));
        }
        let rewritten = node.map_expressions(|e| {
            e.transform_up(|e| match e {
                Expr::ScalarFunction(call)
                    if call.func.name() == MEMORY_CHECK
                        && call.args.iter().all(|a| a.column_refs().is_empty()) =>
                {
                    Ok(Transformed::yes(Expr::ScalarFunction(
                        ScalarFunction::new_udf(Arc::clone(&repeated), call.args),
                    )))
                }
                e => Ok(Transformed::no(e)),
            })
        })?;
        if rewritten.transformed {
            rewritten.map_data(|plan| plan.recompute_schema())
        } else {
            Ok(rewritten)
        }
    })
    .map(|t| t.data)
}

/// `a || b || …` on strings or binaries, one call for a whole chain, checked before it
/// allocates (as [`ConcatBytes`]): NULL when any part is NULL, as the operator is. One
/// call rather than one per `||`, so a chain of a thousand parts is one flat expression and
/// its result is written once. Its column name is the operator chain's.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ConcatOperator {
    signature: Signature,
}

impl Default for ConcatOperator {
    fn default() -> Self {
        Self {
            signature: Signature::variadic_any(Volatility::Immutable),
        }
    }
}

const CONCAT_OPERATOR: &str = "evalsql_concat_operator";

impl ScalarUDFImpl for ConcatOperator {
    fn name(&self) -> &str {
        CONCAT_OPERATOR
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        let parts: Vec<String> = args.iter().map(|a| a.schema_name().to_string()).collect();
        Ok(parts.join(" || "))
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        arg_types.first().cloned().ok_or_else(|| {
            DataFusionError::Plan(format!("{CONCAT_OPERATOR} takes at least one argument"))
        })
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = batch_rows(&args);
        let scalars = rows == 1
            && args
                .args
                .iter()
                .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        concat_check("||", call_bytes(&args.args, rows))?;
        let arrays: Vec<ArrayRef> = args
            .args
            .iter()
            .map(|a| a.to_array(rows))
            .collect::<Result<_>>()?;
        let out = concatenate_rows(&arrays, rows, &args.return_field.data_type().clone())?;
        Ok(if scalars {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

/// Row `i` of a string or binary array, as bytes; `None` for NULL.
fn bytes_at(array: &ArrayRef, i: usize) -> Option<&[u8]> {
    if array.is_null(i) {
        return None;
    }
    Some(match array.data_type() {
        DataType::Utf8 => array.as_string::<i32>().value(i).as_bytes(),
        DataType::LargeUtf8 => array.as_string::<i64>().value(i).as_bytes(),
        DataType::Utf8View => array.as_string_view().value(i).as_bytes(),
        DataType::Binary => array.as_binary::<i32>().value(i),
        DataType::LargeBinary => array.as_binary::<i64>().value(i),
        DataType::BinaryView => array.as_binary_view().value(i),
        _ => return None,
    })
}

/// Each row of `arrays` (strings, or binaries) joined, as `data_type`.
fn concatenate_rows(arrays: &[ArrayRef], rows: usize, data_type: &DataType) -> Result<ArrayRef> {
    let strings = matches!(
        data_type,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    );
    let mut builder = LargeBinaryBuilder::new();
    let mut row = Vec::new();
    for i in 0..rows {
        row.clear();
        let mut null = false;
        for array in arrays {
            match bytes_at(array, i) {
                Some(part) => row.extend_from_slice(part),
                None => {
                    null = true;
                    break;
                }
            }
        }
        if null {
            builder.append_null();
        } else {
            builder.append_value(&row);
        }
    }
    let joined: ArrayRef = Arc::new(builder.finish());
    // Parts that are UTF-8 join into UTF-8; the cast checks it all the same.
    let joined = if strings {
        cast(&joined, &DataType::LargeUtf8)?
    } else {
        joined
    };
    Ok(cast(&joined, data_type)?)
}

/// Types whose values are as long as a function makes them.
fn var_width(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::List(_)
            | DataType::LargeList(_)
            | DataType::FixedSizeList(..)
            | DataType::ListView(_)
            | DataType::LargeListView(_)
            | DataType::Struct(_)
            | DataType::Map(..)
    )
}

/// Types [`ConcatOperator`] concatenates (both sides the same after type coercion).
fn concatenable(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
    )
}

/// The analyzer rule that puts [`ConcatOperator`] in place of `||` and [`MemoryCheck`]
/// after each expression producing strings, binaries, lists or records (functions other
/// than asynchronous ones, which stay where the planner finds them; `CASE`; casts).
#[derive(Debug)]
pub struct MemoryChecks;

fn is_check(expr: &Expr) -> bool {
    matches!(expr, Expr::ScalarFunction(call) if call.func.name() == MEMORY_CHECK)
}

/// The parts of a `||` operand: a concatenation already made one call (with or without
/// its check) gives its own parts, so a chain becomes one call.
fn concat_parts(operand: Expr, parts: &mut Vec<Expr>) {
    let concatenation = |e: &Expr| match e {
        Expr::ScalarFunction(c) if c.func.name() == CONCAT_OPERATOR => Some(c.args.clone()),
        _ => None,
    };
    let made = match &operand {
        Expr::ScalarFunction(call) if is_check(&operand) => {
            call.args.first().and_then(concatenation)
        }
        other => concatenation(other),
    };
    match made {
        Some(made) => parts.extend(made),
        None => parts.push(operand),
    }
}

fn checked(expr: Expr) -> Expr {
    Expr::ScalarFunction(ScalarFunction::new_udf(
        Arc::new(ScalarUDF::new_from_impl(MemoryCheck::default())),
        vec![expr],
    ))
}

fn with_checks(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    // A plan analyzed again: one check is enough.
    if let Expr::ScalarFunction(call) = &expr
        && is_check(&expr)
        && call.args.first().is_some_and(is_check)
    {
        return Ok(Transformed::yes(call.args[0].clone()));
    }
    // Only the kinds of expression that may be checked have their type computed: a long
    // chain of other operators is looked at once per node, never typed per node.
    match &expr {
        Expr::BinaryExpr(BinaryExpr {
            op: Operator::StringConcat,
            ..
        }) => {
            let Ok(data_type) = expr.get_type(schema) else {
                return Ok(Transformed::no(expr));
            };
            let Expr::BinaryExpr(BinaryExpr { left, right, .. }) = &expr else {
                return Ok(Transformed::no(expr));
            };
            let same = |e: &Expr| e.get_type(schema).ok().as_ref() == Some(&data_type);
            if !concatenable(&data_type) || !same(left) || !same(right) {
                return Ok(Transformed::no(expr));
            }
            let Expr::BinaryExpr(BinaryExpr { left, right, .. }) = expr else {
                return Ok(Transformed::no(expr));
            };
            let mut parts = Vec::new();
            concat_parts(*left, &mut parts);
            concat_parts(*right, &mut parts);
            Ok(Transformed::yes(checked(Expr::ScalarFunction(
                ScalarFunction::new_udf(
                    Arc::new(ScalarUDF::new_from_impl(ConcatOperator::default())),
                    parts,
                ),
            ))))
        }
        Expr::ScalarFunction(call)
            if call.func.as_async().is_none()
                && call.func.name() != MEMORY_CHECK
                && call.func.name() != REPEATED_CHECK
                && call.func.name() != "get_field" =>
        {
            wrap_var_width(expr, schema)
        }
        Expr::Case(_) | Expr::Cast(_) | Expr::TryCast(_) => wrap_var_width(expr, schema),
        _ => Ok(Transformed::no(expr)),
    }
}

fn wrap_var_width(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    match expr.get_type(schema) {
        Ok(data_type) if var_width(&data_type) => Ok(Transformed::yes(checked(expr))),
        _ => Ok(Transformed::no(expr)),
    }
}

impl AnalyzerRule for MemoryChecks {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        check_repeated_constants(rewrite_expressions(plan, with_checks)?)
    }

    fn name(&self) -> &str {
        "evalsql_memory_checks"
    }
}
