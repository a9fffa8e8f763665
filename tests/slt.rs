//! Runs every `tests/slt/*.slt` file against a fresh evalsql session.

use std::path::{Path, PathBuf};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::error::DataFusionError;
use datafusion::prelude::SessionContext;
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType};

struct EvalSql {
    ctx: SessionContext,
}

/// Cells as the .slt files spell them: NULL for null, (empty) for the empty string.
fn rows(batches: &[RecordBatch]) -> Result<Vec<Vec<String>>, DataFusionError> {
    let options = FormatOptions::default().with_null("NULL");
    let mut out = Vec::new();
    for batch in batches {
        let formatters = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()?;
        for row in 0..batch.num_rows() {
            out.push(
                formatters
                    .iter()
                    .map(|f| {
                        let s = f.value(row).to_string();
                        if s.is_empty() {
                            "(empty)".to_string()
                        } else {
                            s
                        }
                    })
                    .collect(),
            );
        }
    }
    Ok(out)
}

#[async_trait::async_trait]
impl AsyncDB for EvalSql {
    type Error = DataFusionError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, DataFusionError> {
        let df = self.ctx.sql(sql).await?;
        let columns = df.schema().fields().len();
        let batches = df.collect().await?;
        if columns == 0 {
            return Ok(DBOutput::StatementComplete(0));
        }
        Ok(DBOutput::Rows {
            types: vec![DefaultColumnType::Any; columns],
            rows: rows(&batches)?,
        })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "evalsql"
    }
}

fn slt_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slt");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "slt"))
        .collect();
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_logic_tests() {
    let files = slt_files();
    assert!(!files.is_empty(), "no .slt files found");
    let mut failures = Vec::new();
    for file in &files {
        let mut runner = sqllogictest::Runner::new(|| async {
            Ok(EvalSql {
                ctx: evalsql::session::default_context().await?,
            })
        });
        // Runs relative to the crate root so the files can read data/ and tests/ paths.
        // EVALSQL_SLT_COMPLETE=1 rewrites the expected results with the actual ones (review
        // the diff before committing it, as with DataFusion's `--complete`).
        if std::env::var_os("EVALSQL_SLT_COMPLETE").is_some() {
            runner
                .update_test_file(
                    file,
                    " ",
                    sqllogictest::default_validator,
                    sqllogictest::default_normalizer,
                    sqllogictest::default_column_validator,
                )
                .await
                .unwrap_or_else(|e| panic!("completing {}: {e}", file.display()));
        } else if let Err(e) = runner.run_file_async(file).await {
            failures.push(format!("{}:\n{e}", file.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} .slt file(s) failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
