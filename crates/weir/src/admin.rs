//! Admin HTTP: `/metrics` (Prometheus text format), `/healthz` (the process is up), `/readyz`
//! (the broker serves Kafka requests). A few lines of HTTP/1.1 by hand: three GET routes do not
//! justify an HTTP framework in the build.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weir_metrics::{Counter, Histogram, HistogramSnapshot, BUCKETS};

#[derive(Clone)]
pub struct State {
    pub ready: Arc<AtomicBool>,
    pub engine: weir_storage::Engine,
    pub broker: Arc<weir_api::Broker>,
    pub network: Arc<weir_network::NetworkMeters>,
}

pub async fn serve(
    listener: TcpListener,
    state: State,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    let state = state.clone();
                    tokio::spawn(async move {
                        if let Err(e) = handle(stream, &state).await {
                            tracing::debug!(error = %e, "admin request failed");
                        }
                    });
                }
            }
            _ = shutdown.changed() => return,
        }
    }
}

async fn handle(mut stream: TcpStream, state: &State) -> std::io::Result<()> {
    let mut buf = vec![0u8; 8192];
    let mut n = 0;
    // Read until the end of the headers; requests have no body here.
    while n < buf.len() {
        let m = stream.read(&mut buf[n..]).await?;
        if m == 0 {
            break;
        }
        n += m;
        if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let head = String::from_utf8_lossy(&buf[..n]);
    let mut parts = head.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, ctype, body) = match (method, path) {
        ("GET", "/healthz") => ("200 OK", "text/plain", "ok\n".to_string()),
        ("GET", "/readyz") => {
            if state.ready.load(Ordering::SeqCst) {
                ("200 OK", "text/plain", "ready\n".to_string())
            } else {
                (
                    "503 Service Unavailable",
                    "text/plain",
                    "not ready\n".to_string(),
                )
            }
        }
        ("GET", "/metrics") => ("200 OK", "text/plain; version=0.0.4", render(state)),
        ("GET", _) => ("404 Not Found", "text/plain", "not found\n".to_string()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_string(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

fn counter(out: &mut String, name: &str, help: &str, labels: &str, c: &Counter) {
    let _ = writeln!(
        out,
        "# HELP weir_{name}_total {help}\n# TYPE weir_{name}_total counter"
    );
    let _ = writeln!(out, "weir_{name}_total{labels} {}", c.get());
}

fn gauge(out: &mut String, name: &str, help: &str, v: u64) {
    let _ = writeln!(
        out,
        "# HELP weir_{name} {help}\n# TYPE weir_{name} gauge\nweir_{name} {v}"
    );
}

fn histogram(out: &mut String, name: &str, help: &str, h: &Histogram) {
    let s: HistogramSnapshot = h.snapshot();
    let _ = writeln!(
        out,
        "# HELP weir_{name}_seconds {help}\n# TYPE weir_{name}_seconds histogram"
    );
    let mut cumulative = 0;
    for (i, n) in s.buckets.iter().enumerate().take(BUCKETS - 1) {
        cumulative += n;
        let le = HistogramSnapshot::bucket_upper_micros(i) as f64 / 1e6;
        let _ = writeln!(
            out,
            "weir_{name}_seconds_bucket{{le=\"{le}\"}} {cumulative}"
        );
    }
    let _ = writeln!(out, "weir_{name}_seconds_bucket{{le=\"+Inf\"}} {}", s.count);
    let _ = writeln!(out, "weir_{name}_seconds_sum {}", s.sum_micros as f64 / 1e6);
    let _ = writeln!(out, "weir_{name}_seconds_count {}", s.count);
}

fn render(state: &State) -> String {
    let mut o = String::with_capacity(16 << 10);
    let w = state.engine.wal().meters();
    let usage = state.engine.wal().usage();
    counter(
        &mut o,
        "wal_appends",
        "Records appended to the WAL.",
        "",
        &w.appends,
    );
    counter(
        &mut o,
        "wal_bytes_written",
        "Bytes written to the WAL device, padding included.",
        "",
        &w.bytes_written,
    );
    counter(
        &mut o,
        "wal_syncs",
        "WAL writes made durable (one per group commit).",
        "",
        &w.syncs,
    );
    counter(
        &mut o,
        "wal_write_errors",
        "Failed WAL writes.",
        "",
        &w.write_errors,
    );
    counter(
        &mut o,
        "wal_full_rejections",
        "Appends refused because the WAL was full.",
        "",
        &w.full_rejections,
    );
    histogram(
        &mut o,
        "wal_sync_latency",
        "Time of one WAL write plus its sync.",
        &w.sync_latency,
    );
    gauge(
        &mut o,
        "wal_capacity_bytes",
        "WAL capacity.",
        usage.capacity,
    );
    gauge(
        &mut o,
        "wal_used_bytes",
        "WAL bytes not yet trimmed.",
        usage.used,
    );

    let s = state.engine.meters();
    counter(
        &mut o,
        "storage_appends",
        "Batches appended and durable.",
        "",
        &s.appends,
    );
    histogram(
        &mut o,
        "storage_append_latency",
        "Append latency: offset assignment to durable.",
        &s.append_latency,
    );
    counter(
        &mut o,
        "log_cache_hits",
        "Reads served from the log cache.",
        "",
        &s.log_cache_hits,
    );
    counter(
        &mut o,
        "log_cache_misses",
        "Reads that went to objects.",
        "",
        &s.log_cache_misses,
    );
    counter(
        &mut o,
        "log_cache_evicted_bytes",
        "Bytes evicted from the log cache.",
        "",
        &s.log_cache_evicted_bytes,
    );
    gauge(
        &mut o,
        "log_cache_bytes",
        "Bytes in the log cache.",
        state.engine.log_cache_bytes(),
    );
    counter(
        &mut o,
        "block_cache_hits",
        "Object blocks served from the block cache.",
        "",
        &s.block_cache_hits,
    );
    counter(
        &mut o,
        "block_cache_misses",
        "Object blocks fetched with ranged GETs.",
        "",
        &s.block_cache_misses,
    );
    counter(
        &mut o,
        "block_cache_fill_bytes",
        "Bytes fetched into the block cache.",
        "",
        &s.block_cache_fill_bytes,
    );
    gauge(
        &mut o,
        "object_index_cache_bytes",
        "Bytes held by the cache of object indexes.",
        s.object_index_cache_bytes
            .load(std::sync::atomic::Ordering::Relaxed),
    );
    counter(
        &mut o,
        "uploads",
        "Uploads (objects written and committed together).",
        "",
        &s.uploads,
    );
    counter(
        &mut o,
        "objects_uploaded",
        "Objects written.",
        "",
        &s.objects_uploaded,
    );
    counter(
        &mut o,
        "upload_bytes",
        "Bytes of objects written.",
        "",
        &s.upload_bytes,
    );
    counter(
        &mut o,
        "upload_errors",
        "Failed object PUTs (retried).",
        "",
        &s.upload_errors,
    );
    counter(
        &mut o,
        "objects_deleted",
        "Objects deleted by retention and cleanup.",
        "",
        &s.objects_deleted,
    );

    let m = state.engine.object_meters();
    let _ = writeln!(o, "# HELP weir_object_requests_total Object-store requests by kind.\n# TYPE weir_object_requests_total counter");
    for (kind, c) in [
        ("put", &m.puts),
        ("get", &m.gets),
        ("delete", &m.deletes),
        ("list", &m.lists),
        ("multipart_part", &m.multipart_parts),
    ] {
        let _ = writeln!(
            o,
            "weir_object_requests_total{{kind=\"{kind}\"}} {}",
            c.get()
        );
    }
    let _ = writeln!(o, "# HELP weir_object_bytes_total Object-store bytes by direction.\n# TYPE weir_object_bytes_total counter");
    let _ = writeln!(
        o,
        "weir_object_bytes_total{{kind=\"put\"}} {}",
        m.put_bytes.get()
    );
    let _ = writeln!(
        o,
        "weir_object_bytes_total{{kind=\"get\"}} {}",
        m.get_bytes.get()
    );
    counter(
        &mut o,
        "object_errors",
        "Failed object-store requests.",
        "",
        &m.errors,
    );
    histogram(
        &mut o,
        "object_put_latency",
        "Object PUT latency.",
        &m.put_latency,
    );
    histogram(
        &mut o,
        "object_get_latency",
        "Object GET latency (to the first byte).",
        &m.get_latency,
    );

    let a = &state.broker.meters;
    let _ = writeln!(
        o,
        "# HELP weir_requests_total Kafka requests by API key.\n# TYPE weir_requests_total counter"
    );
    for (key, c) in a.requests.iter().enumerate() {
        if c.get() > 0 {
            let _ = writeln!(o, "weir_requests_total{{api_key=\"{key}\"}} {}", c.get());
        }
    }
    histogram(
        &mut o,
        "produce_latency",
        "Produce request latency, to durable.",
        &a.produce_latency,
    );
    histogram(
        &mut o,
        "fetch_latency",
        "Fetch request latency, long polls included.",
        &a.fetch_latency,
    );
    counter(
        &mut o,
        "produce_bytes",
        "Record bytes received by Produce.",
        "",
        &a.produce_bytes,
    );
    counter(
        &mut o,
        "fetch_bytes",
        "Record bytes returned by Fetch.",
        "",
        &a.fetch_bytes,
    );

    let n = &state.network;
    counter(
        &mut o,
        "connections_opened",
        "Kafka connections accepted.",
        "",
        &n.connections_opened,
    );
    counter(
        &mut o,
        "connections_closed",
        "Kafka connections closed.",
        "",
        &n.connections_closed,
    );
    counter(
        &mut o,
        "network_bytes_in",
        "Bytes received on the Kafka listener.",
        "",
        &n.bytes_in,
    );
    counter(
        &mut o,
        "network_bytes_out",
        "Bytes sent on the Kafka listener.",
        "",
        &n.bytes_out,
    );
    counter(
        &mut o,
        "rejected_requests",
        "Requests that closed their connection (malformed, oversized, unsupported).",
        "",
        &n.rejected_frames,
    );
    counter(
        &mut o,
        "connections_refused",
        "Connections closed at accept because max.connections were open.",
        "",
        &n.connections_refused,
    );
    counter(
        &mut o,
        "response_encode_errors",
        "Responses that did not encode at their request's version (answered UNKNOWN_SERVER_ERROR).",
        "",
        &n.response_encode_errors,
    );
    counter(
        &mut o,
        "request_handler_panics",
        "Request handlers that panicked (answered UNKNOWN_SERVER_ERROR).",
        "",
        &n.handler_panics,
    );
    counter(
        &mut o,
        "connection_read_pauses",
        "Times a connection stopped reading at the queued request bytes bound.",
        "",
        &n.read_pauses,
    );
    gauge(
        &mut o,
        "queued_request_bytes",
        "Request bytes read and not yet answered.",
        n.queued_request_bytes
            .load(std::sync::atomic::Ordering::Relaxed),
    );
    o
}
