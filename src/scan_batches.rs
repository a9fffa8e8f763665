//! Batches of about the same bytes, not the same rows, when a query scores a file.
//!
//! DataFusion reads a file in batches of `datafusion.execution.batch_size` rows (8,192),
//! whatever the rows hold, and a metric works on one batch at a time: the tokens of its
//! texts, the parsed trajectories shared by the trajectory metrics of the query, its
//! n-gram tables. At 8,192 rows of 200-byte texts that is a megabyte or two; at 8,192
//! trajectories of 640 bytes, or texts of 2 KB, it is 5-20 MB of text and more of work,
//! which no longer stays in a core's caches between the functions that read it, and on two
//! cores the partitions end within one batch of each other (see [`crate::balance_scans`]),
//! 70 ms of 2 KB texts. So when a query evaluates an evalsql function, this rule gives each
//! file scan batches of about [`BATCH_BYTES`] of the columns it reads, by the file's own
//! estimate of their size, between [`MIN_ROWS`] rows and the session's batch size: texts
//! of a usual length keep 8,192 rows, and only wide rows get fewer. The estimate is
//! Parquet's uncompressed column sizes, which count a dictionary-encoded column's texts
//! once each (a column of few distinct texts looks narrow and keeps its batches); a
//! format without such an estimate (CSV, JSON) keeps its batches.
//!
//! Measured on the release build, alternating runs, medians, one core / two: the 1M-row
//! six-metric trajectory job (640 bytes a row: 2,457 rows a batch) 2.22 -> 2.05 s /
//! 1.21 -> 1.14 s; 100,000 pairs of 2.3 KB texts (683 rows) rouge_l 0.95 -> 0.83 s /
//! 0.67 -> 0.52 s, bleu 2.18 -> 1.86 s / 1.46 -> 1.03 s, f1_score 0.72 -> 0.70 s /
//! 0.49 -> 0.43 s. Below a thousand rows it stops mattering (1,024 and 683 rows of the
//! 2.3 KB texts run alike), and short texts lose by it (bleu on 184-byte pairs: 2,048-row
//! batches 5 % slower than 8,192), hence the bounds.
//!
//! A plan that calls the judge keeps its batches: a judge function sends a whole batch's
//! calls at once and waits for the slowest, and smaller batches would wait more often.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::Statistics;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::config::ConfigOptions;
use datafusion::datasource::physical_plan::{FileScanConfig, FileScanConfigBuilder};
use datafusion::datasource::source::{DataSource, DataSourceExec};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::async_func::AsyncFuncExec;

use crate::balance_scans::{any_node, scores};

/// About how many bytes of the scanned columns a batch holds.
pub const BATCH_BYTES: usize = 3 << 19; // 1.5 MiB

/// The fewest rows a batch is given.
pub const MIN_ROWS: usize = 512;

/// The rule (see the module documentation).
#[derive(Debug, Default)]
pub struct SizeScoringBatches;

fn file_scan(plan: &Arc<dyn ExecutionPlan>) -> Option<&FileScanConfig> {
    plan.downcast_ref::<DataSourceExec>()?
        .data_source()
        .downcast_ref::<FileScanConfig>()
}

/// Rows of about [`BATCH_BYTES`] by the statistics' row count and column sizes, if they
/// give both.
fn rows_for_bytes(statistics: &Statistics) -> Option<usize> {
    let rows = *statistics.num_rows.get_value()?;
    let bytes = statistics
        .column_statistics
        .iter()
        .map(|c| c.byte_size.get_value().copied())
        .sum::<Option<usize>>()?;
    if rows == 0 || bytes == 0 {
        return None;
    }
    Some(BATCH_BYTES / bytes.div_ceil(rows))
}

impl PhysicalOptimizerRule for SizeScoringBatches {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let session_rows = config.execution.batch_size.get();
        if session_rows <= MIN_ROWS
            || !any_node(&plan, |node| file_scan(node).is_some())?
            || any_node(&plan, |node| node.downcast_ref::<AsyncFuncExec>().is_some())?
            || !scores(&plan)?
        {
            return Ok(plan);
        }
        plan.transform_up(|node| {
            let Some(scan) = file_scan(&node) else {
                return Ok(Transformed::no(node));
            };
            let current = scan.batch_size.unwrap_or(session_rows);
            let Some(rows) = rows_for_bytes(scan.partition_statistics(None)?.as_ref()) else {
                return Ok(Transformed::no(node));
            };
            let rows = rows.clamp(MIN_ROWS, session_rows);
            if rows >= current {
                return Ok(Transformed::no(node));
            }
            let sized = FileScanConfigBuilder::from(scan.clone())
                .with_batch_size(Some(rows))
                .build();
            Ok(Transformed::yes(
                DataSourceExec::from_data_source(sized) as Arc<dyn ExecutionPlan>
            ))
        })
        .data()
    }

    fn name(&self) -> &str {
        "evalsql_size_scoring_batches"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
