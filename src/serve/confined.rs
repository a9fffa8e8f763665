//! The table functions that read files, as the server offers them: only under a data root.

use std::sync::Arc;

use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::Expr;
use evalsql_udfs::{JudgeOptions, cache_path, process_env};

use crate::object_stores::DataRoots;

/// `judge_cache(path)` reads a file (read-only): in the server only under a data root.
#[derive(Debug)]
pub(super) struct ConfinedJudgeCache {
    pub(super) inner: Arc<dyn TableFunctionImpl>,
    pub(super) roots: Arc<DataRoots>,
}

impl TableFunctionImpl for ConfinedJudgeCache {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let (path, shown) = match args.exprs() {
            [Expr::Literal(ScalarValue::Utf8(Some(p)), _)]
            | [Expr::Literal(ScalarValue::Utf8View(Some(p)), _)]
            | [Expr::Literal(ScalarValue::LargeUtf8(Some(p)), _)] => {
                // SQLite reads "file:..." as a URI naming any file: not a path here.
                if p.get(..5).is_some_and(|s| s.eq_ignore_ascii_case("file:")) {
                    return Err(DataFusionError::Plan(format!(
                        "judge_cache({p:?}): give a file path, not a URI"
                    )));
                }
                let path = std::path::absolute(p)?;
                let shown = path.display().to_string();
                (path, shown)
            }
            // The session's cache: readable only if it lies under a root too.
            [] => {
                let options = args.session().config_options();
                let session = options.extensions.get::<JudgeOptions>();
                match cache_path(session, &process_env) {
                    Some(p) => (std::path::absolute(p)?, "the server's judge cache".into()),
                    None => return self.inner.call_with_args(args),
                }
            }
            _ => return self.inner.call_with_args(args),
        };
        if !self.roots.allows_local_file(&path) {
            return Err(DataFusionError::Plan(format!(
                "judge_cache(): {shown} is outside the data roots of this server ({}); an \
                 administrator can put the judge cache under one",
                self.roots.describe()
            )));
        }
        self.inner.call_with_args(args)
    }
}

/// `read_otlp(location)` reads traces: in the server only under a data root (the confined
/// stores would refuse the read anyway; this says why before anything is listed).
#[derive(Debug)]
pub(super) struct ConfinedReadOtlp {
    pub(super) inner: Arc<dyn TableFunctionImpl>,
    pub(super) roots: Arc<DataRoots>,
}

impl TableFunctionImpl for ConfinedReadOtlp {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let location = evalsql_udfs::location_argument(args.exprs())?;
        // What is checked is what will be listed: the parsed URL's store and prefix, not the
        // text (where `?` may be a glob or a query, and `file://host/…` a local path).
        let url = evalsql_udfs::parse_location(&location)?;
        let listed = match url.get_url().to_file_path() {
            Ok(path) if url.scheme() == "file" => path.display().to_string(),
            _ => format!(
                "{}://{}/{}",
                url.scheme(),
                url.get_url().host_str().unwrap_or(""),
                url.prefix()
            ),
        };
        if !self.roots.allows_location(&listed) || !self.roots.allows_location(&location) {
            return Err(DataFusionError::Plan(format!(
                "read_otlp(): {location} is outside the data roots of this server ({})",
                self.roots.describe()
            )));
        }
        self.inner.call_with_args(args)
    }
}
