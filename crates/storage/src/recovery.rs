//! Recovery: what the WAL holds and the metadata store does not is uploaded before any stream
//! opens. Records already committed are skipped, records of a stale epoch dropped, and a gap is
//! refused rather than papered over.

use std::collections::BTreeMap;

use crate::engine::EngineInner;
use crate::error::{Result, StorageError};
use crate::format::Frame;
use crate::stream::frame;
use crate::upload::Part;

impl EngineInner {
    /// Brings back what the WAL holds and the metadata store does not, and uploads it.
    pub async fn recover(&self) -> Result<()> {
        let records = self.wal.take_recovered();
        if records.is_empty() {
            return Ok(());
        }
        let count = records.len();
        let mut by_stream: BTreeMap<u64, Vec<weir_wal::WalRecord>> = BTreeMap::new();
        for r in records {
            by_stream
                .entry(r.record.stream_id)
                .or_default()
                .push(r.record);
        }
        let mut parts = Vec::new();
        for (stream_id, records) in by_stream {
            let Some(m) = self.meta.get_stream(stream_id).await? else {
                tracing::warn!(
                    stream_id,
                    "WAL holds data of a stream the metadata store does not know; dropping it"
                );
                continue;
            };
            let mut frames: Vec<Frame> = Vec::new();
            for r in records {
                if r.end_offset() <= m.end_offset {
                    continue; // already in object storage
                }
                if r.epoch != m.epoch {
                    tracing::warn!(
                        stream_id,
                        epoch = r.epoch,
                        current = m.epoch,
                        "dropping WAL data of a stale epoch"
                    );
                    continue;
                }
                // A batch rewritten after a failed write replaces what followed the failure.
                while frames
                    .last()
                    .is_some_and(|f| f.base_offset >= r.base_offset)
                {
                    frames.pop();
                }
                let expected = frames.last().map_or(m.end_offset, Frame::end_offset);
                if r.base_offset != expected {
                    // Records after a gap were acknowledged, but cannot be placed without
                    // inventing the missing offsets. Nothing is dropped or trimmed: the broker
                    // stops, and the WAL stays as it is for an operator (or a fixed broker).
                    tracing::error!(
                        stream_id,
                        expected,
                        got = r.base_offset,
                        "gap in recovered WAL data; refusing to open"
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
            self.commit_parts(&parts).await?;
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
