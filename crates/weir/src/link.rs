//! `weir link`: cluster links (mirroring another Kafka cluster at its offsets) through any
//! broker's admin API: create one from a JSON definition, show them, delete one.

use anyhow::{bail, Context};

use crate::admin_client::call;

#[derive(clap::Args)]
pub struct LinkArgs {
    #[command(subcommand)]
    command: LinkCommand,
    /// Admin address (host:port) of any broker of the cluster.
    #[arg(long, global = true, default_value = "127.0.0.1:9644")]
    admin: String,
    /// The brokers' `broker.admin_token`, if they have one.
    #[arg(
        long,
        global = true,
        env = "WEIR_BROKER_ADMIN_TOKEN",
        hide_env_values = true
    )]
    admin_token: Option<String>,
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
    /// Remove a link (refused while it mirrors topics, unless --force, which leaves them as
    /// ordinary, writable topics).
    Delete {
        name: String,
        #[arg(long)]
        force: bool,
    },
}

pub fn run(args: LinkArgs) -> anyhow::Result<()> {
    let token = args.admin_token.as_deref();
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
        LinkCommand::Delete { name, force } => (
            "DELETE",
            format!(
                "/v1/links/{name}{}",
                if *force { "?force=true" } else { "" }
            ),
            String::new(),
        ),
    };
    let (status, answer) = call(&args.admin, token, method, &path, &body)?;
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
