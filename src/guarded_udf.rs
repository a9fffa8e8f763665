//! A function that plans exactly as the one it wraps (name, aliases, signature, types) and
//! checks each call before it runs: how `evalsql serve` bounds the functions whose output
//! size an argument sets, and how a Ballista executor refuses a function its flags forbid
//! (the plan still decodes; the refusal is an error of the job, not of the process).

use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

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
        self.inner.invoke_with_args(args)
    }
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
