//! An async evalsql function (a judge, a target) as a plain scalar function for
//! datafusion-python: one call per batch, run on evalsql's runtime with the registration's
//! settings, waited for here.

use std::sync::{Arc, RwLock, mpsc};
use std::time::Duration;

use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{Result, exec_err};
use datafusion::logical_expr::async_udf::AsyncScalarUDF;
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};
use evalsql_udfs::JudgeOptions;

use crate::interrupt;

#[derive(Debug)]
pub struct BlockingAsync {
    /// A `ScalarUDF` whose implementation is an [`AsyncScalarUDF`].
    inner: Arc<ScalarUDF>,
    options: Arc<RwLock<JudgeOptions>>,
}

impl PartialEq for BlockingAsync {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner && Arc::ptr_eq(&self.options, &other.options)
    }
}

impl Eq for BlockingAsync {}

impl std::hash::Hash for BlockingAsync {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
    }
}

impl BlockingAsync {
    pub fn new(inner: Arc<ScalarUDF>, options: Arc<RwLock<JudgeOptions>>) -> Self {
        debug_assert!(inner.inner().downcast_ref::<AsyncScalarUDF>().is_some());
        Self { inner, options }
    }
}

/// How often a waiting batch looks at the interrupt flag.
const POLL: Duration = Duration::from_millis(50);

impl ScalarUDFImpl for BlockingAsync {
    fn name(&self) -> &str {
        self.inner.name()
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

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let name = self.inner.name().to_string();
        // The registration's settings, where a SET would have put them.
        let mut config = args.config_options.as_ref().clone();
        let options = self
            .options
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        config.extensions.insert(options);
        let args = ScalarFunctionArgs {
            config_options: Arc::new(config),
            ..args
        };
        let seen = interrupt::count();
        if interrupt::recently() {
            return exec_err!("{name}: interrupted (Ctrl-C); no call was sent");
        }
        let inner = Arc::clone(&self.inner);
        let (tx, rx) = mpsc::channel();
        let task = crate::runtime().spawn(async move {
            let Some(udf) = inner.inner().downcast_ref::<AsyncScalarUDF>() else {
                let _ = tx.send(exec_err!("{} is not an async function", inner.name()));
                return;
            };
            let _ = tx.send(udf.invoke_async_with_args(args).await);
        });
        loop {
            match rx.recv_timeout(POLL) {
                Ok(result) => return result,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if interrupt::count() != seen {
                        // Stops sending: calls not yet made are dropped, what the cache
                        // committed stays.
                        task.abort();
                        return exec_err!(
                            "{name}: interrupted (Ctrl-C); judgements already received are \
                             in the cache"
                        );
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return exec_err!("{name}: the judge task ended without a result");
                }
            }
        }
    }
}
