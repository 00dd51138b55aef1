//! `weir drain`: moves every partition off a broker through any broker's admin API, waits until
//! it leads none, then tells the operator it can be stopped. The broker is marked as draining
//! meanwhile, so neither placement nor the balancer gives it partitions back (until it
//! registers again, e.g. after a restart).

use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::admin_client::call;

#[derive(clap::Args)]
pub struct DrainArgs {
    /// The broker to drain (its node id).
    broker: i32,
    /// How long to wait for its partitions to move.
    #[arg(long, default_value_t = 120)]
    timeout_secs: u64,
    #[command(flatten)]
    target: crate::admin_client::AdminTarget,
}

/// Partitions still led by, or moving to, `broker`.
fn left_on(admin: &str, token: Option<&str>, broker: i32) -> anyhow::Result<usize> {
    let (status, body) = call(admin, token, "GET", "/v1/partitions", "")?;
    if status != 200 {
        bail!("GET /v1/partitions answered {status}: {body}");
    }
    let parts: Vec<serde_json::Value> =
        serde_json::from_str(&body).context("reading /v1/partitions")?;
    Ok(parts
        .iter()
        .filter(|p| {
            p["leader"].as_i64() == Some(i64::from(broker))
                || p["target"].as_i64() == Some(i64::from(broker))
        })
        .count())
}

pub fn run(args: DrainArgs) -> anyhow::Result<()> {
    let token = args.target.admin_token.as_deref();
    let (status, body) = call(
        &args.target.admin,
        token,
        "POST",
        &format!("/v1/brokers/{}/drain", args.broker),
        "",
    )?;
    if status != 200 {
        bail!(
            "draining broker {} was refused ({status}): {body}",
            args.broker
        );
    }
    println!("draining broker {}: {body}", args.broker);
    let started = Instant::now();
    let deadline = Duration::from_secs(args.timeout_secs);
    loop {
        let left = left_on(&args.target.admin, token, args.broker)?;
        if left == 0 {
            println!(
                "broker {} leads no partition after {:.1} s: it can be stopped",
                args.broker,
                started.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        if started.elapsed() > deadline {
            bail!(
                "broker {} still leads {left} partition(s) after {} s",
                args.broker,
                args.timeout_secs
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}
