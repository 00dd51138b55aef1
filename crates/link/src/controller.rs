//! The controller's part of a link: source topics that match the link's filters become mirror
//! topics here (same name, same partition count, the source's topic configs), their partition
//! counts grow and their configs change as the source's do. Runs on the cluster's controller
//! only, so that two brokers never create the same topic.

use std::collections::BTreeMap;

use weir_partition::{topics::validate_config, Topics, MIRROR_LINK_CONFIG};

use crate::conn::Conn;
use crate::model::{LinkBody, MirrorTopic, TopicState};
use crate::source::{self, SourceMetadata};
use crate::Shared;

/// Source topics never mirrored: Kafka's own (`__consumer_offsets`, `__transaction_state`,
/// `__share_group_state`...) and MirrorMaker 2's bookkeeping.
fn internal(name: &str) -> bool {
    name.starts_with("__") || name.ends_with(".internal") || name.starts_with("mm2-")
}

/// The source's topic configs that Weir takes, with the link's name added.
fn mirror_configs(link: &str, source: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = source
        .iter()
        .filter(|(k, v)| validate_config(k, v).is_ok() && k.as_str() != MIRROR_LINK_CONFIG)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.insert(MIRROR_LINK_CONFIG.to_string(), link.to_string());
    out
}

/// One look at the source: new topics mirrored, partitions and configs followed. Returns the
/// link's record with the topics' states as they now are.
pub async fn tick(
    shared: &Shared,
    conn: &mut Conn,
    topics: &Topics,
    body: &LinkBody,
) -> Result<LinkBody, crate::LinkError> {
    let md: SourceMetadata = source::metadata(conn, None).await?;
    let mut next = body.clone();
    let wanted: Vec<&source::SourceTopic> = md
        .topics
        .values()
        .filter(|t| !t.internal && !internal(&t.name) && shared.config.topics.matches(&t.name))
        .collect();
    let names: Vec<String> = wanted
        .iter()
        .filter(|t| {
            body.topics
                .get(&t.name)
                .is_none_or(|m| matches!(m.state, TopicState::Mirroring | TopicState::Promoting))
        })
        .map(|t| t.name.clone())
        .collect();
    let configs = source::topic_configs(conn, &names).await?;
    let none = BTreeMap::new();
    for t in wanted {
        if !names.contains(&t.name) {
            continue;
        }
        let source_configs = configs.get(&t.name).unwrap_or(&none);
        let was = next.topics.get(&t.name);
        let mut state = follow(shared, topics, t, source_configs).await;
        if let (Some(w), TopicState::Mirroring) = (was, state.state) {
            if w.state == TopicState::Promoting {
                // Followed as before; the promotion goes on.
                state = w.clone();
            } else if w.state == TopicState::Mirroring {
                // What the last promotion said stays until the next.
                state.reason = w.reason.clone();
            }
        }
        if was != Some(&state) {
            tracing::info!(link = %shared.name, topic = %t.name, state = state.state.name(),
                reason = state.reason.as_deref().unwrap_or(""), "mirror topic");
            next.topics.insert(t.name.clone(), state);
        }
    }
    Ok(next)
}

/// Makes the mirror of one source topic what the source says; its state after.
async fn follow(
    shared: &Shared,
    topics: &Topics,
    t: &source::SourceTopic,
    source_configs: &BTreeMap<String, String>,
) -> MirrorTopic {
    let wanted = mirror_configs(&shared.name, source_configs);
    let count = t.partitions.len() as i32;
    let failed = MirrorTopic::failed;
    let mirroring = MirrorTopic::mirroring();
    let Some(local) = topics.get(&t.name) else {
        return match topics.create(&t.name, count, wanted, false).await {
            Ok(_) => mirroring,
            Err((code, msg)) => failed(format!("creating the mirror topic: {code:?}: {msg}")),
        };
    };
    if local.configs.get(MIRROR_LINK_CONFIG) != Some(&shared.name) {
        return failed(format!(
            "a topic named {} exists here and is not this link's mirror",
            t.name
        ));
    }
    if (local.partition_count() as i32) < count {
        if let Err((code, msg)) = topics.add_partitions(&t.name, count, false).await {
            return failed(format!("adding partitions: {code:?}: {msg}"));
        }
        tracing::info!(link = %shared.name, topic = %t.name, partitions = count, "mirror topic grew");
    }
    if local.configs != wanted {
        if let Err((code, msg)) = topics.set_configs(&t.name, wanted, false).await {
            return failed(format!("setting the source's configs: {code:?}: {msg}"));
        }
    }
    mirroring
}

/// Promotions under way: a topic whose every partition reached its target becomes ordinary
/// (its link config removed: writable); one past its deadline goes on mirroring, with what was
/// left in its reason. Returns the record as it should be.
pub async fn promotions(
    shared: &Shared,
    topics: &Topics,
    body: &LinkBody,
    now_ms: i64,
) -> LinkBody {
    let mut next = body.clone();
    for (name, t) in &body.topics {
        let (TopicState::Promoting, Some(p)) = (t.state, &t.promotion) else {
            continue;
        };
        let left: Vec<i32> = p
            .targets
            .keys()
            .filter(|i| !p.reached.contains_key(i))
            .copied()
            .collect();
        if left.is_empty() {
            match release(topics, &shared.name, name).await {
                Ok(()) => {
                    tracing::info!(link = %shared.name, topic = %name, "mirror topic promoted: writable");
                    next.topics.insert(
                        name.clone(),
                        MirrorTopic {
                            state: TopicState::Promoted,
                            reason: Some(format!(
                                "promoted at the source's offsets {:?}",
                                p.targets
                            )),
                            promotion: None,
                        },
                    );
                }
                Err(e) => {
                    tracing::warn!(link = %shared.name, topic = %name, error = %e, "promotion not finished; retrying")
                }
            }
        } else if now_ms > p.deadline_ms {
            let behind: Vec<String> = left
                .iter()
                .map(|i| format!("partition {i} short of offset {}", p.targets[i]))
                .collect();
            let reason = format!("promotion gave up at its deadline: {}", behind.join(", "));
            tracing::warn!(link = %shared.name, topic = %name, %reason, "promotion gave up");
            next.topics.insert(
                name.clone(),
                MirrorTopic {
                    state: TopicState::Mirroring,
                    reason: Some(reason),
                    promotion: None,
                },
            );
        }
    }
    next
}

/// Makes `topic` an ordinary topic: the link's config removed, so that it is writable.
pub async fn release(topics: &Topics, link: &str, topic: &str) -> Result<(), crate::LinkError> {
    let link = link.to_string();
    topics
        .alter_configs(
            topic,
            |c| {
                let mut c = c.clone();
                if c.get(MIRROR_LINK_CONFIG) == Some(&link) {
                    c.remove(MIRROR_LINK_CONFIG);
                }
                Ok(c)
            },
            false,
        )
        .await
        .map_err(|(code, msg)| {
            crate::LinkError::Conflict(format!("topic {topic}: {code:?}: {msg}"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_weir_does_not_know_are_left_out_and_the_link_named() {
        let source: BTreeMap<String, String> = [
            ("retention.ms", "86400000"),
            ("cleanup.policy", "compact"),
            ("confluent.placement.constraints", "{}"),
            ("message.timestamp.type", "LogAppendTime"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let got = mirror_configs("l", &source);
        let keys: Vec<&str> = got.keys().map(|k| k.as_str()).collect();
        assert_eq!(
            keys,
            vec!["cleanup.policy", "retention.ms", MIRROR_LINK_CONFIG]
        );
        assert_eq!(got[MIRROR_LINK_CONFIG], "l");
    }

    #[test]
    fn kafkas_own_topics_are_not_mirrored() {
        assert!(internal("__consumer_offsets"));
        assert!(internal("mm2-offsets.source.internal"));
        assert!(!internal("orders"));
    }
}
