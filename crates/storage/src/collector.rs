//! The object WAL's state (`object_wal.rs` has what it does): the batches collected for the next
//! object, the slots of the objects in flight, the turn of their commits, and the bound on the
//! bytes handed over (counted in the engine's meters). Kept apart from the engine's code, as a stream's state is in `stream.rs`.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::{oneshot, Notify, Semaphore};

use crate::format::Frame;
use crate::stream::Stream;

/// One batch handed to the object WAL.
pub(crate) struct Entry {
    pub stream: Arc<Stream>,
    pub epoch: u64,
    pub id: u64,
    pub frame: Frame,
}

#[derive(Default)]
pub(crate) struct Collecting {
    pub entries: Vec<Entry>,
    pub bytes: u64,
    /// When the first batch of the object being collected arrived.
    pub since: Option<Instant>,
}

/// The object WAL's state.
pub(crate) struct Collector {
    collecting: Mutex<Collecting>,
    /// Woken when the first batch of an object arrives, or when one is full.
    pub wake: Notify,
    /// One permit per object in flight.
    pub slots: Arc<Semaphore>,
    /// Resolves when the last sealed object's commit is done: the next one commits after it.
    pub tail: Mutex<Option<oneshot::Receiver<()>>>,
    /// Payload bytes handed over and not yet committed or failed are bounded by this; they are
    /// counted in `StorageMeters::object_wal_pending_bytes`.
    pub max_pending_bytes: u64,
}

impl Collector {
    pub fn new(max_in_flight: usize, object_bytes: u64) -> Collector {
        let max_in_flight = max_in_flight.max(1);
        Collector {
            collecting: Mutex::new(Collecting::default()),
            wake: Notify::new(),
            slots: Arc::new(Semaphore::new(max_in_flight)),
            tail: Mutex::new(None),
            max_pending_bytes: object_bytes.max(1) * (max_in_flight as u64 + 1),
        }
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, Collecting> {
        self.collecting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_bound_is_one_object_more_than_the_objects_in_flight() {
        assert_eq!(Collector::new(2, 10).max_pending_bytes, 30);
        // At least one object in flight, whatever the setting says.
        assert_eq!(Collector::new(0, 10).max_pending_bytes, 20);
    }
}
