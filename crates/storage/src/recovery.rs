//! Recovery: what the WAL holds and the metadata store does not is uploaded before any stream
//! opens. Records already committed are skipped, records of a stale epoch dropped, and a gap is
//! refused rather than papered over.

use std::collections::BTreeMap;
use std::path::Path;

use weir_wal::{FileWal, Seal, WalError, WalRecord};

use crate::engine::{Engine, EngineInner};
use crate::error::{Result, StorageError};
use crate::format::Frame;
use crate::objects::Part;
use crate::stream::frame;

impl EngineInner {
    /// Brings back what the WAL holds and the metadata store does not, and uploads it.
    pub async fn recover(&self) -> Result<()> {
        let records = self.wal.take_recovered();
        if records.is_empty() {
            return Ok(());
        }
        let count = records.len();
        let mut parts = Vec::new();
        for (stream_id, records) in by_stream(records) {
            let Some(m) = self.meta.get_stream(stream_id).await? else {
                tracing::warn!(
                    stream_id,
                    "WAL holds data of a stream the metadata store does not know; dropping it"
                );
                continue;
            };
            let frames = frames_after(stream_id, records, m.epoch, m.end_offset)?;
            if !frames.is_empty() {
                parts.push(Part {
                    stream_id,
                    epoch: m.epoch,
                    frames,
                });
            }
        }
        let uploaded: usize = parts.iter().map(|p| p.frames.len()).sum();
        if !parts.is_empty() {
            self.objects
                .commit_parts(&parts, self.wal_backlogged())
                .await?;
        }
        self.wal.trim(self.wal.next_seq()).await?;
        self.meters.recovered_batches.add(uploaded as u64);
        tracing::info!(
            records = count,
            uploaded,
            streams = parts.len(),
            "WAL recovery uploaded"
        );
        Ok(())
    }
}

/// Recovered records by stream, each stream's in WAL order.
fn by_stream(records: Vec<weir_wal::RecoveredRecord>) -> BTreeMap<u64, Vec<WalRecord>> {
    let mut out: BTreeMap<u64, Vec<WalRecord>> = BTreeMap::new();
    for r in records {
        out.entry(r.record.stream_id).or_default().push(r.record);
    }
    out
}

/// The frames of `records` (one stream's, in WAL order) that follow `end_offset`, written at
/// `epoch`. Records already committed are skipped and records of another epoch dropped; a batch
/// rewritten after a failed write replaces what followed the failure; a gap is refused.
fn frames_after(
    stream_id: u64,
    records: Vec<WalRecord>,
    epoch: u64,
    end_offset: u64,
) -> Result<Vec<Frame>> {
    let mut frames: Vec<Frame> = Vec::new();
    for r in records {
        if r.end_offset() <= end_offset {
            continue; // already in object storage
        }
        if r.epoch != epoch {
            tracing::warn!(
                stream_id,
                epoch = r.epoch,
                current = epoch,
                "dropping WAL data of a stale epoch"
            );
            continue;
        }
        while frames
            .last()
            .is_some_and(|f| f.base_offset >= r.base_offset)
        {
            frames.pop();
        }
        let expected = frames.last().map_or(end_offset, Frame::end_offset);
        if r.base_offset != expected {
            // Records after a gap were acknowledged, but cannot be placed without inventing the
            // missing offsets. Nothing is dropped or trimmed: the WAL stays as it is for an
            // operator (or a fixed broker).
            tracing::error!(
                stream_id,
                expected,
                got = r.base_offset,
                "gap in recovered WAL data; refusing to go on"
            );
            return Err(StorageError::RecoveryGap {
                stream_id,
                expected,
                got: r.base_offset,
            });
        }
        frames.push(frame(
            r.base_offset,
            r.record_count,
            r.max_timestamp,
            r.payload,
        ));
    }
    Ok(frames)
}

/// What a peer's recovery of another broker's WAL did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerRecovery {
    pub records: usize,
    pub uploaded: usize,
    pub streams: usize,
}

/// Why a peer's recovery failed.
#[derive(Debug, thiserror::Error)]
pub enum PeerRecoveryError {
    /// The WAL cannot be opened here (no file at the path, another WAL there, no permission).
    #[error("{0}")]
    Unreachable(WalError),
    #[error(transparent)]
    Failed(#[from] StorageError),
}

impl Engine {
    /// Recovers a dead broker's `file` WAL at `path` (the WAL `seal.wal_id`), as the peer
    /// `seal` names: seals it first, so that its owner, if it still runs, acknowledges nothing
    /// written after this point, then reads it. For each stream with data beyond its committed end
    /// written at the stream's current epoch (by the dead leader), raises the epoch by one, so
    /// that a late commit by the old leader is refused, and commits that data at the new epoch.
    /// Nothing of the WAL is trimmed or changed otherwise. Safe to run again (an interrupted
    /// recovery): what was committed is skipped.
    pub async fn recover_peer_wal(
        &self,
        path: &Path,
        seal: Seal,
    ) -> std::result::Result<PeerRecovery, PeerRecoveryError> {
        let inner = &self.inner;
        inner.check_open()?;
        let path_owned = path.to_path_buf();
        let records = tokio::task::spawn_blocking(move || {
            FileWal::seal(&path_owned, seal)?;
            FileWal::read_sealed(&path_owned, seal.wal_id)
        })
        .await
        .map_err(|_| PeerRecoveryError::Failed(StorageError::Closed))?
        .map_err(|e| match e {
            WalError::Io { .. } | WalError::WrongWal { .. } | WalError::Invalid { .. } => {
                PeerRecoveryError::Unreachable(e)
            }
            e => PeerRecoveryError::Failed(e.into()),
        })?;
        let count = records.len();
        let mut parts = Vec::new();
        for (stream_id, records) in by_stream(records) {
            let Some(m) = inner
                .meta
                .get_stream(stream_id)
                .await
                .map_err(StorageError::from)?
            else {
                continue; // deleted
            };
            let pending = records
                .iter()
                .any(|r| r.epoch == m.epoch && r.end_offset() > m.end_offset);
            if !pending {
                continue;
            }
            // Raise the epoch first: from here the dead leader's commits fail, so the committed
            // end offset read now is final for its epoch.
            let raised = inner
                .meta
                .open_stream(stream_id, m.epoch + 1)
                .await
                .map_err(StorageError::from)?;
            let frames = frames_after(stream_id, records, m.epoch, raised.end_offset)?;
            if !frames.is_empty() {
                parts.push(Part {
                    stream_id,
                    epoch: raised.epoch,
                    frames,
                });
            }
        }
        let uploaded: usize = parts.iter().map(|p| p.frames.len()).sum();
        if !parts.is_empty() {
            inner
                .objects
                .commit_parts(&parts, inner.wal_backlogged())
                .await?;
        }
        inner.meters.recovered_batches.add(uploaded as u64);
        tracing::info!(
            path = %path.display(),
            records = count,
            uploaded,
            streams = parts.len(),
            "peer WAL recovery uploaded"
        );
        Ok(PeerRecovery {
            records: count,
            uploaded,
            streams: parts.len(),
        })
    }
}
