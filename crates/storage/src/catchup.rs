//! A runtime of lower CPU priority for the broker's work that can wait: consumers' reads from
//! object storage, and building and writing the objects of uploads the WAL does not wait for.
//!
//! A consumer catching up reads as fast as the broker lets it; producers want their batches
//! acknowledged at once. On a machine whose cores are busy, the threads that finish a WAL sync
//! and answer a produce request wait behind the catch-up's work (GET bodies, checksums, frames),
//! and the produce tail grows while a consumer reads old data. The catch-up's reads therefore run
//! on worker threads of their own, niced (`storage.catchup_nice`): the scheduler gives them what
//! the produce path leaves, and all of it when the machine is otherwise idle.
//!
//! Uploads are the same kind of work. Building an object (a checksum over every byte of it,
//! 128 MiB by default) took 26-32 ms of one core in one piece: on one of the broker's own worker
//! threads it held up every request queued behind it there, once per upload
//! ([`CatchupRuntime::compute`]). Writing it (a copy into the page cache, or the HTTP client's
//! work) keeps a thread busy for hundreds of milliseconds. At a steady produce rate neither is
//! urgent; once the WAL fills, uploads run at the broker's priority again (`upload.rs`).

use std::future::Future;

use crate::error::{Result, StorageError};

/// The catch-up reads' runtime; without one (`nice` 0) reads run where they are awaited.
pub(crate) struct CatchupRuntime {
    runtime: Option<BackgroundRuntime>,
}

impl CatchupRuntime {
    /// A runtime of as many worker threads as the machine has cores, each `nice` steps below
    /// the thread that starts it (Linux: a thread's own nice value); none if `nice` is 0.
    pub fn new(nice: i32) -> Result<Self> {
        if nice == 0 {
            return Ok(CatchupRuntime { runtime: None });
        }
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let runtime = niced_runtime("weir-catchup", threads, nice)
            .map_err(|e| StorageError::Internal(format!("starting the catch-up runtime: {e}")))?;
        Ok(CatchupRuntime {
            runtime: Some(runtime),
        })
    }

    /// Runs `read` (a catch-up read, or an upload's PUT) on the catch-up runtime (with
    /// everything it spawns: its GETs and read-ahead) and waits for it. If the caller stops
    /// waiting, the read still runs to its end and fills the block cache, as a read-ahead GET
    /// would.
    pub async fn run<T, F>(&self, read: F) -> Result<T>
    where
        F: Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        match &self.runtime {
            None => read.await,
            Some(rt) => joined(rt.spawn(read).await)?,
        }
    }

    /// Runs the CPU-bound `work` on a blocking thread of the niced runtime (its threads are
    /// niced as its workers are) and waits for it; without the runtime, as [`compute_now`] does.
    /// Either way not on a worker thread, where it would stall the tasks queued there for as
    /// long as it runs.
    pub async fn compute<T, F>(&self, work: F) -> Result<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        match &self.runtime {
            Some(rt) => joined(rt.spawn_blocking(work).await),
            None => compute_now(work).await,
        }
    }
}

/// A runtime of `threads` workers named `name`, whose threads (workers and blocking ones) run
/// `nice` steps below the calling thread (Linux: a thread's own nice value): for the broker's
/// work that can wait (catch-up reads, uploads, Iceberg translation), which then never holds up
/// the produce path's threads and gets what they leave.
pub fn niced_runtime(name: &str, threads: usize, nice: i32) -> std::io::Result<BackgroundRuntime> {
    // Fixed here, from the broker's own value: a thread the runtime starts inherits the nice
    // value of the thread that starts it, which for blocking threads is often one of its own
    // niced workers, so lowering "from the current value" lowered those twice.
    let nice = (own_nice() + nice).min(19);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .thread_name(name)
        .enable_all()
        .on_thread_start(move || {
            if nice != own_nice() {
                set_nice(nice)
            }
        })
        .build()
        .map(|rt| BackgroundRuntime(Some(rt)))
}

/// A runtime that shuts down without waiting when dropped: its owner may be dropped inside
/// another runtime (an engine closed in a task, a task aborted when the broker starts again),
/// where tokio's blocking shutdown panics.
#[derive(Debug)]
pub struct BackgroundRuntime(Option<tokio::runtime::Runtime>);

impl std::ops::Deref for BackgroundRuntime {
    type Target = tokio::runtime::Runtime;

    fn deref(&self) -> &tokio::runtime::Runtime {
        // Taken only by drop.
        self.0.as_ref().expect("the runtime is there until dropped")
    }
}

impl Drop for BackgroundRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// Runs the CPU-bound `work` on a blocking thread of the caller's runtime, at the broker's
/// priority, and waits for it: work something waits for, off the worker threads.
pub async fn compute_now<T, F>(work: F) -> Result<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    joined(tokio::task::spawn_blocking(work).await)
}

fn joined<T>(got: std::result::Result<T, tokio::task::JoinError>) -> Result<T> {
    match got {
        Ok(got) => Ok(got),
        // The runtime shut down with the engine.
        Err(e) if e.is_cancelled() => Err(StorageError::Closed),
        Err(e) => Err(StorageError::Internal(format!(
            "a catch-up read or an upload panicked: {e}"
        ))),
    }
}

/// The calling thread's nice value (Linux: a thread's own); 0 elsewhere.
#[cfg(target_os = "linux")]
fn own_nice() -> i32 {
    // SAFETY: `gettid` and `getpriority` take and return plain integers; on Linux, PRIO_PROCESS
    // with a thread id reads that thread's nice value alone.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
}

#[cfg(not(target_os = "linux"))]
fn own_nice() -> i32 {
    0
}

/// Sets the calling thread's nice value to `nice`.
#[cfg(target_os = "linux")]
fn set_nice(nice: i32) {
    // SAFETY: as in `own_nice`; PRIO_PROCESS with a thread id sets that thread's value alone.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, nice) };
    if rc != 0 {
        tracing::warn!(
            nice,
            error = %std::io::Error::last_os_error(),
            "could not lower a catch-up thread's priority"
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn set_nice(_nice: i32) {}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_run_on_niced_threads_and_inline_without_them() {
        let before = own_nice();
        let niced = CatchupRuntime::new(7).expect("runtime");
        let got = niced.run(async { Ok(own_nice()) }).await.expect("read");
        assert_eq!(got, (before + 7).min(19));
        let inline = CatchupRuntime::new(0).expect("runtime");
        let got = inline.run(async { Ok(own_nice()) }).await.expect("read");
        assert_eq!(got, before);
        let failed: Result<()> = niced.run(async { Err(StorageError::Closed) }).await;
        assert!(matches!(failed, Err(StorageError::Closed)));
        let panicked: Result<()> = niced.run(async { panic!("a bug in a read") }).await;
        assert!(matches!(panicked, Err(StorageError::Internal(_))));
        // Blocking work a read starts (object_store's file reads do) on threads the niced
        // workers create: niced as they are, not twice.
        let got = niced
            .run(async {
                tokio::task::spawn_blocking(own_nice)
                    .await
                    .map_err(|e| StorageError::Internal(e.to_string()))
            })
            .await
            .expect("read");
        assert_eq!(got, (before + 7).min(19));
        // Dropped inside a runtime without panicking.
        drop(niced);
    }

    /// The Iceberg translator's task owns its niced runtime; a broker replaced while its session
    /// lapsed aborts its tasks and starts again, and the runtime was then dropped inside the
    /// aborted task: tokio panics when a runtime is dropped in an async context (a chaos run's
    /// pause fault found it).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_niced_runtime_dropped_with_an_aborted_task_does_not_panic() {
        let runtime = niced_runtime("weir-test", 1, 1).expect("runtime");
        let work = runtime.spawn(std::future::pending::<()>());
        let (started, running) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let _owned = runtime;
            let _ = started.send(());
            let _ = work.await;
        });
        running.await.expect("the task started");
        task.abort();
        let e = task.await.expect_err("aborted");
        assert!(e.is_cancelled(), "{e}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn work_computes_on_niced_threads_and_off_the_workers_without_them() {
        let before = own_nice();
        let worker = std::thread::current().id();
        let niced = CatchupRuntime::new(7).expect("runtime");
        let got = niced.compute(own_nice).await.expect("work");
        assert_eq!(got, (before + 7).min(19));
        let inline = CatchupRuntime::new(0).expect("runtime");
        let (nice, thread) = inline
            .compute(|| (own_nice(), std::thread::current().id()))
            .await
            .expect("work");
        assert_eq!(nice, before);
        assert_ne!(thread, worker, "the work ran on the caller's worker thread");
        let panicked: Result<()> = niced.compute(|| panic!("a bug in a build")).await;
        assert!(matches!(panicked, Err(StorageError::Internal(_))));
        drop(niced);
    }
}
