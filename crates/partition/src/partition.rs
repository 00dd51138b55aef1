//! The leader of one partition: validates produced batches, checks producer sequences, assigns
//! offsets through the storage engine, and serves reads.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::ResponseError;
use weir_meta::MetaStore;
use weir_storage::{Engine, StorageError};

use crate::batch::{self, BatchHeader};
use crate::producer::{Check, ProducerStates};

/// The Kafka error a storage error stands for.
pub fn kafka_error(e: &StorageError) -> ResponseError {
    match e {
        StorageError::NotOpen(_) | StorageError::Fenced { .. } | StorageError::Closed => {
            ResponseError::NotLeaderOrFollower
        }
        StorageError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        StorageError::Wal(weir_wal::WalError::TooLarge { .. }) => ResponseError::MessageTooLarge,
        StorageError::Wal(_) | StorageError::Object(_) | StorageError::Corrupt { .. } => {
            ResponseError::KafkaStorageError
        }
        StorageError::Meta(_) => ResponseError::KafkaStorageError,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Produced {
    pub base_offset: i64,
    pub log_start_offset: i64,
}

#[derive(Debug, Clone)]
pub struct FetchData {
    pub records: Bytes,
    pub high_watermark: i64,
    pub log_start_offset: i64,
}

/// A produce whose offsets are assigned, on its way to durability.
pub struct ProduceTicket {
    partition: Arc<Partition>,
    pending: Vec<weir_storage::PendingAppend>,
    duplicates: Vec<crate::producer::BatchMeta>,
    /// Batches not appended yet because the WAL was full.
    remaining: std::collections::VecDeque<batch::ProducedBatch>,
    deadline: Instant,
    error: Option<ResponseError>,
}

impl ProduceTicket {
    /// Appends what it can of `remaining`, in order, under the producer-state lock.
    fn append_some(&mut self) -> bool {
        let p = &self.partition;
        let mut producers = p.producers();
        while let Some(b) = self.remaining.front() {
            match producers.check(&b.header) {
                Err(e) => {
                    self.error = Some(e);
                    self.remaining.clear();
                    return false;
                }
                Ok(Check::Duplicate(meta)) => self.duplicates.push(meta),
                Ok(Check::New) => {
                    let epoch = p.leader_epoch;
                    let appended = p.engine.try_append(
                        p.stream_id,
                        epoch as u64,
                        b.header.offset_count(),
                        b.header.index_timestamp(),
                        |base| batch::assign(&b.bytes, base, epoch),
                    );
                    match appended {
                        Ok(a) => {
                            producers.record(
                                &b.header,
                                a.appended.base_offset,
                                a.appended.end_offset,
                            );
                            self.pending.push(a);
                        }
                        Err(StorageError::Wal(weir_wal::WalError::Full { .. }))
                            if Instant::now() < self.deadline =>
                        {
                            return true;
                        }
                        Err(e) => {
                            tracing::debug!(topic = %p.topic, partition = p.index, error = %e, "append failed");
                            self.error = Some(kafka_error(&e));
                            self.remaining.clear();
                            return false;
                        }
                    }
                }
            }
            self.remaining.pop_front();
        }
        false
    }

    /// Waits until every batch is durable (appending those the WAL had no room for, once it
    /// has). Returns the first batch's offset.
    pub async fn wait(mut self) -> Result<Produced, ResponseError> {
        while !self.remaining.is_empty() && self.error.is_none() {
            // Backpressure: wait for the uploader to free WAL space, then go on.
            self.partition
                .engine
                .wait_for_wal_space(self.deadline)
                .await;
            if Instant::now() >= self.deadline {
                self.error = Some(ResponseError::KafkaStorageError);
                break;
            }
            self.append_some();
        }
        let mut base: Option<u64> = None;
        let mut failure = self.error;
        for p in std::mem::take(&mut self.pending) {
            let this = p.appended.base_offset;
            match p.wait().await {
                Ok(a) => {
                    base.get_or_insert(a.base_offset);
                }
                Err(e) => {
                    // The stream rewound to `this`; so does the producer state.
                    self.partition.producers().rewind(this);
                    failure.get_or_insert(kafka_error(&e));
                }
            }
        }
        if let Some(e) = failure {
            return Err(e);
        }
        for d in &self.duplicates {
            self.partition.wait_durable(d.end_offset).await?;
            base.get_or_insert(d.base_offset);
        }
        let (log_start, _) = self.partition.offsets();
        Ok(Produced {
            base_offset: base.map_or(-1, |b| b as i64),
            log_start_offset: log_start,
        })
    }
}

pub struct Partition {
    pub topic: String,
    pub index: i32,
    pub stream_id: u64,
    pub leader_epoch: i32,
    engine: Engine,
    producers: Mutex<ProducerStates>,
    max_message_bytes: AtomicUsize,
}

impl Partition {
    /// Takes leadership of the partition's stream with a new epoch and rebuilds the idempotent
    /// producer state: the last snapshot, then the batches written after it.
    pub async fn open(
        engine: Engine,
        meta: &dyn MetaStore,
        topic: &str,
        index: i32,
        stream_id: u64,
        max_message_bytes: usize,
    ) -> Result<Arc<Partition>, StorageError> {
        let epoch = meta.get_stream(stream_id).await?.map_or(1, |s| s.epoch + 1);
        let info = engine.open_stream(stream_id, epoch).await?;
        let (mut from, mut producers) = match meta.load_producer_snapshot(stream_id).await? {
            Some((offset, data)) => match ProducerStates::decode(&data) {
                Some(p) => (offset, p),
                None => (0, ProducerStates::default()),
            },
            None => (0, ProducerStates::default()),
        };
        from = from.max(info.start_offset);
        while from < info.high_watermark {
            let r = engine.read(stream_id, from, 4 << 20).await?;
            let Some(last) = r.batches.last() else { break };
            from = last.end_offset();
            for f in &r.batches {
                if let Some(h) = BatchHeader::parse(&f.payload) {
                    producers.record(&h, f.base_offset, f.end_offset());
                }
            }
        }
        Ok(Arc::new(Partition {
            topic: topic.to_string(),
            index,
            stream_id,
            leader_epoch: epoch as i32,
            engine,
            producers: Mutex::new(producers),
            max_message_bytes: AtomicUsize::new(max_message_bytes),
        }))
    }

    fn producers(&self) -> MutexGuard<'_, ProducerStates> {
        self.producers.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_max_message_bytes(&self, n: usize) {
        self.max_message_bytes.store(n, Ordering::Relaxed);
    }

    /// (log start offset, high watermark)
    pub fn offsets(&self) -> (i64, i64) {
        self.engine
            .stream_info(self.stream_id)
            .map_or((0, 0), |i| (i.start_offset as i64, i.high_watermark as i64))
    }

    /// Appends a produce request's records for this partition; returns once they are durable.
    pub async fn produce(
        self: &Arc<Self>,
        records: &Bytes,
        wal_wait: Duration,
    ) -> Result<Produced, ResponseError> {
        self.start_produce(records, wal_wait)?.wait().await
    }

    /// Validates the batches, checks their producer sequences and assigns their offsets, all
    /// before it returns, so that requests are appended in the order this is called. The ticket
    /// resolves once they are durable.
    pub fn start_produce(
        self: &Arc<Self>,
        records: &Bytes,
        wal_wait: Duration,
    ) -> Result<ProduceTicket, ResponseError> {
        let batches =
            batch::split_and_validate(records, self.max_message_bytes.load(Ordering::Relaxed))?;
        let mut ticket = ProduceTicket {
            partition: Arc::clone(self),
            pending: Vec::with_capacity(batches.len()),
            duplicates: Vec::new(),
            remaining: batches.into(),
            deadline: Instant::now() + wal_wait,
            error: None,
        };
        ticket.append_some();
        if let Some(e) = ticket.error.take() {
            if ticket.pending.is_empty() {
                return Err(e);
            }
            ticket.error = Some(e);
        }
        Ok(ticket)
    }

    /// Waits until `end` is durable: a retried batch may still be on its way to the WAL.
    async fn wait_durable(&self, end: u64) -> Result<(), ResponseError> {
        let mut rx = self
            .engine
            .watch_high_watermark(self.stream_id)
            .ok_or(ResponseError::NotLeaderOrFollower)?;
        let result =
            tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|hw| *hw >= end)).await;
        match result {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(ResponseError::NotLeaderOrFollower),
            Err(_) => Err(ResponseError::RequestTimedOut),
        }
    }

    /// Batches from `offset`, up to about `max_bytes` (at least one whole batch if any).
    pub async fn fetch(&self, offset: i64, max_bytes: usize) -> Result<FetchData, ResponseError> {
        if offset < 0 {
            return Err(ResponseError::OffsetOutOfRange);
        }
        let r = self
            .engine
            .read(self.stream_id, offset as u64, max_bytes)
            .await
            .map_err(|e| kafka_error(&e))?;
        let records = match r.batches.len() {
            0 => Bytes::new(),
            1 => r.batches[0].payload.clone(),
            _ => {
                let mut b =
                    BytesMut::with_capacity(r.batches.iter().map(|f| f.payload.len()).sum());
                for f in &r.batches {
                    b.extend_from_slice(&f.payload);
                }
                b.freeze()
            }
        };
        Ok(FetchData {
            records,
            high_watermark: r.high_watermark as i64,
            log_start_offset: r.start_offset as i64,
        })
    }

    /// A receiver of the high watermark, for fetches that wait for data.
    pub fn watch_high_watermark(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.engine.watch_high_watermark(self.stream_id)
    }

    /// The offset and timestamp of the first record with a timestamp at least `ts`.
    pub async fn offset_for_timestamp(&self, ts: i64) -> Result<Option<(i64, i64)>, ResponseError> {
        let f = self
            .engine
            .find_by_timestamp(self.stream_id, ts)
            .await
            .map_err(|e| kafka_error(&e))?;
        Ok(f.and_then(|f| batch::first_record_at_or_after(&f.payload, ts)))
    }

    /// The largest timestamp and the offset of the first record that has it (ListOffsets with
    /// MAX_TIMESTAMP).
    pub async fn max_timestamp(&self) -> Result<Option<(i64, i64)>, ResponseError> {
        let max = self
            .engine
            .max_timestamp(self.stream_id)
            .await
            .map_err(|e| kafka_error(&e))?;
        match max {
            Some(ts) => self.offset_for_timestamp(ts).await,
            None => Ok(None),
        }
    }

    /// DeleteRecords: moves the log start offset; returns the new low watermark.
    pub async fn delete_records(&self, offset: i64) -> Result<i64, ResponseError> {
        let (start, hw) = self.offsets();
        let target = if offset == -1 { hw } else { offset };
        if target < 0 || target > hw {
            return Err(ResponseError::OffsetOutOfRange);
        }
        if target <= start {
            return Ok(start);
        }
        self.engine
            .trim(self.stream_id, target as u64)
            .await
            .map(|s| s as i64)
            .map_err(|e| kafka_error(&e))
    }

    /// Saves the idempotent-producer state as of the high watermark.
    pub async fn snapshot_producers(&self, meta: &dyn MetaStore) -> Result<(), StorageError> {
        let (_, hw) = self.offsets();
        let data = self.producers().encode_until(hw as u64);
        meta.save_producer_snapshot(self.stream_id, hw as u64, data)
            .await?;
        Ok(())
    }

    pub fn set_retention(&self, retention: weir_storage::Retention) {
        let _ = self.engine.set_retention(self.stream_id, retention);
    }

    /// Uploads what the partition holds and gives up leadership.
    pub async fn close(&self, meta: &dyn MetaStore) -> Result<(), StorageError> {
        if let Err(e) = self.snapshot_producers(meta).await {
            tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "could not snapshot producer state; it will be rebuilt from the log");
        }
        self.engine.close_stream(self.stream_id).await
    }
}
