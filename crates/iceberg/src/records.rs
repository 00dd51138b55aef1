//! A partition's record batches, as a `read_committed` fetch returns them, into rows: the
//! records of aborted transactions and control batches left out, as a `read_committed`
//! consumer leaves them out, so that a table never has what a consumer would never see.

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;

use crate::key_value::Row;

/// What a read gave: the rows, and the offset after the last batch read (control batches and
/// aborted records included: the table has them, in the sense that it will never need them).
#[derive(Debug, Default)]
pub struct Decoded {
    pub rows: Vec<Row>,
    pub next_offset: Option<i64>,
}

/// The fields of a batch header the decoding needs (Kafka's v2 record batch).
struct Header {
    base_offset: i64,
    length: usize,
    last_offset_delta: i32,
    producer_id: i64,
    transactional: bool,
    control: bool,
}

fn header(b: &[u8]) -> Option<Header> {
    let i64_at = |at: usize| Some(i64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?));
    let i32_at = |at: usize| Some(i32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?));
    let attributes = i16::from_be_bytes(b.get(21..23)?.try_into().ok()?);
    Some(Header {
        base_offset: i64_at(0)?,
        length: 12 + usize::try_from(i32_at(8)?).ok()?,
        last_offset_delta: i32_at(23)?,
        producer_id: i64_at(43)?,
        transactional: attributes & 0x10 != 0,
        control: attributes & 0x20 != 0,
    })
}

/// Whether a control batch is an abort marker (its one record's key: version, then type 0).
fn is_abort_marker(batch: &Bytes) -> bool {
    let mut b = batch.clone();
    RecordBatchDecoder::decode(&mut b)
        .ok()
        .and_then(|set| set.records.into_iter().next())
        .and_then(|r| r.key)
        .is_some_and(|k| k.get(2..4) == Some(&[0, 0][..]))
}

/// Decodes `records` (whole batches in offset order) of `partition`; `aborted` is the fetch's
/// list of aborted transactions (producer id, first offset).
pub fn decode(partition: i32, records: &Bytes, aborted: &[(i64, i64)]) -> Result<Decoded, String> {
    let mut pending: Vec<(i64, i64)> = aborted.to_vec();
    pending.sort_by_key(|a| std::cmp::Reverse(a.1));
    let mut active: Vec<i64> = Vec::new();
    let mut out = Decoded::default();
    let mut rest = records.clone();
    while !rest.is_empty() {
        let h = header(&rest).ok_or("a truncated record batch header")?;
        if h.length > rest.len() {
            return Err(format!(
                "a record batch at offset {} of {} bytes, {} left",
                h.base_offset,
                h.length,
                rest.len()
            ));
        }
        let batch = rest.slice(..h.length);
        rest = rest.slice(h.length..);
        let last = h.base_offset + i64::from(h.last_offset_delta);
        // Transactions aborted from an offset at or below this batch's end are open here.
        while pending.last().is_some_and(|a| a.1 <= last) {
            if let Some((pid, _)) = pending.pop() {
                active.push(pid);
            }
        }
        out.next_offset = Some(last + 1);
        if h.control {
            if is_abort_marker(&batch) {
                active.retain(|p| *p != h.producer_id);
            }
            continue;
        }
        if h.transactional && active.contains(&h.producer_id) {
            continue;
        }
        let mut b = batch;
        let set = RecordBatchDecoder::decode(&mut b)
            .map_err(|e| format!("the record batch at offset {}: {e}", h.base_offset))?;
        out.rows.extend(set.records.into_iter().map(|r| {
            Row {
                partition,
                offset: r.offset,
                timestamp_ms: r.timestamp,
                key: r.key,
                value: r.value,
                headers: r
                    .headers
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            }
        }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    fn record(offset: i64, pid: i64, transactional: bool, control: bool, key: &[u8]) -> Record {
        Record {
            transactional,
            control,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: pid,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset,
            sequence: offset as i32,
            timestamp: 1_000 + offset,
            key: Some(Bytes::copy_from_slice(key)),
            value: Some(Bytes::from(format!("v{offset}"))),
            headers: Default::default(),
        }
    }

    fn batch(records: &[Record], compression: Compression) -> Bytes {
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            records.iter(),
            &RecordEncodeOptions {
                version: 2,
                compression,
            },
        )
        .expect("encode");
        buf.freeze()
    }

    #[test]
    fn aborted_transactions_and_markers_are_left_out() {
        let abort = [0u8, 0, 0, 0];
        let commit = [0u8, 0, 0, 1];
        let mut all = BytesMut::new();
        for b in [
            batch(
                &[
                    record(0, -1, false, false, b"a"),
                    record(1, -1, false, false, b"b"),
                ],
                Compression::Lz4,
            ),
            batch(&[record(2, 7, true, false, b"aborted")], Compression::None),
            batch(
                &[record(3, 8, true, false, b"committed")],
                Compression::Zstd,
            ),
            batch(&[record(4, 7, true, true, &abort)], Compression::None),
            batch(&[record(5, 8, true, true, &commit)], Compression::None),
            // Producer 7 again, in a later transaction that committed.
            batch(&[record(6, 7, true, false, b"later")], Compression::None),
        ] {
            all.extend_from_slice(&b);
        }
        let d = decode(2, &all.freeze(), &[(7, 2)]).expect("decode");
        let offsets: Vec<i64> = d.rows.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![0, 1, 3, 6]);
        assert_eq!(d.next_offset, Some(7));
        assert!(d.rows.iter().all(|r| r.partition == 2));
        assert_eq!(d.rows[2].timestamp_ms, 1_003);
        assert_eq!(d.rows[2].value.as_deref(), Some(&b"v3"[..]));
    }

    #[test]
    fn a_truncated_batch_is_an_error() {
        let b = batch(&[record(0, -1, false, false, b"a")], Compression::None);
        assert!(decode(0, &b.slice(..b.len() - 3), &[]).is_err());
        assert!(decode(0, &b.slice(..20), &[]).is_err());
        assert_eq!(
            decode(0, &Bytes::new(), &[]).expect("empty").next_offset,
            None
        );
    }
}
