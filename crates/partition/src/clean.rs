//! The cleaner of compacted topics (`cleanup.policy=compact`): the latest record of each key is
//! kept, older ones go, as Kafka's log cleaner does it.
//!
//! A partition's log has a clean part (cleaned before, up to the *cleaner checkpoint*, kept in
//! the metadata store) and a dirty part. A clean reads the dirty part and notes each key's
//! latest offset (a 128-bit hash of the key), then rewrites every range from the start of the
//! log to the end of the dirty part through [`weir_storage::Engine::rewrite_stream`], keeping a
//! record unless a later record has its key. Offsets never change: a batch keeps its base
//! offset and last offset delta (so producer sequences stay whole), only records inside it go,
//! and a frame whose records all went stays as an empty frame, which readers skip.
//!
//! Kafka's rules, and where this differs:
//! - Only what is in object storage, below the last stable offset, below the last producer
//!   snapshot (so that rebuilding producer state never needs a removed batch), older than
//!   `min.compaction.lag.ms`, and never the partition's last range (Kafka never cleans the
//!   active segment) is cleaned; and only when the dirty part is at least
//!   `min.cleanable.dirty.ratio` of the cleanable log.
//! - Tombstones (a key with a null value) stay for `delete.retention.ms` after their record's
//!   timestamp, and at least until a clean after the one that first saw them (Kafka keeps them
//!   `delete.retention.ms` after the clean that first passed them).
//! - Records of aborted transactions are removed; commit markers older than
//!   `delete.retention.ms` in the clean part go; abort markers stay (a `read_committed` reader
//!   needs them to end an aborted transaction the aborted-transaction index names).
//! - Records without a key are kept (Kafka refuses them at produce time on compacted topics;
//!   Weir refuses the uncompressed ones).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hasher};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{Compressor, Decompressor, Gzip, Lz4, Snappy, Zstd};

use crate::batch::{self, BatchHeader, HEADER_LEN};

/// Keys remembered in one clean at most (about 40 bytes each): a larger dirty part is cleaned
/// in several rounds (Kafka: `log.cleaner.dedupe.buffer.size`).
pub const MAX_KEYS: usize = 2_000_000;

/// A topic's cleaning settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CleanerPolicy {
    pub delete_retention_ms: i64,
    pub min_compaction_lag_ms: i64,
    pub min_cleanable_dirty_ratio: f64,
}

impl Default for CleanerPolicy {
    fn default() -> Self {
        CleanerPolicy {
            delete_retention_ms: 86_400_000,
            min_compaction_lag_ms: 0,
            min_cleanable_dirty_ratio: 0.5,
        }
    }
}

/// One record inside a batch, as the cleaner needs it.
struct Rec<'a> {
    /// The record with its length prefix, as stored.
    raw: &'a [u8],
    offset_delta: i64,
    timestamp_delta: i64,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    tombstone: bool,
}

fn read_varint(b: &mut &[u8]) -> Option<i64> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = b.split_first()?;
        *b = rest;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(((v >> 1) as i64) ^ -((v & 1) as i64));
        }
    }
    None
}

fn take<'a>(b: &mut &'a [u8], n: i64) -> Option<Option<&'a [u8]>> {
    if n < 0 {
        return Some(None);
    }
    let n = usize::try_from(n).ok()?;
    if b.len() < n {
        return None;
    }
    let (head, rest) = b.split_at(n);
    *b = rest;
    Some(Some(head))
}

/// The records of an uncompressed records section.
fn parse_records(mut b: &[u8], count: i32) -> Option<Vec<Rec<'_>>> {
    let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0).min(1 << 16));
    for _ in 0..count {
        let whole = b;
        let len = read_varint(&mut b)?;
        let body = take(&mut b, len)??;
        let raw = &whole[..whole.len() - b.len()];
        let mut r = body;
        take(&mut r, 1)??; // attributes
        let timestamp_delta = read_varint(&mut r)?;
        let offset_delta = read_varint(&mut r)?;
        let key_len = read_varint(&mut r)?;
        let key = take(&mut r, key_len)?;
        let value_len = read_varint(&mut r)?;
        let value = take(&mut r, value_len)?;
        out.push(Rec {
            raw,
            offset_delta,
            timestamp_delta,
            key,
            value,
            tombstone: value_len < 0,
        });
    }
    Some(out)
}

/// A batch's records section, decompressed.
fn records_section(batch: &[u8], codec: i16) -> Option<Bytes> {
    let mut data = Bytes::copy_from_slice(batch.get(HEADER_LEN..)?);
    let all = |b: &mut Bytes| Ok(std::mem::take(b));
    let r = match codec {
        0 => Ok(data),
        1 => Gzip::decompress(&mut data, all),
        2 => Snappy::decompress(&mut data, all),
        3 => Lz4::decompress(&mut data, all),
        4 => Zstd::decompress(&mut data, all),
        _ => return None,
    };
    r.ok()
}

fn compress(raw: &[u8], codec: i16) -> Option<Bytes> {
    let mut out = BytesMut::new();
    let put = |b: &mut BytesMut| {
        b.put_slice(raw);
        Ok(())
    };
    let r = match codec {
        0 => return Some(Bytes::copy_from_slice(raw)),
        1 => Gzip::compress(&mut out, put),
        2 => Snappy::compress(&mut out, put),
        3 => Lz4::compress(&mut out, put),
        4 => Zstd::compress(&mut out, put),
        _ => return None,
    };
    r.ok().map(|()| out.freeze())
}

/// A 128-bit hash of a key (Kafka's cleaner keeps a 128-bit MD5): collisions, which would drop
/// a record whose key was never superseded, are out of reach.
fn key_hash(key: &[u8]) -> u128 {
    let mut a = DefaultHasher::new();
    a.write_u8(0);
    a.write(key);
    let mut b = DefaultHasher::new();
    b.write_u8(1);
    b.write(key);
    (u128::from(a.finish()) << 64) | u128::from(b.finish())
}

/// What the cleaner knows of the dirty part: each key's latest offset, and which producers'
/// records at which offsets belong to aborted transactions.
#[derive(Default)]
pub struct OffsetMap {
    latest: HashMap<u128, u64>,
    aborted: HashMap<i64, Vec<(u64, u64)>>,
}

impl OffsetMap {
    pub fn new(aborted: &[crate::txn::AbortedTxn]) -> OffsetMap {
        let mut m = OffsetMap::default();
        for a in aborted {
            m.aborted
                .entry(a.producer_id)
                .or_default()
                .push((a.first_offset, a.last_offset));
        }
        m
    }

    pub fn len(&self) -> usize {
        self.latest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }

    fn is_aborted(&self, h: &BatchHeader, offset: u64) -> bool {
        h.is_transactional()
            && self
                .aborted
                .get(&h.producer_id)
                .is_some_and(|v| v.iter().any(|&(f, l)| f <= offset && offset < l))
    }

    /// Notes the keys of a stored payload (one frame's batches).
    pub fn add(&mut self, payload: &[u8]) {
        for (h, base, _, bytes) in batch::batches(payload) {
            if h.is_control() || self.is_aborted(&h, base) {
                continue;
            }
            let Some(section) = records_section(bytes, h.compression()) else {
                continue;
            };
            let Some(records) = parse_records(&section, h.record_count) else {
                continue;
            };
            for r in records {
                if let Some(k) = r.key {
                    let offset = base.wrapping_add(r.offset_delta as u64);
                    self.latest.insert(key_hash(k), offset);
                }
            }
        }
    }
}

/// How a clean treats the records it rewrites.
pub struct Rules<'a> {
    pub map: &'a OffsetMap,
    /// The cleaner checkpoint before this clean: tombstones and markers below it were seen by
    /// an earlier clean.
    pub cleaned: u64,
    /// Tombstones and commit markers with timestamps before this may go.
    pub delete_before_ms: i64,
}

/// Counts of what a rewrite removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    pub records: u64,
    pub batches: u64,
}

impl Rules<'_> {
    /// A stored payload with what the rules remove taken out; `None` when nothing goes.
    pub fn rewrite(&self, payload: &Bytes, removed: &mut Removed) -> Option<Bytes> {
        let mut out = BytesMut::new();
        let mut changed = false;
        for (h, base, _, bytes) in batch::batches(payload) {
            match self.batch(&h, base, bytes, removed) {
                Kept::All => out.extend_from_slice(bytes),
                Kept::None => {
                    changed = true;
                    removed.batches += 1;
                }
                Kept::Some(b) => {
                    changed = true;
                    out.extend_from_slice(&b);
                }
            }
        }
        changed.then(|| out.freeze())
    }

    fn batch(&self, h: &BatchHeader, base: u64, bytes: &[u8], removed: &mut Removed) -> Kept {
        if h.is_control() {
            let old = base < self.cleaned && h.max_timestamp < self.delete_before_ms;
            return match batch::marker_kind(bytes) {
                Some(true) if old => Kept::None,
                _ => Kept::All,
            };
        }
        if self.map.is_aborted(h, base) {
            removed.records += u64::try_from(h.record_count).unwrap_or(0);
            return Kept::None;
        }
        let Some(section) = records_section(bytes, h.compression()) else {
            return Kept::All;
        };
        let Some(records) = parse_records(&section, h.record_count) else {
            return Kept::All;
        };
        let keep = |r: &Rec<'_>| {
            let Some(k) = r.key else { return true };
            let offset = base.wrapping_add(r.offset_delta as u64);
            if self
                .map
                .latest
                .get(&key_hash(k))
                .is_some_and(|&latest| latest > offset)
            {
                return false;
            }
            !(r.tombstone
                && offset < self.cleaned
                && h.base_timestamp.saturating_add(r.timestamp_delta) < self.delete_before_ms)
        };
        let kept: Vec<&Rec<'_>> = records.iter().filter(|r| keep(r)).collect();
        removed.records += (records.len() - kept.len()) as u64;
        if kept.len() == records.len() {
            return Kept::All;
        }
        if kept.is_empty() {
            return Kept::None;
        }
        let mut raw = BytesMut::new();
        for r in &kept {
            raw.extend_from_slice(r.raw);
        }
        let Some(section) = compress(&raw, h.compression()) else {
            return Kept::All;
        };
        Kept::Some(rebuild(bytes, &section, kept.len() as i32))
    }
}

enum Kept {
    All,
    None,
    Some(Bytes),
}

/// `batch` with `section` as its records (`count` of them): the same base offset, last offset
/// delta, timestamps, producer fields and attributes, a new length and CRC.
fn rebuild(batch: &[u8], section: &[u8], count: i32) -> Bytes {
    let mut b = BytesMut::with_capacity(HEADER_LEN + section.len());
    b.extend_from_slice(&batch[..HEADER_LEN]);
    b.extend_from_slice(section);
    let len = (b.len() - 12) as i32;
    (&mut b[8..12]).put_i32(len);
    (&mut b[57..61]).put_i32(count);
    let crc = crc32c::crc32c(&b[21..]);
    (&mut b[17..21]).put_u32(crc);
    b.freeze()
}

/// Whether every record of an uncompressed produced batch has a key (compacted topics refuse
/// keyless records, as Kafka does). Compressed batches are not opened here.
pub fn all_records_keyed(batch: &[u8]) -> bool {
    let Some(h) = BatchHeader::parse(batch) else {
        return true;
    };
    if h.compression() != 0 || h.is_control() {
        return true;
    }
    parse_records(&batch[HEADER_LEN..], h.record_count)
        .is_none_or(|rs| rs.iter().all(|r| r.key.is_some()))
}

/// The key and value of every record of a partition's produced records (one batch, as
/// producers send since produce v3, or several), decompressed, in order: what the schema check
/// of a topic reads. `None` when any batch cannot be read; control batches have no records to
/// check.
pub fn record_payloads(records: &Bytes) -> Option<Vec<(Option<Bytes>, Option<Bytes>)>> {
    let mut out = Vec::new();
    let mut rest = records.clone();
    while !rest.is_empty() {
        let h = BatchHeader::parse(&rest)?;
        let len = usize::try_from(i32::from_be_bytes(rest.get(8..12)?.try_into().ok()?)).ok()?;
        let one = rest.get(..12 + len).map(|b| rest.slice_ref(b))?;
        rest = rest.slice(one.len()..);
        if h.is_control() {
            continue;
        }
        let section = match h.compression() {
            // Uncompressed: slices of the request's own bytes, nothing copied.
            0 => one.slice(HEADER_LEN.min(one.len())..),
            codec => records_section(&one, codec)?,
        };
        let parsed = parse_records(&section, h.record_count)?;
        let owned = |s: Option<&[u8]>| s.map(|s| section.slice_ref(s));
        out.extend(parsed.iter().map(|r| (owned(r.key), owned(r.value))));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::records::{
        Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
        TimestampType,
    };

    use super::*;

    fn record(offset: i64, key: &str, value: Option<&str>, ts: i64) -> Record {
        Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset,
            // offset - sequence the same for all: the encoder keeps them in one batch.
            sequence: offset as i32,
            timestamp: ts,
            key: Some(Bytes::from(key.to_string())),
            value: value.map(|v| Bytes::from(v.to_string())),
            headers: Default::default(),
        }
    }

    fn encode(records: &[Record], compression: Compression) -> Bytes {
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            records,
            &RecordEncodeOptions {
                version: 2,
                compression,
            },
        )
        .expect("encode");
        buf.freeze()
    }

    fn decode(b: &Bytes) -> Vec<(i64, String, Option<String>)> {
        let mut b = b.clone();
        let mut out = Vec::new();
        while !b.is_empty() {
            let set = RecordBatchDecoder::decode(&mut b).expect("decode");
            out.extend(set.records.iter().map(|r| {
                (
                    r.offset,
                    String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned(),
                    r.value
                        .as_ref()
                        .map(|v| String::from_utf8_lossy(v).into_owned()),
                )
            }));
        }
        out
    }

    #[test]
    fn the_latest_record_of_each_key_survives_in_every_codec() {
        for compression in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let old = encode(
                &[
                    record(10, "a", Some("1"), 1000),
                    record(11, "b", Some("1"), 1001),
                    record(12, "a", Some("2"), 1002),
                    record(13, "c", None, 1003),
                ],
                compression,
            );
            let newer = encode(&[record(14, "b", Some("2"), 1004)], compression);
            let mut map = OffsetMap::new(&[]);
            map.add(&old);
            map.add(&newer);
            assert_eq!(map.len(), 3);
            let rules = Rules {
                map: &map,
                cleaned: 0,
                delete_before_ms: 0,
            };
            let mut removed = Removed::default();
            let out = rules.rewrite(&old, &mut removed).expect("changed");
            assert_eq!(removed.records, 2, "{compression:?}");
            // Offsets stay; the tombstone stays (not yet seen by an earlier clean).
            assert_eq!(
                decode(&out),
                vec![(12, "a".into(), Some("2".into())), (13, "c".into(), None)],
                "{compression:?}"
            );
            let h = BatchHeader::parse(&out).expect("header");
            assert_eq!(
                (h.base_offset, h.last_offset_delta, h.record_count),
                (10, 3, 2)
            );
            assert_eq!(
                h.compression(),
                BatchHeader::parse(&old).expect("h").compression()
            );
            // The newest batch is untouched.
            assert!(rules.rewrite(&newer, &mut removed).is_none());
            // A tombstone past delete.retention.ms in the clean part goes.
            let rules = Rules {
                map: &map,
                cleaned: 100,
                delete_before_ms: 5000,
            };
            let out = rules
                .rewrite(&old, &mut Removed::default())
                .expect("changed");
            assert_eq!(decode(&out), vec![(12, "a".into(), Some("2".into()))]);
        }
    }

    #[test]
    fn a_batch_whose_records_all_go_goes() {
        let old = encode(&[record(0, "a", Some("1"), 1)], Compression::None);
        let newer = encode(&[record(1, "a", Some("2"), 2)], Compression::None);
        let payload = Bytes::from([&old[..], &newer[..]].concat());
        let mut map = OffsetMap::new(&[]);
        map.add(&payload);
        let mut removed = Removed::default();
        let out = Rules {
            map: &map,
            cleaned: 0,
            delete_before_ms: 0,
        }
        .rewrite(&payload, &mut removed)
        .expect("changed");
        assert_eq!(out, newer);
        assert_eq!(
            removed,
            Removed {
                records: 1,
                batches: 1
            }
        );
    }

    #[test]
    fn aborted_transactions_go_and_abort_markers_stay() {
        let mut r = record(5, "k", Some("v"), 1);
        r.transactional = true;
        r.producer_id = 9;
        r.producer_epoch = 0;
        r.sequence = 0;
        let aborted = encode(&[r], Compression::None);
        let abort = batch::marker(9, 0, false, 0, 1);
        let commit = batch::marker(9, 0, true, 0, 1);
        let mut commit_at_7 = BytesMut::from(&commit[..]);
        (&mut commit_at_7[0..8]).put_i64(7);
        let mut abort_at_6 = BytesMut::from(&abort[..]);
        (&mut abort_at_6[0..8]).put_i64(6);
        let payload = Bytes::from([&aborted[..], &abort_at_6[..], &commit_at_7[..]].concat());
        let map = OffsetMap::new(&[crate::txn::AbortedTxn {
            producer_id: 9,
            first_offset: 5,
            last_offset: 6,
        }]);
        let out = Rules {
            map: &map,
            cleaned: 100,
            delete_before_ms: 1000,
        }
        .rewrite(&payload, &mut Removed::default())
        .expect("changed");
        let kinds: Vec<_> = batch::batches(&out)
            .map(|(h, base, _, b)| (base, h.is_control(), batch::marker_kind(b)))
            .collect();
        assert_eq!(kinds, vec![(6, true, Some(false))]);
    }

    #[test]
    fn keyless_records_are_found() {
        let mut r = record(0, "a", Some("1"), 1);
        assert!(all_records_keyed(&encode(&[r.clone()], Compression::None)));
        r.key = None;
        assert!(!all_records_keyed(&encode(&[r], Compression::None)));
    }

    #[test]
    fn record_payloads_are_read_in_every_codec() {
        let mut keyless = record(1, "x", None, 2);
        keyless.key = None;
        let records = [record(0, "a", Some("1"), 1), keyless];
        for compression in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let got = record_payloads(&encode(&records, compression)).expect("readable");
            let got: Vec<_> = got
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_deref().map(<[u8]>::to_vec),
                        v.as_deref().map(<[u8]>::to_vec),
                    )
                })
                .collect();
            assert_eq!(
                got,
                vec![(Some(b"a".to_vec()), Some(b"1".to_vec())), (None, None)],
                "{compression:?}"
            );
        }
        assert!(record_payloads(&Bytes::from_static(&[0u8; 10])).is_none());
        // Several batches in one produce: every record of each.
        let mut two = encode(&records[..1], Compression::None).to_vec();
        two.extend_from_slice(&encode(&records[1..], Compression::Gzip));
        assert_eq!(
            record_payloads(&Bytes::from(two.clone())).map(|r| r.len()),
            Some(2)
        );
        // A batch cut short is not read.
        two.pop();
        assert!(record_payloads(&Bytes::from(two)).is_none());
    }
}
