//! File formats known by extension beyond DataFusion's own: `.jsonl` and `.ndjson`, the
//! usual names of evaluation datasets (Azure AI evaluation, OpenAI evals), are
//! newline-delimited JSON.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::catalog::Session;
use datafusion::common::{GetExt, Result};
use datafusion::datasource::file_format::json::JsonFormatFactory;
use datafusion::datasource::file_format::{FileFormat, FileFormatFactory};

/// DataFusion's JSON format under another file extension.
#[derive(Debug)]
pub struct JsonLinesFormatFactory {
    extension: &'static str,
    inner: JsonFormatFactory,
}

impl JsonLinesFormatFactory {
    pub fn new(extension: &'static str) -> Self {
        Self {
            extension,
            inner: JsonFormatFactory::new(),
        }
    }

    /// The extensions registered by [`crate::session::new_context`].
    pub fn all() -> Vec<Arc<dyn FileFormatFactory>> {
        ["jsonl", "ndjson"]
            .into_iter()
            .map(|e| Arc::new(Self::new(e)) as Arc<dyn FileFormatFactory>)
            .collect()
    }
}

impl GetExt for JsonLinesFormatFactory {
    fn get_ext(&self) -> String {
        self.extension.to_string()
    }
}

impl FileFormatFactory for JsonLinesFormatFactory {
    fn create(
        &self,
        state: &dyn Session,
        format_options: &HashMap<String, String>,
    ) -> Result<Arc<dyn FileFormat>> {
        self.inner.create(state, format_options)
    }

    fn default(&self) -> Arc<dyn FileFormat> {
        self.inner.default()
    }
}
