//! The engine's open streams, by id: the one map every part of the engine finds a stream in.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::stream::Stream;

#[derive(Default)]
pub struct Streams {
    map: RwLock<HashMap<u64, Arc<Stream>>>,
}

impl Streams {
    pub fn read(&self) -> RwLockReadGuard<'_, HashMap<u64, Arc<Stream>>> {
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, HashMap<u64, Arc<Stream>>> {
        self.map.write().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, id: u64) -> Option<Arc<Stream>> {
        self.read().get(&id).cloned()
    }

    /// Every open stream, by id.
    pub fn all(&self) -> Vec<Arc<Stream>> {
        let mut v: Vec<_> = self.read().values().cloned().collect();
        v.sort_by_key(|s| s.id);
        v
    }

    /// Takes a stream out of the map of open streams; its handles see it gone.
    pub fn forget(&self, stream_id: u64) -> Option<Arc<Stream>> {
        let s = self.write().remove(&stream_id)?;
        s.set_forgotten();
        Some(s)
    }
}
