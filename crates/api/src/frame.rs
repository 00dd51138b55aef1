//! Encoded responses as a list of byte chunks, so that records go out without being copied.
//!
//! A Fetch response is mostly record batches that the broker already holds as [`Bytes`]: slices
//! of the log cache, of a cached object block or of a GET's body. Encoding the response into one
//! buffer copied every byte of them (and the buffer, grown by doubling, copied them again and
//! faulted in fresh pages for each response): in a profile of a catch-up read, the encoder's
//! copies and the kernel zeroing the pages it wrote to were about a third of the broker's CPU.
//! [`SplicingBuf`] is the encoder's buffer instead: small writes (lengths, ids, error codes) are
//! copied into the current chunk as before; a write of one of the response's own record
//! batches, recognised by its address and length, closes the chunk and keeps a reference to
//! the batch as the next chunk. [`ResponseFrame`] is the result, a [`Buf`] whose chunks the
//! network layer hands to one vectored write.

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::buf::UninitSlice;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::buf::ByteBufMut;

/// Record batches shorter than this are copied: a chunk of its own costs an iovec entry and a
/// reference count, which for a few hundred bytes is more than the copy.
pub(crate) const SPLICE_MIN: usize = 4096;

/// An encoded response (length prefix included), as the chunks to write in order.
#[derive(Debug, Default)]
pub struct ResponseFrame {
    parts: VecDeque<Bytes>,
    remaining: usize,
}

impl ResponseFrame {
    /// Bytes left to write.
    pub fn len(&self) -> usize {
        self.remaining
    }

    pub fn is_empty(&self) -> bool {
        self.remaining == 0
    }

    /// Chunks left to write.
    pub fn chunk_count(&self) -> usize {
        self.parts.len()
    }

    /// The whole frame in one buffer (a copy): for tests and callers that need it contiguous.
    pub fn contiguous(&self) -> BytesMut {
        let mut out = BytesMut::with_capacity(self.remaining);
        for p in &self.parts {
            out.extend_from_slice(p);
        }
        out
    }

    fn push(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.remaining += b.len();
            self.parts.push_back(b);
        }
    }
}

impl From<BytesMut> for ResponseFrame {
    fn from(b: BytesMut) -> Self {
        let mut f = ResponseFrame::default();
        f.push(b.freeze());
        f
    }
}

impl Buf for ResponseFrame {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.parts.front().map_or(&[], |b| b.as_ref())
    }

    fn advance(&mut self, mut cnt: usize) {
        assert!(
            cnt <= self.remaining,
            "advance past the end of a response frame"
        );
        self.remaining -= cnt;
        while cnt > 0 {
            let Some(front) = self.parts.front_mut() else {
                break;
            };
            if cnt < front.len() {
                front.advance(cnt);
                return;
            }
            cnt -= front.len();
            self.parts.pop_front();
        }
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for (slot, part) in dst.iter_mut().zip(self.parts.iter()) {
            *slot = IoSlice::new(part);
            n += 1;
        }
        n
    }
}

/// The encoder's buffer: copies small writes, keeps the expected record batches by reference.
///
/// `expect` lists, in the order the encoder will write them, the batches to keep by reference
/// (each at least [`SPLICE_MIN`] bytes). A write is taken by reference only if it is exactly
/// the next expected batch (same address, same length); anything else is copied, so a batch
/// written out of the expected order costs a copy, never a wrong byte.
pub(crate) struct SplicingBuf {
    frame: ResponseFrame,
    cur: BytesMut,
    /// Bytes already moved from `cur` into `frame`.
    base: usize,
    expect: VecDeque<Bytes>,
    spliced: usize,
}

impl SplicingBuf {
    pub(crate) fn new(capacity: usize, expect: VecDeque<Bytes>) -> Self {
        debug_assert!(expect.iter().all(|b| b.len() >= SPLICE_MIN));
        SplicingBuf {
            frame: ResponseFrame::default(),
            cur: BytesMut::with_capacity(capacity),
            base: 0,
            expect,
            spliced: 0,
        }
    }

    /// Bytes taken by reference so far.
    #[cfg(test)]
    pub(crate) fn spliced(&self) -> usize {
        self.spliced
    }

    /// The frame: a length prefix, then everything written.
    pub(crate) fn finish(mut self) -> ResponseFrame {
        let total = self.base + self.cur.len();
        let cur = self.cur.split().freeze();
        self.frame.push(cur);
        debug_assert_eq!(self.frame.remaining, total);
        let prefix = Bytes::copy_from_slice(&(total as u32).to_be_bytes());
        self.frame.remaining += prefix.len();
        self.frame.parts.push_front(prefix);
        self.frame
    }

    fn flatten(&mut self) {
        // Rare: a seek or range reaching into chunks already closed. Bring everything back into
        // one buffer (no encoder of responses does this today; records' CRC gaps are written
        // while batches are built, not here).
        let mut all = self.frame.contiguous();
        all.extend_from_slice(&self.cur);
        self.frame = ResponseFrame::default();
        self.cur = all;
        self.base = 0;
    }
}

// SAFETY: every method delegates to `cur`, a `BytesMut`, whose implementation upholds the
// trait's contract; `put_slice` only adds whole chunks beside it.
unsafe impl BufMut for SplicingBuf {
    fn remaining_mut(&self) -> usize {
        self.cur.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller's contract is the one of `BytesMut::advance_mut`.
        unsafe { self.cur.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.cur.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        let expected = src.len() >= SPLICE_MIN
            && self
                .expect
                .front()
                .is_some_and(|next| next.as_ptr() == src.as_ptr() && next.len() == src.len());
        if expected {
            if let Some(batch) = self.expect.pop_front() {
                let chunk = self.cur.split().freeze();
                self.base += chunk.len() + batch.len();
                self.spliced += batch.len();
                self.frame.push(chunk);
                self.frame.push(batch);
                return;
            }
        }
        self.cur.extend_from_slice(src);
    }
}

impl ByteBufMut for SplicingBuf {
    fn offset(&self) -> usize {
        self.base + self.cur.len()
    }

    fn seek(&mut self, offset: usize) {
        if offset < self.base {
            self.flatten();
        }
        self.cur.resize(offset - self.base, 0);
    }

    fn range(&mut self, r: std::ops::Range<usize>) -> &mut [u8] {
        if r.start < self.base {
            self.flatten();
        }
        let base = self.base;
        &mut self.cur[r.start - base..r.end - base]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(mut f: ResponseFrame) -> Vec<u8> {
        let mut out = Vec::new();
        while f.has_remaining() {
            let c = f.chunk().to_vec();
            out.extend_from_slice(&c);
            f.advance(c.len());
        }
        out
    }

    fn framed(body: &[u8]) -> Vec<u8> {
        let mut out = (body.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn expected_batches_are_kept_by_reference_and_the_bytes_are_the_same() {
        let big = Bytes::from(vec![7u8; 10_000]);
        let other = Bytes::from(vec![9u8; 5_000]);
        let mut buf = SplicingBuf::new(64, VecDeque::from([big.clone(), other.clone()]));
        let mut plain = BytesMut::new();
        for b in [&mut buf as &mut dyn BufMut, &mut plain as &mut dyn BufMut] {
            b.put_i32(42);
            b.put_slice(&big);
            b.put_i16(3);
            // Not the next expected batch's address: copied.
            b.put_slice(&vec![9u8; 5_000]);
            b.put_slice(&other);
            b.put_u8(1);
        }
        assert_eq!(buf.spliced(), 15_000);
        let frame = buf.finish();
        let want = framed(&plain);
        assert_eq!(frame.len(), want.len());
        assert_eq!(frame.contiguous().to_vec(), want);
        // The big batches are chunks of their own, pointing at the original memory.
        assert!(frame.parts.iter().any(|p| p.as_ptr() == big.as_ptr()));
        assert!(frame.parts.iter().any(|p| p.as_ptr() == other.as_ptr()));
        assert_eq!(drain(frame), want);
    }

    #[test]
    fn small_batches_and_unexpected_order_are_copied() {
        let a = Bytes::from(vec![1u8; 8_000]);
        let b = Bytes::from(vec![2u8; 8_000]);
        let mut buf = SplicingBuf::new(16, VecDeque::from([a.clone(), b.clone()]));
        buf.put_slice(&b); // b before a: copied
        buf.put_slice(&a); // now a is next: kept
        buf.put_slice(&[5u8; 100]);
        assert_eq!(buf.spliced(), 8_000);
        let frame = buf.finish();
        let mut body = b.to_vec();
        body.extend_from_slice(&a);
        body.extend_from_slice(&[5u8; 100]);
        assert_eq!(drain(frame), framed(&body));
    }

    #[test]
    fn a_seek_back_into_closed_chunks_flattens_and_stays_correct() {
        let a = Bytes::from(vec![3u8; 6_000]);
        let mut buf = SplicingBuf::new(16, VecDeque::from([a.clone()]));
        buf.put_slice(&[0, 0]);
        buf.put_slice(&a);
        assert_eq!(buf.offset(), 2 + 6_000);
        buf.range(0..2).copy_from_slice(&[8, 8]);
        let out = drain(buf.finish());
        let mut body = vec![8u8, 8];
        body.extend_from_slice(&a);
        assert_eq!(out, framed(&body));
    }

    #[test]
    fn a_fetch_response_keeps_its_records_by_reference_and_decodes_the_same() {
        use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
        use kafka_protocol::messages::{
            ApiKey, FetchResponse, RequestHeader, ResponseHeader, ResponseKind, TopicName,
        };
        use kafka_protocol::protocol::{Decodable, StrBytes};
        let big = Bytes::from(vec![5u8; 20_000]);
        let small = Bytes::from_static(b"a small batch");
        for version in [4i16, 12, 13, 17] {
            let mut topic = FetchableTopicResponse::default().with_partitions(vec![
                PartitionData::default()
                    .with_partition_index(0)
                    .with_high_watermark(9)
                    .with_records(Some(big.clone())),
                PartitionData::default()
                    .with_partition_index(1)
                    .with_records(Some(small.clone())),
            ]);
            if version < 13 {
                topic.topic = TopicName(StrBytes::from_static_str("t"));
            } else {
                topic.topic_id = uuid::Uuid::from_u128(7);
            }
            let response = FetchResponse::default().with_responses(vec![topic]);
            let header = RequestHeader::default()
                .with_request_api_key(ApiKey::Fetch as i16)
                .with_request_api_version(version)
                .with_correlation_id(11);
            let frame = crate::encode_response(&header, &ResponseKind::Fetch(response.clone()))
                .expect("encodes");
            assert!(
                frame.parts.iter().any(|p| p.as_ptr() == big.as_ptr()),
                "v{version}: the big batch is sent from where it is"
            );
            let mut bytes = frame.contiguous().freeze();
            let len = bytes.get_u32() as usize;
            assert_eq!(len, bytes.len());
            let rh =
                ResponseHeader::decode(&mut bytes, ApiKey::Fetch.response_header_version(version))
                    .expect("header");
            assert_eq!(rh.correlation_id, 11);
            let decoded = FetchResponse::decode(&mut bytes, version).expect("body");
            assert_eq!(decoded, response, "v{version}");
        }
    }

    #[test]
    fn advancing_across_chunks_and_vectored_chunks() {
        let mut f = ResponseFrame::default();
        f.push(Bytes::from_static(b"abc"));
        f.push(Bytes::from_static(b"defgh"));
        f.push(Bytes::from_static(b"ij"));
        let mut slices = [IoSlice::new(&[]); 8];
        assert_eq!(f.chunks_vectored(&mut slices), 3);
        f.advance(4);
        assert_eq!(f.len(), 6);
        assert_eq!(f.chunk(), b"efgh");
        f.advance(4);
        assert_eq!(f.chunk(), b"ij");
        f.advance(2);
        assert!(f.is_empty());
        assert_eq!(f.chunk_count(), 0);
    }
}
