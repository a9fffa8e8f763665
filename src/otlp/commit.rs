//! Appending to a Delta log without keeping the table's file list.
//!
//! delta-rs's `CommitBuilder` commits against a snapshot of the table and, once the commit is
//! in, brings that snapshot up to the new version; the kernel rebuilds the list of the
//! table's files to do it, so every commit costs in proportion to the files the table has.
//! Under a steady flood (a commit every few hundred milliseconds, compaction every few
//! minutes) that cost was the writer's: acknowledged spans per second fell by half between
//! two compactions.
//!
//! An append needs none of it. What it writes does not depend on the files already there,
//! and no other commit can invalidate it except one that changes what a file must be — the
//! table's schema (metadata) or its protocol. So [`Log`] keeps only the version it last
//! wrote, writes the next entry with the log store's put-if-absent (the same
//! `write_commit_entry` `CommitBuilder` uses: a local rename, a conditional put on object
//! storage), and when another writer took that version it reads only that entry: an append,
//! a compaction or a vacuum is passed over and the next version tried; a change of schema or
//! protocol refuses the commit, so nothing is written under a table definition the encoders
//! do not know. Compaction ([`super::compact`]) commits the same way, and is refused also
//! when the version it would follow removed one of the files it replaces.

use std::collections::{HashMap, HashSet};

use deltalake::kernel::transaction::{CommitData, PROTOCOL, TransactionError};
use deltalake::kernel::{Action, Add};
use deltalake::logstore::{CommitOrBytes, LogStoreRef};
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::{DeltaTable, DeltaTableError};
use uuid::Uuid;

/// Versions taken by other writers passed over in one commit before it gives up.
const MAX_PASSED: u64 = 10_000;

/// The log of one table, as one appending writer sees it.
pub struct Log {
    store: LogStoreRef,
    /// The last version this writer knows of.
    version: u64,
    partition_by: Vec<String>,
}

impl Log {
    /// The log of `table`, at the version `table` was loaded at; an error when delta-rs
    /// cannot append to the table (a protocol feature it does not write, an append-only
    /// table's constraints are fine).
    pub fn of(table: &DeltaTable) -> Result<Log, DeltaTableError> {
        let snapshot = table.snapshot()?;
        let partition_by = snapshot.metadata().partition_columns().to_vec();
        let log = Log {
            store: table.log_store(),
            version: snapshot.version(),
            partition_by,
        };
        PROTOCOL.can_commit(snapshot, &[], &log.operation())?;
        Ok(log)
    }

    /// The last version written or passed over.
    pub fn version(&self) -> u64 {
        self.version
    }

    fn operation(&self) -> DeltaOperation {
        DeltaOperation::Write {
            mode: SaveMode::Append,
            partition_by: Some(self.partition_by.clone()),
            predicate: None,
        }
    }

    /// Commits `adds` as one version, the next free one; that version.
    pub async fn append(&mut self, adds: Vec<Add>) -> Result<u64, String> {
        let actions = adds.into_iter().map(Action::Add).collect();
        self.commit(actions, self.operation()).await
    }

    /// Commits `actions` (files added, and files removed that were in the table at the last
    /// version this log knows) as one version, the next free one; that version. A version
    /// another writer took meanwhile is passed over unless it removed one of the same files
    /// (two compactions of the same files: the second is refused, so no rows are
    /// duplicated — delta-rs's own conflict check lets it through, as it ignores removals
    /// that change no data) or changed the table's schema or protocol.
    pub async fn commit(
        &mut self,
        actions: Vec<Action>,
        operation: DeltaOperation,
    ) -> Result<u64, String> {
        let Some(first) = actions.iter().find_map(|a| match a {
            Action::Add(a) => Some(a.path.clone()),
            _ => None,
        }) else {
            return Ok(self.version);
        };
        let removed: HashSet<String> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Remove(r) => Some(r.path.clone()),
                _ => None,
            })
            .collect();
        let data = CommitData::new(actions, operation, HashMap::new(), Vec::new());
        let bytes = data.get_bytes().map_err(|e| e.to_string())?;
        let operation_id = Uuid::new_v4();
        for _ in 0..MAX_PASSED {
            let version = self.version + 1;
            let entry = CommitOrBytes::LogBytes(bytes.clone());
            match self
                .store
                .write_commit_entry(version, entry, operation_id)
                .await
            {
                Ok(()) => {
                    self.version = version;
                    return Ok(version);
                }
                Err(TransactionError::VersionAlreadyExists(_)) => {
                    let theirs = self.winner(version, &first, &removed).await?;
                    self.version = version;
                    if theirs == Winner::Ours {
                        // A put whose answer was lost and was tried again by the object
                        // store: the entry is ours, and in.
                        return Ok(version);
                    }
                }
                Err(e) => return Err(format!("writing log entry {version}: {e}")),
            }
        }
        Err(format!(
            "{MAX_PASSED} versions were taken by other writers while this one tried to commit"
        ))
    }

    /// Who wrote `version`: this commit (its first file is in it), or another writer whose
    /// entry this commit may follow.
    async fn winner(
        &self,
        version: u64,
        first: &str,
        removed: &HashSet<String>,
    ) -> Result<Winner, String> {
        let entry = self
            .store
            .read_commit_entry(version)
            .await
            .map_err(|e| format!("reading log entry {version}: {e}"))?
            .ok_or_else(|| format!("log entry {version} was taken but cannot be read"))?;
        for line in entry.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let action: Action = serde_json::from_slice(line)
                .map_err(|e| format!("log entry {version} is not a Delta log entry: {e}"))?;
            match action {
                Action::Add(a) if a.path == first => return Ok(Winner::Ours),
                Action::Remove(r) if removed.contains(&r.path) => {
                    return Err(format!(
                        "log entry {version} removed {} too: another process compacted the \
                         same files",
                        r.path
                    ));
                }
                Action::Metadata(_) => {
                    return Err(format!(
                        "log entry {version} changed the table's schema or settings; \
                         restart the server to write under the new definition"
                    ));
                }
                Action::Protocol(_) => {
                    return Err(format!(
                        "log entry {version} changed the table's protocol; restart the \
                         server to write under the new one"
                    ));
                }
                _ => {}
            }
        }
        Ok(Winner::Theirs)
    }
}

#[derive(Debug, PartialEq)]
enum Winner {
    Ours,
    Theirs,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::store::open_or_create;

    fn add(path: &str) -> Add {
        Add {
            path: path.into(),
            partition_values: [("start_date".to_string(), Some("2026-12-07".to_string()))].into(),
            size: 1,
            modification_time: 1,
            data_change: true,
            ..Default::default()
        }
    }

    async fn table(name: &str) -> DeltaTable {
        let dir = std::env::temp_dir().join(format!("evalsql-commit-{name}-{}", Uuid::new_v4()));
        let url = url::Url::from_directory_path(&dir).unwrap();
        open_or_create(&url).await.unwrap()
    }

    async fn files(table: &mut DeltaTable) -> Vec<String> {
        table.update_state().await.unwrap();
        let mut f: Vec<String> = table
            .get_file_uris()
            .unwrap()
            .map(|u| u.rsplit('/').next().unwrap().to_string())
            .collect();
        f.sort();
        f
    }

    #[tokio::test]
    async fn a_version_taken_by_another_append_is_passed_over() {
        let mut t = table("passed").await;
        let (mut a, mut b) = (Log::of(&t).unwrap(), Log::of(&t).unwrap());
        let start = a.version();
        assert_eq!(a.append(vec![add("a.parquet")]).await, Ok(start + 1));
        // `b` has not seen version start + 1: it finds it taken, by an append, and goes on.
        assert_eq!(
            b.append(vec![add("b.parquet"), add("c.parquet")]).await,
            Ok(start + 2)
        );
        assert_eq!(a.append(vec![add("d.parquet")]).await, Ok(start + 3));
        assert_eq!(
            files(&mut t).await,
            ["a.parquet", "b.parquet", "c.parquet", "d.parquet"]
        );
        assert_eq!(
            a.append(Vec::new()).await,
            Ok(start + 3),
            "nothing to commit"
        );
    }

    #[tokio::test]
    async fn an_entry_that_is_ours_already_is_not_written_twice() {
        let mut t = table("ours").await;
        let mut a = Log::of(&t).unwrap();
        let start = a.version();
        // As if a put went in but its answer was lost: the entry is there, the log does not
        // know it.
        let data = CommitData::new(
            vec![Action::Add(add("a.parquet"))],
            a.operation(),
            HashMap::new(),
            Vec::new(),
        );
        let bytes = CommitOrBytes::LogBytes(data.get_bytes().unwrap());
        t.log_store()
            .write_commit_entry(start + 1, bytes, Uuid::new_v4())
            .await
            .unwrap();
        assert_eq!(a.append(vec![add("a.parquet")]).await, Ok(start + 1));
        assert_eq!(t.get_latest_version().await.unwrap(), start + 1);
        assert_eq!(files(&mut t).await, ["a.parquet"]);
    }

    #[tokio::test]
    async fn a_changed_schema_or_protocol_refuses_the_commit() {
        for (name, changed) in [("schema", "schema or settings"), ("protocol", "protocol")] {
            let mut t = table(name).await;
            let mut a = Log::of(&t).unwrap();
            let start = a.version();
            let snapshot = t.snapshot().unwrap();
            let action = if name == "schema" {
                Action::Metadata(snapshot.metadata().clone())
            } else {
                Action::Protocol(snapshot.protocol().clone())
            };
            let bytes = CommitOrBytes::LogBytes(serde_json::to_vec(&action).unwrap().into());
            t.log_store()
                .write_commit_entry(start + 1, bytes, Uuid::new_v4())
                .await
                .unwrap();
            let refused = a.append(vec![add("a.parquet")]).await.unwrap_err();
            assert!(refused.contains(changed), "{refused}");
            assert!(files(&mut t).await.is_empty());
        }
    }
}
