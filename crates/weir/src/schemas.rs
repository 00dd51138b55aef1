//! `weir schemas`: the schema registry from the command line, through its REST API: list the
//! subjects, and import every schema of another Confluent-compatible registry with its ids and
//! versions (IMPORT mode), so that records already written with those ids stay readable.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::{json, Value};

#[derive(clap::Args)]
pub struct SchemasArgs {
    #[command(subcommand)]
    command: SchemasCommand,
    /// The registry: any Weir broker's `schema_registry.listen` (`http://user:password@host:port`
    /// with HTTP Basic credentials).
    #[arg(long, global = true, default_value = "http://127.0.0.1:8081")]
    registry: String,
}

#[derive(clap::Subcommand)]
enum SchemasCommand {
    /// Every subject: its versions, and the latest one's id and type.
    List {
        /// Soft-deleted subjects and versions too.
        #[arg(long)]
        deleted: bool,
    },
    /// Copy every live subject version of another registry (a Confluent-compatible URL) into
    /// this one with its id and version, then the compatibility configs: the registry is put in
    /// IMPORT mode for the copy and back in READWRITE mode after, whatever happens.
    Import {
        /// The registry to copy from.
        from: String,
        /// Import even though this registry has live subjects (ids that clash are refused one
        /// by one).
        #[arg(long)]
        force: bool,
    },
}

pub fn run(args: SchemasArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async {
        let target = Registry::new(&args.registry)?;
        match args.command {
            SchemasCommand::List { deleted } => list(&target, deleted).await,
            SchemasCommand::Import { from, force } => {
                import(&Registry::new(&from)?, &target, force).await
            }
        }
    })
}

/// A registry's REST API.
struct Registry {
    base: reqwest::Url,
    user: Option<(String, String)>,
    http: reqwest::Client,
}

/// Subjects in paths: every byte but unreserved ones percent-encoded.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Registry {
    fn new(url: &str) -> anyhow::Result<Registry> {
        let mut base = reqwest::Url::parse(url).with_context(|| format!("registry URL {url}"))?;
        let user = (!base.username().is_empty()).then(|| {
            (
                base.username().to_string(),
                base.password().unwrap_or_default().to_string(),
            )
        });
        // Credentials go in the Authorization header, not in every URL printed.
        let _ = base.set_username("");
        let _ = base.set_password(None);
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .context("building the HTTP client")?;
        Ok(Registry { base, user, http })
    }

    /// `method path` with `body`: the answer's JSON, or an error with the registry's message.
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let url = self
            .base
            .join(path.trim_start_matches('/'))
            .with_context(|| format!("{path} on {}", self.base))?;
        let method = reqwest::Method::from_bytes(method.as_bytes()).context("method")?;
        let mut req = self
            .http
            .request(method.clone(), url.clone())
            .header("Content-Type", "application/vnd.schemaregistry.v1+json");
        if let Some((u, p)) = &self.user {
            req = req.basic_auth(u, Some(p));
        }
        if let Some(b) = body {
            req = req.body(b.to_string());
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("{method} {url}"))?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .with_context(|| format!("{method} {url}"))?;
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if !status.is_success() {
            let message = value
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| value.to_string(), str::to_string);
            bail!("{method} {url}: {status}: {message}");
        }
        Ok(value)
    }

    async fn subjects(&self, deleted: bool) -> anyhow::Result<Vec<String>> {
        let v = self
            .call("GET", &format!("subjects?deleted={deleted}"), None)
            .await?;
        serde_json::from_value(v).context("the subjects")
    }

    async fn versions(&self, subject: &str, deleted: bool) -> anyhow::Result<Vec<u32>> {
        let v = self
            .call(
                "GET",
                &format!("subjects/{}/versions?deleted={deleted}", encode(subject)),
                None,
            )
            .await?;
        serde_json::from_value(v).context("the versions")
    }

    async fn version(&self, subject: &str, version: u32, deleted: bool) -> anyhow::Result<Value> {
        self.call(
            "GET",
            &format!(
                "subjects/{}/versions/{version}?deleted={deleted}",
                encode(subject)
            ),
            None,
        )
        .await
    }
}

async fn list(r: &Registry, deleted: bool) -> anyhow::Result<()> {
    let subjects = r.subjects(deleted).await?;
    println!(
        "{:<50} {:>9} {:>10} {:<9}",
        "SUBJECT", "VERSIONS", "LATEST ID", "TYPE"
    );
    for s in &subjects {
        let versions = r.versions(s, deleted).await?;
        let Some(latest) = versions.last() else {
            continue;
        };
        let v = r.version(s, *latest, deleted).await?;
        let shown: Vec<String> = versions.iter().map(u32::to_string).collect();
        println!(
            "{:<50} {:>9} {:>10} {:<9}",
            s,
            shown.join(","),
            v.get("id").and_then(Value::as_u64).unwrap_or_default(),
            v.get("schemaType")
                .and_then(Value::as_str)
                .unwrap_or("AVRO"),
        );
    }
    println!("{} subjects", subjects.len());
    Ok(())
}

/// One subject version to copy.
struct Item {
    subject: String,
    version: u32,
    id: u64,
    body: Value,
    /// The (subject, version) pairs its references name.
    needs: Vec<(String, u32)>,
}

async fn import(from: &Registry, to: &Registry, force: bool) -> anyhow::Result<()> {
    let mut items = Vec::new();
    for subject in from.subjects(false).await? {
        for version in from.versions(&subject, false).await? {
            let v = from.version(&subject, version, false).await?;
            items.push(item(&subject, version, &v)?);
        }
    }
    items.sort_by_key(|i| (i.id, i.subject.clone(), i.version));
    to.call(
        "PUT",
        &format!("mode?force={force}"),
        Some(json!({"mode": "IMPORT"})),
    )
    .await
    .context("putting the registry in IMPORT mode")?;
    let copied = copy(from, to, items).await;
    // Back to READWRITE whatever happened: IMPORT mode refuses every ordinary registration.
    let back = to
        .call("PUT", "mode", Some(json!({"mode": "READWRITE"})))
        .await
        .context("putting the registry back in READWRITE mode");
    let (schemas, configs) = copied?;
    back?;
    println!(
        "imported {schemas} subject versions with their ids and {configs} compatibility configs \
         from {}",
        from.base
    );
    Ok(())
}

fn item(subject: &str, version: u32, v: &Value) -> anyhow::Result<Item> {
    let id = v
        .get("id")
        .and_then(Value::as_u64)
        .with_context(|| format!("{subject} version {version} has no id"))?;
    let references = v.get("references").cloned().unwrap_or(json!([]));
    let needs = references
        .as_array()
        .map(|refs| {
            refs.iter()
                .filter_map(|r| {
                    Some((
                        r.get("subject")?.as_str()?.to_string(),
                        u32::try_from(r.get("version")?.as_u64()?).ok()?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut body = json!({
        "schema": v.get("schema").cloned().unwrap_or(Value::Null),
        "schemaType": v.get("schemaType").cloned().unwrap_or(json!("AVRO")),
        "references": references,
        "id": id,
        "version": version,
    });
    for key in ["metadata", "ruleSet"] {
        if let Some(x) = v.get(key).filter(|x| !x.is_null()) {
            body[key] = x.clone();
        }
    }
    Ok(Item {
        subject: subject.to_string(),
        version,
        id,
        body,
        needs,
    })
}

/// Registers every item once what it references is there (ascending ids, so usually in one
/// pass), then copies the compatibility configs; the counts.
async fn copy(from: &Registry, to: &Registry, items: Vec<Item>) -> anyhow::Result<(usize, usize)> {
    let mut done: BTreeSet<(String, u32)> = BTreeSet::new();
    let mut pending = items;
    let mut copied = 0;
    while !pending.is_empty() {
        let before = pending.len();
        let mut next = Vec::new();
        for i in pending {
            if !i.needs.iter().all(|n| done.contains(n)) {
                next.push(i);
                continue;
            }
            to.call(
                "POST",
                &format!("subjects/{}/versions", encode(&i.subject)),
                Some(i.body.clone()),
            )
            .await
            .with_context(|| {
                format!(
                    "importing {} version {} (id {})",
                    i.subject, i.version, i.id
                )
            })?;
            done.insert((i.subject, i.version));
            copied += 1;
        }
        if next.len() == before {
            let stuck: Vec<String> = next
                .iter()
                .map(|i| format!("{} version {}", i.subject, i.version))
                .collect();
            bail!(
                "these reference subject versions the source does not serve live: {}",
                stuck.join(", ")
            );
        }
        pending = next;
    }
    let mut configs = 0;
    let global = from.call("GET", "config", None).await?;
    to.call("PUT", "config", Some(config_body(&global))).await?;
    configs += 1;
    let subjects: BTreeSet<String> = done.iter().map(|(s, _)| s.clone()).collect();
    for s in subjects {
        // A subject without a config of its own answers 404 (40408): nothing to copy.
        if let Ok(c) = from
            .call("GET", &format!("config/{}", encode(&s)), None)
            .await
        {
            to.call(
                "PUT",
                &format!("config/{}", encode(&s)),
                Some(config_body(&c)),
            )
            .await?;
            configs += 1;
        }
    }
    Ok((copied, configs))
}

/// A config as read (`compatibilityLevel`), as PUT takes it (`compatibility`).
fn config_body(c: &Value) -> Value {
    let mut out = c.clone();
    if let Some(obj) = out.as_object_mut() {
        if let Some(level) = obj.remove("compatibilityLevel") {
            obj.insert("compatibility".into(), level);
        }
    }
    out
}
