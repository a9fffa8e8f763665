//! A function that plans exactly as the one it wraps (name, aliases, signature, types) and
//! checks each call before it runs: how `evalsql serve` bounds the functions whose output
//! size an argument sets, and how a Ballista executor refuses a function its flags forbid
//! (the plan still decodes; the refusal is an error of the job, not of the process).

use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::compute::concat;

use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::async_udf::{AsyncScalarUDF, AsyncScalarUDFImpl};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature,
};

/// What is checked before a call runs; an error stops the call.
pub trait CallGuard: Debug + Send + Sync {
    fn check(&self, name: &str, args: &ScalarFunctionArgs) -> Result<()>;

    /// Row ranges to call the function on one after another, the statement's interrupt
    /// checked between them ([`evalsql_udfs::interrupt`]): for functions whose one
    /// call over a batch can compute for long. `None`: the whole batch at once.
    fn pieces(&self, _args: &ScalarFunctionArgs) -> Result<Option<Vec<Range<usize>>>> {
        Ok(None)
    }
}

/// Refuses every call, with the reason.
#[derive(Debug)]
pub struct Refuse(pub String);

impl CallGuard for Refuse {
    fn check(&self, _name: &str, _args: &ScalarFunctionArgs) -> Result<()> {
        Err(DataFusionError::Execution(self.0.clone()))
    }
}

/// `udf` behind `guard`, asynchronous where `udf` is.
pub fn guarded(udf: &Arc<ScalarUDF>, guard: Arc<dyn CallGuard>) -> Arc<ScalarUDF> {
    let function = Arc::new(GuardedUdf {
        inner: Arc::clone(udf),
        guard,
    });
    Arc::new(if udf.as_async().is_some() {
        AsyncScalarUDF::new(function).into_scalar_udf()
    } else {
        ScalarUDF::new_from_shared_impl(function)
    })
}

#[derive(Debug)]
struct GuardedUdf {
    inner: Arc<ScalarUDF>,
    guard: Arc<dyn CallGuard>,
}

impl PartialEq for GuardedUdf {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner && Arc::ptr_eq(&self.guard, &other.guard)
    }
}

impl Eq for GuardedUdf {}

impl Hash for GuardedUdf {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
        (Arc::as_ptr(&self.guard) as *const () as usize).hash(state);
    }
}

impl ScalarUDFImpl for GuardedUdf {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        self.inner.inner().schema_name(args)
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }
    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.guard.check(self.inner.name(), &args)?;
        match self.guard.pieces(&args)? {
            Some(pieces) if pieces.len() > 1 => invoke_in_pieces(&self.inner, args, pieces),
            _ => self.inner.invoke_with_args(args),
        }
    }
}

/// `udf` over each range of rows in turn, stopping between them if the statement must.
fn invoke_in_pieces(
    udf: &ScalarUDF,
    args: ScalarFunctionArgs,
    pieces: Vec<Range<usize>>,
) -> Result<ColumnarValue> {
    let mut outputs: Vec<ArrayRef> = Vec::with_capacity(pieces.len());
    for piece in pieces {
        evalsql_udfs::interrupt::check()?;
        let rows = piece.len();
        let sliced = args
            .args
            .iter()
            .map(|arg| match arg {
                ColumnarValue::Array(array) => ColumnarValue::Array(array.slice(piece.start, rows)),
                ColumnarValue::Scalar(value) => ColumnarValue::Scalar(value.clone()),
            })
            .collect();
        let output = udf.invoke_with_args(ScalarFunctionArgs {
            args: sliced,
            arg_fields: args.arg_fields.clone(),
            number_rows: rows,
            return_field: Arc::clone(&args.return_field),
            config_options: Arc::clone(&args.config_options),
        })?;
        outputs.push(output.into_array(rows)?);
    }
    let parts: Vec<&dyn Array> = outputs.iter().map(|a| a.as_ref()).collect();
    Ok(ColumnarValue::Array(concat(&parts)?))
}

#[async_trait::async_trait]
impl AsyncScalarUDFImpl for GuardedUdf {
    async fn invoke_async_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.guard.check(self.inner.name(), &args)?;
        match self.inner.as_async() {
            Some(function) => function.invoke_async_with_args(args).await,
            None => self.inner.invoke_with_args(args),
        }
    }
}
