//! Object stores as the engine uses them: chosen by URL, and wrapped so that every request is
//! counted, the way the `object_store` crate composes its own wrappers (`LimitStore`,
//! `ThrottledStore`).

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};
use weir_metrics::{Counter, Histogram};

/// How a store is built and wrapped.
#[derive(Debug, Clone, Default)]
pub struct StoreOptions {
    /// Settings for the cloud builders, as `object_store` names them (`aws_endpoint`,
    /// `aws_allow_http`, `google_service_account`, `azure_storage_account_name`, ...). They
    /// override the environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`), which is read first.
    pub settings: Vec<(String, String)>,
    /// Requests in flight at most (`LimitStore`); 0 for no bound.
    pub max_concurrent_requests: usize,
    /// Injected faults; off by default.
    pub faults: FaultConfig,
}

fn split_bucket(rest: &str) -> (&str, &str) {
    match rest.split_once('/') {
        Some((bucket, prefix)) => (bucket, prefix.trim_matches('/')),
        None => (rest, ""),
    }
}

fn with_prefix<T: ObjectStore>(store: T, prefix: &str) -> Arc<dyn ObjectStore> {
    if prefix.is_empty() {
        Arc::new(store)
    } else {
        Arc::new(object_store::prefix::PrefixStore::new(store, prefix))
    }
}

/// Builds a store from a URL: `file:///path`, `memory://`, `s3://bucket/prefix` (credentials,
/// region and endpoint from the usual `AWS_*` variables), `gs://bucket/prefix`,
/// `az://container/prefix`; then wraps it with fault injection (if configured) and a bound on
/// concurrent requests. Retries with backoff on 5xx, throttling and timeouts are the cloud
/// clients' own (`object_store`'s `RetryConfig`).
pub fn from_url_with(url: &str, options: &StoreOptions) -> Result<Arc<dyn ObjectStore>, String> {
    let err = |e: object_store::Error| format!("object store {url}: {e}");
    // The three cloud builders share no trait; their use is the same: bucket, settings, build.
    macro_rules! cloud {
        ($named:expr, $rest:expr, $what:literal) => {{
            let (bucket, prefix) = split_bucket($rest);
            let mut b = ($named)(bucket);
            for (k, v) in &options.settings {
                let key = k
                    .to_ascii_lowercase()
                    .parse()
                    .map_err(|_| format!("unknown {} setting {k}", $what))?;
                b = b.with_config(key, v);
            }
            with_prefix(b.build().map_err(err)?, prefix)
        }};
    }
    let base: Arc<dyn ObjectStore> = if let Some(path) = url.strip_prefix("file://") {
        std::fs::create_dir_all(path).map_err(|e| format!("creating {path}: {e}"))?;
        Arc::new(crate::local::LocalStore::new(path).map_err(err)?)
    } else if url == "memory://" || url == "memory:///" {
        Arc::new(object_store::memory::InMemory::new())
    } else if let Some(rest) = url
        .strip_prefix("s3://")
        .or_else(|| url.strip_prefix("s3a://"))
    {
        cloud!(
            |bucket: &str| object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket),
            rest,
            "S3"
        )
    } else if let Some(rest) = url.strip_prefix("gs://") {
        cloud!(
            |bucket: &str| object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_bucket_name(bucket),
            rest,
            "GCS"
        )
    } else if let Some(rest) = url.strip_prefix("az://") {
        cloud!(
            |bucket: &str| object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_container_name(bucket),
            rest,
            "Azure"
        )
    } else {
        return Err(format!(
            "unsupported object store URL {url:?}: expected file:///path, memory://, s3://bucket/prefix, gs://bucket/prefix or az://container/prefix"
        ));
    };
    let mut store = base;
    let f = &options.faults;
    if !f.latency.is_zero() {
        let latency = object_store::throttle::ThrottleConfig {
            wait_put_per_call: f.latency,
            wait_get_per_call: f.latency,
            wait_delete_per_call: f.latency,
            wait_list_per_call: f.latency,
            ..Default::default()
        };
        store = Arc::new(object_store::throttle::ThrottledStore::new(store, latency));
    }
    if f.put_error_rate > 0.0 || f.get_error_rate > 0.0 {
        store = Arc::new(FaultyStore::new(
            store,
            FaultConfig {
                latency: std::time::Duration::ZERO,
                ..f.clone()
            },
        ));
    }
    if options.max_concurrent_requests > 0 {
        store = Arc::new(object_store::limit::LimitStore::new(
            store,
            options.max_concurrent_requests,
        ));
    }
    Ok(store)
}

/// [`from_url_with`] with default options.
pub fn from_url(url: &str) -> Result<Arc<dyn ObjectStore>, String> {
    from_url_with(url, &StoreOptions::default())
}

/// The key of object `id`: a hash first, so that keys spread over prefixes (S3's request limits
/// are per prefix), then the id, so that a key names its object.
pub fn object_key(id: u64) -> String {
    let h = crc32c::crc32c(&id.to_le_bytes());
    format!("{h:08x}/{id:016x}.wobj")
}

/// Requests and bytes by kind.
#[derive(Debug, Default)]
pub struct ObjectMeters {
    pub puts: Counter,
    pub put_bytes: Counter,
    pub gets: Counter,
    pub get_bytes: Counter,
    pub deletes: Counter,
    pub lists: Counter,
    pub multipart_parts: Counter,
    pub errors: Counter,
    pub put_latency: Histogram,
    pub get_latency: Histogram,
}

/// Counts every request that passes through to `inner`.
#[derive(Debug)]
pub struct MeteredStore {
    inner: Arc<dyn ObjectStore>,
    meters: Arc<ObjectMeters>,
}

impl MeteredStore {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        MeteredStore {
            inner,
            meters: Arc::default(),
        }
    }

    pub fn meters(&self) -> Arc<ObjectMeters> {
        Arc::clone(&self.meters)
    }

    fn count<T>(&self, r: object_store::Result<T>) -> object_store::Result<T> {
        if r.is_err() {
            self.meters.errors.inc();
        }
        r
    }
}

impl fmt::Display for MeteredStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Metered({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for MeteredStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let started = Instant::now();
        self.meters.puts.inc();
        self.meters.put_bytes.add(payload.content_length() as u64);
        let r = self.inner.put_opts(location, payload, opts).await;
        self.meters.put_latency.record(started.elapsed());
        self.count(r)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let upload = self.count(self.inner.put_multipart_opts(location, opts).await)?;
        Ok(Box::new(MeteredUpload {
            inner: upload,
            meters: Arc::clone(&self.meters),
            started: Instant::now(),
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let started = Instant::now();
        self.meters.gets.inc();
        let r = self.count(self.inner.get_opts(location, options).await)?;
        // Bytes are counted as requested; the body streams later.
        self.meters.get_bytes.add(r.range.end - r.range.start);
        self.meters.get_latency.record(started.elapsed());
        Ok(r)
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        // Routed through get_opts so that every GET the coalescing issues is counted once.
        object_store::coalesce_ranges(
            ranges,
            |range| async move {
                let opts = GetOptions {
                    range: Some(range.into()),
                    ..Default::default()
                };
                self.get_opts(location, opts).await?.bytes().await
            },
            object_store::OBJECT_STORE_COALESCE_DEFAULT,
        )
        .await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let meters = Arc::clone(&self.meters);
        let counted = locations
            .map(move |p| {
                meters.deletes.inc();
                p
            })
            .boxed();
        self.inner.delete_stream(counted)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.meters.lists.inc();
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.meters.lists.inc();
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.meters.lists.inc();
        self.count(self.inner.list_with_delimiter(prefix).await)
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.meters.puts.inc();
        self.count(self.inner.copy_opts(from, to, options).await)
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.meters.puts.inc();
        self.count(self.inner.rename_opts(from, to, options).await)
    }
}

/// Faults to inject into object-store requests: a test and chaos switch, off by default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultConfig {
    /// Share of PUTs (and multipart uploads) that fail, 0.0 to 1.0.
    pub put_error_rate: f64,
    /// Share of GETs that fail.
    pub get_error_rate: f64,
    /// Added to every request.
    pub latency: std::time::Duration,
}

/// Injects [`FaultConfig`]'s errors and latency into requests to `inner`. The faults can be
/// changed while it runs.
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    faults: std::sync::RwLock<FaultConfig>,
    rng: std::sync::atomic::AtomicU64,
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn ObjectStore>, faults: FaultConfig) -> Self {
        FaultyStore {
            inner,
            faults: std::sync::RwLock::new(faults),
            rng: std::sync::atomic::AtomicU64::new(0x2545_F491_4F6C_DD1D),
        }
    }

    pub fn set_faults(&self, faults: FaultConfig) {
        *self.faults.write().unwrap_or_else(|e| e.into_inner()) = faults;
    }

    fn faults(&self) -> FaultConfig {
        self.faults
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A draw in [0, 1) from a xorshift generator: cheap, and good enough to spread faults.
    fn draw(&self) -> f64 {
        let mut x = self.rng.load(std::sync::atomic::Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, std::sync::atomic::Ordering::Relaxed);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }

    async fn before(
        &self,
        error_rate: f64,
        what: &'static str,
        location: &Path,
    ) -> object_store::Result<()> {
        let f = self.faults();
        if !f.latency.is_zero() {
            tokio::time::sleep(f.latency).await;
        }
        if error_rate > 0.0 && self.draw() < error_rate {
            return Err(object_store::Error::Generic {
                store: "faults",
                source: format!("injected {what} failure for {location}").into(),
            });
        }
        Ok(())
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Faulty({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.before(self.faults().put_error_rate, "PUT", location)
            .await?;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.before(self.faults().put_error_rate, "multipart PUT", location)
            .await?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.before(self.faults().get_error_rate, "GET", location)
            .await?;
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[derive(Debug)]
struct MeteredUpload {
    inner: Box<dyn MultipartUpload>,
    meters: Arc<ObjectMeters>,
    started: Instant,
}

#[async_trait]
impl MultipartUpload for MeteredUpload {
    fn put_part(&mut self, data: PutPayload) -> object_store::UploadPart {
        self.meters.multipart_parts.inc();
        self.meters.put_bytes.add(data.content_length() as u64);
        self.inner.put_part(data)
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        self.meters.puts.inc();
        let r = self.inner.complete().await;
        // From the start of the upload to its completion: the time the whole object took.
        self.meters.put_latency.record(self.started.elapsed());
        r
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.inner.abort().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;

    #[tokio::test]
    async fn counts_requests_and_bytes() {
        let store = MeteredStore::new(Arc::new(object_store::memory::InMemory::new()));
        let m = store.meters();
        let p = Path::from(object_key(7));
        store
            .put(&p, Bytes::from_static(b"hello world").into())
            .await
            .unwrap();
        assert_eq!(
            store.get_range(&p, 0..5).await.unwrap(),
            Bytes::from_static(b"hello")
        );
        store.delete(&p).await.unwrap();
        assert_eq!((m.puts.get(), m.put_bytes.get()), (1, 11));
        assert_eq!((m.gets.get(), m.get_bytes.get()), (1, 5));
        assert_eq!(m.deletes.get(), 1);
        assert!(store.get_range(&p, 0..5).await.is_err());
        assert_eq!(m.errors.get(), 1);
    }

    #[test]
    fn keys_spread_and_name_their_object() {
        let a = object_key(1);
        let b = object_key(2);
        assert_ne!(a[..8], b[..8]);
        assert!(a.ends_with("0000000000000001.wobj"));
    }
}
