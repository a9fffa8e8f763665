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
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result, UploadPart,
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

/// `fsync` of the file at `location` and of its directory.
async fn sync(location: Path) -> Result<()> {
    let file = std::path::PathBuf::from(format!("/{location}"));
    tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        std::fs::File::open(&file)?.sync_all()?;
        if let Some(dir) = file.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })
    .await
    .map_err(|e| object_store::Error::Generic {
        store: "SyncedLocal",
        source: Box::new(e),
    })?
    .map_err(|e| object_store::Error::Generic {
        store: "SyncedLocal",
        source: Box::new(e),
    })
}

#[async_trait]
impl ObjectStore for SyncedLocal {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let put = self.inner.put_opts(location, payload, opts).await?;
        sync(location.clone()).await?;
        Ok(put)
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
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await?;
        sync(to.clone()).await
    }
}

#[derive(Debug)]
struct SyncedUpload {
    inner: Box<dyn MultipartUpload>,
    location: Path,
}

#[async_trait]
impl MultipartUpload for SyncedUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.inner.put_part(data)
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let done = self.inner.complete().await?;
        sync(self.location.clone()).await?;
        Ok(done)
    }

    async fn abort(&mut self) -> Result<()> {
        self.inner.abort().await
    }
}
