//! The engine's intake: each stream's waiting batches, in offset order, handed to the way its
//! stream makes them durable ([`crate::durability`]) while that has room; a batch that waited
//! past its deadline fails, and its stream rewinds to it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use weir_wal::WalError;

use crate::config::WalKind;
use crate::durability::{Durability, Taken, WalFile};
use crate::error::Result;
use crate::object_wal::ObjectWal;
use crate::stream::{Failure, Stream, StreamState, Totals};
use crate::streams::Streams;
use crate::StorageMeters;

pub(crate) struct Intake {
    pub wal_file: WalFile,
    pub object_wal: Arc<ObjectWal>,
    pub streams: Arc<Streams>,
    /// Batches waiting, counted by the streams.
    pub totals: Arc<Totals>,
    pub meters: Arc<StorageMeters>,
}

impl Intake {
    /// Hands a stream's waiting batches to the WAL, in order, while it has room. A batch that
    /// waited past its deadline, or that the WAL refuses, fails and rewinds the stream to it.
    /// Returns the WAL's error if it refused one.
    pub(crate) fn submit_waiting(&self, s: &Arc<Stream>, st: &mut StreamState) -> Result<()> {
        while let Some(b) = st.first_unsubmitted() {
            if st.switching() && b.deadline.is_some_and(|d| Instant::now() < d) {
                // Waits until the stream is on its new WAL (`Engine::set_wal_kind`).
                return Ok(());
            }
            let (base, id) = (b.frame.base_offset, b.id);
            if b.deadline.is_some_and(|d| Instant::now() >= d) {
                self.meters.wal_full_failures.inc();
                let usage = self.wal_file.wal.usage();
                tracing::warn!(
                    stream_id = s.id,
                    offset = base,
                    "append waited too long for WAL space; failing it and the appends behind it"
                );
                st.rewind(
                    base,
                    Failure::Wal(WalError::Full {
                        needed: b.frame.payload.len() as u64,
                        free: usage.capacity.saturating_sub(usage.used),
                        capacity: usage.capacity,
                    }),
                );
                return Ok(());
            }
            let (epoch, frame) = (st.epoch(), b.frame.clone());
            let kind: &dyn Durability = match st.wal_kind() {
                WalKind::Object => &*self.object_wal,
                _ => &self.wal_file,
            };
            match kind.take(s, epoch, id, &frame) {
                Taken::Seq(seq) => st.submitted(seq),
                Taken::NoRoom => return Ok(()),
                Taken::Refused(e) => {
                    st.rewind(base, Failure::Wal(e.clone()));
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    /// Hands every stream's waiting batches to the WAL while it has room, and fails those that
    /// waited too long.
    pub(crate) fn submit_all_waiting(&self) {
        // A batch counted after this look waits for the next tick, as one that finds the WAL
        // full just after a pass would.
        if self.totals.waiting.load(Ordering::Acquire) == 0 {
            return;
        }
        for s in self.streams.all() {
            let mut st = s.lock();
            if st.first_unsubmitted().is_some() {
                if let Err(e) = self.submit_waiting(&s, &mut st) {
                    tracing::warn!(stream_id = s.id, error = %e, "a waiting append failed");
                }
                st.check_invariants();
            }
        }
    }
}
