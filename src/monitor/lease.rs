//! Which serve process runs a monitor: a lease per monitor, kept in the store, so that
//! processes sharing a store (on one machine or several) do not run the same monitor at
//! once and pay its judge calls twice.
//!
//! A monitor's lease is a sequence of small objects `<store>/monitor_leases/<name>/<term>`,
//! each written with a create-if-absent put (the one conditional write every object store
//! and the local file system offer; a compare-and-swap is not available on the local file
//! system). The object with the highest term says who holds the monitor and until when.
//! A holder extends its lease by writing the next term before the lease runs out; another
//! process takes the monitor only once the lease has run out, by writing the next term
//! itself. Two processes racing for one term cannot both write it, so at most one holds a
//! term. Terms older than the previous one are deleted by the holder.
//!
//! The lease saves work; exactness does not rest on it. A holder that stalls past its lease
//! (a long pause, clocks that disagree by more than the lease) may overlap with the next
//! one for a run; a run's rows and progress are still committed once (Delta's application
//! transactions refuse the second), so the overlap costs calls, never a duplicate row.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion::common::{DataFusionError, Result};
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use url::Url;

use super::catalog::now_micros;

/// What a term's object holds.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
struct Term {
    holder: String,
    /// Microseconds since the epoch at which the lease runs out.
    until: i64,
}

/// What this process last knew of a monitor's lease.
#[derive(Debug, Clone)]
struct Known {
    term: u64,
    lease: Term,
    /// When it was read or written (microseconds since the epoch).
    at: i64,
}

/// How long another process's lease is taken as read before it is read again (it may have
/// been given up).
const RECHECK_MICROS: i64 = 1_000_000;

/// The leases of a store's monitors, as one process sees them.
pub struct Leases {
    store: Arc<dyn ObjectStore>,
    root: Path,
    /// Who this process is ([`this_kernel`], the process id and a random part: a restarted
    /// process is another holder).
    holder: String,
    /// How long a term lasts.
    length: Duration,
    known: Mutex<HashMap<String, Known>>,
}

/// The host's name, the kernel's boot and the process-id namespace this process runs in:
/// a holder named with the same three is a process whose id this one can look up.
fn this_kernel() -> String {
    let read = |path: &str| std::fs::read_to_string(path).map(|s| s.trim().to_string());
    let link = |path: &str| std::fs::read_link(path).map(|p| p.display().to_string());
    format!(
        "{}/{}/{}",
        read("/proc/sys/kernel/hostname").unwrap_or_else(|_| "host".into()),
        read("/proc/sys/kernel/random/boot_id").unwrap_or_default(),
        link("/proc/self/ns/pid").unwrap_or_default()
    )
}

/// Whether `holder` is a process of this kernel and process-id namespace that has ended
/// (killed, crashed): its lease need not be waited out. Anything else (another machine,
/// another container, a process id in use) is taken as alive.
fn ended_here(holder: &str) -> bool {
    let Some((kernel, rest)) = holder
        .rsplit_once('/')
        .and_then(|(head, _)| head.rsplit_once('/'))
    else {
        return false;
    };
    let Ok(pid) = rest.parse::<u32>() else {
        return false;
    };
    let kernel_known = !kernel.contains("//") && !kernel.ends_with('/');
    if !kernel_known || kernel != this_kernel() || pid == std::process::id() {
        return false;
    }
    // Gone, or a zombie not yet reaped by its parent (state Z or X after the command name).
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// Terms are named by number, zero-padded so that they list in order.
fn term_name(term: u64) -> String {
    format!("{term:020}")
}

fn store_error(what: &str, e: object_store::Error) -> DataFusionError {
    DataFusionError::Execution(format!("monitor lease: {what}: {e}"))
}

impl Leases {
    /// The leases under the store at `base`, terms of `length`.
    pub fn new(base: &Url, length: Duration) -> Result<Leases> {
        let store = crate::otlp::store::object_store_for(base)?;
        let url = super::tables::table_url(base, "monitor_leases/")?;
        let root = Path::from_url_path(url.path())
            .map_err(|e| DataFusionError::Configuration(format!("{url}: {e}")))?;
        let random = uuid::Uuid::new_v4().simple().to_string();
        let holder = format!("{}/{}/{}", this_kernel(), std::process::id(), &random[..8]);
        Ok(Leases {
            store,
            root,
            holder,
            length,
            known: Mutex::default(),
        })
    }

    /// Who this process is, as its leases name it: `host/boot/pid-namespace/pid/random`.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    fn dir(&self, monitor: &str) -> Path {
        self.root.clone().join(monitor)
    }

    fn remember(&self, monitor: &str, known: Known) {
        if let Ok(mut k) = self.known.lock() {
            k.insert(monitor.to_string(), known);
        }
    }

    /// The latest term of `monitor`'s lease as the store has it, and the older terms' paths.
    async fn latest(&self, monitor: &str) -> Result<(Option<Known>, Vec<(u64, Path)>)> {
        let mut terms: Vec<(u64, Path)> = self
            .store
            .list(Some(&self.dir(monitor)))
            .try_filter_map(|meta| async move {
                let term = meta.location.filename().and_then(|n| n.parse::<u64>().ok());
                Ok(term.map(|t| (t, meta.location)))
            })
            .try_collect()
            .await
            .map_err(|e| store_error(&format!("cannot list {monitor}'s terms"), e))?;
        terms.sort_by_key(|(t, _)| *t);
        let Some((term, path)) = terms.pop() else {
            return Ok((None, terms));
        };
        let lease = match self.store.get(&path).await {
            Ok(got) => {
                let bytes = got
                    .bytes()
                    .await
                    .map_err(|e| store_error(&format!("cannot read {path}"), e))?;
                serde_json::from_slice(&bytes).map_err(|e| {
                    DataFusionError::Execution(format!("monitor lease: {path} is not a lease: {e}"))
                })?
            }
            // Deleted between the listing and the read: a newer term exists, and the next
            // claim (of this term's successor) fails, as it should.
            Err(object_store::Error::NotFound { .. }) => Term {
                holder: String::new(),
                until: 0,
            },
            Err(e) => return Err(store_error(&format!("cannot read {path}"), e)),
        };
        let at = now_micros();
        Ok((Some(Known { term, lease, at }), terms))
    }

    /// Writes `lease` as `monitor`'s `term`; false when another process wrote it first.
    async fn write_term(&self, monitor: &str, term: u64, lease: &Term) -> Result<bool> {
        let body = serde_json::to_vec(lease)
            .map_err(|e| DataFusionError::Execution(format!("monitor lease: {e}")))?;
        let path = self.dir(monitor).join(term_name(term));
        let options = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        match self
            .store
            .put_opts(&path, PutPayload::from(body), options)
            .await
        {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(store_error(&format!("cannot write {path}"), e)),
        }
    }

    /// Writes `term` for this process; false when another process wrote it first.
    async fn claim(&self, monitor: &str, term: u64) -> Result<bool> {
        let at = now_micros();
        let lease = Term {
            holder: self.holder.clone(),
            until: at + self.length.as_micros() as i64,
        };
        let won = self.write_term(monitor, term, &lease).await?;
        if won {
            self.remember(monitor, Known { term, lease, at });
        } else if let Ok(mut k) = self.known.lock() {
            k.remove(monitor);
        }
        Ok(won)
    }

    /// Whether this process holds `monitor` now, taking it when nobody does and extending
    /// its own lease when a third of it is left. Reads the store only when what this
    /// process knows does not answer.
    pub async fn hold(&self, monitor: &str) -> Result<bool> {
        let now = now_micros();
        let third = self.length.as_micros() as i64 / 3;
        let known = self.known.lock().ok().and_then(|k| k.get(monitor).cloned());
        if let Some(k) = &known {
            if k.lease.holder == self.holder && k.lease.until - now > third {
                return Ok(true);
            }
            if k.lease.holder != self.holder
                && k.lease.until > now
                && now - k.at < RECHECK_MICROS
                && !ended_here(&k.lease.holder)
            {
                return Ok(false);
            }
        }
        let (latest, older) = self.latest(monitor).await?;
        let held = match latest {
            None => self.claim(monitor, 1).await?,
            Some(k)
                if k.lease.holder == self.holder
                    || k.lease.until <= now
                    || ended_here(&k.lease.holder) =>
            {
                self.claim(monitor, k.term + 1).await?
            }
            Some(k) => {
                self.remember(monitor, k);
                false
            }
        };
        if held {
            // Keep the term before this one (a reader may be between listing and reading).
            for (_, path) in older {
                let _ = self.store.delete(&path).await;
            }
        }
        Ok(held)
    }

    /// The monitors this process holds, as it last knew, with their terms.
    fn held_terms(&self) -> Vec<(String, u64)> {
        self.known
            .lock()
            .map(|k| {
                k.iter()
                    .filter(|(_, v)| v.lease.holder == self.holder)
                    .map(|(m, v)| (m.clone(), v.term))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The monitors this process holds, as it last knew.
    pub fn held(&self) -> Vec<String> {
        self.held_terms().into_iter().map(|(m, _)| m).collect()
    }

    /// Gives up the leases this process holds (a process that stops), so that another
    /// process need not wait for them to run out: a next term that has already ended.
    pub async fn release_all(&self) {
        let ended = Term {
            holder: self.holder.clone(),
            until: 0,
        };
        for (monitor, term) in self.held_terms() {
            let _ = self.write_term(&monitor, term + 1, &ended).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leases(dir: &std::path::Path, secs: u64) -> Leases {
        let base = Url::from_directory_path(dir).unwrap();
        Leases::new(&base, Duration::from_secs(secs)).unwrap()
    }

    /// A directory of its own for a test's store.
    fn store(test: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "evalsql-lease-{test}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[tokio::test]
    async fn one_holder_at_a_time_and_the_next_after_it_ends() {
        let dir = store("one_holder");
        let (a, b) = (leases(&dir, 60), leases(&dir, 60));
        assert!(a.hold("m").await.unwrap());
        assert!(!b.hold("m").await.unwrap());
        // Another monitor is free.
        assert!(b.hold("n").await.unwrap());
        assert!(a.hold("m").await.unwrap());
        a.release_all().await;
        // b reads the store again within a second, and finds the lease given up.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert!(b.hold("m").await.unwrap());
        let c = leases(&dir, 60);
        assert!(!c.hold("m").await.unwrap());
        assert!(!c.hold("n").await.unwrap());
    }

    #[tokio::test]
    async fn a_lease_that_runs_out_is_taken_and_its_holder_knows() {
        let dir = store("runs_out");
        let (a, b) = (leases(&dir, 1), leases(&dir, 1));
        assert!(a.hold("m").await.unwrap());
        assert!(!b.hold("m").await.unwrap());
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert!(b.hold("m").await.unwrap());
        assert!(!a.hold("m").await.unwrap());
    }

    #[test]
    fn a_holder_of_this_kernel_that_ended_is_known_to_have_ended() {
        let here = this_kernel();
        // A process id that is not in use: the highest the kernel allows, plus one.
        let unused = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .map_or(4_194_304, |s| s.trim().parse::<u32>().unwrap())
            + 1;
        assert!(ended_here(&format!("{here}/{unused}/abcd0123")));
        assert!(!ended_here(&format!(
            "{here}/{}/abcd0123",
            std::process::id()
        )));
        assert!(!ended_here(&format!("{here}/1/abcd0123")), "pid 1 is alive");
        assert!(!ended_here(&format!("elsewhere/boot/ns/{unused}/abcd0123")));
        assert!(!ended_here("nonsense"));
    }

    #[tokio::test]
    async fn racers_for_a_free_monitor_get_one_holder() {
        let dir = store("racers");
        let all: Vec<Arc<Leases>> = (0..8).map(|_| Arc::new(leases(&dir, 60))).collect();
        let tasks: Vec<_> = all
            .iter()
            .map(|l| {
                let l = Arc::clone(l);
                tokio::spawn(async move { l.hold("m").await.unwrap() })
            })
            .collect();
        let mut held = 0;
        for t in tasks {
            held += usize::from(t.await.unwrap());
        }
        assert_eq!(held, 1);
    }

    #[tokio::test]
    async fn a_holder_extends_its_lease_and_old_terms_go() {
        let dir = store("extends");
        let a = leases(&dir, 1);
        for _ in 0..6 {
            assert!(a.hold("m").await.unwrap());
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
        let terms = std::fs::read_dir(dir.join("monitor_leases/m"))
            .unwrap()
            .count();
        assert!(terms <= 2, "{terms} terms kept");
        let b = leases(&dir, 1);
        assert!(!b.hold("m").await.unwrap(), "the lease was extended");
    }
}
