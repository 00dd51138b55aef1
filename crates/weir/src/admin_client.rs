//! The admin API's client side, for the subcommands that drive a running cluster (`weir drain`,
//! `weir link`): one HTTP/1.1 request at a time, bounded.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{bail, Context};

/// Which broker's admin API a subcommand drives, and its token: the arguments every such
/// subcommand takes.
#[derive(clap::Args)]
pub struct AdminTarget {
    /// Admin address (host:port) of any broker of the cluster.
    #[arg(long, global = true, default_value = "127.0.0.1:9644")]
    pub admin: String,
    /// The brokers' `broker.admin_token`, if they have one.
    #[arg(
        long,
        global = true,
        env = "WEIR_BROKER_ADMIN_TOKEN",
        hide_env_values = true
    )]
    pub admin_token: Option<String>,
}

impl AdminTarget {
    /// One request to the target (see [`call`]).
    pub fn call(&self, method: &str, path: &str, body: &str) -> anyhow::Result<(u16, String)> {
        call(&self.admin, self.admin_token.as_deref(), method, path, body)
    }
}

/// One HTTP/1.1 request to the admin API at `admin` with a JSON `body` (may be empty); returns
/// the status and the body.
pub fn call(
    admin: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: &str,
) -> anyhow::Result<(u16, String)> {
    let mut s = TcpStream::connect(admin).with_context(|| format!("connecting to {admin}"))?;
    // Creating a link waits for its source to answer (the link's request.timeout.ms).
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {admin}\r\n{auth}Content-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let Some((head, body)) = raw.split_once("\r\n\r\n") else {
        bail!("no HTTP answer from {admin}")
    };
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("no HTTP status")?;
    Ok((status, body.to_string()))
}
