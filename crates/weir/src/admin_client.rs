//! The admin API's client side, for the subcommands that drive a running cluster (`weir drain`,
//! `weir link`): one HTTP/1.1 request at a time, bounded.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{bail, Context};

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
