//! The Kafka APIs Weir serves, one module each, and the one list of them below: it makes the
//! dispatch of requests ([`handle`]), of their authorization ([`authorize`], [`put_back`]),
//! [`supported_versions`] (what ApiVersions advertises) and [`error_response_for`].
//!
//! Each module says, for its API, in one `Api` impl: the versions Weir serves, what it must be
//! authorized for (and how refused parts come back), its handler, and the error response: what a
//! client gets when Weir cannot give it the real answer (a handler failed, its response would
//! not encode at the request's version, or a part of the request was refused by the ACLs),
//! instead of a closed connection. Kafka's `AbstractRequest.getErrorResponse` does the same:
//! the API's own response, with the error in its top-level error code, or in the error code of
//! every topic, partition, group or resource the request named where the response has no
//! top-level code. Only fields that exist at every version the request's fields exist in are
//! set, so the result encodes at the request's version (the `versions` test walks every
//! advertised version). Versions newer than Apache Kafka 4.1 speaks are served only where a
//! module says so.
//!
//! Adding an API: its module, declared below, and a line in the list. The module's `samples`
//! (sample requests, compiled for tests only) put it in the every-version test.

use std::sync::Arc;

use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseKind};
use kafka_protocol::ResponseError;

use crate::authz::{Check, Gate};
use crate::{Broker, Conn, Reply};

mod add_offsets_to_txn;
mod add_partitions_to_txn;
mod alter_client_quotas;
mod alter_configs;
mod alter_partition_reassignments;
mod alter_share_group_offsets;
mod alter_user_scram_credentials;
mod api_versions;
pub(crate) use api_versions::api_versions;
mod consumer_group_describe;
mod consumer_group_heartbeat;
mod create_acls;
mod create_partitions;
mod create_topics;
mod delete_acls;
mod delete_groups;
mod delete_records;
mod delete_share_group_offsets;
mod delete_topics;
mod describe_acls;
mod describe_client_quotas;
mod describe_cluster;
mod describe_configs;
mod describe_groups;
mod describe_log_dirs;
mod describe_producers;
mod describe_share_group_offsets;
mod describe_transactions;
mod describe_user_scram_credentials;
mod end_txn;
mod fetch;
mod find_coordinator;
mod heartbeat;
mod incremental_alter_configs;
mod init_producer_id;
mod join_group;
mod leave_group;
mod list_groups;
mod list_offsets;
mod list_partition_reassignments;
mod list_transactions;
mod metadata;
mod offset_commit;
mod offset_delete;
mod offset_fetch;
mod offset_for_leader_epoch;
mod produce;
mod sasl_authenticate;
mod sasl_handshake;
mod share_acknowledge;
mod share_fetch;
mod share_group_describe;
mod share_group_heartbeat;
mod share_group_offsets;
mod streams_group_describe;
mod streams_group_heartbeat;
mod sync_group;
mod txn_offset_commit;

#[cfg(feature = "testing")]
pub mod samples;

macro_rules! apis {
    ($($variant:ident => $module:ident,)*) => {
        /// The API keys Weir implements, with the versions it accepts. ApiVersions advertises
        /// these.
        pub fn supported_versions(key: ApiKey) -> Option<(i16, i16)> {
            match key {
                $(ApiKey::$variant => Some(<$module::$variant as Api>::versions()),)*
                _ => None,
            }
        }

        /// Serves an authorized request with its API's handler; gives back a request of an API
        /// Weir does not implement.
        pub(crate) async fn handle(
            broker: &Arc<Broker>,
            request: RequestKind,
            cx: &Cx<'_>,
        ) -> Result<Reply, RequestKind> {
            match request {
                $(RequestKind::$variant(r) => Ok(<$module::$variant as Api>::handle(broker, cx, r).await),)*
                other => Err(other),
            }
        }

        /// What `request` must be authorized for, by its API ([`Api::authorize`]).
        pub(crate) fn authorize(
            broker: &Broker,
            check: &Check,
            request: RequestKind,
            v: i16,
        ) -> Gate {
            match request {
                $(RequestKind::$variant(r) => <$module::$variant as Api>::authorize(broker, check, r, v),)*
                // APIs Weir does not serve are refused by their handler.
                other => crate::authz::serve(other),
            }
        }

        /// Puts back what `authorize` took out of a request, by its API ([`Api::put_back`]).
        pub(crate) fn put_back(
            broker: &Broker,
            response: ResponseKind,
            denied: Option<ResponseKind>,
            filter: Option<&Check>,
        ) -> ResponseKind {
            match &response {
                $(ResponseKind::$variant(_) => <$module::$variant as Api>::put_back(broker, response, denied, filter),)*
                _ => response,
            }
        }

        /// Representative requests of `key` at version `v` ([`Api::samples`]), or `None` for an
        /// API Weir does not implement.
        #[cfg(feature = "testing")]
        pub async fn samples_of(
            key: ApiKey,
            e: &samples::Samples<'_>,
            v: i16,
        ) -> Option<Vec<(&'static str, RequestKind)>> {
            match key {
                $(ApiKey::$variant => Some(<$module::$variant as Api>::samples(e, v).await),)*
                _ => None,
            }
        }

        /// The error response to `request` at `version` with `error` in every error code it
        /// has, or `None` for an API Weir does not implement.
        pub fn error_response_for(
            request: &RequestKind,
            version: i16,
            error: ResponseError,
        ) -> Option<ResponseKind> {
            let code = error.code();
            match request {
                $(RequestKind::$variant(r) => Some(<$module::$variant as Api>::error_response(r, version, code)),)*
                _ => None,
            }
        }
    };
}

apis! {
    Produce => produce,
    Fetch => fetch,
    ListOffsets => list_offsets,
    Metadata => metadata,
    OffsetCommit => offset_commit,
    OffsetFetch => offset_fetch,
    FindCoordinator => find_coordinator,
    JoinGroup => join_group,
    Heartbeat => heartbeat,
    LeaveGroup => leave_group,
    SyncGroup => sync_group,
    DescribeGroups => describe_groups,
    ListGroups => list_groups,
    ApiVersions => api_versions,
    CreateTopics => create_topics,
    DeleteTopics => delete_topics,
    DeleteRecords => delete_records,
    InitProducerId => init_producer_id,
    OffsetForLeaderEpoch => offset_for_leader_epoch,
    DescribeConfigs => describe_configs,
    AlterConfigs => alter_configs,
    IncrementalAlterConfigs => incremental_alter_configs,
    CreatePartitions => create_partitions,
    DeleteGroups => delete_groups,
    OffsetDelete => offset_delete,
    AlterPartitionReassignments => alter_partition_reassignments,
    ListPartitionReassignments => list_partition_reassignments,
    DescribeCluster => describe_cluster,
    AddPartitionsToTxn => add_partitions_to_txn,
    AddOffsetsToTxn => add_offsets_to_txn,
    EndTxn => end_txn,
    TxnOffsetCommit => txn_offset_commit,
    DescribeTransactions => describe_transactions,
    DescribeLogDirs => describe_log_dirs,
    ListTransactions => list_transactions,
    DescribeProducers => describe_producers,
    ConsumerGroupHeartbeat => consumer_group_heartbeat,
    ConsumerGroupDescribe => consumer_group_describe,
    DescribeClientQuotas => describe_client_quotas,
    AlterClientQuotas => alter_client_quotas,
    CreateAcls => create_acls,
    DescribeAcls => describe_acls,
    DeleteAcls => delete_acls,
    SaslHandshake => sasl_handshake,
    SaslAuthenticate => sasl_authenticate,
    DescribeUserScramCredentials => describe_user_scram_credentials,
    AlterUserScramCredentials => alter_user_scram_credentials,
    ShareGroupHeartbeat => share_group_heartbeat,
    ShareGroupDescribe => share_group_describe,
    ShareFetch => share_fetch,
    ShareAcknowledge => share_acknowledge,
    DescribeShareGroupOffsets => describe_share_group_offsets,
    AlterShareGroupOffsets => alter_share_group_offsets,
    DeleteShareGroupOffsets => delete_share_group_offsets,
    StreamsGroupHeartbeat => streams_group_heartbeat,
    StreamsGroupDescribe => streams_group_describe,
}

/// Every version `kafka-protocol` knows of `key`.
fn valid(key: ApiKey) -> (i16, i16) {
    let v = key.valid_versions();
    (v.min, v.max)
}

/// [`valid`], up to `max`.
fn capped(key: ApiKey, max: i16) -> (i16, i16) {
    let (min, top) = valid(key);
    (min, top.min(max))
}

/// Everything about one Kafka API, implemented by the unit struct of its module.
pub(crate) trait Api {
    /// The API's request.
    type Request;

    /// The versions Weir serves.
    fn versions() -> (i16, i16);

    /// The response to `request` at `version` that carries `code` wherever it has an error
    /// code.
    fn error_response(request: &Self::Request, version: i16, code: i16) -> ResponseKind;

    /// What the request must be authorized for: refused whole ([`Gate::Refuse`], its error
    /// response), or served without the topics, groups or ids the principal may not touch,
    /// which come back in the response with their error (as Kafka's `KafkaApis` checks).
    fn authorize(broker: &Broker, check: &Check, request: Self::Request, v: i16) -> Gate;

    /// Puts back into `response` what `authorize` took out of the request (`denied`, the error
    /// response of those parts) and leaves out what the principal may not see (`filter`).
    /// Nothing, for an API whose requests are served or refused whole.
    fn put_back(
        _broker: &Broker,
        response: ResponseKind,
        denied: Option<ResponseKind>,
        _filter: Option<&Check>,
    ) -> ResponseKind {
        if denied.is_some() {
            tracing::error!("a denied part of a request has no place in its response");
        }
        response
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply;

    /// Representative requests at version `v` (topics that exist and that do not, real record
    /// batches, fields the version lacks left at their defaults), labelled: the every-version
    /// test (`tests/versions.rs`) sends each one and checks its answers encode at `v`.
    #[cfg(feature = "testing")]
    async fn samples(e: &samples::Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)>;
}

/// What a handler knows of a request besides its body.
#[derive(Clone, Copy)]
pub(crate) struct Cx<'a> {
    pub header: &'a RequestHeader,
    pub conn: &'a Conn,
    /// The request's version.
    pub v: i16,
    pub client_id: &'a str,
    pub client_host: &'a str,
    /// The client's zone, where zones are in use.
    pub zone: Option<&'a str>,
    /// The name of the listener the request came in on.
    pub listener: &'a str,
}

/// An answer now.
pub(crate) fn now(r: ResponseKind) -> Reply {
    Reply::Now(Box::new(r))
}
