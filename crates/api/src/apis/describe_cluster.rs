//! DescribeCluster: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{Check, Gate};
use crate::cluster::{controller_id, rack, CLUSTER_OPERATIONS};
use crate::{endpoint, str, Broker, Reply};

/// DescribeCluster.
pub(crate) struct DescribeCluster;

impl Api for DescribeCluster {
    type Request = DescribeClusterRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::DescribeCluster)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::DescribeCluster(
            DescribeClusterResponse::default()
                .with_error_code(code)
                .with_endpoint_type(request.endpoint_type),
        )
    }

    /// Kafka serves DescribeCluster to everyone; what the principal may do on the
    /// cluster is what its authorized operations say.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, _v: i16) -> Gate {
        Gate::Serve {
            request: RequestKind::DescribeCluster(r),
            denied: None,
            filter: Some(check.clone()),
        }
    }

    /// Says what the principal may do on the cluster.
    fn put_back(
        _broker: &Broker,
        response: ResponseKind,
        denied: Option<ResponseKind>,
        filter: Option<&Check>,
    ) -> ResponseKind {
        let ResponseKind::DescribeCluster(mut r) = response else {
            return response;
        };
        if denied.is_some() {
            tracing::error!("a denied part of a request has no place in its response");
        }
        if let Some(check) = filter {
            if r.cluster_authorized_operations != i32::MIN {
                r.cluster_authorized_operations = check.cluster_operations();
            }
        }
        ResponseKind::DescribeCluster(r)
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, listener, .. } = *cx;
        now(ResponseKind::DescribeCluster(describe_cluster(
            broker, request, v, listener,
        )))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let r = DescribeClusterRequest::default().with_include_cluster_authorized_operations(true);
        let r = if v >= 1 { r.with_endpoint_type(1) } else { r };
        let r = if v >= 2 {
            r.with_include_fenced_brokers(true)
        } else {
            r
        };
        vec![("cluster", R::DescribeCluster(r))]
    }
}

fn describe_cluster(
    broker: &Broker,
    r: DescribeClusterRequest,
    _version: i16,
    listener: &str,
) -> DescribeClusterResponse {
    let view = broker.cluster.view();
    DescribeClusterResponse::default()
        .with_endpoint_type(r.endpoint_type)
        .with_cluster_id(str(&broker.identity.cluster_id))
        .with_controller_id(controller_id(broker, &view))
        .with_brokers(
            view.reachable_brokers()
                .filter_map(|b| {
                    let (host, port) = endpoint(b, listener)?;
                    Some(
                        DescribeClusterBroker::default()
                            .with_broker_id(BrokerId(b.node_id))
                            .with_host(str(host))
                            .with_port(port)
                            .with_rack(rack(&b.zone))
                            .with_is_fenced(false),
                    )
                })
                .collect(),
        )
        .with_cluster_authorized_operations(if r.include_cluster_authorized_operations {
            CLUSTER_OPERATIONS
        } else {
            i32::MIN
        })
}
