//! Where the broker runs, as the cloud's instance metadata service and, in a pod, the
//! Kubernetes API say. Two uses:
//!
//! - `broker.zone = "auto"`: the zone, found before the broker starts serving. In a pod
//!   (`NODE_NAME` set from `spec.nodeName`, the API reachable with the pod's service-account
//!   token) it is the node's `topology.kubernetes.io/zone` label; on a cloud machine, AWS's zone
//!   id (IMDSv2, `placement/availability-zone-id`, the same in every account), GCP's zone
//!   (`instance/zone`) or Azure's `location-zone` (as AKS labels nodes). The clouds are asked at
//!   once; none answering is an error that says what each said, since a broker in the wrong
//!   zone would send data across zones. In a pod, a node that cannot be read or has no zone
//!   label is an error too, not a guess from the cloud.
//! - Interruption notices (`cloud.interruption_watch = "auto"`): a broker keeps nothing, so it
//!   can run on spot or preemptible machines; when the cloud says its machine will be taken
//!   back (AWS `spot/instance-action`, about two minutes ahead; GCP `instance/preempted`, about
//!   30 s; Azure Scheduled Events `Preempt` or `Terminate`, at least 30 s), the broker leaves as
//!   on SIGTERM: its partitions move, its WAL is uploaded.
//!
//! Every request is bounded by `cloud.request_timeout_ms`.

use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use reqwest::Client;

use crate::config::CloudSection;

/// The value of `broker.zone` that asks for discovery.
pub const AUTO: &str = "auto";

/// Where the zone came from, and the zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub zone: String,
    pub source: &'static str,
}

/// What discovery reads of the process's environment.
#[derive(Debug, Clone, Default)]
pub struct Env {
    /// `NODE_NAME`, set from the pod's `spec.nodeName`.
    pub node_name: Option<String>,
    /// `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT`, set in every pod.
    pub service: Option<(String, String)>,
}

impl Env {
    pub fn of_process() -> Env {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Env {
            node_name: var("NODE_NAME"),
            service: var("KUBERNETES_SERVICE_HOST").zip(var("KUBERNETES_SERVICE_PORT")),
        }
    }
}

/// The settings checked before anything starts.
pub fn check(cloud: &CloudSection) -> anyhow::Result<()> {
    if !matches!(cloud.interruption_watch.as_str(), "auto" | "off") {
        bail!(
            "cloud.interruption_watch is {:?}: it must be auto or off",
            cloud.interruption_watch
        );
    }
    Ok(())
}

fn timeout(cloud: &CloudSection) -> Duration {
    Duration::from_millis(cloud.request_timeout_ms.max(1))
}

/// The client for the metadata service: no proxy (it is link-local), every request bounded.
fn metadata_client(cloud: &CloudSection) -> anyhow::Result<Client> {
    Client::builder()
        .timeout(timeout(cloud))
        .connect_timeout(timeout(cloud))
        .no_proxy()
        .build()
        .context("making the HTTP client for the instance metadata service")
}

fn base(cloud: &CloudSection) -> &str {
    cloud.metadata_url.trim_end_matches('/')
}

/// Finds the zone: Kubernetes first when the broker runs in a pod, then the clouds.
pub async fn discover_zone(cloud: &CloudSection, env: &Env) -> anyhow::Result<Found> {
    let mut said = Vec::new();
    match kubernetes_zone(cloud, env).await {
        Ok(Some(zone)) => return Ok(found(zone, "kubernetes")),
        Ok(None) => {
            said.push("kubernetes: not in a pod (NODE_NAME or the API's address unset)".to_string())
        }
        // In a pod, the node's label is what its neighbours and the chart's spread go by; a
        // cloud's name for the zone may be spelt otherwise (AWS's zone id), so no fallback.
        Err(e) => bail!("broker.zone = auto: kubernetes: {e:#}"),
    }
    let client = metadata_client(cloud)?;
    let base = base(cloud);
    let (aws, gcp, azure) = tokio::join!(
        aws_zone(&client, base),
        gcp_zone(&client, base),
        azure_zone(&client, base)
    );
    for (source, answer) in [("aws", aws), ("gcp", gcp), ("azure", azure)] {
        match answer {
            Ok(zone) => return Ok(found(zone, source)),
            Err(e) => said.push(format!("{source}: {e:#}")),
        }
    }
    bail!(
        "broker.zone = auto found no zone ({}); set broker.zone to the zone's name",
        said.join("; ")
    )
}

fn found(zone: String, source: &'static str) -> Found {
    Found { zone, source }
}

/// A zone as a service gave it: one line, no spaces, not empty.
fn checked(zone: &str) -> anyhow::Result<String> {
    let zone = zone.trim();
    if zone.is_empty() || zone.len() > 128 || zone.chars().any(char::is_whitespace) {
        bail!("not a zone: {zone:?}");
    }
    Ok(zone.to_string())
}

/// The body of a successful answer; `None` for 404 (nothing there).
async fn body_or_none(request: reqwest::RequestBuilder) -> anyhow::Result<Option<String>> {
    let response = request.send().await?;
    let status = response.status();
    let body = response.text().await?;
    if status == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if !status.is_success() {
        bail!(
            "HTTP {status}: {}",
            body.chars().take(200).collect::<String>()
        );
    }
    Ok(Some(body))
}

async fn text(request: reqwest::RequestBuilder) -> anyhow::Result<String> {
    body_or_none(request)
        .await?
        .ok_or_else(|| anyhow!("HTTP 404 Not Found"))
}

/// AWS IMDSv2: a session token for the requests after it.
async fn aws_token(client: &Client, base: &str) -> anyhow::Result<String> {
    let token = text(
        client
            .put(format!("{base}/latest/api/token"))
            .header("X-aws-ec2-metadata-token-ttl-seconds", "60"),
    )
    .await?;
    Ok(token.trim().to_string())
}

fn aws_get(client: &Client, base: &str, token: &str, path: &str) -> reqwest::RequestBuilder {
    client
        .get(format!("{base}/latest/meta-data/{path}"))
        .header("X-aws-ec2-metadata-token", token)
}

/// AWS: the zone id.
async fn aws_zone(client: &Client, base: &str) -> anyhow::Result<String> {
    let token = aws_token(client, base).await?;
    let zone = text(aws_get(
        client,
        base,
        &token,
        "placement/availability-zone-id",
    ))
    .await?;
    checked(&zone)
}

fn gcp_get(client: &Client, base: &str, path: &str) -> reqwest::RequestBuilder {
    client
        .get(format!("{base}/computeMetadata/v1/instance/{path}"))
        .header("Metadata-Flavor", "Google")
}

/// GCP: `projects/<number>/zones/<zone>`.
async fn gcp_zone(client: &Client, base: &str) -> anyhow::Result<String> {
    let path = text(gcp_get(client, base, "zone")).await?;
    checked(path.trim().rsplit('/').next().unwrap_or_default())
}

fn azure_get(client: &Client, base: &str, what: &str) -> reqwest::RequestBuilder {
    client
        .get(format!(
            "{base}/metadata/instance/compute/{what}?api-version=2021-02-01&format=text"
        ))
        .header("Metadata", "true")
}

/// Azure: `<location>-<zone>`, as AKS labels its nodes; a machine in no zone has none.
async fn azure_zone(client: &Client, base: &str) -> anyhow::Result<String> {
    let zone = text(azure_get(client, base, "zone")).await?;
    if zone.trim().is_empty() {
        bail!("the machine is in no availability zone");
    }
    let location = text(azure_get(client, base, "location")).await?;
    checked(&format!("{}-{}", location.trim(), zone.trim()))
}

/// Kubernetes: the node's zone label, read with the pod's token. `None` outside a pod.
async fn kubernetes_zone(cloud: &CloudSection, env: &Env) -> anyhow::Result<Option<String>> {
    let Some(node) = &env.node_name else {
        return Ok(None);
    };
    let api = match (&env.service, cloud.kubernetes_api_url.is_empty()) {
        (_, false) => cloud.kubernetes_api_url.trim_end_matches('/').to_string(),
        (Some((host, port)), true) => format!("https://{host}:{port}"),
        (None, true) => return Ok(None),
    };
    let dir = std::path::Path::new(&cloud.kubernetes_credentials_dir);
    let token = std::fs::read_to_string(dir.join("token"))
        .with_context(|| format!("reading the service account's token in {}", dir.display()))?;
    let mut builder = Client::builder().timeout(timeout(cloud)).no_proxy();
    if let Ok(ca) = std::fs::read(dir.join("ca.crt")) {
        let ca = reqwest::Certificate::from_pem(&ca).context("the cluster's CA (ca.crt)")?;
        builder = builder.add_root_certificate(ca);
    }
    let client = builder
        .build()
        .context("making the HTTP client for the Kubernetes API")?;
    let body = text(
        client
            .get(format!("{api}/api/v1/nodes/{node}"))
            .bearer_auth(token.trim()),
    )
    .await
    .with_context(|| format!("reading node {node} (the service account needs get on nodes)"))?;
    let node_json: serde_json::Value = serde_json::from_str(&body).context("the node as JSON")?;
    let label = node_json["metadata"]["labels"]["topology.kubernetes.io/zone"]
        .as_str()
        .ok_or_else(|| anyhow!("node {node} has no topology.kubernetes.io/zone label"))?;
    checked(label).map(Some)
}

/// The clouds whose interruption notices the broker reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cloud {
    Aws,
    Gcp,
    /// With the machine's name: Azure's scheduled events name the machines they concern.
    Azure,
}

/// The cloud is taking the machine back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub cloud: Cloud,
    /// What the cloud said (AWS's action and time, Azure's event).
    pub what: String,
}

/// Which cloud's metadata service answers here, if any (asked at once).
async fn detect(client: &Client, base: &str) -> Option<(Cloud, String)> {
    let (aws, gcp, azure) = tokio::join!(
        aws_token(client, base),
        text(gcp_get(client, base, "id")),
        text(azure_get(client, base, "name")),
    );
    match (aws, gcp, azure) {
        (Ok(_), _, _) => Some((Cloud::Aws, String::new())),
        (_, Ok(_), _) => Some((Cloud::Gcp, String::new())),
        (_, _, Ok(name)) => Some((Cloud::Azure, name.trim().to_string())),
        _ => None,
    }
}

/// Whether the cloud says, now, that the machine is to be taken back.
async fn notice(
    client: &Client,
    base: &str,
    cloud: Cloud,
    machine: &str,
) -> anyhow::Result<Option<String>> {
    match cloud {
        Cloud::Aws => {
            let token = aws_token(client, base).await?;
            let action =
                body_or_none(aws_get(client, base, &token, "spot/instance-action")).await?;
            Ok(action.map(|a| a.trim().to_string()))
        }
        Cloud::Gcp => {
            let preempted = text(gcp_get(client, base, "preempted")).await?;
            Ok((preempted.trim() == "TRUE").then(|| "preempted".to_string()))
        }
        Cloud::Azure => {
            let events = text(
                client
                    .get(format!(
                        "{base}/metadata/scheduledevents?api-version=2020-07-01"
                    ))
                    .header("Metadata", "true"),
            )
            .await?;
            azure_eviction(&events, machine)
        }
    }
}

/// A `Preempt` or `Terminate` event among Azure's scheduled events that concerns `machine`.
fn azure_eviction(events: &str, machine: &str) -> anyhow::Result<Option<String>> {
    let events: serde_json::Value =
        serde_json::from_str(events).context("Azure's scheduled events as JSON")?;
    let empty = Vec::new();
    for e in events["Events"].as_array().unwrap_or(&empty) {
        let kind = e["EventType"].as_str().unwrap_or_default();
        let resources = e["Resources"].as_array().unwrap_or(&empty);
        let ours = resources.is_empty() || resources.iter().any(|r| r.as_str() == Some(machine));
        if matches!(kind, "Preempt" | "Terminate") && ours {
            let id = e["EventId"].as_str().unwrap_or_default();
            let not_before = e["NotBefore"].as_str().unwrap_or_default();
            return Ok(Some(format!("{kind} {id}, not before {not_before}")));
        }
    }
    Ok(None)
}

/// Resolves when the cloud says the machine is to be taken back; never when the watch is off
/// or no cloud's metadata service answers here. Failed reads are logged (once in a row) and
/// read again at the next interval.
pub async fn interruption(cloud: CloudSection) -> Notice {
    if cloud.interruption_watch != "auto" {
        return std::future::pending().await;
    }
    let Ok(client) = metadata_client(&cloud) else {
        return std::future::pending().await;
    };
    let base = base(&cloud).to_string();
    let Some((which, machine)) = detect(&client, &base).await else {
        tracing::debug!(
            "no cloud's metadata service answers here: not watching for interruption notices"
        );
        return std::future::pending().await;
    };
    tracing::info!(cloud = ?which, "watching for interruption notices");
    let every = Duration::from_millis(cloud.interruption_poll_ms.max(100));
    let mut failing = false;
    loop {
        match notice(&client, &base, which, &machine).await {
            Ok(Some(what)) => return Notice { cloud: which, what },
            Ok(None) => failing = false,
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %format!("{e:#}"), cloud = ?which, "reading the interruption notice failed; reading it again");
            }
            Err(_) => {}
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpListener;
    use std::time::Instant;

    /// A request as the test server saw it.
    struct Request {
        method: String,
        path: String,
        headers: Vec<(String, String)>,
    }

    impl Request {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        }
    }

    /// An HTTP server on a loopback port answering each request with `answer`'s status and
    /// body (`None`: never answers). Returns its base URL.
    fn server(answer: impl Fn(&Request) -> Option<(u16, String)> + Send + 'static) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut reader = BufReader::new(conn.try_clone().expect("clone"));
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let mut words = line.split_whitespace();
                let method = words.next().unwrap_or_default().to_string();
                let path = words.next().unwrap_or_default().to_string();
                let mut headers = Vec::new();
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
                        break;
                    }
                    if let Some((k, v)) = h.trim().split_once(':') {
                        headers.push((k.trim().to_string(), v.trim().to_string()));
                    }
                }
                let request = Request {
                    method,
                    path,
                    headers,
                };
                match answer(&request) {
                    Some((status, body)) => {
                        let _ = write!(
                            conn,
                            "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                    }
                    // Held open, never answered.
                    None => std::thread::sleep(Duration::from_secs(30)),
                }
            }
        });
        url
    }

    fn cloud(metadata_url: &str) -> CloudSection {
        CloudSection {
            metadata_url: metadata_url.to_string(),
            request_timeout_ms: 500,
            interruption_poll_ms: 100,
            ..CloudSection::default()
        }
    }

    fn not_found() -> Option<(u16, String)> {
        Some((404, "no".into()))
    }

    #[tokio::test]
    async fn aws_gives_its_zone_id_to_a_session_token() {
        let url = server(|r| match (r.method.as_str(), r.path.as_str()) {
            ("PUT", "/latest/api/token")
                if r.header("X-aws-ec2-metadata-token-ttl-seconds").is_some() =>
            {
                Some((200, "tok-1".into()))
            }
            ("GET", "/latest/meta-data/placement/availability-zone-id")
                if r.header("X-aws-ec2-metadata-token") == Some("tok-1") =>
            {
                Some((200, "use1-az4".into()))
            }
            ("GET", "/latest/meta-data/placement/availability-zone-id") => {
                Some((401, "token required".into()))
            }
            _ => not_found(),
        });
        let found = discover_zone(&cloud(&url), &Env::default())
            .await
            .expect("found");
        assert_eq!(
            found,
            Found {
                zone: "use1-az4".into(),
                source: "aws"
            }
        );
    }

    #[tokio::test]
    async fn gcp_gives_the_last_part_of_its_zone_path() {
        let url = server(|r| match r.path.as_str() {
            "/computeMetadata/v1/instance/zone"
                if r.header("Metadata-Flavor") == Some("Google") =>
            {
                Some((200, "projects/1234/zones/us-central1-b".into()))
            }
            _ => not_found(),
        });
        let found = discover_zone(&cloud(&url), &Env::default())
            .await
            .expect("found");
        assert_eq!(
            found,
            Found {
                zone: "us-central1-b".into(),
                source: "gcp"
            }
        );
    }

    #[tokio::test]
    async fn azure_gives_location_and_zone_as_aks_labels_nodes() {
        let url = server(|r| {
            let p = r.path.as_str();
            match r.header("Metadata") {
                Some("true") if p.starts_with("/metadata/instance/compute/zone?") => {
                    Some((200, "2".into()))
                }
                Some("true") if p.starts_with("/metadata/instance/compute/location?") => {
                    Some((200, "eastus".into()))
                }
                _ => not_found(),
            }
        });
        let found = discover_zone(&cloud(&url), &Env::default())
            .await
            .expect("found");
        assert_eq!(
            found,
            Found {
                zone: "eastus-2".into(),
                source: "azure"
            }
        );
    }

    #[tokio::test]
    async fn in_a_pod_the_nodes_zone_label_wins() {
        let api = server(|r| {
            if r.path == "/api/v1/nodes/node-7"
                && r.header("Authorization") == Some("Bearer pod-token")
            {
                let node = r#"{"metadata":{"name":"node-7","labels":{"topology.kubernetes.io/zone":"eu-west-1c"}}}"#;
                Some((200, node.into()))
            } else {
                Some((403, "forbidden".into()))
            }
        });
        // The cloud answers too, with another name: the node's label is what a pod's
        // neighbours (and the chart's spread) go by.
        let cloud_url = server(|r| match r.path.as_str() {
            "/computeMetadata/v1/instance/zone" => Some((200, "projects/1/zones/x".into())),
            _ => not_found(),
        });
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("token"), "pod-token\n").expect("token");
        let mut z = cloud(&cloud_url);
        z.kubernetes_api_url = api;
        z.kubernetes_credentials_dir = dir.path().display().to_string();
        let env = Env {
            node_name: Some("node-7".into()),
            service: None,
        };
        let found = discover_zone(&z, &env).await.expect("found");
        assert_eq!(
            found,
            Found {
                zone: "eu-west-1c".into(),
                source: "kubernetes"
            }
        );

        // A node without the label: a clear error, not a guess from the cloud.
        let env = Env {
            node_name: Some("node-8".into()),
            service: None,
        };
        let e = discover_zone(&z, &env).await.expect_err("no zone");
        assert!(
            format!("{e:#}").contains("kubernetes: reading node node-8"),
            "{e:#}"
        );
    }

    #[tokio::test]
    async fn nowhere_to_ask_is_a_clear_error_within_the_timeout() {
        // Every request held open: each source gives up at the timeout, all at once.
        let url = server(|_| None);
        let t = Instant::now();
        let e = discover_zone(&cloud(&url), &Env::default())
            .await
            .expect_err("no zone");
        let said = format!("{e:#}");
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "took {:?}",
            t.elapsed()
        );
        for source in [
            "kubernetes: not in a pod",
            "aws:",
            "gcp:",
            "azure:",
            "set broker.zone",
        ] {
            assert!(said.contains(source), "{source:?} not in {said}");
        }
        // And refusals are named as such.
        let url = server(|_| not_found());
        let e = discover_zone(&cloud(&url), &Env::default())
            .await
            .expect_err("no zone");
        assert!(format!("{e:#}").contains("404"), "{e:#}");
    }

    /// Serves `answer` until `flip` is set, then `after`.
    fn flipping(
        answer: impl Fn(&Request, bool) -> Option<(u16, String)> + Send + 'static,
    ) -> (String, std::sync::Arc<std::sync::atomic::AtomicBool>) {
        let flip = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let f = std::sync::Arc::clone(&flip);
        let url = server(move |r| answer(r, f.load(std::sync::atomic::Ordering::SeqCst)));
        (url, flip)
    }

    /// Runs the watch; sets `flip` after a while; the notice it returns, if within 5 s.
    async fn watch_until_flipped(
        url: &str,
        flip: &std::sync::atomic::AtomicBool,
    ) -> Option<Notice> {
        let watch = tokio::spawn(interruption(cloud(url)));
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(!watch.is_finished(), "a notice before the cloud gave one");
        flip.store(true, std::sync::atomic::Ordering::SeqCst);
        tokio::time::timeout(Duration::from_secs(5), watch)
            .await
            .ok()
            .map(|r| r.expect("the watch"))
    }

    #[tokio::test]
    async fn aws_spot_instance_action_is_a_notice() {
        let (url, flip) = flipping(|r, flipped| match (r.method.as_str(), r.path.as_str()) {
            ("PUT", "/latest/api/token") => Some((200, "tok".into())),
            ("GET", "/latest/meta-data/spot/instance-action")
                if r.header("X-aws-ec2-metadata-token") == Some("tok") && flipped =>
            {
                Some((
                    200,
                    r#"{"action": "terminate", "time": "2026-12-06T04:00:00Z"}"#.into(),
                ))
            }
            _ => not_found(),
        });
        let n = watch_until_flipped(&url, &flip).await.expect("a notice");
        assert_eq!(n.cloud, Cloud::Aws);
        assert!(n.what.contains("terminate"), "{n:?}");
    }

    #[tokio::test]
    async fn gcp_preempted_is_a_notice() {
        let (url, flip) =
            flipping(
                |r, flipped| match (r.path.as_str(), r.header("Metadata-Flavor")) {
                    ("/computeMetadata/v1/instance/id", Some("Google")) => Some((200, "42".into())),
                    ("/computeMetadata/v1/instance/preempted", Some("Google")) => {
                        Some((200, if flipped { "TRUE" } else { "FALSE" }.into()))
                    }
                    _ => not_found(),
                },
            );
        let n = watch_until_flipped(&url, &flip).await.expect("a notice");
        assert_eq!(
            n,
            Notice {
                cloud: Cloud::Gcp,
                what: "preempted".into()
            }
        );
    }

    #[tokio::test]
    async fn azure_preempt_of_this_machine_is_a_notice_of_another_is_not() {
        let (url, flip) = flipping(|r, flipped| {
            let p = r.path.as_str();
            if r.header("Metadata") != Some("true") {
                return not_found();
            }
            if p.starts_with("/metadata/instance/compute/name?") {
                return Some((200, "vm-1".into()));
            }
            if p.starts_with("/metadata/scheduledevents?") {
                let machine = if flipped { "vm-1" } else { "vm-2" };
                let events = format!(
                    r#"{{"DocumentIncarnation": 3, "Events": [{{"EventId": "E1", "EventType": "Preempt", "ResourceType": "VirtualMachine", "Resources": ["{machine}"], "EventStatus": "Scheduled", "NotBefore": "Sun, 06 Dec 2026 04:00:00 GMT"}}]}}"#
                );
                return Some((200, events));
            }
            not_found()
        });
        let n = watch_until_flipped(&url, &flip).await.expect("a notice");
        assert_eq!(n.cloud, Cloud::Azure);
        assert!(n.what.starts_with("Preempt E1"), "{n:?}");
    }

    #[tokio::test]
    async fn no_cloud_or_the_watch_off_is_never_a_notice() {
        let url = server(|_| not_found());
        let quiet = tokio::time::timeout(Duration::from_secs(1), interruption(cloud(&url))).await;
        assert!(quiet.is_err(), "a notice from nowhere: {quiet:?}");
        let (url, flip) = flipping(|r, _| match r.path.as_str() {
            "/computeMetadata/v1/instance/id" => Some((200, "42".into())),
            "/computeMetadata/v1/instance/preempted" => Some((200, "TRUE".into())),
            _ => not_found(),
        });
        flip.store(true, std::sync::atomic::Ordering::SeqCst);
        let off = CloudSection {
            interruption_watch: "off".into(),
            ..cloud(&url)
        };
        let quiet = tokio::time::timeout(Duration::from_secs(1), interruption(off)).await;
        assert!(quiet.is_err(), "a notice with the watch off: {quiet:?}");
        assert!(check(&CloudSection {
            interruption_watch: "sometimes".into(),
            ..cloud(&url)
        })
        .is_err());
    }
}
