//! The local file system, with every object written flushed to the disk before the write
//! returns. object_store's `LocalFileSystem` writes through the OS only: a commit it reports
//! would survive `kill -9` but not a power cut. The store answers a sender only after its
//! commit, so the commit (and the data files before it) must be on the disk: each file
//! written is `fsync`ed, and so is its directory (which holds the new name).

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::executor::block_on;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
    UploadPart,
};

/// `LocalFileSystem` rooted at `/`, flushing what it writes.
#[derive(Debug)]
pub struct SyncedLocal {
    inner: Arc<LocalFileSystem>,
}

impl SyncedLocal {
    pub fn new() -> Self {
        SyncedLocal {
            inner: Arc::new(LocalFileSystem::new()),
        }
    }
}

impl fmt::Display for SyncedLocal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SyncedLocal")
    }
}

/// `fsync` of the file at `location` and of its directory (on a store thread).
fn sync(location: &Path) -> Result<()> {
    let file = std::path::PathBuf::from(format!("/{location}"));
    let synced = std::fs::File::open(&file)
        .and_then(|f| f.sync_all())
        .and_then(|()| match file.parent() {
            Some(dir) => std::fs::File::open(dir).and_then(|d| d.sync_all()),
            None => Ok(()),
        });
    synced.map_err(|e| object_store::Error::Generic {
        store: "SyncedLocal",
        source: Box::new(e),
    })
}

// Every operation runs on the store's own threads ([`io::run`]), where `LocalFileSystem`,
// finding no tokio runtime, does its work inline.
#[async_trait]
impl ObjectStore for SyncedLocal {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let (inner, location) = (Arc::clone(&self.inner), location.clone());
        io::run(move || {
            let put = block_on(inner.put_opts(&location, payload, opts))?;
            sync(&location)?;
            Ok(put)
        })
        .await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        let inner = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(SyncedUpload {
            inner,
            location: location.clone(),
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let (inner, location) = (Arc::clone(&self.inner), location.clone());
        io::run(move || {
            let head = options.head;
            let got = block_on(inner.get_opts(&location, options))?;
            if head || got.range.end - got.range.start > io::WHOLE_READ_MAX {
                // Streamed by the caller as before (a big file is not held in memory whole).
                return Ok(got);
            }
            let (meta, range, attributes) =
                (got.meta.clone(), got.range.clone(), got.attributes.clone());
            let bytes = block_on(got.bytes())?;
            Ok(GetResult {
                payload: GetResultPayload::Stream(
                    futures::stream::once(async { Ok(bytes) }).boxed(),
                ),
                meta,
                range,
                attributes,
            })
        })
        .await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let (inner, location, ranges) =
            (Arc::clone(&self.inner), location.clone(), ranges.to_vec());
        io::run(move || block_on(inner.get_ranges(&location, &ranges))).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let inner = Arc::clone(&self.inner);
        locations
            .map(move |location| {
                let inner = Arc::clone(&inner);
                async move {
                    let location = location?;
                    io::run(move || {
                        block_on(inner.delete(&location))?;
                        Ok(location)
                    })
                    .await
                }
            })
            .buffered(io::THREADS)
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let (inner, prefix) = (Arc::clone(&self.inner), prefix.cloned());
        listed(io::run(move || {
            block_on(inner.list(prefix.as_ref()).try_collect::<Vec<_>>())
        }))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        // `LocalFileSystem` skips the entries up to `offset` before reading their metadata
        // (a Delta log is listed from its last checkpoint this way).
        let (inner, prefix, offset) = (Arc::clone(&self.inner), prefix.cloned(), offset.clone());
        listed(io::run(move || {
            block_on(
                inner
                    .list_with_offset(prefix.as_ref(), &offset)
                    .try_collect::<Vec<_>>(),
            )
        }))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let (inner, prefix) = (Arc::clone(&self.inner), prefix.cloned());
        io::run(move || block_on(inner.list_with_delimiter(prefix.as_ref()))).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let (inner, from, to) = (Arc::clone(&self.inner), from.clone(), to.clone());
        io::run(move || {
            block_on(inner.copy_opts(&from, &to, options))?;
            sync(&to)
        })
        .await
    }
}

/// A listing made on a store thread, as a stream.
fn listed(
    listing: impl std::future::Future<Output = Result<Vec<ObjectMeta>>> + Send + 'static,
) -> BoxStream<'static, Result<ObjectMeta>> {
    futures::stream::once(listing)
        .map_ok(|all| futures::stream::iter(all.into_iter().map(Ok)))
        .try_flatten()
        .boxed()
}

#[derive(Debug)]
struct SyncedUpload {
    inner: Box<dyn MultipartUpload>,
    location: Path,
}

#[async_trait]
impl MultipartUpload for SyncedUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let part = self.inner.put_part(data);
        Box::pin(io::run(move || block_on(part)))
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let done = self.inner.complete().await?;
        let location = self.location.clone();
        io::run(move || sync(&location)).await?;
        Ok(done)
    }

    async fn abort(&mut self) -> Result<()> {
        self.inner.abort().await
    }
}

/// The store's file operations, on threads of their own that give their memory back after
/// each.
///
/// object_store's `LocalFileSystem` does each file operation on one of tokio's blocking
/// threads, which allocates what it returns (a file's bytes, a listing); the caller frees it
/// on another thread. mimalloc returns such a page to the system only when the thread that
/// allocated it collects, and a blocking thread collects only when it allocates again in the
/// same size class: under an OTLP flood the 16 blocking threads held 250-400 MiB that the
/// live heap no longer used (forcing a collection in each through gdb gave it back at once),
/// and the process grew by ~40 MiB a minute. tokio has no hook after a blocking task, so the
/// operations run here: outside a tokio runtime `LocalFileSystem` does its work inline, and
/// each thread collects after each operation (which is a system call or more; collecting
/// one small heap is microseconds).
mod io {
    use std::sync::mpsc::{Receiver, Sender, channel};
    use std::sync::{Mutex, OnceLock};

    use object_store::Result;

    /// The store's threads: enough for its parallel reads, writes and flushes on a local disk.
    pub const THREADS: usize = 8;

    /// A read larger than this is streamed to the caller as `LocalFileSystem` streams it,
    /// not read whole here.
    pub const WHOLE_READ_MAX: u64 = 64 << 20;

    type Job = Box<dyn FnOnce() + Send>;

    /// The store threads' queue; `None` when none could start.
    fn queue() -> Option<&'static Mutex<Sender<Job>>> {
        static QUEUE: OnceLock<Option<Mutex<Sender<Job>>>> = OnceLock::new();
        QUEUE
            .get_or_init(|| {
                let (send, receive) = channel::<Job>();
                let receive: &'static Mutex<Receiver<Job>> =
                    Box::leak(Box::new(Mutex::new(receive)));
                let mut started = 0;
                for i in 0..THREADS {
                    let spawned = std::thread::Builder::new()
                        .name(format!("evalsql-store-{i}"))
                        .spawn(move || {
                            loop {
                                let job = match receive.lock() {
                                    Ok(r) => r.recv(),
                                    Err(e) => e.into_inner().recv(),
                                };
                                let Ok(job) = job else { return };
                                job();
                                // SAFETY: collects this thread's own heap; no pointer is passed.
                                unsafe { libmimalloc_sys::mi_collect(true) };
                            }
                        });
                    match spawned {
                        Ok(_) => started += 1,
                        Err(e) => log::warn!("the store's thread {i} did not start: {e}"),
                    }
                }
                (started > 0).then(|| Mutex::new(send))
            })
            .as_ref()
    }

    /// Runs `work` on a store thread (on one of tokio's if none could start).
    pub async fn run<T: Send + 'static>(
        work: impl FnOnce() -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(work());
        });
        let sent = match queue() {
            Some(q) => match q.lock() {
                Ok(q) => q.send(job),
                Err(e) => e.into_inner().send(job),
            },
            None => Err(std::sync::mpsc::SendError(job)),
        };
        if let Err(std::sync::mpsc::SendError(job)) = sent {
            tokio::task::spawn_blocking(job);
        }
        rx.await.map_err(|e| object_store::Error::Generic {
            store: "SyncedLocal",
            source: Box::new(e),
        })?
    }
}
