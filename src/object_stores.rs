//! The object-store registry of every session, and the data-root confinement of the server.
//!
//! datafusion-cli's [`InstrumentedObjectStoreRegistry`] keeps the stores (and their
//! `\object_store_profiling`); its own code builds s3/gs/http stores with the AWS / Google
//! credential chains. This registry wraps it and adds what datafusion-cli 55 lacks:
//!
//! - Azure Blob / ADLS Gen2 (`az://`, `azure://`, `abfs://`, `abfss://`, `adl://`), built on
//!   first use from the standard `AZURE_*` environment variables (datafusion-cli has no Azure
//!   store). Every way a URL is used — `FROM 'az://…'`, `CREATE EXTERNAL TABLE`, `COPY … TO` —
//!   ends in [`ObjectStoreRegistry::get_store`], so building there is enough.
//! - In the server, where statements do not go through datafusion-cli's executor, s3/gs/http
//!   stores are likewise built on first use from the environment (`AWS_*`, `GOOGLE_*`).
//! - [`DataRoots`]: in the server every store is wrapped so that only objects under the
//!   configured roots (`--data-root`, local directories or object-store URLs) can be read,
//!   listed or written. Local paths are checked after resolving symbolic links, so a link
//!   inside a root cannot reach outside it.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::object_store::ObjectStoreRegistry;
use datafusion_cli::object_storage::instrumented::InstrumentedObjectStoreRegistry;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};
use url::Url;

/// URL schemes object_store's Azure builder understands.
pub const AZURE_SCHEMES: [&str; 5] = ["az", "azure", "abfs", "abfss", "adl"];

/// The registry key DataFusion uses: `scheme://host[:port]`.
fn store_key(url: &Url) -> String {
    format!(
        "{}://{}",
        url.scheme(),
        &url[url::Position::BeforeHost..url::Position::AfterPort]
    )
}

#[derive(Debug)]
pub struct EvalsqlObjectStoreRegistry {
    inner: Arc<InstrumentedObjectStoreRegistry>,
    /// Build s3/gs/http stores from the environment when none is registered (the server).
    cloud_from_env: bool,
    roots: Option<Arc<DataRoots>>,
    /// Serialises "miss → build → register", so concurrent first uses build one store.
    building: Mutex<()>,
    /// The confining wrapper handed out per store key, with the store it wraps: handing out
    /// the same wrapper lets `register_store` recognise a store it gave out itself.
    confined: Mutex<HashMap<String, (Arc<dyn ObjectStore>, Arc<dyn ObjectStore>)>>,
}

impl EvalsqlObjectStoreRegistry {
    /// The registry of the command line: datafusion-cli's stores, plus Azure.
    pub fn new(inner: Arc<InstrumentedObjectStoreRegistry>) -> Self {
        Self {
            inner,
            cloud_from_env: false,
            roots: None,
            building: Mutex::new(()),
            confined: Mutex::new(HashMap::new()),
        }
    }

    /// Every cloud store built from the environment (Ballista's scheduler and executors,
    /// which see no datafusion-cli statements).
    pub fn from_env(inner: Arc<InstrumentedObjectStoreRegistry>) -> Self {
        Self {
            cloud_from_env: true,
            ..Self::new(inner)
        }
    }

    /// The registry of the server: every cloud store built from the environment, and only
    /// objects under `roots` reachable.
    pub fn confined(inner: Arc<InstrumentedObjectStoreRegistry>, roots: Arc<DataRoots>) -> Self {
        Self {
            cloud_from_env: true,
            roots: Some(roots),
            ..Self::new(inner)
        }
    }

    fn build_from_env(&self, url: &Url) -> Option<Result<Arc<dyn ObjectStore>>> {
        use object_store::aws::AmazonS3Builder;
        use object_store::azure::MicrosoftAzureBuilder;
        use object_store::gcp::GoogleCloudStorageBuilder;
        use object_store::http::HttpBuilder;
        let scheme = url.scheme();
        let built: object_store::Result<Arc<dyn ObjectStore>> = if AZURE_SCHEMES.contains(&scheme) {
            // Every AZURE_* variable naming a setting (others, such as AZURE_OPENAI_ENDPOINT,
            // are ignored); the container (and account, for abfss://c@acct…) from the URL.
            MicrosoftAzureBuilder::from_env()
                .with_url(url.as_str())
                .build()
                .map(|s| Arc::new(s) as _)
        } else if !self.cloud_from_env {
            return None;
        } else if scheme == "s3" {
            AmazonS3Builder::from_env()
                .with_url(url.as_str())
                .build()
                .map(|s| Arc::new(s) as _)
        } else if scheme == "gs" || scheme == "gcs" {
            GoogleCloudStorageBuilder::from_env()
                .with_url(url.as_str())
                .build()
                .map(|s| Arc::new(s) as _)
        } else if scheme == "http" || scheme == "https" {
            HttpBuilder::new()
                .with_url(store_key(url))
                .build()
                .map(|s| Arc::new(s) as _)
        } else {
            return None;
        };
        Some(built.map_err(|e| {
            DataFusionError::Execution(format!(
                "cannot open the object store for {}: {e}",
                store_key(url)
            ))
        }))
    }

    fn get_unconfined(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        match self.inner.get_store(url) {
            Ok(store) => Ok(store),
            Err(missing) => {
                let _guard = self.building.lock().unwrap_or_else(|p| p.into_inner());
                if let Ok(store) = self.inner.get_store(url) {
                    return Ok(store); // built meanwhile by a concurrent caller
                }
                match self.build_from_env(url) {
                    None => Err(missing),
                    // datafusion-cli replaces a registry error by "Unsupported object store
                    // scheme": hand out a store that fails with the real reason instead
                    // (not registered, so nothing stale stays behind).
                    Some(Err(e)) => Ok(Arc::new(UnavailableStore(e.to_string()))),
                    Some(Ok(built)) => {
                        self.inner.register_store(url, built);
                        // The instrumented wrapper datafusion-cli's registry made of it.
                        self.inner.get_store(url)
                    }
                }
            }
        }
    }
}

impl ObjectStoreRegistry for EvalsqlObjectStoreRegistry {
    fn register_store(
        &self,
        url: &Url,
        store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        // datafusion-cli registers what `get_store` just returned: keep it as it is rather
        // than instrument (or confine) it twice.
        if let Ok(existing) = self.get_store(url)
            && std::ptr::addr_eq(Arc::as_ptr(&existing), Arc::as_ptr(&store))
        {
            return Some(existing);
        }
        self.inner.register_store(url, store)
    }

    fn deregister_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        self.inner.deregister_store(url)
    }

    fn get_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        let Some(roots) = &self.roots else {
            return self.get_unconfined(url);
        };
        let key = store_key(url);
        let prefixes = roots.prefixes_for(url);
        let store = self.get_unconfined(url)?;
        let mut confined = self.confined.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((inner, wrapper)) = confined.get(&key)
            && Arc::ptr_eq(inner, &store)
        {
            return Ok(Arc::clone(wrapper));
        }
        let wrapper: Arc<dyn ObjectStore> = Arc::new(ConfinedStore {
            inner: Arc::clone(&store),
            key: key.clone(),
            local: url.scheme() == "file",
            prefixes,
            roots: Arc::clone(roots),
        });
        confined.insert(key, (store, Arc::clone(&wrapper)));
        Ok(wrapper)
    }
}

/// A store that could not be built: every operation fails with the reason.
#[derive(Debug)]
struct UnavailableStore(String);

impl fmt::Display for UnavailableStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Unavailable({})", self.0)
    }
}

impl UnavailableStore {
    fn error(&self) -> object_store::Error {
        object_store::Error::Generic {
            store: "object store",
            source: self.0.clone().into(),
        }
    }
}

#[async_trait]
impl ObjectStore for UnavailableStore {
    async fn put_opts(
        &self,
        _: &Path,
        _: PutPayload,
        _: PutOptions,
    ) -> object_store::Result<PutResult> {
        Err(self.error())
    }

    async fn put_multipart_opts(
        &self,
        _: &Path,
        _: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        Err(self.error())
    }

    async fn get_opts(&self, _: &Path, _: GetOptions) -> object_store::Result<GetResult> {
        Err(self.error())
    }

    fn delete_stream(
        &self,
        _: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let e = self.error();
        futures::stream::once(async move { Err(e) }).boxed()
    }

    fn list(&self, _: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let e = self.error();
        futures::stream::once(async move { Err(e) }).boxed()
    }

    async fn list_with_delimiter(&self, _: Option<&Path>) -> object_store::Result<ListResult> {
        Err(self.error())
    }

    async fn copy_opts(&self, _: &Path, _: &Path, _: CopyOptions) -> object_store::Result<()> {
        Err(self.error())
    }
}

/// Where the server may read and write: local directories (canonical) and object-store URL
/// prefixes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataRoots {
    local: Vec<PathBuf>,
    /// (store key, path prefix within the store)
    remote: Vec<(String, Path)>,
}

impl DataRoots {
    /// Parses `--data-root` values: a directory (it must exist), or a URL such as
    /// `s3://bucket/prefix`.
    pub fn parse(roots: &[String]) -> Result<Self> {
        let mut parsed = DataRoots {
            local: vec![],
            remote: vec![],
        };
        for root in roots {
            if root.contains("://") && !root.starts_with("file://") {
                let url = Url::parse(root).map_err(|e| {
                    DataFusionError::Configuration(format!("--data-root {root:?}: not a URL: {e}"))
                })?;
                if url.host_str().is_none_or(str::is_empty) {
                    return Err(DataFusionError::Configuration(format!(
                        "--data-root {root:?}: name the bucket or container, e.g. s3://bucket/prefix"
                    )));
                }
                let prefix = Path::from_url_path(url.path()).map_err(|e| {
                    DataFusionError::Configuration(format!("--data-root {root:?}: {e}"))
                })?;
                parsed.remote.push((store_key(&url), prefix));
            } else {
                let dir = root.strip_prefix("file://").unwrap_or(root);
                let canonical = std::fs::canonicalize(dir).map_err(|e| {
                    DataFusionError::Configuration(format!("--data-root {dir:?}: {e}"))
                })?;
                if !canonical.is_dir() {
                    return Err(DataFusionError::Configuration(format!(
                        "--data-root {dir:?} is not a directory"
                    )));
                }
                parsed.local.push(canonical);
            }
        }
        Ok(parsed)
    }

    /// The roots, as given back to users in messages.
    pub fn describe(&self) -> String {
        let mut all: Vec<String> = self.local.iter().map(|p| p.display().to_string()).collect();
        all.extend(self.remote.iter().map(|(key, prefix)| {
            if prefix.as_ref().is_empty() {
                key.clone()
            } else {
                format!("{key}/{prefix}")
            }
        }));
        all.join(", ")
    }

    /// The path prefixes allowed in the store of `url` (none: every access is refused, with
    /// the reason, when it happens; DataFusion asks for stores it may not use, and
    /// datafusion-cli would replace an error here by "Unsupported object store scheme").
    fn prefixes_for(&self, url: &Url) -> Vec<Path> {
        if url.scheme() == "file" {
            self.local
                .iter()
                .filter_map(|p| Path::from_absolute_path(p).ok())
                .collect()
        } else {
            let key = store_key(url);
            self.remote
                .iter()
                .filter(|(k, _)| *k == key)
                .map(|(_, p)| p.clone())
                .collect()
        }
    }

    /// Whether `location` — a local path (relative to the working directory, or `~/…`) or a
    /// URL as written in SQL — lies under a root.
    pub fn allows_location(&self, location: &str) -> bool {
        if location.contains("://") && !location.starts_with("file://") {
            let Ok(url) = Url::parse(location) else {
                return false;
            };
            let Ok(path) = Path::from_url_path(url.path()) else {
                return false;
            };
            let key = store_key(&url);
            return self
                .remote
                .iter()
                .any(|(k, prefix)| *k == key && path.prefix_matches(prefix));
        }
        let local = location.strip_prefix("file://").unwrap_or(location);
        let local = datafusion_cli::catalog::substitute_tilde(local.to_string());
        std::path::absolute(&local).is_ok_and(|p| self.allows_local_file(&p))
    }

    /// Whether the local file `path` (which need not exist yet) resolves under a root.
    pub fn allows_local_file(&self, path: &std::path::Path) -> bool {
        // The nearest existing ancestor, with symbolic links resolved.
        let mut probe = path.to_path_buf();
        let mut rest = vec![];
        let resolved = loop {
            match std::fs::canonicalize(&probe) {
                Ok(p) => break p,
                Err(_) => match (probe.file_name().map(|n| n.to_owned()), probe.parent()) {
                    (Some(name), Some(parent)) => {
                        rest.push(name);
                        probe = parent.to_path_buf();
                    }
                    _ => return false,
                },
            }
        };
        let mut full = resolved;
        for name in rest.into_iter().rev() {
            if name == ".." {
                return false;
            }
            full.push(name);
        }
        self.local.iter().any(|root| full.starts_with(root))
    }
}

/// A store through which only paths under the data roots can be reached.
#[derive(Debug)]
struct ConfinedStore {
    inner: Arc<dyn ObjectStore>,
    key: String,
    local: bool,
    prefixes: Vec<Path>,
    roots: Arc<DataRoots>,
}

impl fmt::Display for ConfinedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Confined({})", self.inner)
    }
}

impl ConfinedStore {
    fn check(&self, location: &Path) -> object_store::Result<()> {
        // Local paths are judged after resolving links (a path through a link to a root is
        // fine, a link out of one is not); object-store paths by their segments.
        let allowed = if self.local {
            self.roots
                .allows_local_file(&std::path::Path::new("/").join(location.as_ref()))
        } else {
            self.prefixes.iter().any(|p| location.prefix_matches(p))
        };
        if allowed {
            return Ok(());
        }
        let shown = if self.local {
            format!("/{location}")
        } else {
            format!("{}/{location}", self.key)
        };
        Err(object_store::Error::PermissionDenied {
            path: shown,
            source: format!(
                "outside the data roots of this server ({})",
                self.roots.describe()
            )
            .into(),
        })
    }

    fn clone_config(&self) -> ConfinedStore {
        ConfinedStore {
            inner: Arc::clone(&self.inner),
            key: self.key.clone(),
            local: self.local,
            prefixes: self.prefixes.clone(),
            roots: Arc::clone(&self.roots),
        }
    }

    fn check_prefix(&self, prefix: Option<&Path>) -> object_store::Result<()> {
        self.check(&prefix.cloned().unwrap_or_default())
    }
}

#[async_trait]
impl ObjectStore for ConfinedStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.check(location)?;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.check(location)?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.check(location)?;
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<bytes::Bytes>> {
        self.check(location)?;
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let this = self.clone_config();
        let checked = locations
            .map(move |l| l.and_then(|l| this.check(&l).map(|()| l)))
            .boxed();
        self.inner.delete_stream(checked)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        if let Err(e) = self.check_prefix(prefix) {
            return futures::stream::once(async move { Err(e) }).boxed();
        }
        let listed = self.inner.list(prefix);
        if !self.local {
            return listed;
        }
        // The local store follows links while walking: leave out what resolves outside.
        let this = self.clone_config();
        listed
            .filter(move |entry| {
                let keep = entry
                    .as_ref()
                    .map_or(true, |m| this.check(&m.location).is_ok());
                futures::future::ready(keep)
            })
            .boxed()
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        match self.check_prefix(prefix) {
            Ok(()) => self.inner.list_with_offset(prefix, offset),
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
        }
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.check_prefix(prefix)?;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.check(from)?;
        self.check(to)?;
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.check(from)?;
        self.check(to)?;
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots(dirs: &[&std::path::Path], urls: &[&str]) -> Arc<DataRoots> {
        let mut all: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        all.extend(urls.iter().map(|u| u.to_string()));
        Arc::new(DataRoots::parse(&all).unwrap())
    }

    #[test]
    fn remote_roots_allow_their_prefix_segment_by_segment() {
        let r = roots(&[], &["s3://bucket/evals"]);
        let url = Url::parse("s3://bucket/evals/x.parquet").unwrap();
        let prefixes = r.prefixes_for(&url);
        let store = ConfinedStore {
            inner: Arc::new(object_store::memory::InMemory::new()),
            key: "s3://bucket".into(),
            local: false,
            prefixes,
            roots: Arc::clone(&r),
        };
        assert!(store.check(&Path::from("evals/x.parquet")).is_ok());
        assert!(store.check(&Path::from("evals")).is_ok());
        let e = store
            .check(&Path::from("evals2/x"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("s3://bucket/evals2/x") && e.contains("outside the data roots"));
        assert!(store.check_prefix(None).is_err());
        let other = Url::parse("s3://other/evals/x").unwrap();
        assert!(r.prefixes_for(&other).is_empty());
    }

    #[test]
    fn local_roots_resolve_links_and_dot_dot() {
        let base = std::env::temp_dir().join(format!("evalsql-roots-{}", std::process::id()));
        let root = base.join("root");
        let outside = base.join("outside");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), "x").unwrap();
        std::fs::write(root.join("ok.csv"), "a\n1\n").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        let r = roots(&[&root], &[]);
        let canonical_root = std::fs::canonicalize(&root).unwrap();
        assert!(r.allows_local_file(&canonical_root.join("ok.csv")));
        assert!(r.allows_local_file(&canonical_root.join("new/dir/out.parquet")));
        assert!(!r.allows_local_file(&canonical_root.join("link/secret.txt")));
        assert!(!r.allows_local_file(&canonical_root.join("missing/../../outside/secret.txt")));
        assert!(!r.allows_local_file(std::path::Path::new("/etc/passwd")));
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_missing_root_is_a_clear_error() {
        let e = DataRoots::parse(&["/no/such/dir".into()]).unwrap_err();
        assert!(e.to_string().contains("/no/such/dir"), "{e}");
        let e = DataRoots::parse(&["s3://".into()]).unwrap_err();
        assert!(e.to_string().contains("name the bucket"), "{e}");
    }
}
