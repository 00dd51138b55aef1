//! `weir link`: cluster links (mirroring another Kafka cluster at its offsets) through any
//! broker's admin API: create one from a JSON definition, show them, delete one.

use anyhow::{bail, Context};

use crate::admin_client::call;

#[derive(clap::Args)]
pub struct LinkArgs {
    #[command(subcommand)]
    command: LinkCommand,
    #[command(flatten)]
    target: crate::admin_client::AdminTarget,
}

#[derive(clap::Subcommand)]
enum LinkCommand {
    /// Define a link from a JSON file ('-': standard input); see docs/links.md.
    Create {
        /// The definition: {"name", "bootstrap.servers", "topics": [...], ...}.
        file: String,
    },
    /// Show every link, or one: its topics' states and the lag of the partitions the broker
    /// asked leads.
    Status { name: Option<String> },
    /// Promote the link's topics (all, or those named): wait until each mirror has every
    /// record its source had when this was run, then make it writable. Stop the producers at
    /// the source first.
    Promote {
        name: String,
        /// A topic to promote (repeat it for several); none: every topic the link mirrors.
        #[arg(long = "topic")]
        topics: Vec<String>,
        /// How long the mirror may take to get there.
        #[arg(long, default_value_t = 120)]
        timeout_secs: u64,
    },
    /// Remove a link (refused while it mirrors topics, unless --force, which leaves them as
    /// ordinary, writable topics).
    Delete {
        name: String,
        #[arg(long)]
        force: bool,
    },
}

pub fn run(args: LinkArgs) -> anyhow::Result<()> {
    let token = args.target.admin_token.as_deref();
    if let LinkCommand::Promote {
        name,
        topics,
        timeout_secs,
    } = &args.command
    {
        return promote(&args.target.admin, token, name, topics, *timeout_secs);
    }
    let (method, path, body) = match &args.command {
        LinkCommand::Create { file } => {
            let text = if file == "-" {
                std::io::read_to_string(std::io::stdin()).context("reading standard input")?
            } else {
                std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?
            };
            ("POST", "/v1/links".to_string(), text)
        }
        LinkCommand::Status { name: None } => ("GET", "/v1/links".to_string(), String::new()),
        LinkCommand::Status { name: Some(n) } => ("GET", format!("/v1/links/{n}"), String::new()),
        LinkCommand::Promote { .. } => unreachable!("handled above"),
        LinkCommand::Delete { name, force } => (
            "DELETE",
            format!(
                "/v1/links/{name}{}",
                if *force { "?force=true" } else { "" }
            ),
            String::new(),
        ),
    };
    let (status, answer) = args.target.call(method, &path, &body)?;
    if !(200..300).contains(&status) {
        let message = serde_json::from_str::<serde_json::Value>(&answer)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .unwrap_or(answer);
        bail!("{method} {path} answered {status}: {message}");
    }
    match serde_json::from_str::<serde_json::Value>(&answer) {
        Ok(v) => println!("{}", serde_json::to_string_pretty(&v)?),
        Err(_) => println!("{answer}"),
    }
    Ok(())
}

/// Starts the promotion, then waits until every topic it started is promoted, or one is not
/// (it gave up: its reason says what was left).
fn promote(
    admin: &str,
    token: Option<&str>,
    name: &str,
    topics: &[String],
    timeout_secs: u64,
) -> anyhow::Result<()> {
    let body = serde_json::json!({ "topics": topics, "timeout_ms": timeout_secs * 1000 });
    let path = format!("/v1/links/{name}/promote");
    let (status, answer) = call(admin, token, "POST", &path, &body.to_string())?;
    if status != 202 {
        bail!("POST {path} answered {status}: {answer}");
    }
    let started: serde_json::Value = serde_json::from_str(&answer).context("the answer")?;
    let promoting: Vec<String> = started["topics"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(_, t)| t["state"] == "promoting")
                .map(|(n, _)| n.clone())
                .collect()
        })
        .unwrap_or_default();
    println!(
        "promoting {}: waiting for the mirror to reach the source's end",
        promoting.join(", ")
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(timeout_secs + 30);
    loop {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let (status, answer) = call(admin, token, "GET", &format!("/v1/links/{name}"), "")?;
        if status != 200 {
            bail!("GET /v1/links/{name} answered {status}: {answer}");
        }
        let now: serde_json::Value = serde_json::from_str(&answer).context("the status")?;
        let states: Vec<(String, String, String)> = promoting
            .iter()
            .map(|t| {
                let s = &now["topics"][t];
                (
                    t.clone(),
                    s["state"].as_str().unwrap_or("?").to_string(),
                    s["reason"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        if let Some((t, _, reason)) = states
            .iter()
            .find(|(_, s, _)| s != "promoting" && s != "promoted")
        {
            bail!("topic {t} was not promoted: {reason}");
        }
        if states.iter().all(|(_, s, _)| s == "promoted") {
            for (t, _, reason) in &states {
                println!("{t}: promoted ({reason}); producers can move to this cluster");
            }
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            bail!("the promotion did not end in time: {states:?}");
        }
    }
}
