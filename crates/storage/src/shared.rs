//! What the engine's parts share, made once when the engine opens: its settings, the metadata and
//! object stores (the latter metered), the reader, the catch-up runtime, the open streams, the
//! object writer, the log cache and the backlog hint. Each part takes what it needs from it.

use std::sync::Arc;

use object_store::ObjectStore;
use weir_meta::MetaStore;
use weir_wal::Wal;

use crate::error::Result;
use crate::objstore::{MeteredStore, ObjectMeters};
use crate::reader::ObjectReader;
use crate::{StorageConfig, StorageMeters};

/// What the engine's parts share, made once when it opens.
pub(crate) struct Shared {
    pub config: StorageConfig,
    pub meta: Arc<dyn MetaStore>,
    /// The object store, its requests counted in `object_meters`.
    pub store: Arc<dyn ObjectStore>,
    pub object_meters: Arc<ObjectMeters>,
    pub meters: Arc<StorageMeters>,
    pub reader: Arc<ObjectReader>,
    pub catchup: Arc<crate::catchup::CatchupRuntime>,
    pub streams: Arc<crate::streams::Streams>,
    pub objects: Arc<crate::objects::Objects>,
    pub log_cache: Arc<crate::log_cache::LogCache>,
    pub backlog: Arc<crate::upload::Backlog>,
}

impl Shared {
    pub fn new(
        config: StorageConfig,
        wal: &Arc<dyn Wal>,
        meta: Arc<dyn MetaStore>,
        store: Arc<dyn ObjectStore>,
    ) -> Result<Shared> {
        let metered = MeteredStore::new(store);
        let object_meters = metered.meters();
        let store: Arc<dyn ObjectStore> = Arc::new(metered);
        let meters = Arc::new(StorageMeters::default());
        let reader = Arc::new(ObjectReader::with_index_cache(
            Arc::clone(&store),
            Arc::clone(&meta),
            Arc::clone(&meters),
            config.block_bytes,
            config.block_cache_bytes,
            config.readahead_max_bytes,
            crate::budget::Budget::new(config.catchup_bytes_per_sec),
            crate::budget::Budget::new(config.background_bytes_per_sec),
            config.index_cache_bytes,
        ));
        let catchup = Arc::new(crate::catchup::CatchupRuntime::new(config.catchup_nice)?);
        let streams = Arc::new(crate::streams::Streams::default());
        let objects = Arc::new(crate::objects::Objects {
            store: Arc::clone(&store),
            meta: Arc::clone(&meta),
            catchup: Arc::clone(&catchup),
            meters: Arc::clone(&meters),
            sizes: crate::objects::Sizes {
                block_bytes: config.block_bytes,
                stream_object_bytes: config.stream_object_bytes,
                multipart_part_bytes: config.multipart_part_bytes,
            },
            streams: Arc::clone(&streams),
        });
        let log_cache = Arc::new(crate::log_cache::LogCache::new(
            config.log_cache_bytes,
            Arc::clone(&streams),
            Arc::clone(&meters),
        ));
        let backlog = Arc::new(crate::upload::Backlog {
            wal: Arc::clone(wal),
            upload_bytes: config.upload_bytes,
        });
        Ok(Shared {
            config,
            meta,
            store,
            object_meters,
            meters,
            reader,
            catchup,
            streams,
            objects,
            log_cache,
            backlog,
        })
    }
}
