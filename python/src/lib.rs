//! `evalsql._native`: every evalsql function as a datafusion-python object, through
//! DataFusion's FFI (`__datafusion_scalar_udf__` and the aggregate, window and table-function
//! capsules). The Python package (`python/evalsql/`) registers them into a session.
//!
//! The judges are async UDFs, which datafusion-python cannot plan as async: each is exported
//! as a plain scalar function ([`blocking::BlockingAsync`]) that hands the whole batch to
//! evalsql's engine on evalsql's own runtime — limiter, cache, retries, batch mode and budgets
//! unchanged — and waits for it, stopping early on Ctrl-C ([`interrupt`]). A datafusion-python
//! session does not know the `evalsql` configuration namespace, so the settings of a
//! registration travel inside these wrappers ([`Settings`]).

mod blocking;
mod interrupt;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use datafusion::catalog::TableFunctionImpl;
use datafusion::config::ExtensionOptions;
use datafusion::logical_expr::async_udf::AsyncScalarUDF;
use datafusion::logical_expr::{AggregateUDF, ScalarUDF, WindowUDF};
use datafusion_ffi::udaf::FFI_AggregateUDF;
use datafusion_ffi::udf::FFI_ScalarUDF;
use datafusion_ffi::udtf::FFI_TableFunction;
use datafusion_ffi::udwf::FFI_WindowUDF;
use evalsql_udfs::JudgeOptions;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

/// evalsql's own runtime: judge calls run here, whatever runtime datafusion-python polls
/// the query on.
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .thread_name("evalsql")
            .enable_all()
            .build()
            .expect("evalsql's tokio runtime starts")
    })
}

/// The `evalsql.judge.*` / `evalsql.target.*` settings of one registration, shared by its
/// functions: the equivalent of `SET` in a session that cannot hold them.
#[pyclass(module = "evalsql._native", frozen)]
pub struct Settings {
    options: Arc<RwLock<JudgeOptions>>,
}

#[pymethods]
impl Settings {
    /// Starts a new query for the budgets (`max_cost_usd`, `max_calls`, `max_tokens` count
    /// from zero again).
    fn start_query(&self) {
        self.options
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .start_query();
    }

    /// Changes one setting (`"judge.model"`, `"target.max_concurrency"`, ...).
    fn set(&self, key: &str, value: &str) -> PyResult<()> {
        set_option(
            &mut self.options.write().unwrap_or_else(|p| p.into_inner()),
            key,
            value,
        )
    }
}

/// Why fused calls cannot be asked for from Python.
const FUSE_REFUSED: &str = "fused judge calls are grouped by a planner rule that only \
                            evalsql's own sessions install (the CLI, evalsql serve, Ballista); \
                            a datafusion-python session cannot install it, so from Python each \
                            judge metric is its own call";

/// Sets one option as `SET evalsql.<key>` would; `judge.fuse` is refused: fused calls are
/// planned by an optimizer rule of evalsql's own sessions, which a datafusion-python session
/// cannot install.
fn set_option(options: &mut JudgeOptions, key: &str, value: &str) -> PyResult<()> {
    if key.trim().eq_ignore_ascii_case("judge.fuse") {
        return Err(PyValueError::new_err(format!(
            "evalsql.judge.fuse: {FUSE_REFUSED}"
        )));
    }
    options
        .set(key, value)
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

enum Inner {
    Scalar(Arc<ScalarUDF>),
    Aggregate(Arc<AggregateUDF>),
    Window(Arc<WindowUDF>),
    Table(Arc<dyn TableFunctionImpl>),
}

/// One evalsql function, exportable to datafusion-python by the protocol of its kind.
#[pyclass(module = "evalsql._native", frozen)]
pub struct Function {
    #[pyo3(get)]
    name: String,
    /// "scalar", "aggregate", "window" or "table".
    #[pyo3(get)]
    kind: &'static str,
    inner: Inner,
}

#[pymethods]
impl Function {
    fn __datafusion_scalar_udf__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        let Inner::Scalar(f) = &self.inner else {
            return Err(self.not_a("scalar"));
        };
        let ffi = FFI_ScalarUDF::from(Arc::clone(f));
        PyCapsule::new_with_value(py, ffi, c"datafusion_scalar_udf")
    }

    fn __datafusion_aggregate_udf__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let Inner::Aggregate(f) = &self.inner else {
            return Err(self.not_a("aggregate"));
        };
        let ffi = FFI_AggregateUDF::from(Arc::clone(f));
        PyCapsule::new_with_value(py, ffi, c"datafusion_aggregate_udf")
    }

    fn __datafusion_window_udf__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        let Inner::Window(f) = &self.inner else {
            return Err(self.not_a("window"));
        };
        let ffi = FFI_WindowUDF::from(Arc::clone(f));
        PyCapsule::new_with_value(py, ffi, c"datafusion_window_udf")
    }

    fn __datafusion_table_function__<'py>(
        &self,
        py: Python<'py>,
        session: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let Inner::Table(f) = &self.inner else {
            return Err(self.not_a("table"));
        };
        let codec = logical_codec(&session)?;
        let ffi = FFI_TableFunction::new_with_ffi_codec(
            Arc::clone(f),
            Some(runtime().handle().clone()),
            codec,
        );
        PyCapsule::new_with_value(py, ffi, c"datafusion_table_function")
    }

    fn __repr__(&self) -> String {
        format!("<evalsql {} function {}>", self.kind, self.name)
    }
}

impl Function {
    fn not_a(&self, kind: &str) -> PyErr {
        PyTypeError::new_err(format!(
            "{} is a {} function, not a {kind} one",
            self.name, self.kind
        ))
    }
}

/// The session's logical codec, which a foreign table function needs to exchange
/// expressions (datafusion-python hands it over as a capsule).
fn logical_codec(
    session: &Bound<'_, PyAny>,
) -> PyResult<datafusion_ffi::proto::logical_extension_codec::FFI_LogicalExtensionCodec> {
    use datafusion_ffi::proto::logical_extension_codec::FFI_LogicalExtensionCodec;
    let attr = "__datafusion_logical_extension_codec__";
    let capsule = if session.hasattr(attr)? {
        session.getattr(attr)?.call0()?
    } else {
        session.clone()
    };
    let capsule = capsule.cast::<PyCapsule>()?;
    let pointer = capsule.pointer_checked(Some(c"datafusion_logical_extension_codec"))?;
    // SAFETY: the capsule's name guarantees its content, which datafusion-python keeps alive
    // while we clone it.
    let codec = unsafe { pointer.cast::<FFI_LogicalExtensionCodec>().as_ref() };
    Ok(codec.clone())
}

fn plan_error(e: datafusion::error::DataFusionError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// Every evalsql function, with `judge` / `target` settings (keys after `evalsql.judge.` and
/// `evalsql.target.`, values as text) and the custom rubric files of `rubric_dirs`.
#[pyfunction]
#[pyo3(signature = (judge = HashMap::new(), target = HashMap::new(), rubric_dirs = Vec::new()))]
fn functions(
    judge: HashMap<String, String>,
    target: HashMap<String, String>,
    rubric_dirs: Vec<String>,
) -> PyResult<(Vec<Function>, Settings)> {
    interrupt::install();
    // `judge.fuse` set in the environment: refused like `set("judge.fuse", ...)`, rather than
    // silently judging each metric on its own.
    if evalsql_udfs::fuse_enabled(&datafusion::config::ConfigOptions::new()) {
        return Err(PyValueError::new_err(format!(
            "EVALSQL_JUDGE_FUSE: {FUSE_REFUSED}"
        )));
    }
    let mut options = JudgeOptions::default();
    for (namespace, values) in [("judge", &judge), ("target", &target)] {
        let mut keys: Vec<_> = values.iter().collect();
        keys.sort();
        for (k, v) in keys {
            set_option(&mut options, &format!("{namespace}.{k}"), v)?;
        }
    }
    let options = Arc::new(RwLock::new(options));
    let mut scalars = evalsql_udfs::scalar_functions().map_err(plan_error)?;
    for dir in &rubric_dirs {
        scalars
            .extend(evalsql_udfs::load_rubric_dir(std::path::Path::new(dir)).map_err(plan_error)?);
    }
    let mut out = Vec::new();
    for f in scalars {
        let name = f.name().to_string();
        let f = if f.inner().downcast_ref::<AsyncScalarUDF>().is_some() {
            Arc::new(ScalarUDF::new_from_impl(blocking::BlockingAsync::new(
                f,
                Arc::clone(&options),
            )))
        } else {
            f
        };
        out.push(Function {
            name,
            kind: "scalar",
            inner: Inner::Scalar(f),
        });
    }
    for f in evalsql_udfs::aggregate_functions().map_err(plan_error)? {
        out.push(Function {
            name: f.name().to_string(),
            kind: "aggregate",
            inner: Inner::Aggregate(f),
        });
    }
    for f in evalsql_udfs::window_functions().map_err(plan_error)? {
        out.push(Function {
            name: f.name().to_string(),
            kind: "window",
            inner: Inner::Window(f),
        });
    }
    for (name, f) in evalsql_udfs::table_functions().map_err(plan_error)? {
        let f: Arc<dyn TableFunctionImpl> = if name == "judge_cache" {
            Arc::new(RegisteredJudgeCache {
                inner: f,
                options: Arc::clone(&options),
            })
        } else {
            f
        };
        out.push(Function {
            name: name.to_string(),
            kind: "table",
            inner: Inner::Table(f),
        });
    }
    Ok((out, Settings { options }))
}

/// `judge_cache()` without a path: the cache of the registration's settings (a
/// datafusion-python session holds no `evalsql.judge.cache` of its own).
#[derive(Debug)]
struct RegisteredJudgeCache {
    inner: Arc<dyn TableFunctionImpl>,
    options: Arc<RwLock<JudgeOptions>>,
}

impl TableFunctionImpl for RegisteredJudgeCache {
    fn call_with_args(
        &self,
        args: datafusion::catalog::TableFunctionArgs,
    ) -> datafusion::error::Result<Arc<dyn datafusion::catalog::TableProvider>> {
        use datafusion::logical_expr::Expr;
        use datafusion::scalar::ScalarValue;
        if !args.exprs().is_empty() {
            return self.inner.call_with_args(args);
        }
        let options = self
            .options
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let Some(path) = evalsql_udfs::cache_path(Some(&options), &evalsql_udfs::process_env)
        else {
            return self.inner.call_with_args(args);
        };
        let exprs = [Expr::Literal(
            ScalarValue::Utf8(Some(path.display().to_string())),
            None,
        )];
        self.inner
            .call_with_args(datafusion::catalog::TableFunctionArgs::new(
                &exprs,
                args.session(),
            ))
    }
}

/// The reference of every function: (name, kind, section, syntax, returns, description).
#[pyfunction]
fn catalogue() -> Vec<(String, &'static str, &'static str, String, String, String)> {
    evalsql_udfs::catalogue()
        .into_iter()
        .map(|e| {
            (
                e.name,
                e.kind,
                e.section,
                e.syntax,
                e.returns,
                e.description,
            )
        })
        .collect()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Function>()?;
    m.add_class::<Settings>()?;
    m.add_function(wrap_pyfunction!(functions, m)?)?;
    m.add_function(wrap_pyfunction!(catalogue, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
