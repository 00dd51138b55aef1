//! `weir acls`: the ACL bindings every broker enforces, through any broker's admin API, for
//! the schema registry's resources (`--subject`, `--registry`), which Kafka's tools cannot name,
//! and Kafka's own (`--topic`, `--group`; `kafka-acls` works for those too).

use anyhow::bail;

use crate::admin_acls::AclJson;

#[derive(clap::Args)]
pub struct AclsArgs {
    #[command(subcommand)]
    command: AclsCommand,
    #[command(flatten)]
    target: crate::admin_client::AdminTarget,
}

#[derive(clap::Subcommand)]
enum AclsCommand {
    /// Every binding in force.
    List,
    /// Allow (or with --deny, deny) a principal an operation on a resource.
    Add(Binding),
    /// Remove exactly that binding.
    Remove(Binding),
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("resource").required(true).args(["subject", "registry", "topic", "group"])))]
struct Binding {
    /// "User:alice", or "User:*" for everyone.
    #[arg(long)]
    principal: String,
    /// READ, WRITE, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS, ALL, ...
    #[arg(long)]
    operation: String,
    /// A schema registry subject (with --prefixed: every subject starting so).
    #[arg(long)]
    subject: Option<String>,
    /// The schema registry as a whole: its global compatibility level and mode.
    #[arg(long)]
    registry: bool,
    /// A topic.
    #[arg(long)]
    topic: Option<String>,
    /// A consumer group.
    #[arg(long)]
    group: Option<String>,
    /// The name is a prefix (PREFIXED), not a literal name.
    #[arg(long)]
    prefixed: bool,
    /// A DENY binding (ALLOW otherwise).
    #[arg(long)]
    deny: bool,
    /// The client address it applies to.
    #[arg(long, default_value = "*")]
    host: String,
}

impl Binding {
    fn json(&self) -> AclJson {
        let (kind, name) = if let Some(s) = &self.subject {
            ("SUBJECT", s.clone())
        } else if let Some(t) = &self.topic {
            ("TOPIC", t.clone())
        } else if let Some(g) = &self.group {
            ("GROUP", g.clone())
        } else {
            ("REGISTRY", weir_auth::acl::REGISTRY_NAME.to_string())
        };
        AclJson {
            resource_type: kind.into(),
            name,
            pattern: if self.prefixed { "PREFIXED" } else { "LITERAL" }.into(),
            principal: self.principal.clone(),
            host: self.host.clone(),
            operation: self.operation.to_uppercase(),
            permission: if self.deny { "DENY" } else { "ALLOW" }.into(),
        }
    }
}

pub fn run(args: AclsArgs) -> anyhow::Result<()> {
    let (method, body) = match &args.command {
        AclsCommand::List => ("GET", String::new()),
        AclsCommand::Add(b) => ("POST", serde_json::to_string(&b.json())?),
        AclsCommand::Remove(b) => ("DELETE", serde_json::to_string(&b.json())?),
    };
    let (status, answer) = args.target.call(method, "/v1/acls", &body)?;
    let parsed = serde_json::from_str::<serde_json::Value>(&answer).ok();
    if !(200..300).contains(&status) {
        let message = parsed
            .as_ref()
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .unwrap_or(answer);
        bail!("{method} /v1/acls answered {status}: {message}");
    }
    match (&args.command, parsed) {
        (AclsCommand::List, Some(v)) => {
            let acls: Vec<AclJson> = serde_json::from_value(v["acls"].clone())?;
            for a in &acls {
                println!(
                    "{} {}:{} ({}) {} {} from {}",
                    a.permission,
                    a.resource_type,
                    a.name,
                    a.pattern,
                    a.principal,
                    a.operation,
                    a.host
                );
            }
            if acls.is_empty() {
                println!("no ACL bindings");
            }
        }
        (_, Some(v)) => println!("{v}"),
        (_, None) => println!("{answer}"),
    }
    Ok(())
}
