//! Every API Weir advertises, at every version it advertises: representative requests (topics
//! that exist and that do not, real record batches for the data APIs, fields a version lacks left
//! at their defaults) go through `Broker::handle` on a real engine, and each response must encode
//! at the request's version, as a client of that version would receive it. The error response
//! that stands in for a failed handler (`weir_api::error_response`) must encode at every version
//! too, and carry UNKNOWN_SERVER_ERROR.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;
use weir_api::{encode_response, error_response, supported_versions, Reply};

mod common;

use common::{batch, env, s, topic, Env, GROUP, MISSING, TOPIC};

/// Representative requests of `key` at version `v`, labelled. Fields the version lacks stay at
/// their defaults; the test checks that each request itself encodes at `v`.
async fn requests(e: &Env, key: ApiKey, v: i16) -> Vec<(&'static str, RequestKind)> {
    use RequestKind as R;
    match key {
        ApiKey::Produce => {
            let t = |name: &str, id: Uuid, parts: Vec<i32>| {
                let t = produce_request::TopicProduceData::default().with_partition_data(
                    parts
                        .into_iter()
                        .map(|i| {
                            produce_request::PartitionProduceData::default()
                                .with_index(i)
                                .with_records(Some(batch(2)))
                        })
                        .collect(),
                );
                if v >= 13 {
                    t.with_topic_id(id)
                } else {
                    t.with_name(topic(name))
                }
            };
            let req = |topics| {
                ProduceRequest::default()
                    .with_acks(-1)
                    .with_timeout_ms(5000)
                    .with_topic_data(topics)
            };
            vec![
                (
                    "existing and missing partitions",
                    R::Produce(req(vec![
                        t(TOPIC, e.topic_id, vec![0, 1, 7]),
                        t(MISSING, Uuid::new_v4(), vec![0]),
                    ])),
                ),
                (
                    "transactional",
                    R::Produce(
                        req(vec![t(TOPIC, e.topic_id, vec![0])])
                            .with_transactional_id(Some(TransactionalId(s("tx")))),
                    ),
                ),
                (
                    "corrupt batch",
                    R::Produce(req(vec![{
                        let t =
                            produce_request::TopicProduceData::default().with_partition_data(vec![
                                produce_request::PartitionProduceData::default()
                                    .with_index(0)
                                    .with_records(Some(Bytes::from_static(&[0u8; 70]))),
                            ]);
                        if v >= 13 {
                            t.with_topic_id(e.topic_id)
                        } else {
                            t.with_name(topic(TOPIC))
                        }
                    }])),
                ),
            ]
        }
        ApiKey::Fetch => {
            let t = |name: &str, id: Uuid, parts: Vec<(i32, i64, i32)>| {
                let t = fetch_request::FetchTopic::default().with_partitions(
                    parts
                        .into_iter()
                        .map(|(p, offset, epoch)| {
                            fetch_request::FetchPartition::default()
                                .with_partition(p)
                                .with_fetch_offset(offset)
                                .with_partition_max_bytes(1 << 20)
                                .with_current_leader_epoch(if v >= 9 { epoch } else { -1 })
                        })
                        .collect(),
                );
                if v >= 13 {
                    t.with_topic_id(id)
                } else {
                    t.with_topic(topic(name))
                }
            };
            let req = |topics| {
                FetchRequest::default()
                    .with_max_wait_ms(0)
                    .with_min_bytes(1)
                    .with_max_bytes(1 << 20)
                    .with_topics(topics)
            };
            vec![
                (
                    "data, empty, out of range, unknown partition",
                    R::Fetch(req(vec![t(
                        TOPIC,
                        e.topic_id,
                        vec![(0, 0, -1), (1, 0, -1), (0, 1000, -1), (9, 0, -1)],
                    )])),
                ),
                (
                    "missing topic",
                    R::Fetch(req(vec![t(MISSING, Uuid::new_v4(), vec![(0, 0, -1)])])),
                ),
                (
                    "unknown leader epoch",
                    R::Fetch(req(vec![t(TOPIC, e.topic_id, vec![(0, 0, 1000)])])),
                ),
                (
                    "long poll",
                    R::Fetch(
                        req(vec![t(TOPIC, e.topic_id, vec![(1, 0, -1)])])
                            .with_max_wait_ms(10)
                            .with_min_bytes(1 << 20),
                    ),
                ),
            ]
        }
        ApiKey::ListOffsets => {
            let parts = |epoch: i32| {
                [-1i64, -2, -3, -4, -5, 0, 1_700_000_000_001, i64::MAX, -7]
                    .into_iter()
                    .map(|ts| {
                        list_offsets_request::ListOffsetsPartition::default()
                            .with_partition_index(0)
                            .with_timestamp(ts)
                            .with_current_leader_epoch(if v >= 4 { epoch } else { -1 })
                    })
                    .collect::<Vec<_>>()
            };
            let req = |topics| ListOffsetsRequest::default().with_topics(topics);
            vec![
                (
                    "every timestamp kind, existing and missing",
                    R::ListOffsets(req(vec![
                        list_offsets_request::ListOffsetsTopic::default()
                            .with_name(topic(TOPIC))
                            .with_partitions(parts(-1)),
                        list_offsets_request::ListOffsetsTopic::default()
                            .with_name(topic(MISSING))
                            .with_partitions(parts(-1)),
                    ])),
                ),
                (
                    "unknown leader epoch",
                    R::ListOffsets(req(vec![list_offsets_request::ListOffsetsTopic::default()
                        .with_name(topic(TOPIC))
                        .with_partitions(parts(1000))])),
                ),
            ]
        }
        ApiKey::Metadata => {
            let auto = format!("auto-created-{v}");
            let named = |names: &[&str]| {
                Some(
                    names
                        .iter()
                        .map(|n| {
                            metadata_request::MetadataRequestTopic::default()
                                .with_name(Some(topic(n)))
                        })
                        .collect(),
                )
            };
            let base = || {
                let r = MetadataRequest::default();
                let r = if v >= 4 {
                    r.with_allow_auto_topic_creation(false)
                } else {
                    r
                };
                if (8..=10).contains(&v) {
                    r.with_include_cluster_authorized_operations(true)
                        .with_include_topic_authorized_operations(true)
                } else if v >= 8 {
                    r.with_include_topic_authorized_operations(true)
                } else {
                    r
                }
            };
            let mut out = vec![
                (
                    "all topics",
                    R::Metadata(base().with_topics(if v >= 1 { None } else { Some(vec![]) })),
                ),
                (
                    "existing, missing, invalid",
                    // v0-3 create what they name: not the topic that other APIs expect missing.
                    R::Metadata(base().with_topics(named(&[
                        TOPIC,
                        if v >= 4 { MISSING } else { &auto },
                        "bad name!",
                    ]))),
                ),
            ];
            if v >= 10 {
                out.push((
                    "by id",
                    R::Metadata(
                        base().with_topics(Some(
                            [e.topic_id, Uuid::new_v4()]
                                .into_iter()
                                .map(|id| {
                                    metadata_request::MetadataRequestTopic::default()
                                        .with_topic_id(id)
                                })
                                .collect(),
                        )),
                    ),
                ));
            }
            out
        }
        ApiKey::OffsetCommit => {
            let part = |p: i32| {
                offset_commit_request::OffsetCommitRequestPartition::default()
                    .with_partition_index(p)
                    .with_committed_offset(1)
                    .with_committed_metadata(Some(s("m")))
            };
            vec![(
                "simple commit, existing and missing",
                R::OffsetCommit(
                    OffsetCommitRequest::default()
                        .with_group_id(GroupId(s(GROUP)))
                        .with_generation_id_or_member_epoch(-1)
                        .with_topics(vec![
                            offset_commit_request::OffsetCommitRequestTopic::default()
                                .with_name(topic(TOPIC))
                                .with_partitions(vec![part(0), part(1), part(9)]),
                            offset_commit_request::OffsetCommitRequestTopic::default()
                                .with_name(topic(MISSING))
                                .with_partitions(vec![part(0)]),
                        ]),
                ),
            )]
        }
        ApiKey::OffsetFetch => {
            if v >= 8 {
                let g = |id: &str, topics| {
                    offset_fetch_request::OffsetFetchRequestGroup::default()
                        .with_group_id(GroupId(s(id)))
                        .with_topics(topics)
                };
                vec![(
                    "groups",
                    R::OffsetFetch(OffsetFetchRequest::default().with_groups(vec![
                        g(
                            GROUP,
                            Some(vec![
                                offset_fetch_request::OffsetFetchRequestTopics::default()
                                    .with_name(topic(TOPIC))
                                    .with_partition_indexes(vec![0, 1, 9]),
                                offset_fetch_request::OffsetFetchRequestTopics::default()
                                    .with_name(topic(MISSING))
                                    .with_partition_indexes(vec![0]),
                            ]),
                        ),
                        g("nope", None),
                    ])),
                )]
            } else {
                let mut out = vec![(
                    "topics",
                    R::OffsetFetch(
                        OffsetFetchRequest::default()
                            .with_group_id(GroupId(s(GROUP)))
                            .with_topics(Some(vec![
                                offset_fetch_request::OffsetFetchRequestTopic::default()
                                    .with_name(topic(TOPIC))
                                    .with_partition_indexes(vec![0, 1, 9]),
                                offset_fetch_request::OffsetFetchRequestTopic::default()
                                    .with_name(topic(MISSING))
                                    .with_partition_indexes(vec![0]),
                            ])),
                    ),
                )];
                if v >= 2 {
                    out.push((
                        "all topics",
                        R::OffsetFetch(
                            OffsetFetchRequest::default()
                                .with_group_id(GroupId(s(GROUP)))
                                .with_topics(None),
                        ),
                    ));
                }
                out
            }
        }
        ApiKey::FindCoordinator => {
            let r = |key_type: i8| {
                let r = FindCoordinatorRequest::default();
                let r = if v >= 1 { r.with_key_type(key_type) } else { r };
                if v >= 4 {
                    r.with_coordinator_keys(vec![s(GROUP), s("other")])
                } else {
                    r.with_key(s(GROUP))
                }
            };
            let mut out = vec![("group", R::FindCoordinator(r(0)))];
            if v >= 1 {
                out.push(("transaction", R::FindCoordinator(r(1))));
            }
            out
        }
        ApiKey::JoinGroup => {
            let r = JoinGroupRequest::default()
                // One group per version: a join at v0-3 completes a rebalance of its own.
                .with_group_id(GroupId(s(&format!("join-{v}"))))
                .with_session_timeout_ms(10_000)
                .with_member_id(s(""))
                .with_protocol_type(s("consumer"))
                .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
                )
                .with_name(s("range"))
                .with_metadata(Bytes::from_static(&[0, 1, 0, 0, 0, 0]))]);
            let r = if v >= 1 {
                r.with_rebalance_timeout_ms(10_000)
            } else {
                r
            };
            let bad = JoinGroupRequest::default()
                .with_group_id(GroupId(s(&format!("join-bad-{v}"))))
                .with_session_timeout_ms(1)
                .with_member_id(s(""))
                .with_protocol_type(s("consumer"));
            vec![
                ("join", R::JoinGroup(r)),
                ("bad timeout", R::JoinGroup(bad)),
            ]
        }
        ApiKey::Heartbeat => vec![(
            "unknown member",
            R::Heartbeat(
                HeartbeatRequest::default()
                    .with_group_id(GroupId(s(GROUP)))
                    .with_generation_id(3)
                    .with_member_id(s("m-1")),
            ),
        )],
        ApiKey::LeaveGroup => {
            let r = LeaveGroupRequest::default().with_group_id(GroupId(s(GROUP)));
            let r = if v >= 3 {
                r.with_members(vec![
                    leave_group_request::MemberIdentity::default().with_member_id(s("m-1"))
                ])
            } else {
                r.with_member_id(s("m-1"))
            };
            vec![("unknown member", R::LeaveGroup(r))]
        }
        ApiKey::SyncGroup => {
            let r = SyncGroupRequest::default()
                .with_group_id(GroupId(s(GROUP)))
                .with_generation_id(1)
                .with_member_id(s("m-1"));
            let r = if v >= 5 {
                r.with_protocol_type(Some(s("consumer")))
                    .with_protocol_name(Some(s("range")))
            } else {
                r
            };
            vec![("unknown member", R::SyncGroup(r))]
        }
        ApiKey::DescribeGroups => {
            let r = DescribeGroupsRequest::default().with_groups(vec![
                GroupId(s(GROUP)),
                GroupId(s("join-0")),
                GroupId(s("nope")),
            ]);
            let r = if v >= 3 {
                r.with_include_authorized_operations(true)
            } else {
                r
            };
            vec![("groups", R::DescribeGroups(r))]
        }
        ApiKey::ListGroups => {
            let r = ListGroupsRequest::default();
            let r = if v >= 4 {
                r.with_states_filter(vec![s("Empty")])
            } else {
                r
            };
            let r = if v >= 5 {
                r.with_types_filter(vec![s("classic")])
            } else {
                r
            };
            vec![
                ("all", R::ListGroups(ListGroupsRequest::default())),
                ("filtered", R::ListGroups(r)),
            ]
        }
        ApiKey::ApiVersions => {
            let r = ApiVersionsRequest::default();
            let r = if v >= 3 {
                r.with_client_software_name(s("weir-test"))
                    .with_client_software_version(s("1.0"))
            } else {
                r
            };
            vec![("versions", R::ApiVersions(r))]
        }
        ApiKey::CreateTopics => {
            let t = |name: String, n: i32| {
                create_topics_request::CreatableTopic::default()
                    .with_name(TopicName(s(&name)))
                    .with_num_partitions(n)
                    .with_replication_factor(1)
                    .with_configs(vec![create_topics_request::CreatableTopicConfig::default()
                        .with_name(s("retention.ms"))
                        .with_value(Some(s("60000")))])
            };
            vec![
                (
                    "new, existing, invalid",
                    R::CreateTopics(CreateTopicsRequest::default().with_topics(vec![
                        t(format!("created-{v}"), 2),
                        t(TOPIC.into(), 1),
                        t("bad name!".into(), 1),
                        t(format!("zero-{v}"), 0),
                    ])),
                ),
                (
                    "validate only",
                    R::CreateTopics(
                        CreateTopicsRequest::default()
                            .with_topics(vec![t(format!("validated-{v}"), -1)])
                            .with_validate_only(true),
                    ),
                ),
            ]
        }
        ApiKey::DeleteTopics => {
            let doomed = format!("doomed-{v}");
            e.topics
                .create(&doomed, 1, Default::default(), false)
                .await
                .expect("create a topic to delete");
            let r = if v >= 6 {
                DeleteTopicsRequest::default().with_topics(vec![
                    delete_topics_request::DeleteTopicState::default()
                        .with_name(Some(TopicName(s(&doomed)))),
                    delete_topics_request::DeleteTopicState::default()
                        .with_name(Some(topic(MISSING))),
                    delete_topics_request::DeleteTopicState::default()
                        .with_topic_id(Uuid::new_v4()),
                ])
            } else {
                DeleteTopicsRequest::default()
                    .with_topic_names(vec![TopicName(s(&doomed)), topic(MISSING)])
            };
            vec![("existing and missing", R::DeleteTopics(r))]
        }
        ApiKey::DeleteRecords => vec![(
            "existing and missing",
            R::DeleteRecords(DeleteRecordsRequest::default().with_topics(vec![
                delete_records_request::DeleteRecordsTopic::default()
                    .with_name(topic(TOPIC))
                    .with_partitions(vec![
                        delete_records_request::DeleteRecordsPartition::default()
                            .with_partition_index(1)
                            .with_offset(0),
                        delete_records_request::DeleteRecordsPartition::default()
                            .with_partition_index(0)
                            .with_offset(1_000_000),
                    ]),
                delete_records_request::DeleteRecordsTopic::default()
                    .with_name(topic(MISSING))
                    .with_partitions(vec![
                        delete_records_request::DeleteRecordsPartition::default()
                            .with_partition_index(0)
                            .with_offset(0),
                    ]),
            ])),
        )],
        ApiKey::InitProducerId => {
            let mut out = vec![(
                "idempotent",
                R::InitProducerId(InitProducerIdRequest::default().with_transaction_timeout_ms(-1)),
            )];
            out.push((
                "transactional",
                R::InitProducerId(
                    InitProducerIdRequest::default()
                        .with_transactional_id(Some(TransactionalId(s("tx"))))
                        .with_transaction_timeout_ms(60_000),
                ),
            ));
            if v >= 3 {
                out.push((
                    "epoch bump",
                    R::InitProducerId(
                        InitProducerIdRequest::default()
                            .with_transaction_timeout_ms(-1)
                            .with_producer_id(ProducerId(7))
                            .with_producer_epoch(2),
                    ),
                ));
            }
            out
        }
        ApiKey::OffsetForLeaderEpoch => {
            let p = |epoch: i32, current: i32| {
                offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                    .with_partition(0)
                    .with_leader_epoch(epoch)
                    .with_current_leader_epoch(current)
            };
            let r = OffsetForLeaderEpochRequest::default().with_topics(vec![
                offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                    .with_topic(topic(TOPIC))
                    .with_partitions(vec![p(0, -1), p(1000, -1), p(0, 1000)]),
                offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                    .with_topic(topic(MISSING))
                    .with_partitions(vec![p(0, -1)]),
            ]);
            let r = if v >= 3 {
                r.with_replica_id(BrokerId(-1))
            } else {
                r
            };
            vec![("epochs", R::OffsetForLeaderEpoch(r))]
        }
        ApiKey::DescribeConfigs => {
            let res = |ty: i8, name: &str, keys: Option<Vec<StrBytes>>| {
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(ty)
                    .with_resource_name(s(name))
                    .with_configuration_keys(keys)
            };
            let r = DescribeConfigsRequest::default()
                .with_include_synonyms(true)
                .with_resources(vec![
                    res(2, TOPIC, None),
                    res(2, TOPIC, Some(vec![s("retention.ms")])),
                    res(2, MISSING, None),
                    res(4, "1", None),
                    res(8, "x", None),
                ]);
            let r = if v >= 3 {
                r.with_include_documentation(true)
            } else {
                r
            };
            vec![("resources", R::DescribeConfigs(r))]
        }
        ApiKey::AlterConfigs => {
            let res = |ty: i8, name: &str, k: &str, val: &str| {
                alter_configs_request::AlterConfigsResource::default()
                    .with_resource_type(ty)
                    .with_resource_name(s(name))
                    .with_configs(vec![alter_configs_request::AlterableConfig::default()
                        .with_name(s(k))
                        .with_value(Some(s(val)))])
            };
            vec![(
                "resources",
                R::AlterConfigs(AlterConfigsRequest::default().with_resources(vec![
                    res(2, TOPIC, "retention.ms", "86400000"),
                    res(2, TOPIC, "retention.ms", "not a number"),
                    res(2, MISSING, "retention.ms", "1"),
                    res(4, "1", "log.retention.ms", "1"),
                ])),
            )]
        }
        ApiKey::CreatePartitions => {
            let grow = format!("grow-{v}");
            e.topics
                .create(&grow, 1, Default::default(), false)
                .await
                .expect("create a topic to grow");
            let t = |name: &str, n: i32| {
                create_partitions_request::CreatePartitionsTopic::default()
                    .with_name(TopicName(s(name)))
                    .with_count(n)
            };
            vec![(
                "grow, shrink, missing",
                R::CreatePartitions(CreatePartitionsRequest::default().with_topics(vec![
                    t(&grow, 3),
                    t(TOPIC, 1),
                    t(MISSING, 4),
                ])),
            )]
        }
        ApiKey::DeleteGroups => vec![(
            "existing and missing",
            R::DeleteGroups(
                DeleteGroupsRequest::default()
                    .with_groups_names(vec![GroupId(s("nope")), GroupId(s("join-0"))]),
            ),
        )],
        ApiKey::IncrementalAlterConfigs => {
            let res = |ty: i8, name: &str, op: i8, val: Option<&str>| {
                incremental_alter_configs_request::AlterConfigsResource::default()
                    .with_resource_type(ty)
                    .with_resource_name(s(name))
                    .with_configs(vec![
                        incremental_alter_configs_request::AlterableConfig::default()
                            .with_name(s("retention.ms"))
                            .with_config_operation(op)
                            .with_value(val.map(s)),
                    ])
            };
            vec![(
                "resources",
                R::IncrementalAlterConfigs(
                    IncrementalAlterConfigsRequest::default().with_resources(vec![
                        res(2, TOPIC, 0, Some("3600000")),
                        res(2, TOPIC, 9, None),
                        res(2, MISSING, 0, Some("1")),
                        res(4, "1", 0, Some("1")),
                    ]),
                ),
            )]
        }
        ApiKey::OffsetDelete => {
            let t = |name: &str| {
                offset_delete_request::OffsetDeleteRequestTopic::default()
                    .with_name(topic(name))
                    .with_partitions(vec![
                        offset_delete_request::OffsetDeleteRequestPartition::default()
                            .with_partition_index(0),
                    ])
            };
            vec![
                (
                    "existing group",
                    R::OffsetDelete(
                        OffsetDeleteRequest::default()
                            .with_group_id(GroupId(s(GROUP)))
                            .with_topics(vec![t(TOPIC), t(MISSING)]),
                    ),
                ),
                (
                    "missing group",
                    R::OffsetDelete(
                        OffsetDeleteRequest::default()
                            .with_group_id(GroupId(s("nope")))
                            .with_topics(vec![t(TOPIC)]),
                    ),
                ),
            ]
        }
        ApiKey::DescribeCluster => {
            let r =
                DescribeClusterRequest::default().with_include_cluster_authorized_operations(true);
            let r = if v >= 1 { r.with_endpoint_type(1) } else { r };
            let r = if v >= 2 {
                r.with_include_fenced_brokers(true)
            } else {
                r
            };
            vec![("cluster", R::DescribeCluster(r))]
        }
        ApiKey::AlterPartitionReassignments => {
            let part = |replicas: Option<Vec<BrokerId>>| {
                alter_partition_reassignments_request::ReassignablePartition::default()
                    .with_partition_index(0)
                    .with_replicas(replicas)
            };
            let topics = |name: &str, replicas| {
                vec![
                    alter_partition_reassignments_request::ReassignableTopic::default()
                        .with_name(topic(name))
                        .with_partitions(vec![part(replicas)]),
                ]
            };
            vec![
                (
                    "to its own broker",
                    R::AlterPartitionReassignments(
                        AlterPartitionReassignmentsRequest::default()
                            .with_topics(topics(TOPIC, Some(vec![BrokerId(1)]))),
                    ),
                ),
                (
                    "missing topic and a cancel with nothing to cancel",
                    R::AlterPartitionReassignments(
                        AlterPartitionReassignmentsRequest::default().with_topics(
                            topics(MISSING, Some(vec![BrokerId(1)]))
                                .into_iter()
                                .chain(topics(TOPIC, None))
                                .collect(),
                        ),
                    ),
                ),
            ]
        }
        ApiKey::ListPartitionReassignments => vec![
            (
                "all",
                R::ListPartitionReassignments(ListPartitionReassignmentsRequest::default()),
            ),
            (
                "one topic",
                R::ListPartitionReassignments(
                    ListPartitionReassignmentsRequest::default().with_topics(Some(vec![
                        list_partition_reassignments_request::ListPartitionReassignmentsTopics::default()
                            .with_name(topic(TOPIC))
                            .with_partition_indexes(vec![0]),
                    ])),
                ),
            ),
        ],
        ApiKey::AddPartitionsToTxn => {
            let topics = vec![
                add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                    .with_name(topic(TOPIC))
                    .with_partitions(vec![0, 1]),
                add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                    .with_name(topic(MISSING))
                    .with_partitions(vec![0]),
            ];
            let r = if v <= 3 {
                AddPartitionsToTxnRequest::default()
                    .with_v3_and_below_transactional_id(TransactionalId(s("tx")))
                    .with_v3_and_below_producer_id(ProducerId(7))
                    .with_v3_and_below_producer_epoch(0)
                    .with_v3_and_below_topics(topics)
            } else {
                AddPartitionsToTxnRequest::default().with_transactions(vec![
                    add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default()
                        .with_transactional_id(TransactionalId(s("tx")))
                        .with_producer_id(ProducerId(7))
                        .with_verify_only(true)
                        .with_topics(topics),
                ])
            };
            vec![("unknown producer, a missing topic", R::AddPartitionsToTxn(r))]
        }
        ApiKey::AddOffsetsToTxn => vec![(
            "unknown producer",
            R::AddOffsetsToTxn(
                AddOffsetsToTxnRequest::default()
                    .with_transactional_id(TransactionalId(s("tx")))
                    .with_producer_id(ProducerId(7))
                    .with_group_id(GroupId(s(GROUP))),
            ),
        )],
        ApiKey::EndTxn => vec![(
            "unknown producer",
            R::EndTxn(
                EndTxnRequest::default()
                    .with_transactional_id(TransactionalId(s("tx")))
                    .with_producer_id(ProducerId(7))
                    .with_committed(true),
            ),
        )],
        ApiKey::TxnOffsetCommit => vec![(
            "no such transaction",
            R::TxnOffsetCommit(
                TxnOffsetCommitRequest::default()
                    .with_transactional_id(TransactionalId(s("tx")))
                    .with_group_id(GroupId(s(GROUP)))
                    .with_producer_id(ProducerId(7))
                    .with_generation_id(-1)
                    .with_topics(vec![
                        txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                            .with_name(topic(TOPIC))
                            .with_partitions(vec![
                                txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                                    .with_partition_index(0)
                                    .with_committed_offset(1),
                            ]),
                    ]),
            ),
        )],
        ApiKey::DescribeTransactions => vec![(
            "known and unknown ids",
            R::DescribeTransactions(DescribeTransactionsRequest::default().with_transactional_ids(
                vec![TransactionalId(s("tx")), TransactionalId(s("nope"))],
            )),
        )],
        ApiKey::ListTransactions => {
            let r = ListTransactionsRequest::default()
                .with_state_filters(vec![s("Ongoing"), s("NoSuchState")]);
            let r = if v >= 1 {
                r.with_duration_filter(-1)
            } else {
                r
            };
            vec![("filters", R::ListTransactions(r))]
        }
        ApiKey::DescribeLogDirs => vec![
            ("all", R::DescribeLogDirs(DescribeLogDirsRequest::default())),
            (
                "one topic",
                R::DescribeLogDirs(DescribeLogDirsRequest::default().with_topics(Some(vec![
                    describe_log_dirs_request::DescribableLogDirTopic::default()
                        .with_topic(topic(TOPIC))
                        .with_partitions(vec![0, 1]),
                ]))),
            ),
        ],
        ApiKey::ConsumerGroupHeartbeat => {
            let join = ConsumerGroupHeartbeatRequest::default()
                .with_group_id(GroupId(s("cg-versions")))
                .with_member_id(s(if v >= 1 { "member-1" } else { "" }))
                .with_member_epoch(0)
                .with_rebalance_timeout_ms(30_000)
                .with_subscribed_topic_names(Some(vec![topic(TOPIC)]))
                .with_topic_partitions(Some(Vec::new()));
            vec![
                ("join", R::ConsumerGroupHeartbeat(join)),
                (
                    "unknown member",
                    R::ConsumerGroupHeartbeat(
                        ConsumerGroupHeartbeatRequest::default()
                            .with_group_id(GroupId(s("cg-versions")))
                            .with_member_id(s("nobody"))
                            .with_member_epoch(5)
                            .with_rebalance_timeout_ms(-1),
                    ),
                ),
                (
                    "invalid",
                    R::ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest::default()),
                ),
            ]
        }
        ApiKey::DescribeProducers => vec![(
            "a partition and an unknown topic",
            R::DescribeProducers(DescribeProducersRequest::default().with_topics(vec![
                describe_producers_request::TopicRequest::default()
                    .with_name(topic(TOPIC))
                    .with_partition_indexes(vec![0, 99]),
                describe_producers_request::TopicRequest::default()
                    .with_name(topic("no-such-topic"))
                    .with_partition_indexes(vec![0]),
            ])),
        )],
        ApiKey::DescribeClientQuotas => vec![(
            "every user",
            R::DescribeClientQuotas(DescribeClientQuotasRequest::default().with_components(vec![
                describe_client_quotas_request::ComponentData::default()
                    .with_entity_type(s("user"))
                    .with_match_type(2),
            ])),
        )],
        ApiKey::AlterClientQuotas => vec![(
            "a quota set and a bad key",
            R::AlterClientQuotas(AlterClientQuotasRequest::default().with_entries(vec![
                alter_client_quotas_request::EntryData::default()
                    .with_entity(vec![alter_client_quotas_request::EntityData::default()
                        .with_entity_type(s("user"))
                        .with_entity_name(Some(s("alice")))])
                    .with_ops(vec![alter_client_quotas_request::OpData::default()
                        .with_key(s("producer_byte_rate"))
                        .with_value(1048576.0)]),
                alter_client_quotas_request::EntryData::default()
                    .with_entity(vec![alter_client_quotas_request::EntityData::default()
                        .with_entity_type(s("client-id"))
                        .with_entity_name(None)])
                    .with_ops(vec![alter_client_quotas_request::OpData::default()
                        .with_key(s("no_such_key"))
                        .with_value(1.0)]),
            ])),
        )],
        ApiKey::CreateAcls => vec![(
            "a valid binding and an invalid one",
            R::CreateAcls(CreateAclsRequest::default().with_creations(vec![
                create_acls_request::AclCreation::default()
                    .with_resource_type(2)
                    .with_resource_name(s("t"))
                    .with_resource_pattern_type(3)
                    .with_principal(s("User:alice"))
                    .with_host(s("*"))
                    .with_operation(3)
                    .with_permission_type(3),
                create_acls_request::AclCreation::default()
                    .with_resource_type(0)
                    .with_resource_name(s("t"))
                    .with_resource_pattern_type(3)
                    .with_principal(s("alice"))
                    .with_host(s("*"))
                    .with_operation(3)
                    .with_permission_type(3),
            ])),
        )],
        ApiKey::DescribeAcls => vec![(
            "every binding",
            R::DescribeAcls(
                DescribeAclsRequest::default()
                    .with_resource_type_filter(1)
                    .with_pattern_type_filter(if v >= 1 { 1 } else { 3 })
                    .with_operation(1)
                    .with_permission_type(1),
            ),
        )],
        ApiKey::DeleteAcls => vec![(
            "a filter that matches and one that does not decode",
            R::DeleteAcls(DeleteAclsRequest::default().with_filters(vec![
                delete_acls_request::DeleteAclsFilter::default()
                    .with_resource_type_filter(2)
                    .with_resource_name_filter(Some(s("t")))
                    .with_pattern_type_filter(3)
                    .with_operation(1)
                    .with_permission_type(1),
                delete_acls_request::DeleteAclsFilter::default()
                    .with_resource_type_filter(99)
                    .with_pattern_type_filter(3)
                    .with_operation(1)
                    .with_permission_type(1),
            ])),
        )],
        ApiKey::SaslHandshake => vec![
            (
                "a mechanism the listener does not offer",
                R::SaslHandshake(SaslHandshakeRequest::default().with_mechanism(s("SCRAM-SHA-256"))),
            ),
            (
                "an unknown mechanism",
                R::SaslHandshake(SaslHandshakeRequest::default().with_mechanism(s("GSSAPI"))),
            ),
        ],
        ApiKey::SaslAuthenticate => vec![(
            "without a handshake",
            R::SaslAuthenticate(
                SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_static(b"n,,n=u,r=x")),
            ),
        )],
        ApiKey::DescribeUserScramCredentials => vec![
            (
                "every user",
                R::DescribeUserScramCredentials(DescribeUserScramCredentialsRequest::default()),
            ),
            (
                "a missing user, named twice",
                R::DescribeUserScramCredentials(
                    DescribeUserScramCredentialsRequest::default().with_users(Some(vec![
                        describe_user_scram_credentials_request::UserName::default()
                            .with_name(s("nobody")),
                        describe_user_scram_credentials_request::UserName::default()
                            .with_name(s("nobody")),
                    ])),
                ),
            ),
        ],
        ApiKey::AlterUserScramCredentials => vec![(
            "an upsertion and a deletion that fails",
            R::AlterUserScramCredentials(
                AlterUserScramCredentialsRequest::default()
                    .with_upsertions(vec![
                        alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
                            .with_name(s("alice"))
                            .with_mechanism(1)
                            .with_iterations(4096)
                            .with_salt(Bytes::from_static(b"salt"))
                            .with_salted_password(Bytes::from_static(&[7; 32])),
                    ])
                    .with_deletions(vec![
                        alter_user_scram_credentials_request::ScramCredentialDeletion::default()
                            .with_name(s("nobody"))
                            .with_mechanism(2),
                    ]),
            ),
        )],
        ApiKey::ConsumerGroupDescribe => vec![(
            "known and unknown",
            R::ConsumerGroupDescribe(
                ConsumerGroupDescribeRequest::default()
                    .with_group_ids(vec![GroupId(s("cg-versions")), GroupId(s("nope"))])
                    .with_include_authorized_operations(true),
            ),
        )],
        other => panic!("{other:?} is advertised but this test has no request for it"),
    }
}

/// Encodes `request` at `v` and decodes it back: what the broker sees from a client of that
/// version. Fails if the request sets a field the version lacks (a mistake of this test).
fn as_sent(key: ApiKey, v: i16, request: &RequestKind) -> Result<RequestKind, String> {
    let mut buf = BytesMut::new();
    request
        .encode(&mut buf, v)
        .map_err(|e| format!("the test's request does not encode: {e}"))?;
    RequestKind::decode(key, &mut buf.freeze(), v)
        .map_err(|e| format!("the test's request does not decode: {e}"))
}

fn decode_response(key: ApiKey, v: i16, bytes: BytesMut) -> Result<ResponseKind, String> {
    let mut b = bytes.freeze();
    // Length prefix, then the response header.
    let _len = bytes::Buf::get_i32(&mut b);
    ResponseHeader::decode(&mut b, key.response_header_version(v))
        .map_err(|e| format!("response header: {e}"))?;
    let r = ResponseKind::decode(key, &mut b, v).map_err(|e| format!("response body: {e}"))?;
    if bytes::Buf::has_remaining(&b) {
        return Err("trailing bytes after the response".into());
    }
    Ok(r)
}

use kafka_protocol::protocol::Decodable;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_answers_at_every_advertised_version() {
    let e = env().await;
    let mut failures = Vec::new();
    let mut checked = 0;
    for key in ApiKey::iter() {
        let Some((min, max)) = supported_versions(key) else {
            continue;
        };
        for v in min..=max {
            for (label, request) in requests(&e, key, v).await {
                let what = format!("{key:?} v{v} ({label})");
                let request = match as_sent(key, v, &request) {
                    Ok(r) => r,
                    Err(err) => {
                        failures.push(format!("{what}: {err}"));
                        continue;
                    }
                };
                let header = RequestHeader::default()
                    .with_request_api_key(key as i16)
                    .with_request_api_version(v)
                    .with_correlation_id(7)
                    .with_client_id(Some(s("versions-test")));

                // The fallback answer for this request must encode at this version too.
                match error_response(&header, &request) {
                    None => failures.push(format!("{what}: no error response")),
                    Some(r) => match encode_response(&header, &r)
                        .map_err(|e| e.to_string())
                        .and_then(|b| decode_response(key, v, b.contiguous()))
                    {
                        Err(err) => failures.push(format!("{what}: error response: {err}")),
                        Ok(decoded) => {
                            let text = format!("{decoded:?}");
                            let names_nothing = matches!(
                                &request,
                                RequestKind::Metadata(m) if m.topics.as_ref().is_none_or(|t| t.is_empty())
                            );
                            if !text.contains("error_code: -1") && !names_nothing {
                                failures.push(format!(
                                    "{what}: error response carries no UNKNOWN_SERVER_ERROR: {text}"
                                ));
                            }
                        }
                    },
                }

                let reply = e.broker.handle(&header, request, "127.0.0.1").await;
                let response = match reply {
                    Reply::Now(r) => *r,
                    Reply::Later(f) => match tokio::time::timeout(Duration::from_secs(60), f).await
                    {
                        Ok(r) => r,
                        Err(_) => {
                            failures.push(format!("{what}: no answer"));
                            continue;
                        }
                    },
                    Reply::Silent(_) => {
                        failures.push(format!("{what}: no response"));
                        continue;
                    }
                    Reply::Unsupported => {
                        failures.push(format!("{what}: advertised but unsupported"));
                        continue;
                    }
                };
                checked += 1;
                match encode_response(&header, &response) {
                    Err(err) => failures.push(format!("{what}: {err}")),
                    Ok(bytes) => {
                        if let Err(err) = decode_response(key, v, bytes.contiguous()) {
                            failures.push(format!("{what}: {err}"));
                        }
                    }
                }
            }
        }
    }
    e.topics.close().await;
    e.engine.close().await.expect("close the engine");
    assert!(checked > 150, "only {checked} requests checked");
    assert!(
        failures.is_empty(),
        "{} of {checked} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
