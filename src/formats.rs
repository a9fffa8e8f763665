//! File formats known by extension beyond DataFusion's own.
//!
//! - `.jsonl` and `.ndjson`, the usual names of evaluation datasets (Azure AI evaluation,
//!   OpenAI evals), are newline-delimited JSON.
//! - `.json` holds either newline-delimited JSON or one JSON array (what Ragas, DeepEval
//!   and most notebooks write). DataFusion needs to be told which; [`JsonAutoFormat`] looks
//!   at the first file's first character while inferring the schema and reads it as an
//!   array when that is `[`.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::config::JsonOptions;
use datafusion::common::{GetExt, Result, Statistics};
use datafusion::datasource::file_format::file_compression_type::FileCompressionType;
use datafusion::datasource::file_format::json::{JsonFormat, JsonFormatFactory};
use datafusion::datasource::file_format::{FileFormat, FileFormatFactory};
use datafusion::datasource::physical_plan::{FileScanConfig, FileSinkConfig, FileSource};
use datafusion::datasource::table_schema::TableSchema;
use datafusion::physical_expr::LexRequirement;
use datafusion::physical_plan::ExecutionPlan;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};

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

/// The `json` extension: DataFusion's JSON format, array or newline-delimited as the file
/// says (see the module docs). An explicit `format.newline_delimited` option wins.
#[derive(Debug, Default)]
pub struct JsonAutoFormatFactory {
    inner: JsonFormatFactory,
}

impl GetExt for JsonAutoFormatFactory {
    fn get_ext(&self) -> String {
        self.inner.get_ext()
    }
}

impl FileFormatFactory for JsonAutoFormatFactory {
    fn create(
        &self,
        state: &dyn Session,
        format_options: &HashMap<String, String>,
    ) -> Result<Arc<dyn FileFormat>> {
        let format = self.inner.create(state, format_options)?;
        let explicit = format_options
            .keys()
            .any(|k| k.ends_with("newline_delimited"));
        match format.as_ref().downcast_ref::<JsonFormat>() {
            Some(json) if !explicit => Ok(Arc::new(JsonAutoFormat {
                options: json.options().clone(),
                base: JsonFormat::default().with_options(json.options().clone()),
                decided: OnceLock::new(),
            })),
            _ => Ok(format),
        }
    }

    fn default(&self) -> Arc<dyn FileFormat> {
        self.inner.default()
    }
}

/// A JSON format that settles array vs newline-delimited on first sight of the data.
#[derive(Debug)]
pub struct JsonAutoFormat {
    options: JsonOptions,
    base: JsonFormat,
    decided: OnceLock<JsonFormat>,
}

impl JsonAutoFormat {
    /// The format to use: as decided by schema inference, else newline-delimited.
    fn format(&self) -> &JsonFormat {
        self.decided.get().unwrap_or(&self.base)
    }
}

/// Whether an uncompressed file starts (after whitespace and a BOM) with `[`.
async fn starts_with_array(store: &Arc<dyn ObjectStore>, object: &ObjectMeta) -> Result<bool> {
    let end = object.size.min(4096);
    if end == 0 {
        return Ok(false);
    }
    let head = store.get_range(&object.location, 0..end).await?;
    let text = String::from_utf8_lossy(&head);
    Ok(text
        .trim_start_matches(|c: char| c.is_whitespace() || c == '\u{feff}')
        .starts_with('['))
}

#[async_trait]
impl FileFormat for JsonAutoFormat {
    fn get_ext(&self) -> String {
        self.base.get_ext()
    }

    fn get_ext_with_compression(&self, c: &FileCompressionType) -> Result<String> {
        self.base.get_ext_with_compression(c)
    }

    fn compression_type(&self) -> Option<FileCompressionType> {
        self.base.compression_type()
    }

    async fn infer_schema(
        &self,
        state: &dyn Session,
        store: &Arc<dyn ObjectStore>,
        objects: &[ObjectMeta],
    ) -> Result<SchemaRef> {
        if self.decided.get().is_none() {
            let uncompressed = self
                .base
                .compression_type()
                .is_none_or(|c| !c.is_compressed());
            let array = match objects.first() {
                Some(first) if uncompressed => starts_with_array(store, first).await?,
                _ => false,
            };
            let _ = self
                .decided
                .set(JsonFormat::default().with_options(JsonOptions {
                    newline_delimited: !array,
                    ..self.options.clone()
                }));
        }
        self.format().infer_schema(state, store, objects).await
    }

    async fn infer_stats(
        &self,
        state: &dyn Session,
        store: &Arc<dyn ObjectStore>,
        table_schema: SchemaRef,
        object: &ObjectMeta,
    ) -> Result<Statistics> {
        self.format()
            .infer_stats(state, store, table_schema, object)
            .await
    }

    async fn create_physical_plan(
        &self,
        state: &dyn Session,
        conf: FileScanConfig,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.format().create_physical_plan(state, conf).await
    }

    async fn create_writer_physical_plan(
        &self,
        input: Arc<dyn ExecutionPlan>,
        state: &dyn Session,
        conf: FileSinkConfig,
        order_requirements: Option<LexRequirement>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.format()
            .create_writer_physical_plan(input, state, conf, order_requirements)
            .await
    }

    fn file_source(&self, table_schema: TableSchema) -> Arc<dyn FileSource> {
        self.format().file_source(table_schema)
    }
}
