//! Producer ids, handed out in blocks from the metadata store's counter, so that a broker asks
//! the store once per thousand producers and ids stay unique across brokers and restarts.

use std::sync::{Arc, Mutex};

use weir_meta::{MetaError, MetaStore};

const BLOCK: u64 = 1000;

pub struct ProducerIds {
    meta: Arc<dyn MetaStore>,
    /// The block being handed out: (next, end).
    block: Mutex<(i64, i64)>,
    /// Serialises refills.
    refill: tokio::sync::Mutex<()>,
}

impl ProducerIds {
    pub fn new(meta: Arc<dyn MetaStore>) -> ProducerIds {
        ProducerIds {
            meta,
            block: Mutex::new((0, 0)),
            refill: tokio::sync::Mutex::new(()),
        }
    }

    pub async fn next(&self) -> Result<i64, MetaError> {
        loop {
            {
                let mut b = self.block.lock().unwrap_or_else(|e| e.into_inner());
                if b.0 < b.1 {
                    b.0 += 1;
                    return Ok(b.0 - 1);
                }
            }
            let _refill = self.refill.lock().await;
            let empty = {
                let b = self.block.lock().unwrap_or_else(|e| e.into_inner());
                b.0 >= b.1
            };
            if empty {
                let first = self.meta.allocate_ids("producer", BLOCK).await? as i64;
                *self.block.lock().unwrap_or_else(|e| e.into_inner()) =
                    (first, first + BLOCK as i64);
            }
        }
    }
}
