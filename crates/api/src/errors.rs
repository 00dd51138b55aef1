//! The error response of each API: what a client gets when Weir cannot give it the real answer
//! (a handler panicked, or its response would not encode at the request's version), instead of
//! a closed connection. Kafka's `AbstractRequest.getErrorResponse` does the same: the API's own
//! response, with the error in its top-level error code, or in the error code of every topic,
//! partition, group or resource the request named where the response has no top-level code.
//! Only fields that exist at every version the request's fields exist in are set, so the result
//! encodes at the request's version (the `versions` test walks every advertised version).

use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

/// The error response to `request` at `version` with `error` in every error code it has, or
/// `None` for an API Weir does not implement.
pub fn error_response_for(
    request: &RequestKind,
    version: i16,
    error: ResponseError,
) -> Option<ResponseKind> {
    let code = error.code();
    Some(match request {
        RequestKind::Produce(r) => {
            use produce_response::{PartitionProduceResponse, TopicProduceResponse};
            ResponseKind::Produce(
                ProduceResponse::default().with_responses(
                    r.topic_data
                        .iter()
                        .map(|t| {
                            TopicProduceResponse::default()
                                .with_name(t.name.clone())
                                .with_topic_id(t.topic_id)
                                .with_partition_responses(
                                    t.partition_data
                                        .iter()
                                        .map(|p| {
                                            PartitionProduceResponse::default()
                                                .with_index(p.index)
                                                .with_error_code(code)
                                                .with_base_offset(-1)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::Fetch(r) => {
            use fetch_response::{FetchableTopicResponse, PartitionData};
            let response = FetchResponse::default().with_responses(
                r.topics
                    .iter()
                    .map(|t| {
                        FetchableTopicResponse::default()
                            .with_topic(t.topic.clone())
                            .with_topic_id(t.topic_id)
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        PartitionData::default()
                                            .with_partition_index(p.partition)
                                            .with_error_code(code)
                                            .with_high_watermark(-1)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            );
            ResponseKind::Fetch(if version >= 7 {
                response.with_error_code(code)
            } else {
                response
            })
        }
        RequestKind::ListOffsets(r) => {
            use list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
            ResponseKind::ListOffsets(
                ListOffsetsResponse::default().with_topics(
                    r.topics
                        .iter()
                        .map(|t| {
                            ListOffsetsTopicResponse::default()
                                .with_name(t.name.clone())
                                .with_partitions(
                                    t.partitions
                                        .iter()
                                        .map(|p| {
                                            ListOffsetsPartitionResponse::default()
                                                .with_partition_index(p.partition_index)
                                                .with_error_code(code)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::Metadata(r) => {
            use metadata_response::MetadataResponseTopic;
            ResponseKind::Metadata(
                MetadataResponse::default().with_topics(
                    r.topics
                        .iter()
                        .flatten()
                        .map(|t| {
                            MetadataResponseTopic::default()
                                .with_name(t.name.clone())
                                .with_topic_id(t.topic_id)
                                .with_error_code(code)
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::OffsetCommit(r) => {
            use offset_commit_response::{
                OffsetCommitResponsePartition, OffsetCommitResponseTopic,
            };
            ResponseKind::OffsetCommit(
                OffsetCommitResponse::default().with_topics(
                    r.topics
                        .iter()
                        .map(|t| {
                            OffsetCommitResponseTopic::default()
                                .with_name(t.name.clone())
                                .with_topic_id(t.topic_id)
                                .with_partitions(
                                    t.partitions
                                        .iter()
                                        .map(|p| {
                                            OffsetCommitResponsePartition::default()
                                                .with_partition_index(p.partition_index)
                                                .with_error_code(code)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::OffsetFetch(r) => {
            use offset_fetch_response::{
                OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponseTopic,
            };
            if version >= 8 {
                ResponseKind::OffsetFetch(
                    OffsetFetchResponse::default().with_groups(
                        r.groups
                            .iter()
                            .map(|g| {
                                OffsetFetchResponseGroup::default()
                                    .with_group_id(g.group_id.clone())
                                    .with_error_code(code)
                            })
                            .collect(),
                    ),
                )
            } else {
                let response = OffsetFetchResponse::default().with_topics(
                    r.topics
                        .iter()
                        .flatten()
                        .map(|t| {
                            OffsetFetchResponseTopic::default()
                                .with_name(t.name.clone())
                                .with_partitions(
                                    t.partition_indexes
                                        .iter()
                                        .map(|&p| {
                                            OffsetFetchResponsePartition::default()
                                                .with_partition_index(p)
                                                .with_committed_offset(-1)
                                                .with_error_code(code)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                );
                ResponseKind::OffsetFetch(if version >= 2 {
                    response.with_error_code(code)
                } else {
                    response
                })
            }
        }
        RequestKind::FindCoordinator(r) => {
            use find_coordinator_response::Coordinator;
            ResponseKind::FindCoordinator(if version >= 4 {
                FindCoordinatorResponse::default().with_coordinators(
                    r.coordinator_keys
                        .iter()
                        .map(|k| {
                            Coordinator::default()
                                .with_key(k.clone())
                                .with_node_id(BrokerId(-1))
                                .with_port(-1)
                                .with_error_code(code)
                        })
                        .collect(),
                )
            } else {
                FindCoordinatorResponse::default()
                    .with_error_code(code)
                    .with_node_id(BrokerId(-1))
                    .with_port(-1)
            })
        }
        RequestKind::JoinGroup(_) => ResponseKind::JoinGroup(
            JoinGroupResponse::default()
                .with_error_code(code)
                .with_generation_id(-1),
        ),
        RequestKind::Heartbeat(_) => {
            ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(code))
        }
        RequestKind::LeaveGroup(_) => {
            ResponseKind::LeaveGroup(LeaveGroupResponse::default().with_error_code(code))
        }
        RequestKind::SyncGroup(_) => {
            ResponseKind::SyncGroup(SyncGroupResponse::default().with_error_code(code))
        }
        RequestKind::DescribeGroups(r) => {
            use describe_groups_response::DescribedGroup;
            ResponseKind::DescribeGroups(
                DescribeGroupsResponse::default().with_groups(
                    r.groups
                        .iter()
                        .map(|g| {
                            DescribedGroup::default()
                                .with_group_id(g.clone())
                                .with_error_code(code)
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::ListGroups(_) => {
            ResponseKind::ListGroups(ListGroupsResponse::default().with_error_code(code))
        }
        RequestKind::ApiVersions(_) => {
            ResponseKind::ApiVersions(crate::cluster::api_versions(code))
        }
        RequestKind::CreateTopics(r) => {
            use create_topics_response::CreatableTopicResult;
            ResponseKind::CreateTopics(
                CreateTopicsResponse::default().with_topics(
                    r.topics
                        .iter()
                        .map(|t| {
                            CreatableTopicResult::default()
                                .with_name(t.name.clone())
                                .with_error_code(code)
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::DeleteTopics(r) => {
            use delete_topics_response::DeletableTopicResult;
            let results = if version >= 6 {
                r.topics
                    .iter()
                    .map(|t| {
                        DeletableTopicResult::default()
                            .with_name(t.name.clone())
                            .with_topic_id(t.topic_id)
                            .with_error_code(code)
                    })
                    .collect()
            } else {
                r.topic_names
                    .iter()
                    .map(|n| {
                        DeletableTopicResult::default()
                            .with_name(Some(n.clone()))
                            .with_error_code(code)
                    })
                    .collect()
            };
            ResponseKind::DeleteTopics(DeleteTopicsResponse::default().with_responses(results))
        }
        RequestKind::DeleteRecords(r) => {
            use delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
            ResponseKind::DeleteRecords(
                DeleteRecordsResponse::default().with_topics(
                    r.topics
                        .iter()
                        .map(|t| {
                            DeleteRecordsTopicResult::default()
                                .with_name(t.name.clone())
                                .with_partitions(
                                    t.partitions
                                        .iter()
                                        .map(|p| {
                                            DeleteRecordsPartitionResult::default()
                                                .with_partition_index(p.partition_index)
                                                .with_low_watermark(-1)
                                                .with_error_code(code)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::InitProducerId(_) => ResponseKind::InitProducerId(
            InitProducerIdResponse::default()
                .with_error_code(code)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        ),
        RequestKind::OffsetForLeaderEpoch(r) => {
            use offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
            ResponseKind::OffsetForLeaderEpoch(
                OffsetForLeaderEpochResponse::default().with_topics(
                    r.topics
                        .iter()
                        .map(|t| {
                            OffsetForLeaderTopicResult::default()
                                .with_topic(t.topic.clone())
                                .with_partitions(
                                    t.partitions
                                        .iter()
                                        .map(|p| {
                                            EpochEndOffset::default()
                                                .with_partition(p.partition)
                                                .with_error_code(code)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::DescribeConfigs(r) => {
            use describe_configs_response::DescribeConfigsResult;
            ResponseKind::DescribeConfigs(
                DescribeConfigsResponse::default().with_results(
                    r.resources
                        .iter()
                        .map(|res| {
                            DescribeConfigsResult::default()
                                .with_resource_type(res.resource_type)
                                .with_resource_name(res.resource_name.clone())
                                .with_error_code(code)
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::AlterConfigs(r) => {
            use alter_configs_response::AlterConfigsResourceResponse;
            ResponseKind::AlterConfigs(
                AlterConfigsResponse::default().with_responses(
                    r.resources
                        .iter()
                        .map(|res| {
                            AlterConfigsResourceResponse::default()
                                .with_resource_type(res.resource_type)
                                .with_resource_name(res.resource_name.clone())
                                .with_error_code(code)
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::IncrementalAlterConfigs(r) => {
            use incremental_alter_configs_response::AlterConfigsResourceResponse;
            ResponseKind::IncrementalAlterConfigs(
                IncrementalAlterConfigsResponse::default().with_responses(
                    r.resources
                        .iter()
                        .map(|res| {
                            AlterConfigsResourceResponse::default()
                                .with_resource_type(res.resource_type)
                                .with_resource_name(res.resource_name.clone())
                                .with_error_code(code)
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::CreatePartitions(r) => {
            use create_partitions_response::CreatePartitionsTopicResult;
            ResponseKind::CreatePartitions(
                CreatePartitionsResponse::default().with_results(
                    r.topics
                        .iter()
                        .map(|t| {
                            CreatePartitionsTopicResult::default()
                                .with_name(t.name.clone())
                                .with_error_code(code)
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::DeleteGroups(r) => {
            use delete_groups_response::DeletableGroupResult;
            ResponseKind::DeleteGroups(
                DeleteGroupsResponse::default().with_results(
                    r.groups_names
                        .iter()
                        .map(|g| {
                            DeletableGroupResult::default()
                                .with_group_id(g.clone())
                                .with_error_code(code)
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::OffsetDelete(r) => {
            use offset_delete_response::{
                OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
            };
            ResponseKind::OffsetDelete(
                OffsetDeleteResponse::default()
                    .with_error_code(code)
                    .with_topics(
                        r.topics
                            .iter()
                            .map(|t| {
                                OffsetDeleteResponseTopic::default()
                                    .with_name(t.name.clone())
                                    .with_partitions(
                                        t.partitions
                                            .iter()
                                            .map(|p| {
                                                OffsetDeleteResponsePartition::default()
                                                    .with_partition_index(p.partition_index)
                                                    .with_error_code(code)
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    ),
            )
        }
        RequestKind::AlterPartitionReassignments(_) => ResponseKind::AlterPartitionReassignments(
            AlterPartitionReassignmentsResponse::default()
                .with_error_code(code)
                .with_error_message(Some(kafka_protocol::protocol::StrBytes::from_static_str(
                    "the request failed",
                ))),
        ),
        RequestKind::ListPartitionReassignments(_) => ResponseKind::ListPartitionReassignments(
            ListPartitionReassignmentsResponse::default()
                .with_error_code(code)
                .with_error_message(Some(kafka_protocol::protocol::StrBytes::from_static_str(
                    "the request failed",
                ))),
        ),
        RequestKind::DescribeCluster(r) => ResponseKind::DescribeCluster(
            DescribeClusterResponse::default()
                .with_error_code(code)
                .with_endpoint_type(r.endpoint_type),
        ),
        RequestKind::AddPartitionsToTxn(r) => {
            let topics = |ts| crate::txn::add_partitions_results(ts, &|_, _| code);
            ResponseKind::AddPartitionsToTxn(if version <= 3 {
                AddPartitionsToTxnResponse::default()
                    .with_results_by_topic_v3_and_below(topics(&r.v3_and_below_topics))
            } else {
                AddPartitionsToTxnResponse::default().with_error_code(code)
            })
        }
        RequestKind::AddOffsetsToTxn(_) => {
            ResponseKind::AddOffsetsToTxn(AddOffsetsToTxnResponse::default().with_error_code(code))
        }
        RequestKind::EndTxn(r) => ResponseKind::EndTxn(
            EndTxnResponse::default()
                .with_error_code(code)
                .with_producer_id(r.producer_id)
                .with_producer_epoch(r.producer_epoch),
        ),
        RequestKind::TxnOffsetCommit(r) => {
            use txn_offset_commit_response::*;
            ResponseKind::TxnOffsetCommit(
                TxnOffsetCommitResponse::default().with_topics(
                    r.topics
                        .iter()
                        .map(|t| {
                            TxnOffsetCommitResponseTopic::default()
                                .with_name(t.name.clone())
                                .with_partitions(
                                    t.partitions
                                        .iter()
                                        .map(|p| {
                                            TxnOffsetCommitResponsePartition::default()
                                                .with_partition_index(p.partition_index)
                                                .with_error_code(code)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::DescribeTransactions(r) => {
            use describe_transactions_response::TransactionState;
            ResponseKind::DescribeTransactions(
                DescribeTransactionsResponse::default().with_transaction_states(
                    r.transactional_ids
                        .iter()
                        .map(|id| {
                            TransactionState::default()
                                .with_transactional_id(id.clone())
                                .with_error_code(code)
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::DescribeLogDirs(_) => ResponseKind::DescribeLogDirs(
            // The top-level code exists from v3; before, each directory carries it.
            DescribeLogDirsResponse::default()
                .with_error_code(code)
                .with_results(vec![
                    describe_log_dirs_response::DescribeLogDirsResult::default()
                        .with_error_code(code),
                ]),
        ),
        RequestKind::ListTransactions(_) => ResponseKind::ListTransactions(
            ListTransactionsResponse::default().with_error_code(code),
        ),
        RequestKind::DescribeProducers(r) => {
            use describe_producers_response::{PartitionResponse, TopicResponse};
            ResponseKind::DescribeProducers(
                DescribeProducersResponse::default().with_topics(
                    r.topics
                        .iter()
                        .map(|t| {
                            TopicResponse::default()
                                .with_name(t.name.clone())
                                .with_partitions(
                                    t.partition_indexes
                                        .iter()
                                        .map(|&p| {
                                            PartitionResponse::default()
                                                .with_partition_index(p)
                                                .with_error_code(code)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::ConsumerGroupHeartbeat(_) => ResponseKind::ConsumerGroupHeartbeat(
            ConsumerGroupHeartbeatResponse::default()
                .with_error_code(code)
                .with_member_epoch(-1),
        ),
        RequestKind::ConsumerGroupDescribe(r) => {
            use consumer_group_describe_response::DescribedGroup;
            ResponseKind::ConsumerGroupDescribe(
                ConsumerGroupDescribeResponse::default().with_groups(
                    r.group_ids
                        .iter()
                        .map(|id| {
                            DescribedGroup::default()
                                .with_group_id(id.clone())
                                .with_error_code(code)
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::DescribeClientQuotas(_) => ResponseKind::DescribeClientQuotas(
            DescribeClientQuotasResponse::default().with_error_code(code),
        ),
        RequestKind::AlterClientQuotas(r) => {
            use alter_client_quotas_response::{EntityData, EntryData};
            ResponseKind::AlterClientQuotas(
                AlterClientQuotasResponse::default().with_entries(
                    r.entries
                        .iter()
                        .map(|e| {
                            EntryData::default().with_error_code(code).with_entity(
                                e.entity
                                    .iter()
                                    .map(|c| {
                                        EntityData::default()
                                            .with_entity_type(c.entity_type.clone())
                                            .with_entity_name(c.entity_name.clone())
                                    })
                                    .collect(),
                            )
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::CreateAcls(r) => {
            use create_acls_response::AclCreationResult;
            ResponseKind::CreateAcls(
                CreateAclsResponse::default().with_results(
                    r.creations
                        .iter()
                        .map(|_| AclCreationResult::default().with_error_code(code))
                        .collect(),
                ),
            )
        }
        RequestKind::DescribeAcls(_) => {
            ResponseKind::DescribeAcls(DescribeAclsResponse::default().with_error_code(code))
        }
        RequestKind::DeleteAcls(r) => {
            use delete_acls_response::DeleteAclsFilterResult;
            ResponseKind::DeleteAcls(
                DeleteAclsResponse::default().with_filter_results(
                    r.filters
                        .iter()
                        .map(|_| DeleteAclsFilterResult::default().with_error_code(code))
                        .collect(),
                ),
            )
        }
        RequestKind::SaslHandshake(_) => {
            ResponseKind::SaslHandshake(SaslHandshakeResponse::default().with_error_code(code))
        }
        RequestKind::SaslAuthenticate(_) => ResponseKind::SaslAuthenticate(
            SaslAuthenticateResponse::default().with_error_code(code),
        ),
        RequestKind::DescribeUserScramCredentials(_) => ResponseKind::DescribeUserScramCredentials(
            DescribeUserScramCredentialsResponse::default().with_error_code(code),
        ),
        RequestKind::AlterUserScramCredentials(r) => {
            use alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
            let mut users: Vec<_> = r
                .deletions
                .iter()
                .map(|d| &d.name)
                .chain(r.upsertions.iter().map(|u| &u.name))
                .collect();
            users.sort();
            users.dedup();
            ResponseKind::AlterUserScramCredentials(
                AlterUserScramCredentialsResponse::default().with_results(
                    users
                        .into_iter()
                        .map(|u| {
                            AlterUserScramCredentialsResult::default()
                                .with_user(u.clone())
                                .with_error_code(code)
                        })
                        .collect(),
                ),
            )
        }
        _ => return None,
    })
}
