//! One outcome cell per content address: identical calls in flight are sent once, and the
//! functions of one query that make the same call see the same outcome.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::OnceCell;

/// How long an outcome stays shared in memory. Long enough for every function of a query
/// to see the same outcome; short enough that a REPL user who fixed a quota problem gets
/// errors retried by the next query a few minutes later. Successes live on in the
/// persistent cache.
const MEMO_TTL: Duration = Duration::from_secs(600);

struct MemoEntry<T> {
    cell: Arc<OnceCell<Arc<T>>>,
    created: Instant,
}

/// One outcome cell per content address, kept for [`MEMO_TTL`] once settled.
pub struct SharedOutcomes<T> {
    inner: Mutex<(HashMap<String, MemoEntry<T>>, usize)>,
}

impl<T> SharedOutcomes<T> {
    pub fn new() -> Self {
        Self {
            inner: Mutex::new((HashMap::new(), 65_536)),
        }
    }

    /// The process's outcome cell for `key`.
    pub fn cell(&self, key: &str) -> Arc<OnceCell<Arc<T>>> {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (cells, purge_at) = &mut *guard;
        let now = Instant::now();
        if let Some(entry) = cells.get(key) {
            // An expired, settled outcome is replaced; a call in flight is always shared.
            if now - entry.created < MEMO_TTL || !entry.cell.initialized() {
                return Arc::clone(&entry.cell);
            }
        }
        if cells.len() >= *purge_at {
            cells.retain(|_, e| now - e.created < MEMO_TTL || !e.cell.initialized());
            *purge_at = (cells.len() * 2).max(65_536);
        }
        let cell = Arc::new(OnceCell::new());
        cells.insert(
            key.to_string(),
            MemoEntry {
                cell: Arc::clone(&cell),
                created: now,
            },
        );
        cell
    }
}
