//! `broker.zone = "auto"`: the broker finds its zone where it runs, before it starts serving.
//!
//! In a Kubernetes pod (`NODE_NAME` set from `spec.nodeName`, the API reachable with the pod's
//! service-account token) it is the node's `topology.kubernetes.io/zone` label; on a cloud
//! machine it is what the instance metadata service says: AWS's zone id (IMDSv2,
//! `placement/availability-zone-id`, the same in every account), GCP's zone
//! (`instance/zone`), Azure's `location-zone` (as AKS labels nodes). The cloud services are asked
//! at once, each bounded by `zones.discovery_timeout_ms`; none answering is an error that says
//! what each one said, since a broker in the wrong zone would send data across zones.

use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use reqwest::Client;

use crate::config::ZonesSection;

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

/// Finds the zone: Kubernetes first when the broker runs in a pod, then the clouds.
pub async fn discover(zones: &ZonesSection, env: &Env) -> anyhow::Result<Found> {
    let timeout = Duration::from_millis(zones.discovery_timeout_ms.max(1));
    let client = Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .no_proxy()
        .build()
        .context("making the HTTP client for zone discovery")?;
    let mut said = Vec::new();
    match kubernetes(zones, env, timeout).await {
        Ok(Some(zone)) => return Ok(found(zone, "kubernetes")),
        Ok(None) => {
            said.push("kubernetes: not in a pod (NODE_NAME or the API's address unset)".to_string())
        }
        // In a pod, the node's label is what its neighbours and the chart's spread go by; a
        // cloud's name for the zone may be spelt otherwise (AWS's zone id), so no fallback.
        Err(e) => bail!("broker.zone = auto: kubernetes: {e:#}"),
    }
    let base = zones.metadata_url.trim_end_matches('/');
    let (aws, gcp, azure) =
        tokio::join!(aws(&client, base), gcp(&client, base), azure(&client, base));
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

async fn text(request: reqwest::RequestBuilder) -> anyhow::Result<String> {
    let response = request.send().await?;
    let status = response.status();
    let body = response.text().await?;
    if !status.is_success() {
        bail!(
            "HTTP {status}: {}",
            body.chars().take(200).collect::<String>()
        );
    }
    Ok(body)
}

/// AWS: a session token first (IMDSv2), then the zone id.
async fn aws(client: &Client, base: &str) -> anyhow::Result<String> {
    let token = text(
        client
            .put(format!("{base}/latest/api/token"))
            .header("X-aws-ec2-metadata-token-ttl-seconds", "60"),
    )
    .await?;
    let zone = text(
        client
            .get(format!(
                "{base}/latest/meta-data/placement/availability-zone-id"
            ))
            .header("X-aws-ec2-metadata-token", token.trim()),
    )
    .await?;
    checked(&zone)
}

/// GCP: `projects/<number>/zones/<zone>`.
async fn gcp(client: &Client, base: &str) -> anyhow::Result<String> {
    let path = text(
        client
            .get(format!("{base}/computeMetadata/v1/instance/zone"))
            .header("Metadata-Flavor", "Google"),
    )
    .await?;
    checked(path.trim().rsplit('/').next().unwrap_or_default())
}

/// Azure: `<location>-<zone>`, as AKS labels its nodes; a machine in no zone has none.
async fn azure(client: &Client, base: &str) -> anyhow::Result<String> {
    let get = |what: &str| {
        client
            .get(format!(
                "{base}/metadata/instance/compute/{what}?api-version=2021-02-01&format=text"
            ))
            .header("Metadata", "true")
    };
    let zone = text(get("zone")).await?;
    if zone.trim().is_empty() {
        bail!("the machine is in no availability zone");
    }
    let location = text(get("location")).await?;
    checked(&format!("{}-{}", location.trim(), zone.trim()))
}

/// Kubernetes: the node's zone label, read with the pod's token. `None` outside a pod.
async fn kubernetes(
    zones: &ZonesSection,
    env: &Env,
    timeout: Duration,
) -> anyhow::Result<Option<String>> {
    let Some(node) = &env.node_name else {
        return Ok(None);
    };
    let api = match (&env.service, zones.kubernetes_api_url.is_empty()) {
        (_, false) => zones.kubernetes_api_url.trim_end_matches('/').to_string(),
        (Some((host, port)), true) => format!("https://{host}:{port}"),
        (None, true) => return Ok(None),
    };
    let dir = std::path::Path::new(&zones.kubernetes_credentials_dir);
    let token = std::fs::read_to_string(dir.join("token"))
        .with_context(|| format!("reading the service account's token in {}", dir.display()))?;
    let mut builder = Client::builder().timeout(timeout).no_proxy();
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

    fn zones(metadata_url: &str) -> ZonesSection {
        ZonesSection {
            metadata_url: metadata_url.to_string(),
            discovery_timeout_ms: 500,
            ..ZonesSection::default()
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
        let found = discover(&zones(&url), &Env::default())
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
        let found = discover(&zones(&url), &Env::default())
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
        let found = discover(&zones(&url), &Env::default())
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
        let cloud = server(|r| match r.path.as_str() {
            "/computeMetadata/v1/instance/zone" => Some((200, "projects/1/zones/x".into())),
            _ => not_found(),
        });
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("token"), "pod-token\n").expect("token");
        let mut z = zones(&cloud);
        z.kubernetes_api_url = api;
        z.kubernetes_credentials_dir = dir.path().display().to_string();
        let env = Env {
            node_name: Some("node-7".into()),
            service: None,
        };
        let found = discover(&z, &env).await.expect("found");
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
        let e = discover(&z, &env).await.expect_err("no zone");
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
        let e = discover(&zones(&url), &Env::default())
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
        let e = discover(&zones(&url), &Env::default())
            .await
            .expect_err("no zone");
        assert!(format!("{e:#}").contains("404"), "{e:#}");
    }
}
