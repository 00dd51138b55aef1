//! The object format.
//!
//! ```text
//! object := block*, index, footer
//! block  := frame*                  (one stream's batches, in offset order, about block_bytes)
//! frame  := base_offset u64, record_count u32, len u32, max_timestamp i64, payload[len]
//! index  := entry*                  (sorted by stream, then offset)
//! entry  := stream u64, start u64, end u64, max_timestamp i64, position u64,
//!           record_count u32, size u32, crc32c-of-block u32
//! footer := index_position u64, index_len u32, entry_count u32, index_crc u32, version u32,
//!           footer_crc u32, reserved u32, magic u64                              (40 bytes)
//! ```
//!
//! All integers little-endian. One ranged GET of the object's tail finds footer and index; a
//! block is then one ranged GET, checked against the CRC its index entry carries. Payloads are
//! the bytes the caller appended, returned as they are.

use bytes::{Buf, BufMut, Bytes, BytesMut};

pub const FRAME_HEADER_LEN: usize = 24;
pub const ENTRY_LEN: usize = 52;
pub const FOOTER_LEN: usize = 40;
const MAGIC: u64 = 0x5745_4952_4f42_4a31; // "WEIROBJ1"
const VERSION: u32 = 1;

/// One batch as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub base_offset: u64,
    pub record_count: u32,
    pub max_timestamp: i64,
    pub payload: Bytes,
}

impl Frame {
    pub fn end_offset(&self) -> u64 {
        self.base_offset + u64::from(self.record_count)
    }

    fn encoded_len(&self) -> usize {
        FRAME_HEADER_LEN + self.payload.len()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub stream_id: u64,
    pub start_offset: u64,
    pub end_offset: u64,
    pub max_timestamp: i64,
    pub position: u64,
    pub record_count: u32,
    pub size: u32,
    pub crc: u32,
}

/// Where one stream's data landed in an object being built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub stream_id: u64,
    pub start_offset: u64,
    pub end_offset: u64,
    pub position: u64,
    pub size: u64,
    pub max_timestamp: i64,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FormatError(pub String);

/// Builds an object from streams added in (stream, offset) order, without copying payloads.
pub struct ObjectBuilder {
    block_bytes: usize,
    parts: Vec<Bytes>,
    len: u64,
    entries: Vec<IndexEntry>,
    placements: Vec<Placement>,
}

impl ObjectBuilder {
    pub fn new(block_bytes: usize) -> Self {
        ObjectBuilder {
            block_bytes: block_bytes.max(1),
            parts: Vec::new(),
            len: 0,
            entries: Vec::new(),
            placements: Vec::new(),
        }
    }

    /// Adds one stream's contiguous frames.
    pub fn add_stream(&mut self, stream_id: u64, frames: &[Frame]) {
        debug_assert!(
            self.placements
                .last()
                .is_none_or(|p| p.stream_id < stream_id),
            "streams must be added in order, once each"
        );
        self.extend_stream(stream_id, frames);
    }

    /// Adds frames of a stream that go on from where its last frames added ended (or starts the
    /// stream): a large object is built, and its parts taken ([`ObjectBuilder::take_parts`]), a
    /// piece at a time.
    pub fn extend_stream(&mut self, stream_id: u64, frames: &[Frame]) {
        let Some(first) = frames.first() else { return };
        debug_assert!(
            self.placements
                .last()
                .is_none_or(|p| p.stream_id < stream_id
                    || (p.stream_id == stream_id && p.end_offset == first.base_offset)),
            "streams must be added in order, and a stream's frames contiguously"
        );
        debug_assert!(
            frames
                .windows(2)
                .all(|w| w[0].end_offset() == w[1].base_offset),
            "frames of a stream must be contiguous"
        );
        let position = self.len;
        let mut max_ts = i64::MIN;
        let mut i = 0;
        while i < frames.len() {
            // One block: at least one frame, then more while it stays under block_bytes.
            let block_pos = self.len;
            let mut size = 0usize;
            let mut crc = 0u32;
            let mut records = 0u32;
            let mut block_max_ts = i64::MIN;
            let start = frames[i].base_offset;
            while i < frames.len()
                && (size == 0 || size + frames[i].encoded_len() <= self.block_bytes)
            {
                let f = &frames[i];
                let mut h = BytesMut::with_capacity(FRAME_HEADER_LEN);
                h.put_u64_le(f.base_offset);
                h.put_u32_le(f.record_count);
                h.put_u32_le(f.payload.len() as u32);
                h.put_i64_le(f.max_timestamp);
                crc = crc32c::crc32c_append(crc, &h);
                crc = crc32c::crc32c_append(crc, &f.payload);
                self.parts.push(h.freeze());
                self.parts.push(f.payload.clone());
                size += f.encoded_len();
                records += f.record_count;
                block_max_ts = block_max_ts.max(f.max_timestamp);
                i += 1;
            }
            self.len += size as u64;
            max_ts = max_ts.max(block_max_ts);
            self.entries.push(IndexEntry {
                stream_id,
                start_offset: start,
                end_offset: frames[i - 1].end_offset(),
                max_timestamp: block_max_ts,
                position: block_pos,
                record_count: records,
                size: size as u32,
                crc,
            });
        }
        let end_offset = frames[frames.len() - 1].end_offset();
        match self.placements.last_mut() {
            Some(p) if p.stream_id == stream_id => {
                p.end_offset = end_offset;
                p.size = self.len - p.position;
                p.max_timestamp = p.max_timestamp.max(max_ts);
            }
            _ => self.placements.push(Placement {
                stream_id,
                start_offset: first.base_offset,
                end_offset,
                position,
                size: self.len - position,
                max_timestamp: max_ts,
            }),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.placements.is_empty()
    }

    /// The object's bytes added since the last call (whole blocks, to be written in order
    /// before whatever follows), and their length; [`ObjectBuilder::finish`] returns the rest.
    pub fn take_parts(&mut self) -> (Vec<Bytes>, u64) {
        let parts = std::mem::take(&mut self.parts);
        let len = parts.iter().map(|b| b.len() as u64).sum();
        (parts, len)
    }

    /// The object's parts (to be written in order), its total size and where each stream went.
    pub fn finish(mut self) -> (Vec<Bytes>, u64, Vec<Placement>) {
        let index_position = self.len;
        let mut index = BytesMut::with_capacity(self.entries.len() * ENTRY_LEN + FOOTER_LEN);
        for e in &self.entries {
            index.put_u64_le(e.stream_id);
            index.put_u64_le(e.start_offset);
            index.put_u64_le(e.end_offset);
            index.put_i64_le(e.max_timestamp);
            index.put_u64_le(e.position);
            index.put_u32_le(e.record_count);
            index.put_u32_le(e.size);
            index.put_u32_le(e.crc);
        }
        let index_len = index.len();
        let index_crc = crc32c::crc32c(&index);
        let footer_start = index.len();
        index.put_u64_le(index_position);
        index.put_u32_le(index_len as u32);
        index.put_u32_le(self.entries.len() as u32);
        index.put_u32_le(index_crc);
        index.put_u32_le(VERSION);
        let footer_crc = crc32c::crc32c(&index[footer_start..]);
        index.put_u32_le(footer_crc);
        index.put_u32_le(0);
        index.put_u64_le(MAGIC);
        self.len += index.len() as u64;
        self.parts.push(index.freeze());
        (self.parts, self.len, self.placements)
    }
}

/// Where the index lies, read from the footer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    pub index_position: u64,
    pub index_len: u32,
    pub entry_count: u32,
    pub index_crc: u32,
}

pub fn decode_footer(buf: &[u8]) -> Result<Footer, FormatError> {
    if buf.len() < FOOTER_LEN {
        return Err(FormatError(format!(
            "object shorter than a footer ({} bytes)",
            buf.len()
        )));
    }
    let f = &buf[buf.len() - FOOTER_LEN..];
    let mut b = f;
    let index_position = b.get_u64_le();
    let index_len = b.get_u32_le();
    let entry_count = b.get_u32_le();
    let index_crc = b.get_u32_le();
    let version = b.get_u32_le();
    let footer_crc = b.get_u32_le();
    b.advance(4);
    let magic = b.get_u64_le();
    if magic != MAGIC {
        return Err(FormatError("bad magic number: not a Weir object".into()));
    }
    if crc32c::crc32c(&f[..24]) != footer_crc {
        return Err(FormatError("footer checksum mismatch".into()));
    }
    if version > VERSION {
        return Err(FormatError(format!(
            "object format {version}, newer than this broker's {VERSION}: a later Weir release \
             wrote it; upgrade this broker (a release reads a new object format before any \
             release writes it, so a rolling upgrade between neighbouring releases never meets \
             this)"
        )));
    }
    if version != VERSION {
        return Err(FormatError(format!("unsupported object format {version}")));
    }
    if index_len as usize != entry_count as usize * ENTRY_LEN {
        return Err(FormatError(
            "index length does not match its entry count".into(),
        ));
    }
    Ok(Footer {
        index_position,
        index_len,
        entry_count,
        index_crc,
    })
}

pub fn decode_index(footer: &Footer, index: &[u8]) -> Result<Vec<IndexEntry>, FormatError> {
    if index.len() != footer.index_len as usize || crc32c::crc32c(index) != footer.index_crc {
        return Err(FormatError("index checksum mismatch".into()));
    }
    let mut b = index;
    let mut out = Vec::with_capacity(footer.entry_count as usize);
    for _ in 0..footer.entry_count {
        out.push(IndexEntry {
            stream_id: b.get_u64_le(),
            start_offset: b.get_u64_le(),
            end_offset: b.get_u64_le(),
            max_timestamp: b.get_i64_le(),
            position: b.get_u64_le(),
            record_count: b.get_u32_le(),
            size: b.get_u32_le(),
            crc: b.get_u32_le(),
        });
    }
    Ok(out)
}

/// Splits a block into frames after checking it against its index entry.
pub fn decode_block(entry: &IndexEntry, block: &Bytes) -> Result<Vec<Frame>, FormatError> {
    if block.len() != entry.size as usize || crc32c::crc32c(block) != entry.crc {
        return Err(FormatError(format!(
            "block at {} of stream {} fails its checksum",
            entry.position, entry.stream_id
        )));
    }
    let mut frames = Vec::new();
    let mut at = 0usize;
    while at < block.len() {
        if block.len() - at < FRAME_HEADER_LEN {
            return Err(FormatError("truncated frame header".into()));
        }
        let mut h = &block[at..at + FRAME_HEADER_LEN];
        let base_offset = h.get_u64_le();
        let record_count = h.get_u32_le();
        let len = h.get_u32_le() as usize;
        let max_timestamp = h.get_i64_le();
        let start = at + FRAME_HEADER_LEN;
        if block.len() - start < len {
            return Err(FormatError("truncated frame payload".into()));
        }
        frames.push(Frame {
            base_offset,
            record_count,
            max_timestamp,
            payload: block.slice(start..start + len),
        });
        at = start + len;
    }
    Ok(frames)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(base: u64, n: usize, size: usize) -> Vec<Frame> {
        (0..n)
            .map(|i| Frame {
                base_offset: base + 2 * i as u64,
                record_count: 2,
                max_timestamp: 1000 + i as i64,
                payload: Bytes::from(vec![i as u8; size]),
            })
            .collect()
    }

    #[test]
    fn roundtrip_through_blocks_index_and_footer() {
        let mut b = ObjectBuilder::new(1000);
        let a = frames(0, 10, 300);
        let c = frames(50, 3, 5000);
        b.add_stream(1, &a);
        b.add_stream(9, &c);
        let (parts, len, placements) = b.finish();
        let obj: Bytes = parts.concat().into();
        assert_eq!(obj.len() as u64, len);
        assert_eq!(placements.len(), 2);
        assert_eq!(
            (placements[0].start_offset, placements[0].end_offset),
            (0, 20)
        );
        assert_eq!(
            (placements[1].start_offset, placements[1].end_offset),
            (50, 56)
        );
        assert_eq!(placements[1].max_timestamp, 1002);

        let footer = decode_footer(&obj).unwrap();
        let ip = footer.index_position as usize;
        let index = decode_index(&footer, &obj[ip..ip + footer.index_len as usize]).unwrap();
        // 10 frames of 324 bytes in blocks of at most 1000: 3 per block -> 4 blocks; big frames
        // get a block each.
        assert_eq!(index.iter().filter(|e| e.stream_id == 1).count(), 4);
        assert_eq!(index.iter().filter(|e| e.stream_id == 9).count(), 3);
        let mut got = Vec::new();
        for e in &index {
            let block = obj.slice(e.position as usize..(e.position + u64::from(e.size)) as usize);
            got.extend(decode_block(e, &block).unwrap());
        }
        let want: Vec<Frame> = a.into_iter().chain(c).collect();
        assert_eq!(got, want);
        // Stream 1's blocks lie inside its placement.
        let p = placements[0];
        assert!(index
            .iter()
            .filter(|e| e.stream_id == 1)
            .all(|e| e.position >= p.position
                && e.position + u64::from(e.size) <= p.position + p.size));
    }

    /// An object of a later format (its footer's version above this build's, checksum right)
    /// is refused as such, not read as garbage.
    #[test]
    fn an_object_of_a_later_format_is_refused_as_such() {
        let mut b = ObjectBuilder::new(1000);
        b.add_stream(1, &frames(0, 2, 100));
        let mut obj = b.finish().0.concat();
        let footer = obj.len() - FOOTER_LEN;
        obj[footer + 20..footer + 24].copy_from_slice(&(VERSION + 1).to_le_bytes());
        let crc = crc32c::crc32c(&obj[footer..footer + 24]);
        obj[footer + 24..footer + 28].copy_from_slice(&crc.to_le_bytes());
        let err = decode_footer(&obj).expect_err("refused").0;
        let want = format!(
            "object format {}, newer than this broker's {VERSION}",
            VERSION + 1
        );
        assert!(err.contains(&want), "{err}");
    }

    #[test]
    fn a_stream_built_in_pieces_reads_back_as_one_placement() {
        let all = frames(0, 12, 300);
        let mut whole = ObjectBuilder::new(1000);
        whole.add_stream(4, &all);
        let (_, _, one) = whole.finish();

        let mut b = ObjectBuilder::new(1000);
        let mut obj = Vec::new();
        for piece in all.chunks(5) {
            b.extend_stream(4, piece);
            let (parts, len) = b.take_parts();
            assert_eq!(len, parts.iter().map(|p| p.len() as u64).sum::<u64>());
            obj.extend(parts.concat());
        }
        let (rest, len, placements) = b.finish();
        obj.extend(rest.concat());
        let obj = Bytes::from(obj);
        assert_eq!(obj.len() as u64, len);
        assert_eq!(placements.len(), 1);
        let p = placements[0];
        assert_eq!(
            (p.start_offset, p.end_offset),
            (one[0].start_offset, one[0].end_offset)
        );
        assert_eq!((p.position, p.max_timestamp), (0, 1011));
        let footer = decode_footer(&obj).unwrap();
        assert_eq!(p.size, footer.index_position);
        let ip = footer.index_position as usize;
        let index = decode_index(&footer, &obj[ip..ip + footer.index_len as usize]).unwrap();
        let mut got = Vec::new();
        for e in &index {
            let block = obj.slice(e.position as usize..(e.position + u64::from(e.size)) as usize);
            got.extend(decode_block(e, &block).unwrap());
        }
        assert_eq!(got, all);
    }

    #[test]
    fn corruption_is_detected() {
        let mut b = ObjectBuilder::new(1 << 20);
        b.add_stream(1, &frames(0, 2, 100));
        let (parts, _, _) = b.finish();
        let obj: Vec<u8> = parts.concat();
        let footer = decode_footer(&obj).unwrap();
        let ip = footer.index_position as usize;
        let index = decode_index(&footer, &obj[ip..ip + footer.index_len as usize]).unwrap();
        let mut bad = obj.clone();
        bad[30] ^= 1;
        let e = index[0];
        let block = Bytes::from(
            bad[e.position as usize..(e.position + u64::from(e.size)) as usize].to_vec(),
        );
        assert!(decode_block(&e, &block).is_err());
        let mut bad = obj.clone();
        let n = bad.len();
        bad[n - 30] ^= 1;
        assert!(decode_footer(&bad).is_err());
        assert!(decode_footer(b"short").is_err());
    }
}
