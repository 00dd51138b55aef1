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
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // offset - sequence is what keeps records in one batch; the base sequence is -1.
            sequence: i as i32 - 1,
            timestamp: 1_700_000_000_000 + i as i64,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(vec![b'v'; size])),
            headers: Default::default(),
        })
        .collect();
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
