//! WALs of format 1 (Weir before WAL ids and seals): recognised when a broker opens one,
//! read, and rewritten in the current format before the broker uses it, so an upgrade needs no
//! hand step and loses nothing the old WAL held.
//!
//! Format 1 differs from the current one in two places only: its superblock (magic `WEIRWAL1`,
//! no WAL id, 48 bytes) and where its ring starts (after the two superblock slots: it had no seal
//! block). Groups and records are laid out alike, so [`GroupHeader`] and [`decode_records`]
//! read them. What the old WAL holds after its trim point is written, in order, into a new file
//! of the current format beside it, made durable, and renamed over it: a crash before the
//! rename leaves the old WAL as it was (the next start migrates it again), a crash after leaves
//! the new one, holding the same records. The broker then recovers them as from any WAL:
//! records already in object storage are skipped, the others uploaded.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::Buf;

use crate::format::{
    align_up, decode_records, encode_record, encoded_record_len, GroupHeader, Superblock, BLOCK,
    GROUP_HEADER_LEN, RING_START, SEAL_AT, SUPERBLOCK_SLOTS, SUPER_MAGIC_V1,
};
use crate::{WalError, WalRecord};

/// Where format 1's ring starts: right after the superblock slots.
const RING_START_V1: u64 = BLOCK * SUPERBLOCK_SLOTS;
const SUPERBLOCK_LEN_V1: usize = 48;
/// The most bytes of records the rewrite puts in one group.
const GROUP_BYTES: usize = 1 << 20;

/// Format 1's superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SuperblockV1 {
    capacity: u64,
    generation: u64,
    trim_pos: u64,
    trim_seq: u64,
}

impl SuperblockV1 {
    fn decode(buf: &[u8]) -> Option<SuperblockV1> {
        if buf.len() < SUPERBLOCK_LEN_V1
            || crc32c::crc32c(&buf[..40]) != (&buf[40..44]).get_u32_le()
        {
            return None;
        }
        let mut b = buf;
        if b.get_u64_le() != SUPER_MAGIC_V1 {
            return None;
        }
        Some(SuperblockV1 {
            capacity: b.get_u64_le(),
            generation: b.get_u64_le(),
            trim_pos: b.get_u64_le(),
            trim_seq: b.get_u64_le(),
        })
    }
}

fn io_err<'a>(path: &'a Path, context: &'static str) -> impl Fn(std::io::Error) -> WalError + 'a {
    move |source| WalError::Io {
        path: path.display().to_string(),
        context,
        source: std::sync::Arc::new(source),
    }
}

/// The newest valid format-1 superblock of `file`, if it is a format-1 WAL.
fn superblock(file: &File, path: &Path) -> Result<Option<SuperblockV1>, WalError> {
    let mut slots = vec![0u8; (BLOCK * SUPERBLOCK_SLOTS) as usize];
    match file.read_exact_at(&mut slots, 0) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(io_err(path, "reading the superblock")(e)),
    }
    Ok((0..SUPERBLOCK_SLOTS as usize)
        .filter_map(|i| SuperblockV1::decode(&slots[i * BLOCK as usize..]))
        .max_by_key(|s| s.generation))
}

/// Whether the file at `path` is a WAL of format 1.
pub(crate) fn is_v1(path: &Path) -> Result<bool, WalError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_err(path, "opening")(e)),
    };
    Ok(superblock(&file, path)?.is_some())
}

/// Reads `buf.len()` bytes of format 1's ring from logical position `pos`, wrapping at its end.
fn read_ring(file: &File, capacity: u64, pos: u64, buf: &mut [u8]) -> std::io::Result<()> {
    crate::file::read_ring_from(file, RING_START_V1, capacity, pos, buf)
}

/// The records of a format-1 WAL after its trim point, in order, up to the first group that is
/// not whole (a torn last write, never acknowledged).
fn read(file: &File, path: &Path, sb: SuperblockV1) -> Result<Vec<WalRecord>, WalError> {
    let mut records = Vec::new();
    let mut pos = sb.trim_pos;
    let mut head = vec![0u8; BLOCK as usize];
    let read_err = io_err(path, "reading a format-1 WAL");
    while pos + BLOCK <= sb.trim_pos + sb.capacity {
        read_ring(file, sb.capacity, pos, &mut head).map_err(&read_err)?;
        let Some(h) = GroupHeader::decode(&head, pos) else {
            break;
        };
        if pos + u64::from(h.len) > sb.trim_pos + sb.capacity {
            break;
        }
        let mut group = vec![0u8; h.len as usize];
        read_ring(file, sb.capacity, pos, &mut group).map_err(&read_err)?;
        let Some(decoded) =
            decode_records(&group[GROUP_HEADER_LEN..h.used as usize], h.record_count)
        else {
            break;
        };
        records.extend(decoded);
        pos += u64::from(h.len);
    }
    Ok(records)
}

/// Writes `records` as the groups of a new WAL of the current format at `path`, with room for
/// `capacity` bytes, and makes it durable.
fn write_current(path: &Path, capacity: u64, records: &[WalRecord]) -> Result<(), WalError> {
    let err = |what| io_err(path, what);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(err("creating the migrated WAL"))?;
    file.set_len(RING_START + capacity)
        .map_err(err("sizing the migrated WAL"))?;
    let mut pos = 0u64;
    let mut seq = 0u64;
    let mut rest = records;
    while !rest.is_empty() {
        let mut n = 0;
        let mut used = GROUP_HEADER_LEN;
        while n < rest.len() && (n == 0 || used + encoded_record_len(&rest[n]) <= GROUP_BYTES) {
            used += encoded_record_len(&rest[n]);
            n += 1;
        }
        let len = align_up(used as u64);
        if pos + len > capacity {
            return Err(WalError::Invalid {
                path: path.display().to_string(),
                reason: format!(
                    "the format-1 WAL holds more than the capacity of {capacity} bytes"
                ),
            });
        }
        let mut group = vec![0u8; len as usize];
        let mut at = GROUP_HEADER_LEN;
        for r in &rest[..n] {
            encode_record(r, &mut group[at..]);
            at += encoded_record_len(r);
        }
        GroupHeader {
            pos,
            first_seq: seq,
            len: len as u32,
            used: used as u32,
            record_count: n as u32,
        }
        .encode(&mut group);
        file.write_all_at(&group, RING_START + pos)
            .map_err(err("writing the migrated WAL"))?;
        pos += len;
        seq += n as u64;
        rest = &rest[n..];
    }
    // After the last group the ring is blank (a new file reads as zeros): recovery stops there.
    file.write_all_at(&vec![0u8; BLOCK as usize], SEAL_AT)
        .map_err(err("clearing the seal block"))?;
    let mut block = vec![0u8; BLOCK as usize];
    Superblock {
        capacity,
        generation: 1,
        trim_pos: 0,
        trim_seq: 0,
        wal_id: crate::file::new_wal_id(),
    }
    .encode(&mut block);
    file.write_all_at(&block, 0)
        .map_err(err("writing the migrated WAL's superblock"))?;
    file.sync_all().map_err(err("syncing the migrated WAL"))
}

/// Rewrites the format-1 WAL at `path` in the current format (see the module's comment), with
/// at least `capacity` bytes of ring. Returns how many records it holds.
pub(crate) fn migrate(path: &Path, capacity: u64) -> Result<usize, WalError> {
    let file = File::open(path).map_err(io_err(path, "opening"))?;
    let Some(sb) = superblock(&file, path)? else {
        return Err(WalError::Invalid {
            path: path.display().to_string(),
            reason: "not a WAL of format 1".into(),
        });
    };
    let records = read(&file, path, sb)?;
    let capacity = (capacity.max(sb.capacity) / BLOCK) * BLOCK;
    let mut beside = path.as_os_str().to_owned();
    beside.push(".migrating");
    let beside = PathBuf::from(beside);
    write_current(&beside, capacity, &records)?;
    std::fs::rename(&beside, path).map_err(io_err(path, "replacing the format-1 WAL"))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err(path, "syncing its directory"))?;
    }
    Ok(records.len())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::file::{FileWal, FileWalConfig};
    use crate::Wal;
    use bytes::{BufMut, Bytes};

    /// A record of stream `stream` at `offset`.
    pub(crate) fn record(stream: u64, offset: u64) -> WalRecord {
        WalRecord {
            stream_id: stream,
            epoch: 1,
            base_offset: offset,
            record_count: 1,
            max_timestamp: offset as i64,
            payload: Bytes::from(format!(
                "{stream}-{offset}-{}",
                "x".repeat(offset as usize % 50)
            )),
        }
    }

    /// A WAL of format 1 as Weir wrote it before WAL ids and seals: `groups` from the start of
    /// the ring, trimmed before group `trimmed`.
    pub(crate) fn write_v1(path: &Path, capacity: u64, groups: &[Vec<WalRecord>], trimmed: usize) {
        let file = File::create(path).unwrap();
        file.set_len(RING_START_V1 + capacity).unwrap();
        let (mut pos, mut seq) = (0u64, 0u64);
        let (mut trim_pos, mut trim_seq) = (0, 0);
        for (i, g) in groups.iter().enumerate() {
            if i == trimmed {
                (trim_pos, trim_seq) = (pos, seq);
            }
            let used = GROUP_HEADER_LEN + g.iter().map(encoded_record_len).sum::<usize>();
            let len = align_up(used as u64);
            let mut buf = vec![0u8; len as usize];
            let mut at = GROUP_HEADER_LEN;
            for r in g {
                encode_record(r, &mut buf[at..]);
                at += encoded_record_len(r);
            }
            let h = GroupHeader {
                pos,
                first_seq: seq,
                len: len as u32,
                used: used as u32,
                record_count: g.len() as u32,
            };
            h.encode(&mut buf);
            file.write_all_at(&buf, RING_START_V1 + pos).unwrap();
            pos += len;
            seq += g.len() as u64;
        }
        if trimmed >= groups.len() {
            (trim_pos, trim_seq) = (pos, seq);
        }
        let mut sb = vec![0u8; BLOCK as usize];
        {
            let mut b = &mut sb[..];
            b.put_u64_le(SUPER_MAGIC_V1);
            b.put_u64_le(capacity);
            b.put_u64_le(3);
            b.put_u64_le(trim_pos);
            b.put_u64_le(trim_seq);
        }
        let crc = crc32c::crc32c(&sb[..40]);
        (&mut sb[40..44]).put_u32_le(crc);
        file.write_all_at(&sb, 0).unwrap();
        file.sync_all().unwrap();
    }

    fn open(path: &Path, capacity: u64) -> FileWal {
        FileWal::open(FileWalConfig {
            capacity,
            ..FileWalConfig::new(path.to_path_buf())
        })
        .expect("open")
    }

    #[test]
    fn a_format_1_wal_is_rewritten_and_its_records_recovered() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal");
        let groups = vec![
            vec![record(1, 0), record(2, 0)],
            vec![record(1, 1)],
            vec![record(1, 2), record(2, 1), record(3, 0)],
        ];
        // The first group was uploaded and trimmed before the upgrade.
        write_v1(&path, 1 << 20, &groups, 1);
        let wal = open(&path, 1 << 20);
        let got: Vec<WalRecord> = wal.take_recovered().into_iter().map(|r| r.record).collect();
        let want: Vec<WalRecord> = groups[1..].concat();
        assert_eq!(got, want);
        assert!(!is_v1(&path).unwrap(), "still format 1");
        assert!(!dir.path().join("wal.migrating").exists());
        drop(wal);
        // Opened again (a crash before the upload): the same records, from the current format.
        let wal = open(&path, 1 << 20);
        let again: Vec<WalRecord> = wal.take_recovered().into_iter().map(|r| r.record).collect();
        assert_eq!(again, want);
    }

    /// A broker reads its WAL's identity before it opens it (`weir serve`): that read must come
    /// after the rewrite. With the identity read first, the real 08a96a9 build's WAL stopped the
    /// upgraded broker ("a WAL of format 1 ... whose superblock is damaged").
    #[test]
    fn a_format_1_wal_has_an_identity_once_upgraded_as_a_broker_starts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal");
        let groups = vec![vec![record(1, 0)], vec![record(1, 1), record(2, 0)]];
        write_v1(&path, 1 << 20, &groups, 0);
        assert!(
            FileWal::identity(&path).is_err(),
            "read in the current format only"
        );
        let config = FileWalConfig {
            capacity: 1 << 20,
            ..FileWalConfig::new(path.clone())
        };
        FileWal::upgrade_format(&config).expect("upgrade");
        let id = FileWal::identity(&path).expect("identity").expect("a WAL");
        let wal = open(&path, 1 << 20);
        assert_eq!(wal.wal_id(), id.wal_id);
        let got: Vec<WalRecord> = wal.take_recovered().into_iter().map(|r| r.record).collect();
        assert_eq!(got, groups.concat());
    }

    #[test]
    fn an_empty_format_1_wal_is_reformatted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal");
        write_v1(&path, 1 << 20, &[vec![record(1, 0)], vec![record(1, 1)]], 2);
        let wal = open(&path, 1 << 20);
        assert!(wal.take_recovered().is_empty());
        assert!(!is_v1(&path).unwrap());
    }

    #[test]
    fn a_torn_last_group_of_a_format_1_wal_is_not_recovered() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal");
        let groups = vec![vec![record(1, 0)], vec![record(1, 1)]];
        write_v1(&path, 1 << 20, &groups, 0);
        // Tear the second group's record (its header stays): a write never acknowledged.
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(
            &[0xAB],
            RING_START_V1 + BLOCK + GROUP_HEADER_LEN as u64 + 50,
        )
        .unwrap();
        let wal = open(&path, 1 << 20);
        let got: Vec<WalRecord> = wal.take_recovered().into_iter().map(|r| r.record).collect();
        assert_eq!(got, groups[0]);
    }
}
