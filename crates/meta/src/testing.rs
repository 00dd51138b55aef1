//! A private PostgreSQL server for tests: started on first use, shared by the tests of a process
//! that run at the same time, stopped and removed when the last of them lets go of it.
//!
//! Each test takes its own database ([`PgServer::create_database`]), so tests are independent
//! and run in parallel. Needs the PostgreSQL 15 binaries in `/usr/lib/postgresql/15/bin` (or
//! `WEIR_PG_BIN`). `initdb` refuses to run as root, so as root the server runs as the `postgres`
//! user.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// An error of the harness: which step failed and why.
#[derive(Debug, thiserror::Error)]
#[error("test PostgreSQL: {0}")]
pub struct Error(pub String);

pub struct PgServer {
    dir: tempfile::TempDir,
    port: u16,
    as_postgres: bool,
    next_db: AtomicU64,
}

static SHARED: Mutex<Weak<PgServer>> = Mutex::new(Weak::new());

fn bin(name: &str) -> PathBuf {
    let dir = std::env::var_os("WEIR_PG_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/postgresql/15/bin"));
    dir.join(name)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A loopback port that is free when picked and not handed out before in this run, for a server
/// the test starts (PostgreSQL, s3s-fs, a broker). The rule is the one every harness uses,
/// `python3 tests/harness/weir_harness ports 1` (below the ephemeral range, none twice); a run
/// is every process given the same `WEIR_HARNESS_PORTS_FILE` (`make test` sets one for all its
/// suites), else the test binaries of one `cargo test`.
pub fn free_port() -> Result<u16, Error> {
    let program = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/harness/weir_harness"
    );
    let ports_file = std::env::var_os("WEIR_HARNESS_PORTS_FILE").unwrap_or_else(|| {
        let cargo = std::os::unix::process::parent_id();
        std::env::temp_dir()
            .join(format!("weir-harness-ports-{cargo}"))
            .into_os_string()
    });
    let out = Command::new("python3")
        .args([program, "ports", "1"])
        .env("WEIR_HARNESS_PORTS_FILE", ports_file)
        .output()
        .map_err(|e| Error(format!("run the ports program {program}: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let port = text
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse();
    match port {
        Ok(port) if out.status.success() => Ok(port),
        _ => Err(Error(format!(
            "the ports program answered {text:?} ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))),
    }
}

impl PgServer {
    /// The server the running tests share, started if there is none.
    pub fn shared() -> Result<Arc<PgServer>, Error> {
        let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = shared.upgrade() {
            return Ok(s);
        }
        let s = Arc::new(PgServer::start()?);
        *shared = Arc::downgrade(&s);
        Ok(s)
    }

    /// Starts a new private server in a temporary directory.
    pub fn start() -> Result<PgServer, Error> {
        let dir = tempfile::Builder::new()
            .prefix("weir-pg-")
            .tempdir()
            .map_err(|e| Error(format!("creating a directory: {e}")))?;
        let as_postgres = is_root();
        if as_postgres {
            run(Command::new("chown").arg("postgres:").arg(dir.path()))?;
        }
        let data = dir.path().join("data");
        let mut server = PgServer {
            dir,
            port: 0,
            as_postgres,
            next_db: AtomicU64::new(0),
        };
        run(server.command("initdb").arg("-D").arg(&data).args([
            "-A",
            "trust",
            "-U",
            "weir",
            "--no-sync",
        ]))?;
        // Another process may take the port between our probe and the server's bind: try again.
        let mut last = None;
        for _ in 0..5 {
            let port = free_port()?;
            match server.pg_ctl_start(port) {
                Ok(()) => {
                    server.port = port;
                    return Ok(server);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error("starting the server".into())))
    }

    fn pg_ctl_start(&self, port: u16) -> Result<(), Error> {
        let opts = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.dir.path().display()
        );
        run(self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .arg("-l")
            .arg(self.dir.path().join("log"))
            .args(["-o", &opts, "-w", "start"]))
    }

    /// Stops the server (fast shutdown: clients are disconnected), as an outage of the
    /// metadata store; [`PgServer::start_again`] brings it back on the same port.
    pub fn stop(&self) -> Result<(), Error> {
        run(self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "fast", "-w", "stop"]))
    }

    /// Starts a server stopped by [`PgServer::stop`] again, on its port.
    pub fn start_again(&self) -> Result<(), Error> {
        self.pg_ctl_start(self.port)
    }

    fn command(&self, name: &str) -> Command {
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(bin(name));
            c
        } else {
            Command::new(bin(name))
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The URL of database `db` on this server.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://weir@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates a new, empty database and returns its URL.
    pub async fn create_database(&self) -> Result<String, Error> {
        let name = format!("t{}", self.next_db.fetch_add(1, Ordering::Relaxed));
        let (client, conn) = tokio_postgres::connect(&self.url("postgres"), tokio_postgres::NoTls)
            .await
            .map_err(|e| Error(format!("connecting: {e}")))?;
        let task = tokio::spawn(conn);
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .map_err(|e| Error(format!("creating database {name}: {e}")))?;
        drop(client);
        let _ = task.await;
        Ok(self.url(&name))
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if self.port == 0 {
            return;
        }
        let data = self.dir.path().join("data");
        if let Err(e) =
            run(self
                .command("pg_ctl")
                .arg("-D")
                .arg(&data)
                .args(["-m", "immediate", "-w", "stop"]))
        {
            eprintln!("{e}");
        }
    }
}

fn run(cmd: &mut Command) -> Result<(), Error> {
    let out = cmd
        .output()
        .map_err(|e| Error(format!("running {cmd:?}: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error(format!(
            "{cmd:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}
