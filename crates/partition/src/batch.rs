//! Kafka `RecordBatch` v2 headers: validation, the fields the leader needs, and the two fields
//! it writes (base offset, partition leader epoch), which sit outside the CRC so that a batch is
//! stored exactly as the producer sent it otherwise.
//!
//! ```text
//! 0  baseOffset i64        8  batchLength i32     12 partitionLeaderEpoch i32
//! 16 magic i8              17 crc u32 (CRC-32C of bytes 21..)
//! 21 attributes i16        23 lastOffsetDelta i32  27 baseTimestamp i64
//! 35 maxTimestamp i64      43 producerId i64       51 producerEpoch i16
//! 53 baseSequence i32      57 recordCount i32      61 records...
//! ```

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::ResponseError;

pub const HEADER_LEN: usize = 61;
const LOG_OVERHEAD: usize = 12;

/// The header fields of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

impl BatchHeader {
    pub fn compression(&self) -> i16 {
        self.attributes & 0x7
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & 0x10 != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & 0x20 != 0
    }

    /// Offsets the batch takes.
    pub fn offset_count(&self) -> u32 {
        (self.last_offset_delta as u32).wrapping_add(1)
    }

    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence < 0 {
            return self.base_sequence;
        }
        // Sequences wrap at i32::MAX, as Kafka's do.
        ((i64::from(self.base_sequence) + i64::from(self.last_offset_delta))
            % (i64::from(i32::MAX) + 1)) as i32
    }

    /// The timestamp the storage layer indexes.
    pub fn index_timestamp(&self) -> i64 {
        if self.max_timestamp >= 0 {
            self.max_timestamp
        } else {
            self.base_timestamp
        }
    }

    pub fn parse(b: &[u8]) -> Option<BatchHeader> {
        if b.len() < HEADER_LEN {
            return None;
        }
        let mut h = &b[..HEADER_LEN];
        let base_offset = h.get_i64();
        h.advance(4 + 4 + 1 + 4);
        Some(BatchHeader {
            base_offset,
            attributes: h.get_i16(),
            last_offset_delta: h.get_i32(),
            base_timestamp: h.get_i64(),
            max_timestamp: h.get_i64(),
            producer_id: h.get_i64(),
            producer_epoch: h.get_i16(),
            base_sequence: h.get_i32(),
            record_count: h.get_i32(),
        })
    }
}

/// One validated batch of a produce request.
#[derive(Debug, Clone)]
pub struct ProducedBatch {
    pub header: BatchHeader,
    pub bytes: Bytes,
}

/// Splits a produce request's records into batches and validates each: magic v2, lengths, CRC,
/// record count, size limit. Errors are the codes Kafka answers with.
pub fn split_and_validate(
    records: &Bytes,
    max_batch_bytes: usize,
) -> Result<Vec<ProducedBatch>, ResponseError> {
    let out = split_checked(records, max_batch_bytes)?;
    for b in &out {
        let header = &b.header;
        // As Kafka's LogValidator: the count and the offset range must agree exactly.
        if header.record_count <= 0
            || header.last_offset_delta < 0
            || i64::from(header.record_count) != i64::from(header.last_offset_delta) + 1
        {
            return Err(ResponseError::InvalidRecord);
        }
        if header.is_control() {
            return Err(ResponseError::InvalidRecord);
        }
    }
    Ok(out)
}

/// Splits batches fetched from another Kafka cluster (a link's source) and checks them as
/// stored there: magic v2, lengths, CRC, size limit, and offsets that only go forward. Unlike a
/// producer's, they keep their offsets, may be control batches (transaction markers), and may
/// hold fewer records than offsets, or none: the source's cleaner removes records from a
/// batch but keeps its offset range, and keeps an emptied batch for its producer state.
pub fn split_mirrored(
    records: &Bytes,
    max_batch_bytes: usize,
) -> Result<Vec<ProducedBatch>, ResponseError> {
    let out = split_checked(records, max_batch_bytes)?;
    let mut end = 0i64;
    for b in &out {
        let h = &b.header;
        if h.base_offset < end
            || h.last_offset_delta < 0
            || h.record_count < 0
            || i64::from(h.record_count) > i64::from(h.last_offset_delta) + 1
        {
            return Err(ResponseError::CorruptMessage);
        }
        end = h.base_offset + i64::from(h.last_offset_delta) + 1;
    }
    Ok(out)
}

/// Splits records into batches, each checked for magic v2, its lengths, its CRC and the size
/// limit.
fn split_checked(
    records: &Bytes,
    max_batch_bytes: usize,
) -> Result<Vec<ProducedBatch>, ResponseError> {
    let mut out = Vec::new();
    let mut at = 0usize;
    if records.is_empty() {
        return Err(ResponseError::InvalidRecord);
    }
    while at < records.len() {
        let rest = &records[at..];
        if rest.len() < LOG_OVERHEAD + 5 {
            return Err(ResponseError::CorruptMessage);
        }
        let batch_len = i32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]);
        if batch_len < 0 {
            return Err(ResponseError::CorruptMessage);
        }
        let total = LOG_OVERHEAD + batch_len as usize;
        let magic = rest[16];
        if magic != 2 {
            // Message formats v0 and v1 were removed in Kafka 4.0.
            return Err(ResponseError::UnsupportedForMessageFormat);
        }
        if total > rest.len() || total < HEADER_LEN {
            return Err(ResponseError::CorruptMessage);
        }
        if total > max_batch_bytes {
            return Err(ResponseError::MessageTooLarge);
        }
        let bytes = records.slice(at..at + total);
        let crc = u32::from_be_bytes([bytes[17], bytes[18], bytes[19], bytes[20]]);
        if crc32c::crc32c(&bytes[21..]) != crc {
            return Err(ResponseError::CorruptMessage);
        }
        let header = BatchHeader::parse(&bytes).ok_or(ResponseError::CorruptMessage)?;
        out.push(ProducedBatch { header, bytes });
        at += total;
    }
    Ok(out)
}

/// The batch with its base offset and leader epoch written in.
pub fn assign(batch: &Bytes, base_offset: u64, leader_epoch: i32) -> Bytes {
    let mut b = BytesMut::from(&batch[..]);
    (&mut b[0..8]).put_i64(base_offset as i64);
    (&mut b[12..16]).put_i32(leader_epoch);
    b.freeze()
}

/// A request's batches for one partition as one payload, each batch with its base offset
/// (following on from `base_offset`) and the leader epoch written in.
pub fn assign_all(batches: &[ProducedBatch], base_offset: u64, leader_epoch: i32) -> Bytes {
    if let [one] = batches {
        return assign(&one.bytes, base_offset, leader_epoch);
    }
    let mut out = BytesMut::with_capacity(batches.iter().map(|b| b.bytes.len()).sum());
    let mut base = base_offset;
    for b in batches {
        let at = out.len();
        out.extend_from_slice(&b.bytes);
        (&mut out[at..at + 8]).put_i64(base as i64);
        (&mut out[at + 12..at + 16]).put_i32(leader_epoch);
        base += u64::from(b.header.offset_count());
    }
    out.freeze()
}

/// Batches as one payload, each keeping its base offset, with the leader epoch written in.
pub fn relabel_all(batches: &[&ProducedBatch], leader_epoch: i32) -> Bytes {
    let mut out = BytesMut::with_capacity(batches.iter().map(|b| b.bytes.len()).sum());
    for b in batches {
        let at = out.len();
        out.extend_from_slice(&b.bytes);
        (&mut out[at + 12..at + 16]).put_i32(leader_epoch);
    }
    out.freeze()
}

/// The batches stored in one payload (one produce request's batches for a partition).
pub fn split(payload: &Bytes) -> impl Iterator<Item = Bytes> + '_ {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let rest = payload.get(at..)?;
        if rest.len() < HEADER_LEN {
            return None;
        }
        let len =
            usize::try_from(i32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]])).ok()?;
        let end = (at + LOG_OVERHEAD + len).min(payload.len());
        let b = payload.slice(at..end);
        at = end;
        Some(b)
    })
}

/// The headers of the batches stored in one payload, with the offsets each takes.
pub fn headers(payload: &[u8]) -> impl Iterator<Item = (BatchHeader, u64, u64)> + '_ {
    batches(payload).map(|(h, base, end, _)| (h, base, end))
}

/// The batches stored in one payload: header, the offsets it takes, and its bytes.
pub fn batches(payload: &[u8]) -> impl Iterator<Item = (BatchHeader, u64, u64, &[u8])> + '_ {
    let mut rest = payload;
    std::iter::from_fn(move || {
        let h = BatchHeader::parse(rest)?;
        let len = i32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]);
        let total = LOG_OVERHEAD + usize::try_from(len).ok()?;
        let bytes = rest.get(..total).unwrap_or(rest);
        rest = rest.get(total..).unwrap_or(&[]);
        let base = u64::try_from(h.base_offset).ok()?;
        Some((h, base, base + u64::from(h.offset_count()), bytes))
    })
}

/// Attributes of a transaction marker: transactional and control.
const MARKER_ATTRIBUTES: i16 = 0x10 | 0x20;

/// A transaction marker (a control batch of one record) for producer `pid` at `epoch`: its
/// key is (version 0, type: 0 abort, 1 commit), its value (version 0, coordinator epoch), as
/// Kafka writes them. Offsets are assigned when it is appended.
pub fn marker(pid: i64, epoch: i16, commit: bool, coordinator_epoch: i32, ts: i64) -> Bytes {
    let mut record = BytesMut::new();
    record.put_u8(0); // attributes
    put_varint(&mut record, 0); // timestamp delta
    put_varint(&mut record, 0); // offset delta
    put_varint(&mut record, 4);
    record.put_i16(0);
    record.put_i16(i16::from(commit));
    put_varint(&mut record, 6);
    record.put_i16(0);
    record.put_i32(coordinator_epoch);
    put_varint(&mut record, 0); // headers
    let mut b = BytesMut::with_capacity(HEADER_LEN + record.len() + 2);
    b.put_i64(0);
    b.put_i32(0); // length, below
    b.put_i32(-1);
    b.put_u8(2);
    b.put_u32(0); // crc, below
    b.put_i16(MARKER_ATTRIBUTES);
    b.put_i32(0);
    b.put_i64(ts);
    b.put_i64(ts);
    b.put_i64(pid);
    b.put_i16(epoch);
    b.put_i32(-1);
    b.put_i32(1);
    put_varint(&mut b, record.len() as i64);
    b.put_slice(&record);
    let len = (b.len() - LOG_OVERHEAD) as i32;
    (&mut b[8..12]).put_i32(len);
    let crc = crc32c::crc32c(&b[21..]);
    (&mut b[17..21]).put_u32(crc);
    b.freeze()
}

/// Whether a control batch is a commit marker (`Some(true)`), an abort marker
/// (`Some(false)`), or not a transaction marker.
pub fn marker_kind(batch: &[u8]) -> Option<bool> {
    let h = BatchHeader::parse(batch)?;
    if !h.is_control() || h.compression() != 0 {
        return None;
    }
    let mut b = batch.get(HEADER_LEN..)?;
    let _len = read_varint(&mut b)?;
    b = b.get(1..)?; // attributes
    read_varint(&mut b)?; // timestamp delta
    read_varint(&mut b)?; // offset delta
    if read_varint(&mut b)? < 4 {
        return None;
    }
    let mut key = b.get(..4)?;
    let _version = key.get_i16();
    match key.get_i16() {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}

/// Writes a zigzag varint.
fn put_varint(out: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        if z < 0x80 {
            out.put_u8(z as u8);
            return;
        }
        out.put_u8((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
}

/// The offset and timestamp of the first record of an uncompressed batch with a timestamp of
/// at least `ts`. For compressed batches (whose records are not read here) the batch's base
/// offset and timestamps stand in.
pub fn first_record_at_or_after(batch: &Bytes, ts: i64) -> Option<(i64, i64)> {
    let h = BatchHeader::parse(batch)?;
    if h.compression() != 0 {
        return (h.index_timestamp() >= ts).then_some((h.base_offset, h.index_timestamp()));
    }
    let mut b = &batch[HEADER_LEN..];
    for _ in 0..h.record_count {
        let len = read_varint(&mut b)?;
        if len < 0 || len as usize > b.len() {
            return None;
        }
        let mut rec = &b[..len as usize];
        b = &b[len as usize..];
        if rec.is_empty() {
            return None;
        }
        rec.advance(1); // attributes
        let ts_delta = read_varint(&mut rec)?;
        let off_delta = read_varint(&mut rec)?;
        let t = h.base_timestamp + ts_delta;
        if t >= ts {
            return Some((h.base_offset + off_delta, t));
        }
    }
    None
}

/// A zigzag varint (Kafka's varint and varlong).
fn read_varint(b: &mut &[u8]) -> Option<i64> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *b.first()?;
        *b = &b[1..];
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(((v >> 1) as i64) ^ -((v & 1) as i64));
        }
    }
    None
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An uncompressed batch of `n` records, timestamps `ts0 + i`.
    pub fn make_batch(n: i32, ts0: i64, pid: i64, epoch: i16, seq: i32) -> Bytes {
        let mut records = BytesMut::new();
        for i in 0..n {
            let mut r = BytesMut::new();
            r.put_u8(0);
            put_varint(&mut r, i64::from(i)); // timestamp delta
            put_varint(&mut r, i64::from(i)); // offset delta
            put_varint(&mut r, -1); // key
            put_varint(&mut r, 3);
            r.put_slice(b"abc");
            put_varint(&mut r, 0); // headers
            put_varint(&mut records, r.len() as i64);
            records.put_slice(&r);
        }
        let mut b = BytesMut::new();
        b.put_i64(0);
        b.put_i32((HEADER_LEN - 12 + records.len()) as i32);
        b.put_i32(-1);
        b.put_u8(2);
        b.put_u32(0);
        b.put_i16(0);
        b.put_i32(n - 1);
        b.put_i64(ts0);
        b.put_i64(ts0 + i64::from(n) - 1);
        b.put_i64(pid);
        b.put_i16(epoch);
        b.put_i32(seq);
        b.put_i32(n);
        b.put_slice(&records);
        let crc = crc32c::crc32c(&b[21..]);
        (&mut b[17..21]).put_u32(crc);
        b.freeze()
    }

    #[test]
    fn validates_and_assigns() {
        let one = make_batch(3, 1000, 7, 0, 5);
        let two = make_batch(2, 2000, 7, 0, 8);
        let both = Bytes::from([&one[..], &two[..]].concat());
        let batches = split_and_validate(&both, 1 << 20).unwrap();
        assert_eq!(batches.len(), 2);
        assert_eq!(batches[0].header.offset_count(), 3);
        assert_eq!(
            (
                batches[1].header.base_sequence,
                batches[1].header.last_sequence()
            ),
            (8, 9)
        );
        let a = assign(&batches[0].bytes, 42, 3);
        let h = BatchHeader::parse(&a).unwrap();
        assert_eq!(h.base_offset, 42);
        assert_eq!(&a[12..16], &3i32.to_be_bytes());
        // The CRC still holds: the assigned fields sit outside it.
        assert!(split_and_validate(&a, 1 << 20).is_ok());
        assert_eq!(first_record_at_or_after(&a, 1001), Some((43, 1001)));
        assert_eq!(first_record_at_or_after(&a, 5000), None);
    }

    #[test]
    fn rejects_bad_batches() {
        let good = make_batch(3, 1000, -1, -1, -1);
        let mut bad = BytesMut::from(&good[..]);
        bad[70] ^= 1;
        assert_eq!(
            split_and_validate(&bad.freeze(), 1 << 20).unwrap_err(),
            ResponseError::CorruptMessage
        );
        assert_eq!(
            split_and_validate(&good, 10).unwrap_err(),
            ResponseError::MessageTooLarge
        );
        let mut v1 = BytesMut::from(&good[..]);
        v1[16] = 1;
        assert_eq!(
            split_and_validate(&v1.freeze(), 1 << 20).unwrap_err(),
            ResponseError::UnsupportedForMessageFormat
        );
        assert_eq!(
            split_and_validate(&good.slice(0..good.len() - 1), 1 << 20).unwrap_err(),
            ResponseError::CorruptMessage
        );
        assert_eq!(
            split_and_validate(&Bytes::new(), 1 << 20).unwrap_err(),
            ResponseError::InvalidRecord
        );
    }

    #[test]
    fn record_count_must_match_the_offset_range() {
        // Kafka's LogValidator: "Inconsistent batch offset range ... and count of records".
        for (count, delta) in [(1, 4), (3, 1)] {
            let mut b = BytesMut::from(&make_batch(3, 1000, -1, -1, -1)[..]);
            (&mut b[23..27]).put_i32(delta);
            (&mut b[57..61]).put_i32(count);
            let crc = crc32c::crc32c(&b[21..]);
            (&mut b[17..21]).put_u32(crc);
            assert_eq!(
                split_and_validate(&b.freeze(), 1 << 20).unwrap_err(),
                ResponseError::InvalidRecord,
                "record count {count} with last offset delta {delta}"
            );
        }
    }

    #[test]
    fn a_requests_batches_become_one_payload_with_consecutive_offsets() {
        let one = make_batch(3, 1000, 7, 0, 5);
        let two = make_batch(2, 2000, 7, 0, 8);
        let both = Bytes::from([&one[..], &two[..]].concat());
        let batches = split_and_validate(&both, 1 << 20).unwrap();
        let payload = assign_all(&batches, 40, 2);
        let hs: Vec<_> = headers(&payload)
            .map(|(h, b, e)| (h.base_offset, b, e))
            .collect();
        assert_eq!(hs, vec![(40, 40, 43), (43, 43, 45)]);
        assert!(
            split_and_validate(&payload, 1 << 20).is_ok(),
            "CRCs still hold"
        );
        // ListOffsets by time looks into every batch of a stored payload.
        let found = split(&payload).find_map(|b| first_record_at_or_after(&b, 2001));
        assert_eq!(found, Some((44, 2001)));
    }

    #[test]
    fn markers_are_valid_control_batches_kafka_can_read() {
        for commit in [true, false] {
            let m = marker(7, 3, commit, 5, 1000);
            let h = BatchHeader::parse(&m).expect("header");
            assert!(h.is_control() && h.is_transactional());
            assert_eq!((h.producer_id, h.producer_epoch, h.record_count), (7, 3, 1));
            assert_eq!(h.base_sequence, -1);
            assert_eq!(marker_kind(&m), Some(commit));
            let crc = u32::from_be_bytes([m[17], m[18], m[19], m[20]]);
            assert_eq!(crc32c::crc32c(&m[21..]), crc);
            let len = i32::from_be_bytes([m[8], m[9], m[10], m[11]]) as usize;
            assert_eq!(len + LOG_OVERHEAD, m.len());
        }
        assert_eq!(marker_kind(&make_batch(1, 0, 7, 0, 0)), None);
    }

    #[test]
    fn sequences_wrap() {
        let h = BatchHeader {
            base_offset: 0,
            attributes: 0,
            last_offset_delta: 4,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: 1,
            producer_epoch: 0,
            base_sequence: i32::MAX - 1,
            record_count: 5,
        };
        assert_eq!(h.last_sequence(), 2);
    }
}
