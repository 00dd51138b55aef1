//! Iceberg's file IO on Weir's own object store client (`object_store`, built by
//! `weir_storage::objstore::from_url`, with the broker's credentials, endpoint and retries), so
//! that tables need no second S3 client and no second set of settings.
//!
//! Iceberg names files by absolute URIs (`s3://bucket/warehouse/ns/table/data/x.parquet`); the
//! store is rooted at the warehouse, so a path is its key below the warehouse's URI. A path
//! outside the warehouse is refused: Weir writes only there, and reads only what it wrote.

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use iceberg::io::{
    FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage, StorageConfig,
    StorageFactory,
};
use iceberg::{Error, ErrorKind, Result};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};

/// The warehouse's files. Serializable as iceberg's storages must be, but only by its URI: a
/// deserialized copy has no client and refuses every call (nothing in Weir ships one across
/// processes).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WarehouseStorage {
    /// The warehouse's URI, without a trailing `/`.
    root: String,
    #[serde(skip)]
    store: Option<Arc<dyn ObjectStore>>,
}

impl WarehouseStorage {
    /// Files under `root` (`s3://bucket/warehouse`), kept in `store`, which is rooted there.
    pub fn new(root: &str, store: Arc<dyn ObjectStore>) -> WarehouseStorage {
        WarehouseStorage {
            root: root.trim_end_matches('/').to_string(),
            store: Some(store),
        }
    }

    fn store(&self) -> Result<&Arc<dyn ObjectStore>> {
        self.store.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::Unexpected,
                "a warehouse storage without its object store (deserialized)",
            )
        })
    }

    /// The object key of `path`.
    fn key(&self, path: &str) -> Result<Path> {
        // Hadoop's FileIO (a REST catalog server's) writes local paths as `file:/abs/path`.
        let path = match path.strip_prefix("file:/") {
            Some(abs) if !abs.starts_with('/') => std::borrow::Cow::Owned(format!("file:///{abs}")),
            _ => std::borrow::Cow::Borrowed(path),
        };
        let rest = path
            .strip_prefix(&self.root)
            .and_then(|r| r.strip_prefix('/'))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::DataInvalid,
                    format!("{path} is not in the warehouse {}", self.root),
                )
            })?;
        Path::parse(rest).map_err(|e| {
            Error::new(ErrorKind::DataInvalid, format!("a file path {path}: {e}")).with_source(e)
        })
    }
}

/// An object store error as iceberg's; a missing file is `DataInvalid` as iceberg's own
/// storages report it, the rest are retryable.
fn store_error(path: &str, e: object_store::Error) -> Error {
    let missing = matches!(e, object_store::Error::NotFound { .. });
    let kind = if missing {
        ErrorKind::DataInvalid
    } else {
        ErrorKind::Unexpected
    };
    Error::new(kind, format!("object store, {path}: {e}"))
        .with_retryable(!missing)
        .with_source(e)
}

#[async_trait]
#[typetag::serde]
impl Storage for WarehouseStorage {
    async fn exists(&self, path: &str) -> Result<bool> {
        match self.store()?.head(&self.key(path)?).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(store_error(path, e)),
        }
    }

    async fn metadata(&self, path: &str) -> Result<FileMetadata> {
        let meta = self
            .store()?
            .head(&self.key(path)?)
            .await
            .map_err(|e| store_error(path, e))?;
        Ok(FileMetadata { size: meta.size })
    }

    async fn read(&self, path: &str) -> Result<Bytes> {
        let got = self
            .store()?
            .get(&self.key(path)?)
            .await
            .map_err(|e| store_error(path, e))?;
        got.bytes().await.map_err(|e| store_error(path, e))
    }

    async fn reader(&self, path: &str) -> Result<Box<dyn FileRead>> {
        Ok(Box::new(RangeReader {
            store: Arc::clone(self.store()?),
            key: self.key(path)?,
            path: path.to_string(),
        }))
    }

    async fn write(&self, path: &str, bs: Bytes) -> Result<()> {
        self.store()?
            .put(&self.key(path)?, PutPayload::from_bytes(bs))
            .await
            .map_err(|e| store_error(path, e))?;
        Ok(())
    }

    async fn writer(&self, path: &str) -> Result<Box<dyn FileWrite>> {
        Ok(Box::new(BufferedWrite {
            store: Arc::clone(self.store()?),
            key: self.key(path)?,
            path: path.to_string(),
            parts: Vec::new(),
            closed: false,
        }))
    }

    async fn delete(&self, path: &str) -> Result<()> {
        match self.store()?.delete(&self.key(path)?).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(store_error(path, e)),
        }
    }

    async fn delete_prefix(&self, path: &str) -> Result<()> {
        let prefix = self.key(path.trim_end_matches('/'))?;
        let store = Arc::clone(self.store()?);
        let mut listed = store.list(Some(&prefix));
        while let Some(meta) = listed.next().await {
            let meta = meta.map_err(|e| store_error(path, e))?;
            match store.delete(&meta.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(store_error(path, e)),
            }
        }
        Ok(())
    }

    async fn delete_stream(&self, mut paths: BoxStream<'static, String>) -> Result<()> {
        while let Some(path) = paths.next().await {
            self.delete(&path).await?;
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }

    fn new_output(&self, path: &str) -> Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

/// Reads of byte ranges of one file (Parquet footers and column chunks).
struct RangeReader {
    store: Arc<dyn ObjectStore>,
    key: Path,
    path: String,
}

#[async_trait]
impl FileRead for RangeReader {
    async fn read(&self, range: Range<u64>) -> Result<Bytes> {
        self.store
            .get_range(&self.key, range)
            .await
            .map_err(|e| store_error(&self.path, e))
    }
}

/// A file written in one PUT at close: Weir's data files are bounded by the translator's batch
/// (a multipart upload's parts would cost more requests than they save below some hundreds of
/// MiB), and nothing is visible until it is whole.
struct BufferedWrite {
    store: Arc<dyn ObjectStore>,
    key: Path,
    path: String,
    parts: Vec<Bytes>,
    closed: bool,
}

#[async_trait]
impl FileWrite for BufferedWrite {
    async fn write(&mut self, bs: Bytes) -> Result<()> {
        if self.closed {
            return Err(Error::new(
                ErrorKind::Unexpected,
                format!("{} written after its close", self.path),
            ));
        }
        self.parts.push(bs);
        Ok(())
    }

    async fn close(&mut self) -> Result<()> {
        if self.closed {
            return Err(Error::new(
                ErrorKind::Unexpected,
                format!("{} closed twice", self.path),
            ));
        }
        self.closed = true;
        let payload: PutPayload = std::mem::take(&mut self.parts).into_iter().collect();
        self.store
            .put(&self.key, payload)
            .await
            .map_err(|e| store_error(&self.path, e))?;
        Ok(())
    }
}

/// Gives every catalog and table the one [`WarehouseStorage`], whatever the configuration
/// asks (the warehouse's client is the broker's).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WarehouseStorageFactory {
    storage: WarehouseStorage,
}

impl WarehouseStorageFactory {
    pub fn new(storage: WarehouseStorage) -> WarehouseStorageFactory {
        WarehouseStorageFactory { storage }
    }
}

#[typetag::serde]
impl StorageFactory for WarehouseStorageFactory {
    fn build(&self, _config: &StorageConfig) -> Result<Arc<dyn Storage>> {
        Ok(Arc::new(self.storage.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn storage() -> WarehouseStorage {
        WarehouseStorage::new(
            "s3://bucket/warehouse/",
            Arc::new(object_store::memory::InMemory::new()),
        )
    }

    #[tokio::test]
    async fn files_are_written_read_by_range_listed_and_deleted() {
        let s = storage();
        let p = "s3://bucket/warehouse/ns/t/data/a.parquet";
        assert!(!s.exists(p).await.expect("exists"));
        let mut w = s.writer(p).await.expect("writer");
        w.write(Bytes::from_static(b"hello ")).await.expect("write");
        w.write(Bytes::from_static(b"world")).await.expect("write");
        assert!(
            !s.exists(p).await.expect("exists"),
            "visible only once closed"
        );
        w.close().await.expect("close");
        assert!(w.close().await.is_err(), "closed twice");
        assert_eq!(s.metadata(p).await.expect("metadata").size, 11);
        assert_eq!(
            s.read(p).await.expect("read"),
            Bytes::from_static(b"hello world")
        );
        let r = s.reader(p).await.expect("reader");
        assert_eq!(
            r.read(6..11).await.expect("range"),
            Bytes::from_static(b"world")
        );
        s.write(
            "s3://bucket/warehouse/ns/t/data/b.parquet",
            Bytes::from_static(b"x"),
        )
        .await
        .expect("write");
        s.write(
            "s3://bucket/warehouse/ns/u/m.json",
            Bytes::from_static(b"{}"),
        )
        .await
        .expect("write");
        s.delete_prefix("s3://bucket/warehouse/ns/t/")
            .await
            .expect("delete prefix");
        assert!(!s.exists(p).await.expect("exists"));
        assert!(s
            .exists("s3://bucket/warehouse/ns/u/m.json")
            .await
            .expect("exists"));
        s.delete("s3://bucket/warehouse/ns/u/m.json")
            .await
            .expect("delete");
        s.delete("s3://bucket/warehouse/ns/u/m.json")
            .await
            .expect("deleting twice is fine");
    }

    #[tokio::test]
    async fn hadoop_style_local_paths_are_the_same_files() {
        let s = WarehouseStorage::new(
            "file:///tmp/wh",
            Arc::new(object_store::memory::InMemory::new()),
        );
        s.write("file:///tmp/wh/ns/t/m.json", Bytes::from_static(b"{}"))
            .await
            .expect("write");
        assert_eq!(
            s.read("file:/tmp/wh/ns/t/m.json").await.expect("read"),
            Bytes::from_static(b"{}")
        );
        assert!(s.read("file:/tmp/other/m.json").await.is_err());
    }

    #[tokio::test]
    async fn paths_outside_the_warehouse_and_missing_files_are_errors() {
        let s = storage();
        let e = s.read("s3://other/x").await.expect_err("outside");
        assert!(e.to_string().contains("not in the warehouse"), "{e}");
        let e = s
            .read("s3://bucket/warehouse-2/x")
            .await
            .expect_err("a sibling prefix is outside too");
        assert!(e.to_string().contains("not in the warehouse"), "{e}");
        let e = s
            .read("s3://bucket/warehouse/none")
            .await
            .expect_err("missing");
        assert_eq!(e.kind(), ErrorKind::DataInvalid);
        let copy: WarehouseStorage =
            serde_json::from_str(&serde_json::to_string(&s).expect("ser")).expect("de");
        assert!(copy.exists("s3://bucket/warehouse/x").await.is_err());
    }
}
