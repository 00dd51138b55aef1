//! Object stores as the engine uses them: chosen by URL, and wrapped so that every request is
//! counted, the way the `object_store` crate composes its own wrappers (`LimitStore`); faults
//! (latency, errors) are injected by a wrapper of our own that works on every kind of store.

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
    /// Wrap the store in the fault layer even with no fault on, so that faults can be switched
    /// on while it runs ([`from_url_with_switch`]).
    pub fault_switch: bool,
    /// `file://` only: objects written and read with `O_DIRECT` rather than through the page
    /// cache.
    pub local_direct_io: bool,
}

fn split_bucket(rest: &str) -> (&str, &str) {
    match rest.split_once('/') {
        Some((bucket, prefix)) => (bucket, prefix.trim_matches('/')),
        None => (rest, ""),
    }
}

/// How a cloud client retries one request: at most 3 retries, none started later than 15 s
/// after the first attempt (`object_store`'s default, 10 retries within 3 minutes, would hide
/// minutes inside what Weir's own loops count as one attempt). With the client's request
/// timeout (30 s unless the URL's settings change it), one call takes at most about 45 s.
pub fn request_retry() -> object_store::RetryConfig {
    object_store::RetryConfig {
        backoff: object_store::BackoffConfig {
            init_backoff: std::time::Duration::from_millis(100),
            max_backoff: std::time::Duration::from_secs(2),
            base: 2.0,
        },
        max_retries: 3,
        retry_timeout: std::time::Duration::from_secs(15),
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
/// `az://container/prefix`; then wraps it with fault injection (if configured, see
/// [`FaultyStore`]) and a bound on
/// concurrent requests. Retries of one request (on 5xx, throttling and timeouts) are the cloud
/// clients' own, configured by [`request_retry`]; Weir's loops above them retry whole calls.
pub fn from_url_with(url: &str, options: &StoreOptions) -> Result<Arc<dyn ObjectStore>, String> {
    from_url_with_switch(url, options).map(|(store, _)| store)
}

/// [`from_url_with`], and the fault layer's handle when there is one (faults on, or
/// `options.fault_switch`), to change the faults while the store runs.
pub fn from_url_with_switch(
    url: &str,
    options: &StoreOptions,
) -> Result<(Arc<dyn ObjectStore>, Option<FaultyStore>), String> {
    let err = |e: object_store::Error| format!("object store {url}: {e}");
    // The three cloud builders share no trait; their use is the same: bucket, settings, build.
    macro_rules! cloud {
        ($named:expr, $rest:expr, $what:literal) => {{
            let (bucket, prefix) = split_bucket($rest);
            let mut b = ($named)(bucket).with_retry(request_retry());
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
        Arc::new(
            crate::local::LocalStore::new(path)
                .map_err(err)?
                .with_direct_io(options.local_direct_io),
        )
    } else if url == "memory://" || url == "memory:///" {
        Arc::new(object_store::memory::InMemory::new())
    } else if let Some(rest) = url
        .strip_prefix("s3://")
        .or_else(|| url.strip_prefix("s3a://"))
    {
        cloud!(
            |bucket: &str| {
                let b = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
                // No SHA-256 of every PUT's body by default (it took a tenth of the broker's
                // CPU while uploading): objects carry a CRC32C per block, which every read
                // checks, and S3 over HTTPS protects the body in transit.
                // AWS_UNSIGNED_PAYLOAD=false turns signing back on.
                if std::env::var_os("AWS_UNSIGNED_PAYLOAD").is_some() {
                    b
                } else {
                    b.with_unsigned_payload(true)
                }
            },
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
    // Latency and errors are both injected by our own wrapper, which delegates every request
    // unchanged: `object_store`'s `ThrottledStore` rebuilds GET payloads and panics on a local
    // file's (`unimplemented!`), so it could not be used on `file://`.
    let mut switch = None;
    if options.faults.is_on() || options.fault_switch {
        let faulty = FaultyStore::new(store, options.faults.clone());
        switch = Some(faulty.clone());
        store = Arc::new(faulty);
    }
    if options.max_concurrent_requests > 0 {
        store = Arc::new(object_store::limit::LimitStore::new(
            store,
            options.max_concurrent_requests,
        ));
    }
    Ok((store, switch))
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
    /// Multipart uploads started (S3's CreateMultipartUpload, billed as a PUT; the completion
    /// counts as a `put`).
    pub multipart_starts: Counter,
    pub errors: Counter,
    pub put_latency: Histogram,
    pub get_latency: Histogram,
}

impl ObjectMeters {
    /// Declares the object store's meters.
    pub fn register(&self, r: &mut weir_metrics::Registry) {
        r.counters(
            "object_requests",
            "Object-store requests by kind.",
            "kind",
            &[
                ("put", &self.puts),
                ("get", &self.gets),
                ("delete", &self.deletes),
                ("list", &self.lists),
                ("multipart_part", &self.multipart_parts),
                ("multipart_start", &self.multipart_starts),
            ],
        );
        r.counters(
            "object_bytes",
            "Object-store bytes by direction.",
            "kind",
            &[("put", &self.put_bytes), ("get", &self.get_bytes)],
        );
        r.counter(
            "object_errors",
            "Failed object-store requests.",
            &self.errors,
        );
        r.histogram(
            "object_put_latency",
            "Object PUT latency.",
            &self.put_latency,
        );
        r.histogram(
            "object_get_latency",
            "Object GET latency (to the first byte).",
            &self.get_latency,
        );
    }
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
        self.meters.multipart_starts.inc();
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
    /// Share of GETs (and HEADs) that fail.
    pub get_error_rate: f64,
    /// Added to every request: PUT, each multipart part and completion, GET, HEAD, LIST, each
    /// DELETE, COPY.
    pub latency: std::time::Duration,
    /// Added to every PUT and multipart part, on top of `latency`.
    pub put_latency: std::time::Duration,
}

impl FaultConfig {
    /// Whether any fault is switched on.
    pub fn is_on(&self) -> bool {
        self.put_error_rate > 0.0
            || self.get_error_rate > 0.0
            || !self.latency.is_zero()
            || !self.put_latency.is_zero()
    }

    /// Checks that the rates are shares (0.0 to 1.0).
    pub fn validate(&self) -> Result<(), String> {
        for (name, rate) in [
            ("put_error_rate", self.put_error_rate),
            ("get_error_rate", self.get_error_rate),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(format!(
                    "fault {name} = {rate}: must be between 0.0 and 1.0"
                ));
            }
        }
        Ok(())
    }
}

/// Injects [`FaultConfig`]'s latency and errors into requests to `inner`, then hands each
/// request on unchanged (GET payloads of every kind, local files included, pass through). The
/// faults can be changed while it runs.
#[derive(Debug, Clone)]
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    shared: Arc<FaultState>,
}

#[derive(Debug)]
struct FaultState {
    faults: std::sync::RwLock<FaultConfig>,
    rng: std::sync::atomic::AtomicU64,
}

impl FaultState {
    fn faults(&self) -> FaultConfig {
        self.faults
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A draw in [0, 1) from a xorshift generator: cheap, and good enough to spread faults.
    fn draw(&self) -> f64 {
        use std::sync::atomic::Ordering::Relaxed;
        let step = |mut x: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        // One atomic update per draw, so that concurrent requests never share a draw.
        let prev = self
            .rng
            .fetch_update(Relaxed, Relaxed, |x| Some(step(x)))
            .unwrap_or_else(|x| x);
        (step(prev) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Waits the configured latency, then fails at the error rate `rate` picks from the faults.
    async fn before(
        &self,
        rate: fn(&FaultConfig) -> f64,
        what: &'static str,
        location: &Path,
    ) -> object_store::Result<()> {
        let f = self.faults();
        if !f.latency.is_zero() {
            tokio::time::sleep(f.latency).await;
        }
        let error_rate = rate(&f);
        if error_rate > 0.0 && self.draw() < error_rate {
            return Err(object_store::Error::Generic {
                store: "faults",
                source: format!("injected {what} failure for {location}").into(),
            });
        }
        Ok(())
    }

    async fn delay(&self) {
        let latency = self.faults().latency;
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
    }

    /// The latency of PUTs only (a slow store for writes).
    async fn put_delay(&self) {
        let latency = self.faults().put_latency;
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
    }
}

fn put_errors(f: &FaultConfig) -> f64 {
    f.put_error_rate
}

fn get_errors(f: &FaultConfig) -> f64 {
    f.get_error_rate
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn ObjectStore>, faults: FaultConfig) -> Self {
        FaultyStore {
            inner,
            shared: Arc::new(FaultState {
                faults: std::sync::RwLock::new(faults),
                rng: std::sync::atomic::AtomicU64::new(0x2545_F491_4F6C_DD1D),
            }),
        }
    }

    pub fn set_faults(&self, faults: FaultConfig) {
        *self
            .shared
            .faults
            .write()
            .unwrap_or_else(|e| e.into_inner()) = faults;
    }

    /// `stream`, started after the configured latency.
    fn delayed<T: Send + 'static>(&self, stream: BoxStream<'static, T>) -> BoxStream<'static, T> {
        let shared = Arc::clone(&self.shared);
        futures::stream::once(async move { shared.delay().await })
            .filter_map(|()| futures::future::ready(None))
            .chain(stream)
            .boxed()
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
        self.shared.before(put_errors, "PUT", location).await?;
        self.shared.put_delay().await;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.shared
            .before(put_errors, "multipart PUT", location)
            .await?;
        let inner = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(FaultyUpload {
            inner,
            shared: Arc::clone(&self.shared),
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let what = if options.head { "HEAD" } else { "GET" };
        self.shared.before(get_errors, what, location).await?;
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let shared = Arc::clone(&self.shared);
        let delayed = locations
            .then(move |p| {
                let shared = Arc::clone(&shared);
                async move {
                    shared.delay().await;
                    p
                }
            })
            .boxed();
        self.inner.delete_stream(delayed)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.delayed(self.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.delayed(self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.shared.delay().await;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.shared.delay().await;
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.shared.delay().await;
        self.inner.rename_opts(from, to, options).await
    }
}

/// A multipart upload through [`FaultyStore`]: each part, the completion and an abort wait the
/// latency. (PUT errors are injected when the upload starts, before anything is sent.)
#[derive(Debug)]
struct FaultyUpload {
    inner: Box<dyn MultipartUpload>,
    shared: Arc<FaultState>,
}

#[async_trait]
impl MultipartUpload for FaultyUpload {
    fn put_part(&mut self, data: PutPayload) -> object_store::UploadPart {
        let part = self.inner.put_part(data);
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            shared.delay().await;
            shared.put_delay().await;
            part.await
        })
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        self.shared.delay().await;
        self.inner.complete().await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.shared.delay().await;
        self.inner.abort().await
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

    #[tokio::test]
    async fn faulty_store_passes_local_files_through_and_injects_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let local = Arc::new(
            crate::local::LocalStore::new(&dir.path().display().to_string()).expect("local store"),
        );
        let store = FaultyStore::new(
            local,
            FaultConfig {
                latency: std::time::Duration::from_millis(1),
                ..Default::default()
            },
        );
        let p = Path::from(object_key(9));
        store
            .put(&p, Bytes::from_static(b"hello world").into())
            .await
            .expect("PUT");
        // A local GET's payload is a file: it must come through whole.
        let body = store
            .get(&p)
            .await
            .expect("GET")
            .bytes()
            .await
            .expect("body");
        assert_eq!(body, Bytes::from_static(b"hello world"));
        assert_eq!(store.head(&p).await.expect("HEAD").size, 11);

        store.set_faults(FaultConfig {
            get_error_rate: 1.0,
            ..Default::default()
        });
        assert!(store.get_range(&p, 0..5).await.is_err());
        assert!(
            store.put(&p, Bytes::new().into()).await.is_ok(),
            "PUTs unaffected"
        );
        store.set_faults(FaultConfig {
            put_error_rate: 0.5,
            ..Default::default()
        });
        let mut failed = 0;
        for _ in 0..200 {
            if store
                .put(&p, Bytes::from_static(b"x").into())
                .await
                .is_err()
            {
                failed += 1;
            }
        }
        assert!(
            (50..150).contains(&failed),
            "{failed} of 200 PUTs failed at rate 0.5"
        );
        assert!(store.get(&p).await.is_ok(), "GETs unaffected");
    }

    #[test]
    fn fault_rates_are_shares() {
        let f = |r: f64| FaultConfig {
            get_error_rate: r,
            ..Default::default()
        };
        assert!(f(0.0).validate().is_ok() && f(1.0).validate().is_ok());
        assert!(f(1.5).validate().is_err());
        assert!(f(-0.1).validate().is_err());
        assert!(f(f64::NAN).validate().is_err());
        assert!(!FaultConfig::default().is_on());
        assert!(f(0.1).is_on());
    }

    #[test]
    fn keys_spread_and_name_their_object() {
        let a = object_key(1);
        let b = object_key(2);
        assert_ne!(a[..8], b[..8]);
        assert!(a.ends_with("0000000000000001.wobj"));
    }
}
