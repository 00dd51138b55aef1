//! DeleteShareGroupOffsets (KIP-932): the versions Weir serves, its error response, what it must
//! be authorized for, and its handler: forgets an empty share group's share-partitions of whole
//! topics (the group starts them again at its `share.auto.offset.reset`).

use std::sync::Arc;

use kafka_protocol::messages::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic as Topic;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::share_group_offsets::share_group;
use crate::apis::{Api, Cx};
use crate::authz::{refuse, serve, Check, Gate};
use crate::{str, Broker, Reply};

/// DeleteShareGroupOffsets.
pub(crate) struct DeleteShareGroupOffsets;

impl Api for DeleteShareGroupOffsets {
    type Request = DeleteShareGroupOffsetsRequest;

    /// Version 0, as Kafka 4.4 serves.
    fn versions() -> (i16, i16) {
        (0, 0)
    }

    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::DeleteShareGroupOffsets(
            DeleteShareGroupOffsetsResponse::default().with_error_code(code),
        )
    }

    /// DELETE on the group, READ on every topic named.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        if !check.group(Operation::Delete, &r.group_id) {
            return refuse(
                &RequestKind::DeleteShareGroupOffsets(r),
                E::GroupAuthorizationFailed,
                v,
            );
        }
        if r.topics
            .iter()
            .any(|t| !check.topic(Operation::Read, &t.topic_name))
        {
            return refuse(
                &RequestKind::DeleteShareGroupOffsets(r),
                E::TopicAuthorizationFailed,
                v,
            );
        }
        serve(RequestKind::DeleteShareGroupOffsets(r))
    }

    async fn handle(broker: &Arc<Broker>, _cx: &Cx<'_>, r: Self::Request) -> Reply {
        let group = r.group_id.to_string();
        if let Err((code, message)) = share_group(broker, &group, true).await {
            return now(ResponseKind::DeleteShareGroupOffsets(
                DeleteShareGroupOffsetsResponse::default()
                    .with_error_code(code)
                    .with_error_message((!message.is_empty()).then(|| str(&message))),
            ));
        }
        let mut topics = Vec::with_capacity(r.topics.len());
        for t in r.topics {
            let topic = broker.topics.get(&t.topic_name);
            let code = match &topic {
                None => E::UnknownTopicOrPartition.code(),
                Some(_) => match broker
                    .meta
                    .delete_share_states(&group, Some(&t.topic_name))
                    .await
                {
                    Ok(_) => 0,
                    Err(e) => {
                        tracing::warn!(group, error = %e, "deleting share states failed");
                        E::KafkaStorageError.code()
                    }
                },
            };
            topics.push(
                Topic::default()
                    .with_topic_name(t.topic_name)
                    .with_topic_id(
                        topic.map_or(uuid::Uuid::nil(), |tp| uuid::Uuid::from_bytes(tp.id)),
                    )
                    .with_error_code(code),
            );
        }
        broker.shares.forget(&group);
        now(ResponseKind::DeleteShareGroupOffsets(
            DeleteShareGroupOffsetsResponse::default().with_responses(topics),
        ))
    }

    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, topic, TOPIC};
        use delete_share_group_offsets_request::*;
        use RequestKind as R;
        vec![(
            "a topic",
            R::DeleteShareGroupOffsets(
                DeleteShareGroupOffsetsRequest::default()
                    .with_group_id(GroupId(s("sg-offsets")))
                    .with_topics(vec![DeleteShareGroupOffsetsRequestTopic::default()
                        .with_topic_name(topic(TOPIC))]),
            ),
        )]
    }
}
