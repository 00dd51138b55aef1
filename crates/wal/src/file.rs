//! The `file` WAL: a preallocated file or block device used as a ring.
//!
//! One writer thread owns the device. Appends queue up while it writes; each turn it takes
//! everything queued (up to `max_write_bytes`), lays it out as one group in an aligned buffer,
//! writes it with one `pwrite` (two when the group wraps around the ring's end) and makes it
//! durable with one `fdatasync` (or through `O_DSYNC`). Then it runs the completions in order.
//!
//! Space accounting is conservative: an append is admitted only if the ring has room for it even
//! if it ends up alone in a group with a full block of padding, so the writer never finds the
//! ring full. Trimming writes the superblock (alternating between two slots, so a torn write
//! leaves the other one intact) before the freed space can be reused.
//!
//! A new file is formatted (written over with zeros) before first use. Preallocated space is
//! "unwritten" to the filesystem: the first write to each extent converts it, and that metadata
//! change makes the writer's `fdatasync` wait for a journal commit, which on ext4
//! (`data=ordered`) also waits for every other dirty file on the disk, such as objects being
//! written. A formatted ring takes plain overwrites, and a sync is a device flush.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::aligned::AlignedBuf;
use crate::format::{
    align_up, decode_records, encode_record, encoded_record_len, GroupHeader, Superblock, BLOCK,
    GROUP_HEADER_LEN, RING_START, SUPERBLOCK_SLOTS,
};
use crate::{Completion, RecoveredRecord, Seq, Wal, WalError, WalMeters, WalRecord, WalUsage};

/// How the writer makes a write durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// `pwrite`, then `fdatasync`.
    #[default]
    Fdatasync,
    /// The file is opened with `O_DSYNC`: each `pwrite` returns once durable.
    Dsync,
}

#[derive(Debug, Clone)]
pub struct FileWalConfig {
    /// A regular file (created and preallocated if missing) or a block device.
    pub path: PathBuf,
    /// Bytes of the ring. Ignored for a block device (its size counts) and for an existing file
    /// (the capacity it was created with counts, since the layout depends on it).
    pub capacity: u64,
    /// Write with `O_DIRECT`; falls back to buffered I/O (still synced) where the filesystem
    /// refuses it, e.g. tmpfs.
    pub direct_io: bool,
    /// Upper bound of one group write. A single larger record still gets written, alone.
    pub max_write_bytes: u64,
    pub sync: SyncMode,
    /// Write zeros over a newly created file before use (see the module doc).
    pub format: bool,
    /// Injected faults: a test and chaos switch, off by default.
    pub faults: WalFaults,
}

/// Faults injected into the writer's group writes, at the real `pwrite` and `fdatasync` call
/// sites, so that the WAL's own failure handling runs as it would for a failing disk: a failed
/// write fails its records and everything queued behind them, and the next group goes where the
/// failed one began. Superblock writes (trims) are not affected.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WalFaults {
    /// Share of group writes whose `pwrite` fails (0.0 to 1.0), after writing part of the group,
    /// as a failing device may.
    pub write_error_rate: f64,
    /// Share of group writes whose `pwrite` succeeds and whose `fdatasync` then fails.
    pub sync_error_rate: f64,
    /// Added before every group write.
    pub latency: Duration,
    /// Seed of the draws: the same seed fails the same group writes (counted from the open).
    pub seed: u64,
}

impl WalFaults {
    pub fn is_on(&self) -> bool {
        self.write_error_rate > 0.0 || self.sync_error_rate > 0.0 || !self.latency.is_zero()
    }

    /// Checks that the rates are shares (0.0 to 1.0).
    pub fn validate(&self) -> Result<(), String> {
        for (name, rate) in [
            ("write_error_rate", self.write_error_rate),
            ("sync_error_rate", self.sync_error_rate),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(format!(
                    "WAL fault {name} = {rate}: must be between 0.0 and 1.0"
                ));
            }
        }
        Ok(())
    }
}

/// How one group write is made to fail; see [`FileWal::inject`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalFault {
    /// The `pwrite` fails after writing part of the group.
    Write,
    /// The `pwrite` succeeds, the `fdatasync` fails.
    Sync,
}

/// The fault switch's state: the rates, their generator, and faults scheduled by tests.
struct Faults {
    config: WalFaults,
    rng: u64,
    /// Group writes attempted since the open.
    writes: u64,
    /// Faults for given group writes (by their number since the open).
    scheduled: std::collections::BTreeMap<u64, WalFault>,
}

impl Faults {
    fn new(config: WalFaults) -> Faults {
        Faults {
            // xorshift must not start at zero.
            rng: config.seed ^ 0x2545_F491_4F6C_DD1D,
            config,
            writes: 0,
            scheduled: Default::default(),
        }
    }

    fn draw(&mut self) -> f64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        (x >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The fault (if any) and latency of the next group write.
    fn next_write(&mut self) -> (Option<WalFault>, Duration) {
        let n = self.writes;
        self.writes += 1;
        let latency = self.config.latency;
        if let Some(f) = self.scheduled.remove(&n) {
            return (Some(f), latency);
        }
        let (write, sync) = (self.config.write_error_rate, self.config.sync_error_rate);
        if write <= 0.0 && sync <= 0.0 {
            return (None, latency);
        }
        // One draw per write whatever the rates, so that a seed fails the same writes.
        let d = self.draw();
        let fault = if d < write {
            Some(WalFault::Write)
        } else if d < write + sync {
            Some(WalFault::Sync)
        } else {
            None
        };
        (fault, latency)
    }
}

impl FileWalConfig {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        FileWalConfig {
            path: path.into(),
            capacity: 2 << 30,
            direct_io: true,
            max_write_bytes: 4 << 20,
            sync: SyncMode::Fdatasync,
            format: true,
            faults: WalFaults::default(),
        }
    }
}

/// A written (or being written) group that is not yet trimmed.
#[derive(Debug, Clone, Copy)]
struct GroupSpan {
    pos: u64,
    first_seq: Seq,
    last_seq: Seq,
    durable: bool,
}

struct Pending {
    seq: Seq,
    record: WalRecord,
    done: Completion,
    estimate: u64,
}

struct State {
    queue: VecDeque<Pending>,
    /// Upper bound of the ring bytes the queued records will take.
    queued_estimate: u64,
    next_seq: Seq,
    /// Logical position of the next group.
    next_pos: u64,
    /// Everything before this logical position is free; the superblock says so durably.
    trim_pos: u64,
    groups: VecDeque<GroupSpan>,
    resetting: bool,
    closed: bool,
    recovered: Vec<RecoveredRecord>,
}

struct Inner {
    file: File,
    path: String,
    capacity: u64,
    max_write: u64,
    sync: SyncMode,
    state: Mutex<State>,
    work: Condvar,
    space: tokio::sync::Notify,
    /// Serialises superblock writes; holds the last generation written.
    superblock: Mutex<u64>,
    meters: WalMeters,
    faults: Mutex<Faults>,
}

pub struct FileWal {
    inner: Arc<Inner>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

fn io_err<'a>(
    path: &'a str,
    context: &'static str,
) -> impl FnOnce(std::io::Error) -> WalError + 'a {
    move |e| WalError::Io {
        path: path.to_string(),
        context,
        source: Arc::new(e),
    }
}

fn open_file(path: &Path, direct: bool, sync: SyncMode) -> std::io::Result<(File, bool)> {
    let mut flags = 0;
    if sync == SyncMode::Dsync {
        flags |= libc::O_DSYNC;
    }
    let open = |flags: i32| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(flags)
            .open(path)
    };
    if direct {
        match open(flags | libc::O_DIRECT) {
            Ok(f) => return Ok((f, true)),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::warn!(path = %path.display(), "O_DIRECT not supported here; using buffered writes with sync");
            }
            Err(e) => return Err(e),
        }
    }
    open(flags).map(|f| (f, false))
}

impl FileWal {
    /// Opens (or creates) the WAL and recovers what it holds; see [`Wal::take_recovered`].
    pub fn open(config: FileWalConfig) -> Result<FileWal, WalError> {
        let path_str = config.path.display().to_string();
        let p = path_str.as_str();
        if let Some(dir) = config.path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir).map_err(io_err(p, "creating its directory"))?;
            }
        }
        let (file, direct) =
            open_file(&config.path, config.direct_io, config.sync).map_err(io_err(p, "opening"))?;
        let meta = file.metadata().map_err(io_err(p, "reading metadata"))?;
        let is_device = meta.file_type().is_block_device();
        let file_len = if is_device {
            use std::io::{Seek, SeekFrom};
            (&file)
                .seek(SeekFrom::End(0))
                .map_err(io_err(p, "sizing the device"))?
        } else {
            meta.len()
        };

        let mut slots = AlignedBuf::zeroed((BLOCK * SUPERBLOCK_SLOTS) as usize);
        let mut existing = None;
        if file_len >= RING_START {
            file.read_exact_at(&mut slots, 0)
                .map_err(io_err(p, "reading the superblock"))?;
            existing = (0..SUPERBLOCK_SLOTS as usize)
                .filter_map(|i| Superblock::decode(&slots[i * BLOCK as usize..]))
                .max_by_key(|s| s.generation);
            if existing.is_none() && slots.iter().any(|b| *b != 0) && !is_device {
                return Err(WalError::Invalid {
                    path: path_str,
                    reason: "neither superblock is valid and the file is not blank; refusing to overwrite it".into(),
                });
            }
        }

        let sb = match existing {
            Some(sb) => {
                if !is_device && sb.capacity != config.capacity {
                    tracing::warn!(
                        path = p,
                        configured = config.capacity,
                        actual = sb.capacity,
                        "WAL exists with another capacity; keeping the existing one"
                    );
                }
                if RING_START + sb.capacity > file_len {
                    return Err(WalError::Invalid {
                        path: path_str,
                        reason: format!(
                            "superblock says {} bytes but the file has {file_len}",
                            sb.capacity
                        ),
                    });
                }
                sb
            }
            None => {
                let capacity = if is_device {
                    (file_len.saturating_sub(RING_START) / BLOCK) * BLOCK
                } else {
                    (config.capacity / BLOCK) * BLOCK
                };
                if capacity < 4 * BLOCK {
                    return Err(WalError::Invalid {
                        path: path_str,
                        reason: format!("capacity {capacity} is below the minimum of 16 KiB"),
                    });
                }
                if !is_device {
                    preallocate(&file, RING_START + capacity)
                        .map_err(io_err(p, "preallocating"))?;
                    // Without O_DIRECT (tmpfs) there is no disk behind the file.
                    if config.format && direct {
                        format(&file, capacity, p)?;
                    }
                }
                Superblock {
                    capacity,
                    generation: 0,
                    trim_pos: 0,
                    trim_seq: 0,
                }
            }
        };

        let inner = Inner {
            file,
            path: path_str,
            capacity: sb.capacity,
            max_write: config.max_write_bytes.max(BLOCK),
            sync: config.sync,
            state: Mutex::new(State {
                queue: VecDeque::new(),
                queued_estimate: 0,
                next_seq: sb.trim_seq,
                next_pos: sb.trim_pos,
                trim_pos: sb.trim_pos,
                groups: VecDeque::new(),
                resetting: false,
                closed: false,
                recovered: Vec::new(),
            }),
            work: Condvar::new(),
            space: tokio::sync::Notify::new(),
            superblock: Mutex::new(sb.generation),
            meters: WalMeters::default(),
            faults: Mutex::new(Faults::new(config.faults.clone())),
        };
        if existing.is_none() {
            inner.write_superblock(sb)?;
        }
        inner.recover(sb)?;
        tracing::info!(path = %inner.path, capacity = inner.capacity, direct, device = is_device, "WAL opened");

        let inner = Arc::new(inner);
        let thread_inner = Arc::clone(&inner);
        let writer = std::thread::Builder::new()
            .name("weir-wal-writer".into())
            .spawn(move || thread_inner.writer_loop())
            .map_err(io_err(&inner.path, "starting the writer thread"))?;
        Ok(FileWal {
            inner,
            writer: Mutex::new(Some(writer)),
        })
    }

    /// Makes the group write `nth` from now (0: the next one) fail with `fault`, whatever the
    /// configured rates: the deterministic form of the fault switch, for tests. A test that
    /// appends one record at a time and waits for it knows which record that write holds.
    pub fn inject(&self, nth: u64, fault: WalFault) {
        let mut f = self.inner.faults.lock().unwrap_or_else(|e| e.into_inner());
        let at = f.writes + nth;
        f.scheduled.insert(at, fault);
    }

    /// Changes the fault rates and latency while the WAL runs.
    pub fn set_faults(&self, faults: WalFaults) {
        let mut f = self.inner.faults.lock().unwrap_or_else(|e| e.into_inner());
        f.rng = faults.seed ^ 0x2545_F491_4F6C_DD1D;
        f.config = faults;
    }
}

fn preallocate(file: &File, len: u64) -> std::io::Result<()> {
    file.set_len(len)?;
    let Ok(off_len) = libc::off_t::try_from(len) else {
        return Ok(());
    };
    // SAFETY: plain syscall on a valid descriptor.
    let rc = unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(file), 0, 0, off_len) };
    if rc != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "fallocate failed; the WAL file stays sparse");
    }
    file.sync_all()
}

/// Writes zeros over the whole ring, once, when the file is created.
fn format(file: &File, capacity: u64, path: &str) -> Result<(), WalError> {
    const CHUNK: u64 = 8 << 20;
    let started = Instant::now();
    tracing::info!(path, bytes = capacity, "formatting the new WAL (once)");
    let zeros = AlignedBuf::zeroed(CHUNK.min(capacity) as usize);
    let mut at = 0;
    while at < capacity {
        let n = CHUNK.min(capacity - at);
        file.write_all_at(&zeros[..n as usize], RING_START + at)
            .map_err(io_err(path, "formatting"))?;
        at += n;
    }
    file.sync_data().map_err(io_err(path, "formatting"))?;
    tracing::info!(
        path,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "WAL formatted"
    );
    Ok(())
}

/// A window of the ring read in large chunks, so that recovery does not issue one read per
/// small group.
struct RingWindow {
    /// Recovery never reads past one lap from the trim point.
    limit: u64,
    buf: AlignedBuf,
    pos: u64,
    len: u64,
}

impl RingWindow {
    const CHUNK: u64 = 8 << 20;

    /// The bytes `[at, at + len)` of the ring, or `None` if they lie beyond one lap.
    fn get(&mut self, inner: &Inner, at: u64, len: u64) -> std::io::Result<Option<&[u8]>> {
        if at + len > self.limit {
            return Ok(None);
        }
        if at < self.pos || at + len > self.pos + self.len {
            let n = len.max(Self::CHUNK).min(self.limit - at);
            self.buf = AlignedBuf::zeroed(n as usize);
            inner.read_ring(at, &mut self.buf[..n as usize])?;
            self.pos = at;
            self.len = n;
        }
        let start = (at - self.pos) as usize;
        Ok(Some(&self.buf[start..start + len as usize]))
    }
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic while holding the lock leaves plain data behind; keep going rather than cascade.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Inner {
    fn physical(&self, pos: u64) -> u64 {
        RING_START + pos % self.capacity
    }

    /// Reads `buf.len()` bytes of the ring from logical position `pos`, wrapping at its end.
    fn read_ring(&self, pos: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let off = pos % self.capacity;
        let first = ((self.capacity - off) as usize).min(buf.len());
        self.file
            .read_exact_at(&mut buf[..first], RING_START + off)?;
        if first < buf.len() {
            self.file.read_exact_at(&mut buf[first..], RING_START)?;
        }
        Ok(())
    }

    fn write_ring(&self, pos: u64, buf: &[u8]) -> std::io::Result<()> {
        let off = pos % self.capacity;
        let first = ((self.capacity - off) as usize).min(buf.len());
        self.file.write_all_at(&buf[..first], self.physical(pos))?;
        if first < buf.len() {
            self.file.write_all_at(&buf[first..], RING_START)?;
        }
        Ok(())
    }

    /// Writes one group and makes it durable; the fault switch acts here, at the real calls.
    fn write_group(&self, pos: u64, buf: &[u8]) -> std::io::Result<()> {
        let (fault, latency) = self
            .faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .next_write();
        if !latency.is_zero() {
            std::thread::sleep(latency);
        }
        if fault == Some(WalFault::Write) {
            // A failing device may have written part of the group: write its first half (whole
            // blocks, as O_DIRECT wants), then report the error.
            let torn = (buf.len() / 2) / BLOCK as usize * BLOCK as usize;
            self.write_ring(pos, &buf[..torn])?;
            return Err(std::io::Error::other(format!(
                "injected WAL write failure at position {pos} (fault switch)"
            )));
        }
        self.write_ring(pos, buf)?;
        if fault == Some(WalFault::Sync) {
            return Err(std::io::Error::other(format!(
                "injected WAL sync failure at position {pos} (fault switch)"
            )));
        }
        self.sync()
    }

    fn sync(&self) -> std::io::Result<()> {
        match self.sync {
            SyncMode::Fdatasync => self.file.sync_data(),
            SyncMode::Dsync => Ok(()),
        }
    }

    fn write_superblock(&self, mut sb: Superblock) -> Result<(), WalError> {
        let mut generation = self.superblock.lock().unwrap_or_else(|e| e.into_inner());
        sb.generation = *generation + 1;
        let mut buf = AlignedBuf::zeroed(BLOCK as usize);
        sb.encode(&mut buf);
        let slot = sb.generation % SUPERBLOCK_SLOTS;
        self.file
            .write_all_at(&buf, slot * BLOCK)
            .and_then(|_| self.sync())
            .map_err(io_err(&self.path, "writing the superblock"))?;
        *generation = sb.generation;
        Ok(())
    }

    /// Scans groups from the trim point and stops at the first one that is not whole and valid.
    fn recover(&self, sb: Superblock) -> Result<(), WalError> {
        let mut pos = sb.trim_pos;
        let mut next_seq = sb.trim_seq;
        let mut recovered = Vec::new();
        let mut groups = VecDeque::new();
        let mut window = RingWindow {
            limit: sb.trim_pos + self.capacity,
            buf: AlignedBuf::zeroed(0),
            pos: 0,
            len: 0,
        };
        let read_err = || io_err(&self.path, "reading during recovery");

        while let Some(head) = window.get(self, pos, BLOCK).map_err(read_err())? {
            let Some(h) = GroupHeader::decode(head, pos) else {
                break;
            };
            let Some(group) = window
                .get(self, pos, u64::from(h.len))
                .map_err(read_err())?
            else {
                break;
            };
            let Some(records) =
                decode_records(&group[GROUP_HEADER_LEN..h.used as usize], h.record_count)
            else {
                tracing::info!(pos, "WAL recovery stopped at a torn group");
                break;
            };
            debug_assert!(h.first_seq >= next_seq, "sequence numbers go backwards");
            for (i, record) in records.into_iter().enumerate() {
                recovered.push(RecoveredRecord {
                    seq: h.first_seq + i as u64,
                    record,
                });
            }
            let last_seq = h.first_seq + u64::from(h.record_count.max(1)) - 1;
            groups.push_back(GroupSpan {
                pos,
                first_seq: h.first_seq,
                last_seq,
                durable: true,
            });
            next_seq = next_seq.max(last_seq + 1);
            pos += u64::from(h.len);
        }
        tracing::info!(path = %self.path, records = recovered.len(), bytes = pos - sb.trim_pos, "WAL recovered");
        let mut st = lock(&self.state);
        st.next_pos = pos;
        st.next_seq = next_seq;
        st.groups = groups;
        st.recovered = recovered;
        Ok(())
    }

    fn writer_loop(&self) {
        let mut buf = AlignedBuf::zeroed(self.max_write as usize);
        loop {
            let (header, taken) = {
                let mut st = lock(&self.state);
                while st.queue.is_empty() {
                    if st.closed {
                        return;
                    }
                    st = self.work.wait(st).unwrap_or_else(|e| e.into_inner());
                }
                let mut taken = Vec::new();
                let mut used = GROUP_HEADER_LEN as u64;
                while let Some(p) = st.queue.front() {
                    let l = encoded_record_len(&p.record) as u64;
                    if !taken.is_empty() && used + l > self.max_write {
                        break;
                    }
                    used += l;
                    let Some(p) = st.queue.pop_front() else { break };
                    st.queued_estimate -= p.estimate;
                    taken.push(p);
                }
                let len = align_up(used);
                let pos = st.next_pos;
                debug_assert!(
                    pos + len - st.trim_pos <= self.capacity,
                    "admission let the ring overflow"
                );
                st.next_pos += len;
                let first_seq = taken[0].seq;
                let last_seq = taken[taken.len() - 1].seq;
                st.groups.push_back(GroupSpan {
                    pos,
                    first_seq,
                    last_seq,
                    durable: false,
                });
                let header = GroupHeader {
                    pos,
                    first_seq,
                    len: len as u32,
                    used: used as u32,
                    record_count: taken.len() as u32,
                };
                (header, taken)
            };

            let len = header.len as usize;
            if buf.len() < len {
                buf = AlignedBuf::zeroed(len);
            }
            header.encode(&mut buf[..GROUP_HEADER_LEN]);
            let mut at = GROUP_HEADER_LEN;
            for p in &taken {
                let l = encoded_record_len(&p.record);
                encode_record(&p.record, &mut buf[at..at + l]);
                at += l;
            }
            buf[at..len].fill(0);

            let started = Instant::now();
            let result = self.write_group(header.pos, &buf[..len]);
            match result {
                Ok(()) => {
                    self.meters.sync_latency.record(started.elapsed());
                    self.meters.writes.inc();
                    self.meters.syncs.inc();
                    self.meters.bytes_written.add(len as u64);
                    {
                        let mut st = lock(&self.state);
                        if let Some(g) = st.groups.iter_mut().find(|g| g.pos == header.pos) {
                            g.durable = true;
                        }
                    }
                    for p in taken {
                        (p.done)(Ok(p.seq));
                    }
                }
                Err(e) => self.fail_write(header, taken, e),
            }
        }
    }

    /// A failed write fails its records and everything queued behind them, and the next group
    /// goes where the failed one began, so the ring keeps no hole. Appends arriving meanwhile are
    /// refused, so that callers see every failure before they write again.
    fn fail_write(&self, header: GroupHeader, taken: Vec<Pending>, e: std::io::Error) {
        tracing::error!(path = %self.path, pos = header.pos, error = %e, "WAL write failed; failing queued appends");
        self.meters.write_errors.inc();
        // The failed group may be whole on the disk (a failed sync says nothing about what was
        // written). If no later group overwrote it, recovery would bring back records whose
        // appends were told they failed: erase its header, as well as the device lets us.
        let blank = AlignedBuf::zeroed(BLOCK as usize);
        if let Err(e) = self
            .write_ring(header.pos, &blank)
            .and_then(|_| self.sync())
        {
            tracing::error!(path = %self.path, pos = header.pos, error = %e, "erasing the failed WAL group failed too");
        }
        let err = WalError::WriteFailed(Arc::new(e));
        let drained: Vec<Pending> = {
            let mut st = lock(&self.state);
            st.resetting = true;
            st.next_pos = header.pos;
            st.groups.retain(|g| g.pos != header.pos);
            st.queued_estimate = 0;
            st.queue.drain(..).collect()
        };
        for p in taken.into_iter().chain(drained) {
            (p.done)(Err(err.clone()));
        }
        lock(&self.state).resetting = false;
        self.space.notify_waiters();
    }

    fn trim(&self, seq: Seq) -> Result<(), WalError> {
        let sb = {
            let st = lock(&self.state);
            let mut trim_pos = st.next_pos;
            let mut trim_seq = st.queue.front().map_or(st.next_seq, |p| p.seq);
            for g in &st.groups {
                if g.last_seq >= seq || !g.durable {
                    trim_pos = g.pos;
                    trim_seq = g.first_seq;
                    break;
                }
            }
            if trim_pos <= st.trim_pos {
                return Ok(());
            }
            Superblock {
                capacity: self.capacity,
                generation: 0,
                trim_pos,
                trim_seq,
            }
        };
        self.write_superblock(sb)?;
        {
            let mut st = lock(&self.state);
            if sb.trim_pos > st.trim_pos {
                st.trim_pos = sb.trim_pos;
                st.groups.retain(|g| g.pos >= sb.trim_pos);
            }
        }
        self.space.notify_waiters();
        Ok(())
    }
}

#[async_trait::async_trait]
impl Wal for FileWal {
    fn append(&self, record: WalRecord, done: Completion) -> Result<Seq, WalError> {
        let inner = &self.inner;
        let estimate = align_up((GROUP_HEADER_LEN + encoded_record_len(&record)) as u64);
        if estimate > inner.capacity / 2 {
            return Err(WalError::TooLarge {
                size: record.payload.len() as u64,
                max: inner.capacity / 2 - BLOCK,
            });
        }
        let mut st = lock(&inner.state);
        if st.closed {
            return Err(WalError::Closed);
        }
        if st.resetting {
            return Err(WalError::Resetting);
        }
        let used = st.next_pos - st.trim_pos + st.queued_estimate;
        if used + estimate > inner.capacity {
            inner.meters.full_rejections.inc();
            return Err(WalError::Full {
                needed: estimate,
                free: inner.capacity - used,
                capacity: inner.capacity,
            });
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        st.queued_estimate += estimate;
        st.queue.push_back(Pending {
            seq,
            record,
            done,
            estimate,
        });
        inner.meters.appends.inc();
        drop(st);
        inner.work.notify_one();
        Ok(seq)
    }

    fn next_seq(&self) -> Seq {
        lock(&self.inner.state).next_seq
    }

    async fn trim(&self, seq: Seq) -> Result<(), WalError> {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || inner.trim(seq))
            .await
            .unwrap_or(Err(WalError::Closed))
    }

    async fn wait_for_space(&self, timeout: Duration) {
        // Capped so that a notification missed between the caller's check and this wait costs
        // little.
        let _ = tokio::time::timeout(
            timeout.min(Duration::from_millis(50)),
            self.inner.space.notified(),
        )
        .await;
    }

    fn take_recovered(&self) -> Vec<RecoveredRecord> {
        std::mem::take(&mut lock(&self.inner.state).recovered)
    }

    fn usage(&self) -> WalUsage {
        let st = lock(&self.inner.state);
        WalUsage {
            capacity: self.inner.capacity,
            used: st.next_pos - st.trim_pos + st.queued_estimate,
        }
    }

    fn meters(&self) -> &WalMeters {
        &self.inner.meters
    }

    async fn close(&self) {
        lock(&self.inner.state).closed = true;
        self.inner.work.notify_all();
        let handle = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = handle {
            let _ = tokio::task::spawn_blocking(move || h.join()).await;
        }
    }
}

impl Drop for FileWal {
    fn drop(&mut self) {
        lock(&self.inner.state).closed = true;
        self.inner.work.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance;

    fn config(dir: &Path, capacity: u64) -> FileWalConfig {
        FileWalConfig {
            capacity,
            ..FileWalConfig::new(dir.join("wal"))
        }
    }

    fn opener(capacity: u64) -> impl Fn(&Path) -> Arc<dyn Wal> {
        move |dir: &Path| match FileWal::open(config(dir, capacity)) {
            Ok(w) => Arc::new(w) as Arc<dyn Wal>,
            Err(e) => panic!("open failed: {e}"),
        }
    }

    #[tokio::test]
    async fn conformance_suite() {
        conformance::run_all(opener(1 << 20)).await;
    }

    /// The conformance suite's failure check, with a fifth of the group writes failing at the
    /// `pwrite` and another fifth at the `fdatasync` (seeded: the same writes fail every run).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failed_writes_leave_no_trace_with_the_fault_switch() {
        let faults = WalFaults {
            write_error_rate: 0.2,
            sync_error_rate: 0.2,
            seed: 42,
            ..Default::default()
        };
        let open = move |dir: &Path| -> Arc<dyn Wal> {
            match FileWal::open(FileWalConfig {
                faults: faults.clone(),
                ..config(dir, 1 << 20)
            }) {
                Ok(w) => Arc::new(w),
                Err(e) => panic!("open failed: {e}"),
            }
        };
        conformance::failed_writes_leave_no_trace(&open).await;
    }

    /// Appends and waits; an append refused while the WAL is still delivering an earlier
    /// failure (`Resetting`, retriable) is tried again, as the engine's caller would.
    async fn append_with_payload(
        wal: &FileWal,
        offset: u64,
        fill: u8,
        size: usize,
    ) -> Result<Seq, WalError> {
        let mut r = conformance::record(1, offset, size);
        r.payload = bytes::Bytes::from(vec![fill; size]);
        loop {
            match conformance::append_and_wait(wal, r.clone()).await {
                Err(WalError::Resetting) => tokio::task::yield_now().await,
                other => return other,
            }
        }
    }

    fn recovered(dir: &Path) -> Vec<(u64, u8)> {
        let wal = FileWal::open(config(dir, 1 << 20)).expect("reopen");
        wal.take_recovered()
            .iter()
            .map(|r| (r.record.base_offset, r.record.payload[0]))
            .collect()
    }

    /// Injected faults, one write at a time: a failed `pwrite` (torn) and a failed `fdatasync`
    /// (the whole group on disk) each fail their append with a retriable error; the append
    /// rewritten at the same offset replaces it; and a failed group that nothing overwrote does
    /// not come back after a reopen.
    #[tokio::test]
    async fn injected_write_and_sync_failures_fail_their_appends_only() {
        let dir = tempfile::tempdir().unwrap();
        let wal = FileWal::open(config(dir.path(), 1 << 20)).unwrap();
        append_with_payload(&wal, 0, 1, 20_000)
            .await
            .expect("first append");
        wal.inject(0, WalFault::Write);
        match append_with_payload(&wal, 1, 2, 20_000).await {
            Err(e @ WalError::WriteFailed(_)) => assert!(e.is_retriable()),
            other => panic!("expected an injected write failure, got {other:?}"),
        }
        append_with_payload(&wal, 1, 3, 20_000)
            .await
            .expect("rewrite");
        wal.inject(1, WalFault::Sync);
        append_with_payload(&wal, 2, 4, 20_000)
            .await
            .expect("before the fault");
        match append_with_payload(&wal, 3, 5, 20_000).await {
            Err(WalError::WriteFailed(e)) => assert!(e.to_string().contains("sync"), "{e}"),
            other => panic!("expected an injected sync failure, got {other:?}"),
        }
        assert_eq!(wal.meters().write_errors.get(), 2);
        wal.close().await;
        drop(wal);
        // The sync-failed group was written whole and nothing overwrote it; it must not be
        // recovered, and the rewritten record replaced the torn one.
        assert_eq!(recovered(dir.path()), vec![(0, 1), (1, 3), (2, 4)]);
    }

    /// A failure fails every append queued behind the failed one, and appends after the
    /// failure has been delivered succeed: in sequence order, the outcomes are failures, then
    /// successes, never a success between two failures.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_write_fails_what_is_queued_behind_it() {
        let dir = tempfile::tempdir().unwrap();
        let wal = FileWal::open(FileWalConfig {
            faults: WalFaults {
                // Slow writes, so that appends queue up behind the failing one.
                latency: Duration::from_millis(20),
                ..Default::default()
            },
            ..config(dir.path(), 1 << 20)
        })
        .unwrap();
        conformance::append_and_wait(&wal, conformance::record(1, 0, 100))
            .await
            .expect("before the fault");
        wal.inject(0, WalFault::Write);
        let mut rxs = Vec::new();
        for i in 1..21u64 {
            let (tx, rx) = tokio::sync::oneshot::channel();
            match wal.append(
                conformance::record(1, i, 3000),
                Box::new(move |r| {
                    let _ = tx.send(r.is_ok());
                }),
            ) {
                Ok(_) => rxs.push(rx),
                Err(WalError::Resetting) => {}
                Err(e) => panic!("append refused: {e}"),
            }
        }
        let mut outcomes = Vec::new();
        for rx in rxs {
            outcomes.push(rx.await.unwrap());
        }
        assert_eq!(
            outcomes.first(),
            Some(&false),
            "the first append's write failed"
        );
        let failed = outcomes.iter().take_while(|ok| !**ok).count();
        assert!(
            outcomes[failed..].iter().all(|ok| *ok),
            "a success between failures: {outcomes:?}"
        );
        assert_eq!(wal.meters().write_errors.get(), 1);
        wal.close().await;
    }

    #[tokio::test]
    async fn torn_group_is_not_recovered_and_later_writes_stay_reachable() {
        let dir = tempfile::tempdir().unwrap();
        let wal = opener(1 << 20)(dir.path());
        for i in 0..3u64 {
            conformance::append_and_wait(&*wal, conformance::record(1, i, 100))
                .await
                .unwrap();
        }
        wal.close().await;
        drop(wal);
        // Corrupt one payload byte of the last group: recovery must stop before it.
        let f = OpenOptions::new()
            .write(true)
            .open(dir.path().join("wal"))
            .unwrap();
        f.write_all_at(&[0xAB], RING_START + 2 * BLOCK + 100)
            .unwrap();
        drop(f);
        let wal = opener(1 << 20)(dir.path());
        let rec = wal.take_recovered();
        assert_eq!(rec.len(), 2);
        // The next group goes where the torn one was, and is found after a restart.
        conformance::append_and_wait(&*wal, conformance::record(1, 2, 50))
            .await
            .unwrap();
        conformance::append_and_wait(&*wal, conformance::record(1, 3, 50))
            .await
            .unwrap();
        wal.close().await;
        drop(wal);
        let wal = opener(1 << 20)(dir.path());
        let offsets: Vec<u64> = wal
            .take_recovered()
            .iter()
            .map(|r| r.record.base_offset)
            .collect();
        assert_eq!(offsets, vec![0, 1, 2, 3]);
    }

    #[test]
    fn refuses_a_foreign_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("wal"), vec![7u8; 3 * BLOCK as usize]).unwrap();
        match FileWal::open(config(dir.path(), 1 << 20)) {
            Err(WalError::Invalid { .. }) => {}
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("opened a foreign file"),
        }
    }
}
