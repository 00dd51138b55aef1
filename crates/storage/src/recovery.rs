//! Recovery: what the WAL holds and the metadata store does not is uploaded before any stream
//! opens. Records already committed are skipped, records of a stale epoch dropped, and a gap is
//! refused rather than papered over.

use std::collections::BTreeMap;
use std::path::Path;

use weir_wal::{FileWal, Seal, WalError, WalRecord};

use weir_wal::Wal;

use crate::error::{Result, StorageError};
use crate::format::Frame;
use crate::objects::Objects;
use crate::objects::Part;
use crate::stream::frame;
use crate::StorageMeters;

/// Brings back what `wal` holds and the metadata store does not, and uploads it.
/// `backlogged`: the WAL waits for this upload (a hint for the PUTs).
pub(crate) async fn recover(
    wal: &dyn Wal,
    objects: &Objects,
    backlogged: bool,
    meters: &StorageMeters,
) -> Result<()> {
    let records = wal.take_recovered();
    if records.is_empty() {
        return Ok(());
    }
    let count = records.len();
    let mut parts = Vec::new();
    for (stream_id, records) in by_stream(records) {
        let Some(m) = objects.meta.get_stream(stream_id).await? else {
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
    let uploaded = commit_recovered(objects, &parts, backlogged, meters).await?;
    wal.trim(wal.next_seq()).await?;
    tracing::info!(
        records = count,
        uploaded,
        streams = parts.len(),
        "WAL recovery uploaded"
    );
    Ok(())
}

/// Writes and commits the recovered `parts` (a broker's own WAL's or a peer's), counted in
/// `recovered_batches`; returns how many batches they hold.
async fn commit_recovered(
    objects: &Objects,
    parts: &[Part],
    backlogged: bool,
    meters: &StorageMeters,
) -> Result<usize> {
    let uploaded: usize = parts.iter().map(|p| p.frames.len()).sum();
    if !parts.is_empty() {
        objects.commit_parts(parts, backlogged).await?;
    }
    meters.recovered_batches.add(uploaded as u64);
    Ok(uploaded)
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

/// [`crate::Engine::recover_peer_wal`], with what it needs of the engine.
pub(crate) async fn recover_peer(
    path: &Path,
    seal: Seal,
    objects: &Objects,
    backlogged: bool,
    meters: &StorageMeters,
) -> std::result::Result<PeerRecovery, PeerRecoveryError> {
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
        let Some(m) = objects
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
        let raised = objects
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
    let uploaded = commit_recovered(objects, &parts, backlogged, meters).await?;
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
