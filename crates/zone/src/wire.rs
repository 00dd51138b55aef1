//! The internal API between brokers, on the internal listener.
//!
//! Framed like Kafka: a request is `length, api key, version, correlation id, body`, a response
//! `length, correlation id, body`. The keys start at [`INTERNAL_KEY_BASE`], above every Kafka
//! API key, and only the internal listener accepts them. Bodies are a few fixed-width integers
//! and length-prefixed strings, big-endian; a body that does not decode is refused, never
//! trusted.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// The first internal API key.
pub const INTERNAL_KEY_BASE: i16 = 1000;
/// A produce whose bytes are in object storage: see [`ForwardProduce`].
pub const FORWARD_PRODUCE: i16 = 1000;
/// Offsets of partitions a broker serves to its zone: see [`WatchOffsets`].
pub const WATCH_OFFSETS: i16 = 1001;
/// ListOffsets by timestamp for a partition served in another zone: see [`OffsetForTime`].
pub const OFFSET_FOR_TIME: i16 = 1002;
/// The first frame on a connection between brokers: who is calling (see [`Hello`]). No answer.
pub const HELLO: i16 = 1003;
/// Transaction markers for partitions the receiver leads: see [`TxnMarkers`].
pub const TXN_MARKERS: i16 = 1004;
/// The aborted transactions of a partition in a span of offsets: see [`AbortedTxns`].
pub const ABORTED_TXNS: i16 = 1005;
/// Before the hello on a cluster with an internal secret: the listener answers a nonce that the
/// hello's proof must sign ([`weir_auth::peer`]). Empty body; the answer is the nonce.
pub const HELLO_CHALLENGE: i16 = 1006;

/// A peer broker introduces itself, so that the listener's side meters its answers with the
/// peer's zone, and proves it holds the cluster's internal secret (if the cluster has one:
/// [`weir_auth::peer`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub node_id: i32,
    pub zone: String,
    pub timestamp_ms: i64,
    /// Empty without a secret.
    pub proof: Vec<u8>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Hello {
    pub fn new(node_id: i32, zone: &str, secret: Option<&[u8]>) -> Hello {
        let timestamp_ms = now_ms();
        Hello {
            node_id,
            zone: zone.to_string(),
            timestamp_ms,
            proof: secret.map_or_else(Vec::new, |s| {
                weir_auth::peer::proof(s, node_id, zone, timestamp_ms)
            }),
        }
    }

    /// A hello that answers the listener's challenge `nonce` (see [`HELLO_CHALLENGE`]).
    pub fn challenged(node_id: i32, zone: &str, secret: &[u8], nonce: &[u8]) -> Hello {
        Hello {
            node_id,
            zone: zone.to_string(),
            timestamp_ms: now_ms(),
            proof: weir_auth::peer::challenged_proof(secret, node_id, zone, nonce),
        }
    }

    pub fn encode(&self) -> BytesMut {
        let mut b = BytesMut::with_capacity(20 + self.zone.len() + self.proof.len());
        b.put_i32(self.node_id);
        put_str(&mut b, &self.zone);
        b.put_i64(self.timestamp_ms);
        b.put_u16(self.proof.len() as u16);
        b.put_slice(&self.proof);
        b
    }

    pub fn decode(mut b: Bytes) -> Result<Hello> {
        let node_id = get_i32(&mut b)?;
        let zone = get_str(&mut b)?;
        // A hello from a broker of an earlier version ends here.
        if !b.has_remaining() {
            return Ok(Hello {
                node_id,
                zone,
                timestamp_ms: 0,
                proof: Vec::new(),
            });
        }
        if b.remaining() < 10 {
            return Err(WireError("hello cut short"));
        }
        let timestamp_ms = b.get_i64();
        let n = b.get_u16() as usize;
        if b.remaining() < n {
            return Err(WireError("hello proof cut short"));
        }
        Ok(Hello {
            node_id,
            zone,
            timestamp_ms,
            proof: b.split_to(n).to_vec(),
        })
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed internal message: {0}")]
pub struct WireError(pub &'static str);

type Result<T> = std::result::Result<T, WireError>;

fn put_str(b: &mut BytesMut, s: &str) {
    b.put_u16(u16::try_from(s.len()).unwrap_or(u16::MAX));
    b.put_slice(&s.as_bytes()[..s.len().min(u16::MAX as usize)]);
}

fn need(b: &Bytes, n: usize, what: &'static str) -> Result<()> {
    if b.remaining() < n {
        Err(WireError(what))
    } else {
        Ok(())
    }
}

fn get_str(b: &mut Bytes) -> Result<String> {
    need(b, 2, "string length")?;
    let n = b.get_u16() as usize;
    need(b, n, "string")?;
    let s = b.split_to(n);
    String::from_utf8(s.to_vec()).map_err(|_| WireError("string is not UTF-8"))
}

fn get_i16(b: &mut Bytes) -> Result<i16> {
    need(b, 2, "i16")?;
    Ok(b.get_i16())
}

fn get_i32(b: &mut Bytes) -> Result<i32> {
    need(b, 4, "i32")?;
    Ok(b.get_i32())
}

fn get_u32(b: &mut Bytes) -> Result<u32> {
    need(b, 4, "u32")?;
    Ok(b.get_u32())
}

fn get_i64(b: &mut Bytes) -> Result<i64> {
    need(b, 8, "i64")?;
    Ok(b.get_i64())
}

fn get_u64(b: &mut Bytes) -> Result<u64> {
    need(b, 8, "u64")?;
    Ok(b.get_u64())
}

/// A count of items, each at least `min_item` bytes: refused if the body cannot hold them, so
/// that a bad count cannot make the reader allocate.
fn get_count(b: &mut Bytes, min_item: usize) -> Result<usize> {
    let n = get_u32(b)? as usize;
    if n.saturating_mul(min_item) > b.remaining() {
        return Err(WireError("count larger than the message"));
    }
    Ok(n)
}

/// One partition's bytes in a hand-off object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardEntry {
    pub topic: String,
    pub partition: i32,
    /// Bytes of this entry; entries follow each other from [`ForwardProduce::position`].
    pub len: u32,
    /// The produce request's transactional id ("" for none): the leader verifies a
    /// transaction's batches against it (KIP-890) as it would a client's.
    pub transactional_id: String,
}

/// A produce sent through a broker in the client's zone: its records are in `object_key`, from
/// `position` on, one entry after the other. The leader reads them (one ranged GET) and appends
/// each entry as if a client had sent it, in this order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardProduce {
    pub object_key: String,
    pub position: u64,
    pub entries: Vec<ForwardEntry>,
}

/// The leader's answer for one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardResult {
    /// A Kafka error code (0: appended and durable).
    pub error: i16,
    pub base_offset: i64,
    pub log_start_offset: i64,
}

impl ForwardProduce {
    pub fn span(&self) -> u64 {
        self.entries.iter().map(|e| u64::from(e.len)).sum()
    }

    pub fn encode(&self) -> BytesMut {
        let mut b = BytesMut::with_capacity(64 + self.entries.len() * 32);
        put_str(&mut b, &self.object_key);
        b.put_u64(self.position);
        b.put_u32(self.entries.len() as u32);
        for e in &self.entries {
            put_str(&mut b, &e.topic);
            b.put_i32(e.partition);
            b.put_u32(e.len);
            put_str(&mut b, &e.transactional_id);
        }
        b
    }

    pub fn decode(mut b: Bytes) -> Result<ForwardProduce> {
        let object_key = get_str(&mut b)?;
        let position = get_u64(&mut b)?;
        let n = get_count(&mut b, 12)?;
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            entries.push(ForwardEntry {
                topic: get_str(&mut b)?,
                partition: get_i32(&mut b)?,
                len: get_u32(&mut b)?,
                transactional_id: get_str(&mut b)?,
            });
        }
        Ok(ForwardProduce {
            object_key,
            position,
            entries,
        })
    }
}

/// A transaction coordinator asks the leader of `partitions` to write a commit or abort marker
/// for producer `producer_id` at `producer_epoch` in each (Kafka's WriteTxnMarkers). The answer
/// is one Kafka error code per partition, in order ([`encode_codes`]), once each is durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMarkers {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub coordinator_epoch: i32,
    pub partitions: Vec<(String, i32)>,
}

impl TxnMarkers {
    pub fn encode(&self) -> BytesMut {
        let mut b = BytesMut::with_capacity(24 + self.partitions.len() * 24);
        b.put_i64(self.producer_id);
        b.put_i16(self.producer_epoch);
        b.put_u8(u8::from(self.commit));
        b.put_i32(self.coordinator_epoch);
        b.put_u32(self.partitions.len() as u32);
        for (t, p) in &self.partitions {
            put_str(&mut b, t);
            b.put_i32(*p);
        }
        b
    }

    pub fn decode(mut b: Bytes) -> Result<TxnMarkers> {
        let producer_id = get_i64(&mut b)?;
        let producer_epoch = get_i16(&mut b)?;
        need(&b, 1, "commit")?;
        let commit = match b.get_u8() {
            0 => false,
            1 => true,
            _ => return Err(WireError("commit is neither 0 nor 1")),
        };
        let coordinator_epoch = get_i32(&mut b)?;
        let n = get_count(&mut b, 6)?;
        let mut partitions = Vec::with_capacity(n);
        for _ in 0..n {
            partitions.push((get_str(&mut b)?, get_i32(&mut b)?));
        }
        Ok(TxnMarkers {
            producer_id,
            producer_epoch,
            commit,
            coordinator_epoch,
            partitions,
        })
    }
}

/// A list of Kafka error codes.
pub fn encode_codes(codes: &[i16]) -> BytesMut {
    let mut b = BytesMut::with_capacity(4 + codes.len() * 2);
    b.put_u32(codes.len() as u32);
    for c in codes {
        b.put_i16(*c);
    }
    b
}

pub fn decode_codes(mut b: Bytes) -> Result<Vec<i16>> {
    let n = get_count(&mut b, 2)?;
    (0..n).map(|_| get_i16(&mut b)).collect()
}

pub fn encode_forward_results(results: &[ForwardResult]) -> BytesMut {
    let mut b = BytesMut::with_capacity(4 + results.len() * 18);
    b.put_u32(results.len() as u32);
    for r in results {
        b.put_i16(r.error);
        b.put_i64(r.base_offset);
        b.put_i64(r.log_start_offset);
    }
    b
}

pub fn decode_forward_results(mut b: Bytes) -> Result<Vec<ForwardResult>> {
    let n = get_count(&mut b, 18)?;
    (0..n)
        .map(|_| {
            Ok(ForwardResult {
                error: get_i16(&mut b)?,
                base_offset: get_i64(&mut b)?,
                log_start_offset: get_i64(&mut b)?,
            })
        })
        .collect()
}

/// What a leader says of a partition: its epoch, start, the end of what is in object storage
/// (what another zone can read), the high watermark, the last stable offset (where
/// `read_committed` readers stop) and one past the marker of its last aborted transaction (a
/// reader asks for the aborted transactions, [`AbortedTxns`], only when it reads below that).
/// `error` is a Kafka code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Offsets {
    pub error: i16,
    pub epoch: i32,
    pub start: i64,
    pub committed: i64,
    pub high_watermark: i64,
    pub last_stable: i64,
    pub aborted_until: i64,
}

impl Offsets {
    fn put(&self, b: &mut BytesMut) {
        b.put_i16(self.error);
        b.put_i32(self.epoch);
        b.put_i64(self.start);
        b.put_i64(self.committed);
        b.put_i64(self.high_watermark);
        b.put_i64(self.last_stable);
        b.put_i64(self.aborted_until);
    }

    fn get(b: &mut Bytes) -> Result<Offsets> {
        Ok(Offsets {
            error: get_i16(b)?,
            epoch: get_i32(b)?,
            start: get_i64(b)?,
            committed: get_i64(b)?,
            high_watermark: get_i64(b)?,
            last_stable: get_i64(b)?,
            aborted_until: get_i64(b)?,
        })
    }
}

/// A question to a partition's leader: its aborted transactions with records in
/// `[from, to)`, as the leader at `epoch` knows them (the epoch of the offsets the asker
/// serves with: a broker that no longer leads at that epoch, or not yet, answers
/// NOT_LEADER_OR_FOLLOWER, never a list that does not go with those offsets). The answer is an
/// error code and `(producer id, first offset)` pairs, what a `read_committed` Fetch response
/// carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbortedTxns {
    pub topic: String,
    pub partition: i32,
    pub epoch: i32,
    pub from: i64,
    pub to: i64,
}

impl AbortedTxns {
    pub fn encode(&self) -> BytesMut {
        let mut b = BytesMut::with_capacity(28 + self.topic.len());
        put_str(&mut b, &self.topic);
        b.put_i32(self.partition);
        b.put_i32(self.epoch);
        b.put_i64(self.from);
        b.put_i64(self.to);
        b
    }

    pub fn decode(mut b: Bytes) -> Result<AbortedTxns> {
        Ok(AbortedTxns {
            topic: get_str(&mut b)?,
            partition: get_i32(&mut b)?,
            epoch: get_i32(&mut b)?,
            from: get_i64(&mut b)?,
            to: get_i64(&mut b)?,
        })
    }
}

/// The answer to [`AbortedTxns`].
pub fn encode_aborted(error: i16, aborted: &[(i64, i64)]) -> BytesMut {
    let mut b = BytesMut::with_capacity(6 + aborted.len() * 16);
    b.put_i16(error);
    b.put_u32(aborted.len() as u32);
    for (pid, first) in aborted {
        b.put_i64(*pid);
        b.put_i64(*first);
    }
    b
}

pub fn decode_aborted(mut b: Bytes) -> Result<(i16, Vec<(i64, i64)>)> {
    let error = get_i16(&mut b)?;
    let n = get_count(&mut b, 16)?;
    let list = (0..n)
        .map(|_| Ok((get_i64(&mut b)?, get_i64(&mut b)?)))
        .collect::<Result<Vec<_>>>()?;
    Ok((error, list))
}

/// A long poll: the leader answers as soon as any partition's offsets differ from the ones
/// given (what the caller knows), or after `max_wait_ms`, with the offsets of the partitions
/// that differ (none, if the wait ran out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchOffsets {
    pub max_wait_ms: u32,
    pub partitions: Vec<(String, i32, Offsets)>,
}

impl WatchOffsets {
    pub fn encode(&self) -> BytesMut {
        let mut b = BytesMut::with_capacity(8 + self.partitions.len() * 48);
        b.put_u32(self.max_wait_ms);
        encode_offsets_into(&mut b, &self.partitions);
        b
    }

    pub fn decode(mut b: Bytes) -> Result<WatchOffsets> {
        let max_wait_ms = get_u32(&mut b)?;
        Ok(WatchOffsets {
            max_wait_ms,
            partitions: decode_offsets(b)?,
        })
    }
}

fn encode_offsets_into(b: &mut BytesMut, parts: &[(String, i32, Offsets)]) {
    b.put_u32(parts.len() as u32);
    for (t, p, o) in parts {
        put_str(b, t);
        b.put_i32(*p);
        o.put(b);
    }
}

pub fn decode_offsets(mut b: Bytes) -> Result<Vec<(String, i32, Offsets)>> {
    let n = get_count(&mut b, 36)?;
    (0..n)
        .map(|_| Ok((get_str(&mut b)?, get_i32(&mut b)?, Offsets::get(&mut b)?)))
        .collect()
}

/// One partition in a leader's answer to [`WatchOffsets`]: its offsets, and the ranges committed
/// since the end the caller knew (the leader's recent index of the partition, which spares the
/// caller a look-up in the metadata store before it reads them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fed {
    pub topic: String,
    pub partition: i32,
    pub offsets: Offsets,
    pub ranges: Vec<weir_meta::RangeInfo>,
}

pub fn encode_fed(parts: &[Fed]) -> BytesMut {
    let mut b = BytesMut::with_capacity(4 + parts.len() * 64);
    b.put_u32(parts.len() as u32);
    for f in parts {
        put_str(&mut b, &f.topic);
        b.put_i32(f.partition);
        f.offsets.put(&mut b);
        b.put_u32(f.ranges.len() as u32);
        for r in &f.ranges {
            b.put_u64(r.stream_id);
            b.put_u64(r.start_offset);
            b.put_u64(r.end_offset);
            b.put_u64(r.object_id);
            put_str(&mut b, &r.object_key);
            b.put_u64(r.object_size);
            b.put_u64(r.position);
            b.put_u64(r.size);
            b.put_i64(r.max_timestamp);
        }
    }
    b
}

pub fn decode_fed(mut b: Bytes) -> Result<Vec<Fed>> {
    let n = get_count(&mut b, 40)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let topic = get_str(&mut b)?;
        let partition = get_i32(&mut b)?;
        let offsets = Offsets::get(&mut b)?;
        let m = get_count(&mut b, 66)?;
        let mut ranges = Vec::with_capacity(m);
        for _ in 0..m {
            ranges.push(weir_meta::RangeInfo {
                stream_id: get_u64(&mut b)?,
                start_offset: get_u64(&mut b)?,
                end_offset: get_u64(&mut b)?,
                object_id: get_u64(&mut b)?,
                object_key: get_str(&mut b)?,
                object_size: get_u64(&mut b)?,
                position: get_u64(&mut b)?,
                size: get_u64(&mut b)?,
                max_timestamp: get_i64(&mut b)?,
            });
        }
        out.push(Fed {
            topic,
            partition,
            offsets,
            ranges,
        });
    }
    Ok(out)
}

/// ListOffsets by timestamp (or `-3`, the largest timestamp) of one partition, asked of its
/// leader by the broker that serves it in another zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetForTime {
    pub topic: String,
    pub partition: i32,
    pub timestamp: i64,
}

/// The answer: `offset` -1 when no batch is that recent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetForTimeResult {
    pub error: i16,
    pub offset: i64,
    pub timestamp: i64,
    pub epoch: i32,
}

impl OffsetForTime {
    pub fn encode(&self) -> BytesMut {
        let mut b = BytesMut::with_capacity(32);
        put_str(&mut b, &self.topic);
        b.put_i32(self.partition);
        b.put_i64(self.timestamp);
        b
    }

    pub fn decode(mut b: Bytes) -> Result<OffsetForTime> {
        Ok(OffsetForTime {
            topic: get_str(&mut b)?,
            partition: get_i32(&mut b)?,
            timestamp: get_i64(&mut b)?,
        })
    }
}

impl OffsetForTimeResult {
    pub fn encode(&self) -> BytesMut {
        let mut b = BytesMut::with_capacity(22);
        b.put_i16(self.error);
        b.put_i64(self.offset);
        b.put_i64(self.timestamp);
        b.put_i32(self.epoch);
        b
    }

    pub fn decode(mut b: Bytes) -> Result<OffsetForTimeResult> {
        Ok(OffsetForTimeResult {
            error: get_i16(&mut b)?,
            offset: get_i64(&mut b)?,
            timestamp: get_i64(&mut b)?,
            epoch: get_i32(&mut b)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_truncations_are_refused() {
        let f = ForwardProduce {
            object_key: "handoff/1/x".into(),
            position: 77,
            entries: vec![
                ForwardEntry {
                    topic: "a".into(),
                    partition: 3,
                    len: 10,
                    transactional_id: String::new(),
                },
                ForwardEntry {
                    topic: "bb".into(),
                    partition: 0,
                    len: 5,
                    transactional_id: "tx".into(),
                },
            ],
        };
        let bytes = f.encode().freeze();
        assert_eq!(ForwardProduce::decode(bytes.clone()), Ok(f.clone()));
        assert_eq!(f.span(), 15);
        for cut in 0..bytes.len() {
            assert!(
                ForwardProduce::decode(bytes.slice(..cut)).is_err(),
                "cut at {cut}"
            );
        }
        let r = vec![ForwardResult {
            error: 6,
            base_offset: -1,
            log_start_offset: 2,
        }];
        assert_eq!(
            decode_forward_results(encode_forward_results(&r).freeze()),
            Ok(r)
        );
        let o = Offsets {
            error: 0,
            epoch: 4,
            start: 1,
            committed: 9,
            high_watermark: 12,
            last_stable: 10,
            aborted_until: 4,
        };
        let w = WatchOffsets {
            max_wait_ms: 500,
            partitions: vec![("t".into(), 1, o)],
        };
        assert_eq!(WatchOffsets::decode(w.encode().freeze()), Ok(w));
        let h = Hello::new(3, "z", Some(b"secret"));
        assert_eq!(h.proof.len(), 32);
        assert_eq!(Hello::decode(h.encode().freeze()), Ok(h));
        let open = Hello::new(3, "z", None);
        assert_eq!(Hello::decode(open.encode().freeze()), Ok(open));
        // An earlier version's hello: node id and zone only.
        let mut old = BytesMut::new();
        old.put_i32(3);
        put_str(&mut old, "z");
        let h = Hello::decode(old.freeze()).expect("old hello");
        assert_eq!((h.node_id, h.proof.len()), (3, 0));
        let q = OffsetForTime {
            topic: "t".into(),
            partition: 2,
            timestamp: -3,
        };
        assert_eq!(OffsetForTime::decode(q.encode().freeze()), Ok(q));
        let a = OffsetForTimeResult {
            error: 0,
            offset: 5,
            timestamp: 99,
            epoch: 2,
        };
        assert_eq!(OffsetForTimeResult::decode(a.encode().freeze()), Ok(a));
        let m = TxnMarkers {
            producer_id: 42,
            producer_epoch: 3,
            commit: true,
            coordinator_epoch: 9,
            partitions: vec![("t".into(), 0), ("u".into(), 7)],
        };
        let bytes = m.encode().freeze();
        assert_eq!(TxnMarkers::decode(bytes.clone()), Ok(m));
        for cut in 0..bytes.len() {
            assert!(
                TxnMarkers::decode(bytes.slice(..cut)).is_err(),
                "cut at {cut}"
            );
        }
        assert_eq!(decode_codes(encode_codes(&[0, 6]).freeze()), Ok(vec![0, 6]));
        let q = AbortedTxns {
            topic: "t".into(),
            partition: 1,
            epoch: 3,
            from: 5,
            to: 9,
        };
        assert_eq!(AbortedTxns::decode(q.encode().freeze()), Ok(q));
        assert_eq!(
            decode_aborted(encode_aborted(0, &[(7, 5)]).freeze()),
            Ok((0, vec![(7, 5)]))
        );
        // A count that the body cannot hold is refused before anything is allocated.
        let mut huge = BytesMut::new();
        huge.put_u32(u32::MAX);
        assert!(decode_offsets(huge.freeze()).is_err());
    }
}
