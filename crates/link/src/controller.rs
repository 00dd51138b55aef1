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
        let state = follow(shared, topics, t, source_configs).await;
        let was = next.topics.get(&t.name);
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
    let failed = |reason: String| MirrorTopic {
        state: TopicState::Failed,
        reason: Some(reason),
    };
    let mirroring = MirrorTopic {
        state: TopicState::Mirroring,
        reason: None,
    };
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
