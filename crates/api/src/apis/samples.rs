//! What the sample requests of the APIs ([`super::Api::samples`]) name: a topic that exists, one
//! that does not, a group, real record batches. Compiled for tests only (feature `testing`).

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use uuid::Uuid;

/// A topic the broker has (with partitions 0 and 1).
pub const TOPIC: &str = "t";
/// A topic it does not have.
pub const MISSING: &str = "no-such-topic";
/// A group.
pub const GROUP: &str = "g1";

/// What the samples are made against: the broker's topics (some samples create a topic first),
/// and the id of [`TOPIC`].
pub struct Samples<'a> {
    pub topics: &'a weir_partition::Topics,
    pub topic_id: Uuid,
}

pub fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

pub fn topic(v: &str) -> TopicName {
    TopicName(s(v))
}

/// One real record batch (magic 2) of `n` records of 100 bytes.
pub fn batch(n: usize) -> Bytes {
    batch_of(n, 100)
}

/// One real record batch (magic 2) of `n` records of `size` bytes.
pub fn batch_of(n: usize, size: usize) -> Bytes {
    // offset - sequence is what keeps records in one batch; the base sequence is -1.
    encode((0..n).map(|i| Record {
        sequence: i as i32 - 1,
        value: Some(Bytes::from(vec![b'v'; size])),
        ..record(i)
    }))
}

/// One transactional record batch of `n` records from producer `producer_id` at `epoch`, its
/// first record at sequence `first`.
pub fn txn_batch(producer_id: i64, epoch: i16, first: i32, n: usize) -> Bytes {
    encode((0..n).map(|i| Record {
        transactional: true,
        producer_id,
        producer_epoch: epoch,
        sequence: first + i as i32,
        ..record(i)
    }))
}

/// Record `i` of a batch without a producer: key `k{i}`, value `v{i}`.
fn record(i: usize) -> Record {
    Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: i as i64,
        sequence: -1,
        timestamp: 1_700_000_000_000 + i as i64,
        key: Some(Bytes::from(format!("k{i}"))),
        value: Some(Bytes::from(format!("v{i}"))),
        headers: Default::default(),
    }
}

fn encode(records: impl Iterator<Item = Record>) -> Bytes {
    let records: Vec<Record> = records.collect();
    let mut buf = BytesMut::new();
    // Records of this shape always encode; a failure is the test's mistake.
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("encode a batch");
    buf.freeze()
}
