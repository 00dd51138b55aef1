//! On-disk layout of the file WAL.
//!
//! ```text
//! [superblock slot 0: 4 KiB][superblock slot 1: 4 KiB][seal: 4 KiB][ring: capacity bytes]
//! ring   := group*             (a group may wrap from the ring's end to its start)
//! group  := group header, record*, zero padding up to a 4 KiB multiple
//! record := record header, payload
//! ```
//!
//! Positions in the ring are logical: they grow forever, and the byte at logical position `p`
//! lives at `RING_START + p % capacity`. A group header names its own logical position, so a
//! header left over from an earlier lap never passes for the next group.
//!
//! The superblock names the WAL (`wal_id`, random at creation): a broker registers that id in the
//! metadata store, and a peer that opens the file at the registered path checks it, so that it
//! never recovers another WAL that happens to sit at the same path (a local disk). The seal
//! block is written by a peer that recovers the WAL for a dead broker, never by the WAL's owner:
//! the owner reads it after every group write and stops acknowledging once it is there.

use bytes::{Buf, BufMut, Bytes};

use crate::WalRecord;

/// The unit of `O_DIRECT` I/O: offsets, lengths and buffer addresses are multiples of it.
pub const BLOCK: u64 = 4096;
pub const SUPERBLOCK_SLOTS: u64 = 2;
/// Offset of the seal block, after the superblock slots.
pub const SEAL_AT: u64 = BLOCK * SUPERBLOCK_SLOTS;
pub const RING_START: u64 = SEAL_AT + BLOCK;

/// Format 1 (before WAL ids and seals): read and rewritten in this format by `crate::v1`.
pub const SUPER_MAGIC_V1: u64 = 0x5745_4952_5741_4c31; // "WEIRWAL1"
const SUPER_MAGIC: u64 = 0x5745_4952_5741_4c32; // "WEIRWAL2"
/// The WAL format this build writes: the digit ending `SUPER_MAGIC`.
pub const FORMAT: u8 = (SUPER_MAGIC & 0xff) as u8 - b'0';
const SEAL_MAGIC: u64 = 0x5745_4952_5345_414c; // "WEIRSEAL"
const GROUP_MAGIC: u32 = 0x5747_5250; // "WGRP"
const VERSION: u8 = 1;

pub const GROUP_HEADER_LEN: usize = 40;
pub const RECORD_HEADER_LEN: usize = 48;
const SUPERBLOCK_LEN: usize = 64;
const SEAL_LEN: usize = 40;

pub fn align_up(n: u64) -> u64 {
    n.div_ceil(BLOCK) * BLOCK
}

/// The persistent state of a file WAL, written to alternating slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superblock {
    pub capacity: u64,
    /// Incremented on every write; the valid slot with the highest one wins.
    pub generation: u64,
    /// Logical position of the first group that is not trimmed.
    pub trim_pos: u64,
    /// Sequence number the first record at `trim_pos` has (or the next one, if none).
    pub trim_seq: u64,
    /// The WAL's identity, random at creation.
    pub wal_id: u128,
}

impl Superblock {
    pub fn encode(&self, out: &mut [u8]) {
        debug_assert!(out.len() >= SUPERBLOCK_LEN);
        let mut b = &mut out[..];
        b.put_u64_le(SUPER_MAGIC);
        b.put_u64_le(self.capacity);
        b.put_u64_le(self.generation);
        b.put_u64_le(self.trim_pos);
        b.put_u64_le(self.trim_seq);
        b.put_u128_le(self.wal_id);
        let crc = crc32c::crc32c(&out[..56]);
        (&mut out[56..]).put_u32_le(crc);
    }

    pub fn decode(buf: &[u8]) -> Option<Superblock> {
        if buf.len() < SUPERBLOCK_LEN || crc32c::crc32c(&buf[..56]) != (&buf[56..60]).get_u32_le() {
            return None;
        }
        let mut b = buf;
        if b.get_u64_le() != SUPER_MAGIC {
            return None;
        }
        Some(Superblock {
            capacity: b.get_u64_le(),
            generation: b.get_u64_le(),
            trim_pos: b.get_u64_le(),
            trim_seq: b.get_u64_le(),
            wal_id: b.get_u128_le(),
        })
    }

    /// Whether `buf` starts with a superblock of format 1.
    pub fn is_v1(buf: &[u8]) -> bool {
        buf.len() >= 8 && (&buf[..8]).get_u64_le() == SUPER_MAGIC_V1
    }

    /// The format of a later release's superblock at the start of `buf` ("WEIRWAL3" and up),
    /// if it is one: what this broker cannot read, named so that it says so.
    pub fn later_format(buf: &[u8]) -> Option<u8> {
        let magic = (buf.len() >= 8).then(|| (&buf[..8]).get_u64_le())?;
        let format = ((magic & 0xff) as u8).wrapping_sub(b'0');
        (magic >> 8 == SUPER_MAGIC >> 8 && format > FORMAT && format <= 9).then_some(format)
    }
}

/// Who sealed a WAL: the broker (node id and incarnation) that recovers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seal {
    pub wal_id: u128,
    pub node_id: i32,
    pub incarnation: u64,
}

impl Seal {
    pub fn encode(&self, out: &mut [u8]) {
        debug_assert!(out.len() >= SEAL_LEN);
        let mut b = &mut out[..];
        b.put_u64_le(SEAL_MAGIC);
        b.put_u128_le(self.wal_id);
        b.put_i32_le(self.node_id);
        b.put_u64_le(self.incarnation);
        let crc = crc32c::crc32c(&out[..36]);
        (&mut out[36..]).put_u32_le(crc);
    }

    /// The seal in `buf`, if a valid one is there (a blank block is no seal).
    pub fn decode(buf: &[u8]) -> Option<Seal> {
        if buf.len() < SEAL_LEN || crc32c::crc32c(&buf[..36]) != (&buf[36..40]).get_u32_le() {
            return None;
        }
        let mut b = buf;
        if b.get_u64_le() != SEAL_MAGIC {
            return None;
        }
        Some(Seal {
            wal_id: b.get_u128_le(),
            node_id: b.get_i32_le(),
            incarnation: b.get_u64_le(),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupHeader {
    pub pos: u64,
    pub first_seq: u64,
    /// Bytes of the group on disk, padding included: a multiple of [`BLOCK`].
    pub len: u32,
    /// Bytes of header and records, padding excluded.
    pub used: u32,
    pub record_count: u32,
}

impl GroupHeader {
    pub fn encode(&self, out: &mut [u8]) {
        let mut b = &mut out[..GROUP_HEADER_LEN];
        b.put_u32_le(GROUP_MAGIC);
        b.put_u8(VERSION);
        b.put_u8(0);
        b.put_u16_le(0);
        b.put_u64_le(self.pos);
        b.put_u64_le(self.first_seq);
        b.put_u32_le(self.len);
        b.put_u32_le(self.used);
        b.put_u32_le(self.record_count);
        let crc = crc32c::crc32c(&out[..36]);
        (&mut out[36..40]).put_u32_le(crc);
    }

    /// Decodes a header that claims to sit at logical position `expected_pos`.
    pub fn decode(buf: &[u8], expected_pos: u64) -> Option<GroupHeader> {
        if buf.len() < GROUP_HEADER_LEN || crc32c::crc32c(&buf[..36]) != (&buf[36..40]).get_u32_le()
        {
            return None;
        }
        let mut b = buf;
        if b.get_u32_le() != GROUP_MAGIC || b.get_u8() != VERSION {
            return None;
        }
        b.advance(3);
        let h = GroupHeader {
            pos: b.get_u64_le(),
            first_seq: b.get_u64_le(),
            len: b.get_u32_le(),
            used: b.get_u32_le(),
            record_count: b.get_u32_le(),
        };
        let sane = h.pos == expected_pos
            && u64::from(h.len) % BLOCK == 0
            && h.used as usize >= GROUP_HEADER_LEN
            && h.used <= h.len;
        sane.then_some(h)
    }
}

pub fn encoded_record_len(r: &WalRecord) -> usize {
    RECORD_HEADER_LEN + r.payload.len()
}

/// Appends `r` to `out`; `out` must have room for [`encoded_record_len`] bytes.
pub fn encode_record(r: &WalRecord, out: &mut [u8]) {
    let mut b = &mut out[..RECORD_HEADER_LEN];
    b.put_u64_le(r.stream_id);
    b.put_u64_le(r.epoch);
    b.put_u64_le(r.base_offset);
    b.put_i64_le(r.max_timestamp);
    b.put_u32_le(r.record_count);
    b.put_u32_le(r.payload.len() as u32);
    out[RECORD_HEADER_LEN..RECORD_HEADER_LEN + r.payload.len()].copy_from_slice(&r.payload);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&out[..40]), &r.payload);
    (&mut out[40..44]).put_u32_le(crc);
    (&mut out[44..48]).put_u32_le(0);
}

/// Decodes the records of one group body (the bytes after the group header, up to `used`).
/// Returns `None` if any record is torn or corrupt: a group counts whole or not at all.
pub fn decode_records(mut body: &[u8], count: u32) -> Option<Vec<WalRecord>> {
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        if body.len() < RECORD_HEADER_LEN {
            return None;
        }
        let header = &body[..RECORD_HEADER_LEN];
        let mut h = header;
        let stream_id = h.get_u64_le();
        let epoch = h.get_u64_le();
        let base_offset = h.get_u64_le();
        let max_timestamp = h.get_i64_le();
        let record_count = h.get_u32_le();
        let len = h.get_u32_le() as usize;
        let crc = h.get_u32_le();
        let end = RECORD_HEADER_LEN.checked_add(len)?;
        if body.len() < end {
            return None;
        }
        let payload = &body[RECORD_HEADER_LEN..end];
        if crc32c::crc32c_append(crc32c::crc32c(&header[..40]), payload) != crc {
            return None;
        }
        out.push(WalRecord {
            stream_id,
            epoch,
            base_offset,
            record_count,
            max_timestamp,
            payload: Bytes::copy_from_slice(payload),
        });
        body = &body[end..];
    }
    body.is_empty().then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(n: u8) -> WalRecord {
        WalRecord {
            stream_id: 7,
            epoch: 3,
            base_offset: 100,
            record_count: 5,
            max_timestamp: -1,
            payload: Bytes::from(vec![n; 33]),
        }
    }

    #[test]
    fn record_roundtrip_and_corruption() {
        let r = rec(9);
        let mut buf = vec![0u8; encoded_record_len(&r)];
        encode_record(&r, &mut buf);
        assert_eq!(decode_records(&buf, 1), Some(vec![r.clone()]));
        for i in [0, 20, 40, RECORD_HEADER_LEN + 3] {
            let mut bad = buf.clone();
            bad[i] ^= 1;
            assert_eq!(decode_records(&bad, 1), None, "flip at {i}");
        }
        assert_eq!(decode_records(&buf[..buf.len() - 1], 1), None);
    }

    #[test]
    fn group_header_checks_position() {
        let h = GroupHeader {
            pos: 8192,
            first_seq: 4,
            len: 4096,
            used: 100,
            record_count: 1,
        };
        let mut buf = [0u8; GROUP_HEADER_LEN];
        h.encode(&mut buf);
        assert_eq!(GroupHeader::decode(&buf, 8192), Some(h));
        assert_eq!(GroupHeader::decode(&buf, 8192 + 4096), None);
    }

    #[test]
    fn superblock_roundtrip() {
        let s = Superblock {
            capacity: 1 << 20,
            generation: 9,
            trim_pos: 4096,
            trim_seq: 17,
            wal_id: 0x1234_5678_9abc_def0_0fed_cba9_8765_4321,
        };
        let mut buf = [0u8; 64];
        s.encode(&mut buf);
        assert_eq!(Superblock::decode(&buf), Some(s));
        buf[10] ^= 0xff;
        assert_eq!(Superblock::decode(&buf), None);
    }

    #[test]
    fn seal_round_trip_and_a_blank_block_is_no_seal() {
        let seal = Seal {
            wal_id: 77,
            node_id: 3,
            incarnation: 9,
        };
        let mut buf = [0u8; 64];
        assert_eq!(Seal::decode(&buf), None);
        seal.encode(&mut buf);
        assert_eq!(Seal::decode(&buf), Some(seal));
        buf[9] ^= 1;
        assert_eq!(Seal::decode(&buf), None);
    }
}
