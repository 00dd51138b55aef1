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
    align_up, decode_records, encode_record, encoded_record_len, GroupHeader, Seal, Superblock,
    BLOCK, GROUP_HEADER_LEN, RING_START, SEAL_AT, SUPERBLOCK_SLOTS,
};
use crate::{
    AckGate, Completion, RecoveredRecord, Seq, Wal, WalError, WalMeters, WalRecord, WalUsage,
};

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
    /// Read the seal block after every group write and acknowledge nothing once a peer sealed
    /// the WAL. On wherever a peer may recover the WAL (a cluster); it costs one 4 KiB read per
    /// group write.
    pub seal_check: bool,
    /// Asked after every group write whether its records may be acknowledged.
    pub ack_gate: Option<Arc<dyn AckGate>>,
}

/// What a WAL file says about itself before it is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalIdentity {
    pub wal_id: u128,
    /// Set once a peer has recovered (or is recovering) the WAL.
    pub sealed: Option<Seal>,
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
            seal_check: false,
            ack_gate: None,
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
    /// A peer sealed the WAL: every append and trim is refused from now on.
    sealed: Option<Seal>,
    recovered: Vec<RecoveredRecord>,
}

struct Inner {
    file: File,
    path: String,
    capacity: u64,
    wal_id: u128,
    seal_check: bool,
    ack_gate: Option<Arc<dyn AckGate>>,
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
    /// Rewrites the broker's own WAL at `config.path` in the current format if an earlier Weir
    /// wrote it in an older one, keeping its records (`crate::v1`); nothing to do otherwise.
    /// [`FileWal::open`] does it too, but a broker reads its WAL's [`FileWal::identity`] before
    /// opening it, and that reads the current format only. Never for a peer's WAL: its owner may
    /// still be running.
    pub fn upgrade_format(config: &FileWalConfig) -> Result<(), WalError> {
        migrate_format_1(config)
    }

    /// Opens (or creates) the WAL and recovers what it holds; see [`Wal::take_recovered`].
    pub fn open(config: FileWalConfig) -> Result<FileWal, WalError> {
        let path_str = config.path.display().to_string();
        let p = path_str.as_str();
        if let Some(dir) = config.path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir).map_err(io_err(p, "creating its directory"))?;
            }
        }
        migrate_format_1(&config)?;
        let (file, direct) =
            open_file(&config.path, config.direct_io, config.sync).map_err(io_err(p, "opening"))?;
        let (file_len, is_device) = file_size(&file, p)?;
        let existing = read_superblock(&file, file_len, is_device, p)?;

        let sb = match existing {
            Some(sb) => {
                if let Some(seal) = read_seal(&file, p)?.filter(|s| s.wal_id == sb.wal_id) {
                    return Err(WalError::Sealed {
                        node_id: seal.node_id,
                        incarnation: seal.incarnation,
                    });
                }
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
                // A blank seal block: a device (or file) used before may hold an old seal.
                file.write_all_at(&AlignedBuf::zeroed(BLOCK as usize), SEAL_AT)
                    .map_err(io_err(p, "clearing the seal block"))?;
                Superblock {
                    capacity,
                    generation: 0,
                    trim_pos: 0,
                    trim_seq: 0,
                    wal_id: new_wal_id(),
                }
            }
        };

        let inner = Inner {
            file,
            path: path_str,
            capacity: sb.capacity,
            wal_id: sb.wal_id,
            seal_check: config.seal_check,
            ack_gate: config.ack_gate.clone(),
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
                sealed: None,
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
        tracing::info!(path = %inner.path, wal_id = %format!("{:032x}", inner.wal_id), capacity = inner.capacity, direct, device = is_device, "WAL opened");

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

    /// This WAL's id (in its superblock).
    pub fn wal_id(&self) -> u128 {
        self.inner.wal_id
    }

    /// The id and seal of the WAL at `path`, without opening it for writing; `None` if there is
    /// no WAL there yet (no file, or a blank one).
    pub fn identity(path: &Path) -> Result<Option<WalIdentity>, WalError> {
        let p = path.display().to_string();
        let Some(file) = open_existing(path, &p)? else {
            return Ok(None);
        };
        let (len, is_device) = file_size(&file, &p)?;
        let Some(sb) = read_superblock(&file, len, is_device, &p)? else {
            return Ok(None);
        };
        let sealed = read_seal(&file, &p)?.filter(|s| s.wal_id == sb.wal_id);
        Ok(Some(WalIdentity {
            wal_id: sb.wal_id,
            sealed,
        }))
    }

    /// Seals the WAL at `path` (which must be the WAL `seal.wal_id`) for a peer that recovers
    /// it: its owner, if it still runs, acknowledges nothing it writes after this. Durable when it
    /// returns. The peer reads the WAL only after sealing it, so that whatever the owner
    /// acknowledged was durable before the read (see [`FileWalConfig::seal_check`]).
    pub fn seal(path: &Path, seal: Seal) -> Result<(), WalError> {
        let p = path.display().to_string();
        let file = open_required(path, &p, "opening to seal")?;
        let (len, is_device) = file_size(&file, &p)?;
        let sb = read_superblock(&file, len, is_device, &p)?.ok_or_else(|| WalError::Invalid {
            path: p.clone(),
            reason: "no WAL superblock; nothing to seal".into(),
        })?;
        if sb.wal_id != seal.wal_id {
            return Err(WalError::WrongWal {
                path: p,
                expected: seal.wal_id,
                found: sb.wal_id,
            });
        }
        let mut buf = AlignedBuf::zeroed(BLOCK as usize);
        seal.encode(&mut buf);
        file.write_all_at(&buf, SEAL_AT)
            .and_then(|_| file.sync_data())
            .map_err(io_err(&p, "writing the seal"))
    }

    /// Every record the WAL `wal_id` at `path` holds from its trim point, as recovery on open
    /// finds them, without writing to it. For a peer, after [`FileWal::seal`]: the superblock is
    /// read again after the scan, and the scan repeated if the owner trimmed meanwhile (a trim
    /// that was under way when the seal landed), so that the scan never starts in space the
    /// owner has since reused.
    pub fn read_sealed(path: &Path, wal_id: u128) -> Result<Vec<RecoveredRecord>, WalError> {
        let p = path.display().to_string();
        let file = open_required(path, &p, "opening to recover")?;
        let (len, is_device) = file_size(&file, &p)?;
        let read_sb = || -> Result<Superblock, WalError> {
            let sb =
                read_superblock(&file, len, is_device, &p)?.ok_or_else(|| WalError::Invalid {
                    path: p.clone(),
                    reason: "no WAL superblock".into(),
                })?;
            if sb.wal_id != wal_id {
                return Err(WalError::WrongWal {
                    path: p.clone(),
                    expected: wal_id,
                    found: sb.wal_id,
                });
            }
            Ok(sb)
        };
        let mut sb = read_sb()?;
        for _ in 0..10 {
            let found = scan(&file, sb.capacity, &p, sb)?;
            let again = read_sb()?;
            if again.trim_pos == sb.trim_pos {
                return Ok(found.records);
            }
            sb = again;
        }
        Err(WalError::Invalid {
            path: p,
            reason: "its trim point kept moving while it was read; is its owner still writing?"
                .into(),
        })
    }

    /// Makes the WAL at `path` empty under a new id, for a broker whose WAL a peer recovered:
    /// what it held is in object storage, and a replay would bring back records its leaders no
    /// longer own. The trim point moves past every group the ring holds, and the seal is cleared.
    /// Returns the new id.
    pub fn start_empty(path: &Path) -> Result<u128, WalError> {
        let p = path.display().to_string();
        let file = open_required(path, &p, "opening to start empty")?;
        let (len, is_device) = file_size(&file, &p)?;
        let Some(sb) = read_superblock(&file, len, is_device, &p)? else {
            return Ok(new_wal_id());
        };
        let found = scan(&file, sb.capacity, &p, sb)?;
        let fresh = Superblock {
            capacity: sb.capacity,
            generation: sb.generation + 1,
            trim_pos: found.end,
            trim_seq: found.next_seq,
            wal_id: new_wal_id(),
        };
        let mut buf = AlignedBuf::zeroed(BLOCK as usize);
        fresh.encode(&mut buf);
        file.write_all_at(&buf, (fresh.generation % SUPERBLOCK_SLOTS) * BLOCK)
            .and_then(|_| file.sync_data())
            .map_err(io_err(&p, "writing the superblock"))?;
        // Cleared after the new superblock: a crash in between leaves a seal naming the old id,
        // which the new one no longer matches.
        file.write_all_at(&AlignedBuf::zeroed(BLOCK as usize), SEAL_AT)
            .and_then(|_| file.sync_data())
            .map_err(io_err(&p, "clearing the seal"))?;
        tracing::info!(path = %p, old = %format!("{:032x}", sb.wal_id), new = %format!("{:032x}", fresh.wal_id), "WAL starts empty under a new id");
        Ok(fresh.wal_id)
    }

    /// Removes a seal that names this WAL: its owner claimed it back because the peer that
    /// sealed it could not recover it (it gave up before reading it all).
    pub fn clear_seal(path: &Path) -> Result<(), WalError> {
        let p = path.display().to_string();
        let Some(file) = open_existing(path, &p)? else {
            return Ok(());
        };
        file.write_all_at(&AlignedBuf::zeroed(BLOCK as usize), SEAL_AT)
            .and_then(|_| file.sync_data())
            .map_err(io_err(&p, "clearing the seal"))
    }
}

fn sealed_error(seal: Seal) -> WalError {
    WalError::Sealed {
        node_id: seal.node_id,
        incarnation: seal.incarnation,
    }
}

/// A random WAL id.
pub(crate) fn new_wal_id() -> u128 {
    let mut b = [0u8; 16];
    // SAFETY: getrandom writes at most `b.len()` bytes into the buffer it is given.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        // No entropy source: time and process id still make ids that differ between brokers.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        return t ^ (u128::from(std::process::id()) << 96);
    }
    u128::from_le_bytes(b)
}

/// Opens an existing WAL file or device for reading and writing (O_DIRECT where the filesystem
/// allows it); `None` if there is none.
fn open_existing(path: &Path, p: &str) -> Result<Option<File>, WalError> {
    let open = |flags: i32| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(flags)
            .open(path)
    };
    match open(libc::O_DIRECT) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => match open(0) {
            Ok(f) => Ok(Some(f)),
            Err(e) => Err(io_err(p, "opening")(e)),
        },
        Err(e) => Err(io_err(p, "opening")(e)),
    }
}

/// [`open_existing`], with a missing file as an error.
fn open_required(path: &Path, p: &str, context: &'static str) -> Result<File, WalError> {
    open_existing(path, p)?.ok_or_else(|| WalError::Io {
        path: p.to_string(),
        context,
        source: Arc::new(std::io::Error::from(std::io::ErrorKind::NotFound)),
    })
}

/// The file's length (a device's size) and whether it is a block device.
fn file_size(file: &File, p: &str) -> Result<(u64, bool), WalError> {
    let meta = file.metadata().map_err(io_err(p, "reading metadata"))?;
    if meta.file_type().is_block_device() {
        use std::io::{Seek, SeekFrom};
        let len = (&*file)
            .seek(SeekFrom::End(0))
            .map_err(io_err(p, "sizing the device"))?;
        return Ok((len, true));
    }
    Ok((meta.len(), false))
}

/// A WAL file of format 1 (an earlier Weir) rewritten in the current format, its records kept
/// (`crate::v1`). A device is left alone: it cannot be replaced by a rename (refused below).
fn migrate_format_1(config: &FileWalConfig) -> Result<(), WalError> {
    let path = &config.path;
    let is_file = std::fs::metadata(path).is_ok_and(|m| m.file_type().is_file());
    if !is_file || !crate::v1::is_v1(path)? {
        return Ok(());
    }
    let started = Instant::now();
    let records = crate::v1::migrate(path, config.capacity)?;
    tracing::info!(
        path = %path.display(),
        records,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "WAL of format 1 (an earlier Weir) rewritten in the current format; what it held is recovered as usual"
    );
    Ok(())
}

/// The newest valid superblock; `None` for a blank file (or a device, whatever it holds).
fn read_superblock(
    file: &File,
    file_len: u64,
    is_device: bool,
    p: &str,
) -> Result<Option<Superblock>, WalError> {
    if file_len < RING_START {
        return Ok(None);
    }
    let mut slots = AlignedBuf::zeroed((BLOCK * SUPERBLOCK_SLOTS) as usize);
    file.read_exact_at(&mut slots, 0)
        .map_err(io_err(p, "reading the superblock"))?;
    let slot = |i: u64| &slots[(i * BLOCK) as usize..];
    let existing = (0..SUPERBLOCK_SLOTS)
        .filter_map(|i| Superblock::decode(slot(i)))
        .max_by_key(|s| s.generation);
    if existing.is_some() {
        return Ok(existing);
    }
    if let Some(format) = (0..SUPERBLOCK_SLOTS).find_map(|i| Superblock::later_format(slot(i))) {
        return Err(WalError::Invalid {
            path: p.to_string(),
            reason: format!(
                "it is a WAL of format {format}, newer than this broker's {}: a later Weir \
                 release wrote it; run that release or a later one (a broker never rewrites a \
                 WAL it cannot read)",
                crate::format::FORMAT
            ),
        });
    }
    if !is_device {
        if (0..SUPERBLOCK_SLOTS).any(|i| Superblock::is_v1(slot(i))) {
            return Err(WalError::Invalid {
                path: p.to_string(),
                reason: "it is a WAL of format 1 (an earlier Weir) whose superblock is damaged, \
                         or on a device, which cannot be rewritten in place; start that version \
                         once to upload what it holds"
                    .into(),
            });
        }
        if slots.iter().any(|b| *b != 0) {
            return Err(WalError::Invalid {
                path: p.to_string(),
                reason: "neither superblock is valid and the file is not blank; refusing to overwrite it".into(),
            });
        }
    }
    Ok(None)
}

/// The seal in the seal block, if any (whichever WAL it names).
fn read_seal(file: &File, p: &str) -> Result<Option<Seal>, WalError> {
    let mut buf = AlignedBuf::zeroed(BLOCK as usize);
    match file.read_exact_at(&mut buf, SEAL_AT) {
        Ok(()) => Ok(Seal::decode(&buf)),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(io_err(p, "reading the seal")(e)),
    }
}

/// What a scan of the ring found.
struct Scan {
    records: Vec<RecoveredRecord>,
    groups: VecDeque<GroupSpan>,
    /// Logical position after the last whole group.
    end: u64,
    next_seq: Seq,
}

/// Reads `buf.len()` bytes of the ring from logical position `pos`, wrapping at its end.
fn read_ring_at(file: &File, capacity: u64, pos: u64, buf: &mut [u8]) -> std::io::Result<()> {
    read_ring_from(file, RING_START, capacity, pos, buf)
}

/// The same for a ring that starts at `ring_start` (format 1's started earlier: `crate::v1`).
pub(crate) fn read_ring_from(
    file: &File,
    ring_start: u64,
    capacity: u64,
    pos: u64,
    buf: &mut [u8],
) -> std::io::Result<()> {
    let off = pos % capacity;
    let first = ((capacity - off) as usize).min(buf.len());
    file.read_exact_at(&mut buf[..first], ring_start + off)?;
    if first < buf.len() {
        file.read_exact_at(&mut buf[first..], ring_start)?;
    }
    Ok(())
}

/// Scans groups from the trim point and stops at the first one that is not whole and valid.
fn scan(file: &File, capacity: u64, path: &str, sb: Superblock) -> Result<Scan, WalError> {
    let mut pos = sb.trim_pos;
    let mut next_seq = sb.trim_seq;
    let mut records = Vec::new();
    let mut groups = VecDeque::new();
    let mut window = RingWindow {
        limit: sb.trim_pos + capacity,
        buf: AlignedBuf::zeroed(0),
        pos: 0,
        len: 0,
    };
    let read_err = || io_err(path, "reading during recovery");
    while let Some(head) = window.get(file, capacity, pos, BLOCK).map_err(read_err())? {
        let Some(h) = GroupHeader::decode(head, pos) else {
            break;
        };
        let Some(group) = window
            .get(file, capacity, pos, u64::from(h.len))
            .map_err(read_err())?
        else {
            break;
        };
        let Some(decoded) =
            decode_records(&group[GROUP_HEADER_LEN..h.used as usize], h.record_count)
        else {
            tracing::info!(pos, "WAL recovery stopped at a torn group");
            break;
        };
        debug_assert!(h.first_seq >= next_seq, "sequence numbers go backwards");
        for (i, record) in decoded.into_iter().enumerate() {
            records.push(RecoveredRecord {
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
    Ok(Scan {
        records,
        groups,
        end: pos,
        next_seq,
    })
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
    fn get(
        &mut self,
        file: &File,
        capacity: u64,
        at: u64,
        len: u64,
    ) -> std::io::Result<Option<&[u8]>> {
        if at + len > self.limit {
            return Ok(None);
        }
        if at < self.pos || at + len > self.pos + self.len {
            let n = len.max(Self::CHUNK).min(self.limit - at);
            self.buf = AlignedBuf::zeroed(n as usize);
            read_ring_at(file, capacity, at, &mut self.buf[..n as usize])?;
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

    /// Finds what the WAL holds from its trim point, for [`Wal::take_recovered`].
    fn recover(&self, sb: Superblock) -> Result<(), WalError> {
        let found = scan(&self.file, self.capacity, &self.path, sb)?;
        tracing::info!(path = %self.path, records = found.records.len(), bytes = found.end - sb.trim_pos, "WAL recovered");
        let mut st = lock(&self.state);
        st.next_pos = found.end;
        st.next_seq = found.next_seq;
        st.groups = found.groups;
        st.recovered = found.records;
        Ok(())
    }

    fn writer_loop(&self) {
        let mut buf = AlignedBuf::zeroed(self.max_write as usize);
        let mut seal_buf = AlignedBuf::zeroed(BLOCK as usize);
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
                    // Durable; now, and only now, ask whether it may be acknowledged: a seal or
                    // a lapsed session found after the write covers every record in it.
                    if let Err(e) = self.may_acknowledge(&mut seal_buf) {
                        self.meters.refused_acks.inc();
                        self.fail_write(header, taken, e);
                        continue;
                    }
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
                Err(e) => self.fail_write(header, taken, WalError::WriteFailed(Arc::new(e))),
            }
        }
    }

    /// Whether records just made durable may be acknowledged: no peer sealed the WAL (read from
    /// the disk, since the peer writes it there) and the broker's session is valid.
    fn may_acknowledge(&self, buf: &mut AlignedBuf) -> Result<(), WalError> {
        if let Some(seal) = lock(&self.state).sealed {
            return Err(sealed_error(seal));
        }
        if self.seal_check {
            self.file
                .read_exact_at(buf, SEAL_AT)
                .map_err(|e| WalError::WriteFailed(Arc::new(e)))?;
            if let Some(seal) = Seal::decode(buf).filter(|s| s.wal_id == self.wal_id) {
                tracing::error!(path = %self.path, by = seal.node_id, incarnation = seal.incarnation, "the WAL was sealed by a peer that recovered it: this broker was replaced and acknowledges nothing more");
                lock(&self.state).sealed = Some(seal);
                return Err(sealed_error(seal));
            }
        }
        if let Some(gate) = &self.ack_gate {
            gate.check().map_err(WalError::Fenced)?;
        }
        Ok(())
    }

    /// A failed write fails its records and everything queued behind them, and the next group
    /// goes where the failed one began, so the ring keeps no hole. Appends arriving meanwhile are
    /// refused, so that callers see every failure before they write again.
    fn fail_write(&self, header: GroupHeader, taken: Vec<Pending>, err: WalError) {
        if matches!(err, WalError::WriteFailed(_)) {
            tracing::error!(path = %self.path, pos = header.pos, error = %err, "WAL write failed; failing queued appends");
            self.meters.write_errors.inc();
        } else {
            tracing::warn!(path = %self.path, pos = header.pos, error = %err, "WAL write not acknowledged; failing queued appends");
        }
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
            if let Some(seal) = st.sealed {
                return Err(sealed_error(seal));
            }
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
                wal_id: self.wal_id,
            }
        };
        // A peer reading a sealed WAL relies on its trim point staying put (see `read_sealed`).
        if self.seal_check {
            if let Some(seal) =
                read_seal(&self.file, &self.path)?.filter(|s| s.wal_id == self.wal_id)
            {
                lock(&self.state).sealed = Some(seal);
                return Err(sealed_error(seal));
            }
        }
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
        if let Some(seal) = st.sealed {
            return Err(sealed_error(seal));
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

    #[derive(Debug, Default)]
    struct Gate(std::sync::atomic::AtomicBool);

    impl AckGate for Gate {
        fn check(&self) -> Result<(), String> {
            if self.0.load(std::sync::atomic::Ordering::SeqCst) {
                Err("session lapsed (test)".into())
            } else {
                Ok(())
            }
        }
    }

    /// A peer seals the WAL while its owner runs: the owner's next write is durable but not
    /// acknowledged, and every later append and trim is refused; the peer reads exactly what was
    /// acknowledged; the owner, started again, finds the seal and starts empty under a new id.
    #[tokio::test]
    async fn a_sealed_wal_acknowledges_nothing_more_and_starts_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal");
        let wal = FileWal::open(FileWalConfig {
            seal_check: true,
            ..config(dir.path(), 1 << 20)
        })
        .unwrap();
        let id = wal.wal_id();
        assert_eq!(
            FileWal::identity(&path).unwrap(),
            Some(WalIdentity {
                wal_id: id,
                sealed: None
            })
        );
        for i in 0..3 {
            conformance::append_and_wait(&wal, conformance::record(1, i, 100))
                .await
                .expect("before the seal");
        }
        let seal = Seal {
            wal_id: id,
            node_id: 2,
            incarnation: 5,
        };
        FileWal::seal(&path, seal).unwrap();
        match conformance::append_and_wait(&wal, conformance::record(1, 3, 100)).await {
            Err(WalError::Sealed {
                node_id: 2,
                incarnation: 5,
            }) => {}
            other => panic!("expected the seal to refuse the write, got {other:?}"),
        }
        assert!(matches!(
            conformance::append_and_wait(&wal, conformance::record(1, 3, 100)).await,
            Err(WalError::Sealed { .. })
        ));
        assert!(matches!(
            wal.trim(wal.next_seq()).await,
            Err(WalError::Sealed { .. })
        ));
        assert_eq!(wal.meters().refused_acks.get(), 1);
        let read: Vec<u64> = FileWal::read_sealed(&path, id)
            .unwrap()
            .iter()
            .map(|r| r.record.base_offset)
            .collect();
        assert_eq!(read, vec![0, 1, 2], "what was acknowledged, nothing else");
        wal.close().await;
        drop(wal);

        assert_eq!(
            FileWal::identity(&path).unwrap().and_then(|i| i.sealed),
            Some(seal)
        );
        match FileWal::open(config(dir.path(), 1 << 20)) {
            Err(WalError::Sealed { node_id: 2, .. }) => {}
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("a sealed WAL opened"),
        }
        let fresh = FileWal::start_empty(&path).unwrap();
        assert_ne!(fresh, id);
        let wal = FileWal::open(config(dir.path(), 1 << 20)).unwrap();
        assert_eq!(wal.wal_id(), fresh);
        assert!(wal.take_recovered().is_empty(), "nothing is replayed");
        conformance::append_and_wait(&wal, conformance::record(9, 0, 100))
            .await
            .expect("the fresh WAL takes writes");
        wal.close().await;
        drop(wal);
        assert_eq!(recovered(dir.path()).len(), 1);
    }

    /// The ack gate: while it refuses, writes fail (retriable, the WAL keeps going) and are not
    /// recovered; once it allows again, writes are acknowledged.
    #[tokio::test]
    async fn the_ack_gate_refuses_writes_while_closed() {
        let dir = tempfile::tempdir().unwrap();
        let gate = Arc::new(Gate::default());
        let wal = FileWal::open(FileWalConfig {
            ack_gate: Some(Arc::clone(&gate) as Arc<dyn AckGate>),
            ..config(dir.path(), 1 << 20)
        })
        .unwrap();
        append_with_payload(&wal, 0, 1, 100)
            .await
            .expect("open gate");
        gate.0.store(true, std::sync::atomic::Ordering::SeqCst);
        match append_with_payload(&wal, 1, 2, 100).await {
            Err(WalError::Fenced(why)) => assert!(why.contains("lapsed"), "{why}"),
            other => panic!("expected the gate to refuse, got {other:?}"),
        }
        gate.0.store(false, std::sync::atomic::Ordering::SeqCst);
        append_with_payload(&wal, 1, 3, 100)
            .await
            .expect("open again");
        wal.close().await;
        drop(wal);
        assert_eq!(recovered(dir.path()), vec![(0, 1), (1, 3)]);
    }

    #[test]
    fn a_peer_refuses_a_wal_with_another_id() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal");
        let id = FileWal::open(config(dir.path(), 1 << 20)).unwrap().wal_id();
        let seal = Seal {
            wal_id: id ^ 1,
            node_id: 2,
            incarnation: 1,
        };
        assert!(matches!(
            FileWal::seal(&path, seal),
            Err(WalError::WrongWal { .. })
        ));
        assert!(matches!(
            FileWal::read_sealed(&path, id ^ 1),
            Err(WalError::WrongWal { .. })
        ));
        assert_eq!(
            FileWal::identity(&path).unwrap().map(|i| i.sealed),
            Some(None)
        );
        assert_eq!(FileWal::identity(&dir.path().join("none")).unwrap(), None);
    }

    #[test]
    fn refuses_a_damaged_format_1_wal_with_a_clear_message() {
        let dir = tempfile::tempdir().unwrap();
        let mut v1 = vec![0u8; 4 * BLOCK as usize];
        v1[..8].copy_from_slice(&crate::format::SUPER_MAGIC_V1.to_le_bytes());
        std::fs::write(dir.path().join("wal"), v1).unwrap();
        match FileWal::open(config(dir.path(), 1 << 20)) {
            Err(WalError::Invalid { reason, .. }) => {
                assert!(reason.contains("format 1"), "{reason}")
            }
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("opened a format 1 WAL"),
        }
    }

    /// A WAL a later release wrote (its superblocks of a later format) is refused, named as
    /// such, and left as it is.
    #[test]
    fn refuses_a_wal_of_a_later_format_and_leaves_it() {
        let dir = tempfile::tempdir().unwrap();
        drop(FileWal::open(config(dir.path(), 1 << 20)).unwrap());
        let path = dir.path().join("wal");
        let mut bytes = std::fs::read(&path).unwrap();
        let mut superblocks = 0;
        for slot in 0..SUPERBLOCK_SLOTS as usize {
            // The magic's first byte on disk is its format digit (little-endian).
            let at = slot * BLOCK as usize;
            if bytes[at] == b'0' + crate::format::FORMAT {
                bytes[at] += 1;
                superblocks += 1;
            }
        }
        assert!(superblocks > 0, "no superblock of the current format");
        std::fs::write(&path, &bytes).unwrap();
        match FileWal::open(config(dir.path(), 1 << 20)) {
            Err(WalError::Invalid { reason, .. }) => {
                let want = format!(
                    "format {}, newer than this broker's",
                    crate::format::FORMAT + 1
                );
                assert!(reason.contains(&want), "{reason}")
            }
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("opened a WAL of a later format"),
        }
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "the WAL was changed");
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
