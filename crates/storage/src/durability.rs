//! The two ways a stream's batches are made durable, behind one trait:
//!
//! - the WAL file ([`WalFile`], on [`weir_wal::Wal`]): a record per batch, durable once its group
//!   write is synced, uploaded to object storage later by the uploader;
//! - the object WAL ([`crate::object_wal::ObjectWal`]): batches of many streams collected into
//!   one object, durable (and already committed) once it is PUT and its ranges committed.
//!
//! The engine hands each stream's waiting batches to its stream's kind, under the stream's lock
//! and in offset order (`Intake::submit_waiting`, `intake.rs`); either kind calls back through the
//! stream's state when a batch is durable or has failed, in offset order, and either may have
//! no room, in which case the batch waits in its stream until the kind makes room and the
//! engine's intake hands it on. The storage conformance suite's durability checks run against
//! both (`conformance::durability`).

use std::sync::Arc;

use tokio::sync::Notify;
use weir_wal::{Seq, Wal, WalError, WalRecord};

use crate::format::Frame;
use crate::stream::{Failure, Stream};

/// What a kind did with a batch.
pub(crate) enum Taken {
    /// Taken, at this sequence number of the WAL file (0 for the object WAL, whose batches hold
    /// no place in it).
    Seq(Seq),
    /// No room now: the batch waits in its stream.
    NoRoom,
    /// Refused for good: the batch fails, and the stream rewinds to it.
    Refused(WalError),
}

/// A way to make a stream's batches durable.
pub(crate) trait Durability: Send + Sync {
    /// Takes batch `id` of stream `s` (led at `epoch`), called under the stream's lock with its
    /// batches in offset order. Once the batch is durable or failed, the kind marks it so in the
    /// stream's state (`StreamState::durable`, or `rewind`).
    fn take(&self, s: &Arc<Stream>, epoch: u64, id: u64, frame: &Frame) -> Taken;
}

/// The WAL file: the engine's [`Wal`].
pub(crate) struct WalFile {
    pub wal: Arc<dyn Wal>,
    /// Woken when the WAL is full: the uploader frees room.
    pub upload_wanted: Arc<Notify>,
}

impl Durability for WalFile {
    fn take(&self, s: &Arc<Stream>, epoch: u64, id: u64, frame: &Frame) -> Taken {
        let record = WalRecord {
            stream_id: s.id,
            epoch,
            base_offset: frame.base_offset,
            record_count: frame.record_count,
            max_timestamp: frame.max_timestamp,
            payload: frame.payload.clone(),
        };
        let done = completion(Arc::clone(s), frame.base_offset, id);
        match self.wal.append(record, done) {
            Ok(seq) => Taken::Seq(seq),
            Err(WalError::Full { .. }) => {
                // Waits in the stream; the uploader frees room and hands it on.
                self.upload_wanted.notify_one();
                Taken::NoRoom
            }
            Err(e) => Taken::Refused(e),
        }
    }
}

/// What the WAL thread runs when a batch is durable or failed: advance the stream in WAL order,
/// or rewind it to the failed batch.
fn completion(s: Arc<Stream>, base: u64, id: u64) -> weir_wal::Completion {
    Box::new(move |res| {
        let mut st = s.lock();
        match res {
            Ok(_) => {
                if st.durable(base, id) {
                    st.publish();
                    s.end_tx.send_replace(st.durable_end());
                }
            }
            Err(e) => {
                // Later batches of this stream fail too (the WAL fails everything queued behind
                // a failed write); the first failure rewinds the stream and the rest find
                // nothing left to fail.
                if st.in_flight_first(base, id) {
                    tracing::warn!(stream_id = s.id, offset = base, error = %e, "append failed; stream rewinds to its last durable offset");
                    st.rewind(base, Failure::Wal(e));
                }
            }
        }
        st.check_invariants();
    })
}
