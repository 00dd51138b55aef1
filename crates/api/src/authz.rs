//! Authorization: every request checked against the ACLs as Kafka's `KafkaApis` checks it,
//! before its handler runs, so that handlers stay as they are. What each API needs is in its
//! module (`crate::apis`, `Api::authorize` and `Api::put_back`); this module has the checks of a
//! connection ([`Check`]), the gate around them, and the helpers the APIs share.
//!
//! [`Broker::gate`] looks at a decoded request with the connection's principal and either
//! refuses it whole (a group API without READ on its group, an admin API without its
//! permission on the cluster: the API's error response with GROUP_, CLUSTER_ or
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED everywhere) or takes out the topics, groups or ids
//! the principal may not touch and serves the rest; the items taken out come back in the
//! response with TOPIC_AUTHORIZATION_FAILED (or the group's or id's error), built by the
//! API's own error response ([`crate::error_response_for`]), and listings (Metadata of every
//! topic, ListGroups, ListTransactions, OffsetFetch of every topic) leave out what the
//! principal may not DESCRIBE. Connections on the internal listener are peer brokers and are
//! not checked. With no authorizer configured every request is served, as in Kafka.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use kafka_protocol::messages::*;
use kafka_protocol::ResponseError as E;
use weir_auth::acl::{Acl, Authorizer, Operation, ResourceType, CLUSTER_NAME};
use weir_auth::Principal;
use weir_meta::{AclBinding, Acls};

use crate::apis::error_response_for;
use crate::conn::Conn;

/// The authorizer in force, if any.
#[derive(Debug, Default)]
pub struct Authz {
    current: RwLock<Option<Arc<Authorizer>>>,
    settings: RwLock<Option<(HashSet<String>, bool)>>,
}

impl Authz {
    /// Turns ACL checks on: `super_users` (`User:admin`) may do anything, and a resource with
    /// no ACL at all is open to everyone if `allow_if_no_acl`.
    pub fn enable(&self, super_users: HashSet<String>, allow_if_no_acl: bool, acls: Vec<Acl>) {
        *self.settings.write().unwrap_or_else(|e| e.into_inner()) =
            Some((super_users.clone(), allow_if_no_acl));
        self.set(Authorizer::new(acls, super_users, allow_if_no_acl));
    }

    fn set(&self, a: Authorizer) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(a));
    }

    pub fn current(&self) -> Option<Arc<Authorizer>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn enabled(&self) -> bool {
        self.current().is_some()
    }
}

/// The stored bindings Weir can use (others are logged and skipped).
pub(crate) fn acls_of(bindings: Vec<AclBinding>) -> Vec<Acl> {
    bindings
        .into_iter()
        .filter_map(|b| {
            Acl::new(
                b.resource_type,
                &b.resource_name,
                b.pattern_type,
                &b.principal,
                &b.host,
                b.operation,
                b.permission_type,
            )
            .map_err(|e| tracing::warn!(binding = ?b, error = %e, "skipping a stored ACL"))
            .ok()
        })
        .collect()
}

/// One connection's checks.
#[derive(Clone)]
pub(crate) struct Check {
    pub(crate) authorizer: Arc<Authorizer>,
    pub(crate) principal: Principal,
    pub(crate) host: String,
}

impl Check {
    pub(crate) fn ok(&self, op: Operation, kind: ResourceType, name: &str) -> bool {
        self.authorizer
            .authorize(&self.principal, &self.host, op, kind, name)
    }

    pub(crate) fn cluster(&self, op: Operation) -> bool {
        self.ok(op, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// Kafka's bit field of the operations allowed on a resource (bit n: operation code n).
    pub(crate) fn operations(&self, kind: ResourceType, name: &str, ops: &[Operation]) -> i32 {
        ops.iter()
            .filter(|op| self.ok(**op, kind, name))
            .fold(0, |bits, op| bits | (1 << op.code()))
    }

    pub(crate) fn cluster_operations(&self) -> i32 {
        use Operation::*;
        let ops = [
            Create,
            Alter,
            Describe,
            ClusterAction,
            DescribeConfigs,
            AlterConfigs,
            IdempotentWrite,
        ];
        self.operations(ResourceType::Cluster, CLUSTER_NAME, &ops)
    }

    pub(crate) fn topic_operations(&self, name: &str) -> i32 {
        use Operation::*;
        let ops = [
            Read,
            Write,
            Create,
            Delete,
            Alter,
            Describe,
            DescribeConfigs,
            AlterConfigs,
        ];
        self.operations(ResourceType::Topic, name, &ops)
    }

    pub(crate) fn group_operations(&self, name: &str) -> i32 {
        use Operation::*;
        let ops = [Read, Delete, Describe, DescribeConfigs, AlterConfigs];
        self.operations(ResourceType::Group, name, &ops)
    }

    /// Logs a refusal (the 1st, 2nd, 4th... of this broker: seen, not a flood) and counts it.
    pub(crate) fn denied(&self, what: &str, meter: &weir_metrics::Counter) {
        meter.inc();
        let n = meter.get();
        if n.is_power_of_two() {
            tracing::info!(principal = %self.principal, host = %self.host, denied = n,
                "authorization denied: {what}");
        }
    }

    pub(crate) fn topic(&self, op: Operation, name: &str) -> bool {
        self.ok(op, ResourceType::Topic, name)
    }

    pub(crate) fn group(&self, op: Operation, name: &str) -> bool {
        self.ok(op, ResourceType::Group, name)
    }

    pub(crate) fn txn(&self, op: Operation, name: &str) -> bool {
        self.ok(op, ResourceType::TransactionalId, name)
    }
}

/// What to do with a request.
#[allow(clippy::large_enum_variant)] // one per request, moved once
pub(crate) enum Gate {
    /// Serve it; `denied` (the error response of what was taken out) joins the response, and
    /// `filter` then leaves out of listings what may not be described.
    Serve {
        request: RequestKind,
        denied: Option<ResponseKind>,
        filter: Option<Check>,
    },
    /// Answer with this, serve nothing.
    Refuse(ResponseKind),
}

impl Gate {
    /// For a response that tells the principal what it may do (Metadata's and the describes'
    /// authorized operations, lists filtered by what it may describe): `put_back` gets the
    /// principal's checks whatever was denied.
    pub(crate) fn telling(self, check: &Check) -> Gate {
        match self {
            Gate::Serve {
                request, denied, ..
            } => Gate::Serve {
                request,
                denied,
                filter: Some(check.clone()),
            },
            refused => refused,
        }
    }
}

/// Serves the items of a request's list that `keep` allows; the others come back in the
/// response with `e`, built as the API answers when it fails.
macro_rules! sift {
    ($v:expr, $kind:ident, $ty:ty, $r:ident . $field:ident, $keep:expr, $e:expr) => {{
        let (ok, no) = $crate::authz::split(std::mem::take(&mut $r.$field), $keep);
        $r.$field = ok;
        let denied = if no.is_empty() {
            None
        } else {
            let mut d = <$ty>::default();
            d.$field = no;
            $crate::apis::error_response_for(
                &kafka_protocol::messages::RequestKind::$kind(d),
                $v,
                $e,
            )
        };
        $crate::authz::Gate::Serve {
            request: kafka_protocol::messages::RequestKind::$kind($r),
            denied,
            filter: None,
        }
    }};
}
pub(crate) use sift;

/// An API's `put_back` (in its `impl Api`) for the common case: the error response of the parts
/// `authorize` took out joins the response's list `field`; nothing is filtered.
macro_rules! joins_denied {
    ($kind:ident . $field:ident) => {
        fn put_back(
            _broker: &$crate::Broker,
            response: kafka_protocol::messages::ResponseKind,
            denied: Option<kafka_protocol::messages::ResponseKind>,
            _filter: Option<&$crate::authz::Check>,
        ) -> kafka_protocol::messages::ResponseKind {
            use kafka_protocol::messages::ResponseKind as K;
            match (response, denied) {
                (K::$kind(mut r), Some(K::$kind(d))) => {
                    r.$field.extend(d.$field);
                    K::$kind(r)
                }
                (response, _) => response,
            }
        }
    };
}
pub(crate) use joins_denied;

/// The config APIs: topic resources need `op` on the topic (else TOPIC_AUTHORIZATION_FAILED),
/// broker resources on the cluster (else CLUSTER_AUTHORIZATION_FAILED).
macro_rules! configs {
    ($kind:ident, $ty:ty, $r:ident, $op:ident, $check:ident, $v:ident) => {{
        let mut $r = $r;
        let (ok, no) = $crate::authz::split(std::mem::take(&mut $r.resources), |c| {
            match c.resource_type {
                2 => $check.topic(weir_auth::acl::Operation::$op, &c.resource_name),
                32 => $check.group(weir_auth::acl::Operation::$op, &c.resource_name),
                _ => $check.cluster(weir_auth::acl::Operation::$op),
            }
        });
        let (topics, no) = $crate::authz::split(no, |c| c.resource_type == 2);
        let (groups, brokers) = $crate::authz::split(no, |c| c.resource_type == 32);
        $r.resources = ok;
        $crate::authz::Gate::Serve {
            request: kafka_protocol::messages::RequestKind::$kind($r),
            denied: $crate::authz::merge_denied(
                $v,
                [
                    (
                        kafka_protocol::messages::RequestKind::$kind(
                            <$ty>::default().with_resources(topics),
                        ),
                        kafka_protocol::ResponseError::TopicAuthorizationFailed,
                    ),
                    (
                        kafka_protocol::messages::RequestKind::$kind(
                            <$ty>::default().with_resources(groups),
                        ),
                        kafka_protocol::ResponseError::GroupAuthorizationFailed,
                    ),
                    (
                        kafka_protocol::messages::RequestKind::$kind(
                            <$ty>::default().with_resources(brokers),
                        ),
                        kafka_protocol::ResponseError::ClusterAuthorizationFailed,
                    ),
                ],
            ),
            filter: None,
        }
    }};
}
pub(crate) use configs;

/// Serve the request whole.
pub(crate) fn serve(request: RequestKind) -> Gate {
    Gate::Serve {
        request,
        denied: None,
        filter: None,
    }
}

/// Answer the request with its error response, with `e` everywhere, and serve nothing.
pub(crate) fn refuse(request: &RequestKind, e: E, v: i16) -> Gate {
    Gate::Refuse(error_response_for(request, v, e).unwrap_or_else(|| {
        // Every API Weir serves has an error response; a refusal without one would close the
        // connection, which is also what Kafka does for such requests.
        ResponseKind::ApiVersions(crate::api_versions_response(e.code()))
    }))
}

/// Serve `request`; `denied`, what was taken out of it, comes back with `e` if any was.
pub(crate) fn partly(
    request: RequestKind,
    denied: RequestKind,
    any_denied: bool,
    e: E,
    v: i16,
) -> Gate {
    Gate::Serve {
        request,
        denied: if any_denied {
            error_response_for(&denied, v, e)
        } else {
            None
        },
        filter: None,
    }
}

/// Serve the request if `op` is allowed on the cluster, else refuse it.
pub(crate) fn cluster(check: &Check, op: Operation, request: RequestKind, v: i16) -> Gate {
    if check.cluster(op) {
        serve(request)
    } else {
        refuse(&request, E::ClusterAuthorizationFailed, v)
    }
}

/// Serve the request if `op` is allowed on group `id`, else refuse it.
pub(crate) fn group(check: &Check, op: Operation, id: &str, request: RequestKind, v: i16) -> Gate {
    if check.group(op, id) {
        serve(request)
    } else {
        refuse(&request, E::GroupAuthorizationFailed, v)
    }
}

pub(crate) fn split<T>(items: Vec<T>, keep: impl Fn(&T) -> bool) -> (Vec<T>, Vec<T>) {
    items.into_iter().partition(|i| keep(i))
}

impl crate::Broker {
    /// The checks of `conn`, or `None` if nothing is checked (no authorizer, or a peer
    /// broker).
    pub(crate) fn check_for(&self, conn: &Conn) -> Option<Check> {
        if conn.internal {
            return None;
        }
        let authorizer = self.authz.current()?;
        Some(Check {
            authorizer,
            principal: conn.principal().unwrap_or_else(Principal::anonymous),
            host: conn.peer.ip().to_string(),
        })
    }

    /// A topic's name from a request that may name it by id.
    pub(crate) fn topic_name(&self, name: &str, id: &uuid::Uuid) -> String {
        if name.is_empty() && !id.is_nil() {
            if let Some(t) = self.topics.get_by_id(id.as_bytes()) {
                return t.name.clone();
            }
        }
        name.to_string()
    }

    /// Reads the ACLs again from the metadata store (other brokers may have changed them).
    pub async fn refresh_acls(&self) -> Result<(), weir_meta::MetaError> {
        let Some(settings) = self
            .authz
            .settings
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        else {
            return Ok(());
        };
        let acls = acls_of(Acls::acls(&*self.meta).await?);
        if self
            .authz
            .current()
            .is_some_and(|a| a.acls() != acls.as_slice())
        {
            self.authz
                .set(Authorizer::new(acls, settings.0, settings.1));
        }
        Ok(())
    }

    pub(crate) fn gate(&self, check: &Check, request: RequestKind, v: i16) -> Gate {
        let gate = crate::apis::authorize(self, check, request, v);
        match gate {
            Gate::Refuse(_) => {
                check.denied("a request refused whole", &self.meters.authorization_denied);
                gate
            }
            Gate::Serve {
                request,
                denied,
                filter,
            } => {
                if denied.is_some() {
                    check.denied(
                        "topics, groups or ids of a request",
                        &self.meters.authorization_denied,
                    );
                }
                Gate::Serve {
                    request,
                    denied,
                    filter,
                }
            }
        }
    }

    /// Adds what `gate` took out to the response, and leaves out of listings what the
    /// principal may not describe: each API's [`crate::apis::Api::put_back`].
    pub(crate) fn after_gate(
        &self,
        response: ResponseKind,
        denied: Option<ResponseKind>,
        filter: Option<&Check>,
    ) -> ResponseKind {
        crate::apis::put_back(self, response, denied, filter)
    }
}

/// The error responses of several denied parts, joined (DescribeConfigs and the AlterConfigs
/// APIs, whose topics and broker resources fail with different errors).
pub(crate) fn merge_denied<const N: usize>(
    v: i16,
    parts: [(RequestKind, E); N],
) -> Option<ResponseKind> {
    let mut out: Option<ResponseKind> = None;
    for (request, e) in parts {
        let empty = match &request {
            RequestKind::DescribeConfigs(r) => r.resources.is_empty(),
            RequestKind::AlterConfigs(r) => r.resources.is_empty(),
            RequestKind::IncrementalAlterConfigs(r) => r.resources.is_empty(),
            _ => false,
        };
        if empty {
            continue;
        }
        let Some(next) = error_response_for(&request, v, e) else {
            continue;
        };
        out = Some(match (out, next) {
            (None, n) => n,
            (Some(ResponseKind::DescribeConfigs(mut a)), ResponseKind::DescribeConfigs(b)) => {
                a.results.extend(b.results);
                ResponseKind::DescribeConfigs(a)
            }
            (Some(ResponseKind::AlterConfigs(mut a)), ResponseKind::AlterConfigs(b)) => {
                a.responses.extend(b.responses);
                ResponseKind::AlterConfigs(a)
            }
            (
                Some(ResponseKind::IncrementalAlterConfigs(mut a)),
                ResponseKind::IncrementalAlterConfigs(b),
            ) => {
                a.responses.extend(b.responses);
                ResponseKind::IncrementalAlterConfigs(a)
            }
            (Some(a), _) => a,
        });
    }
    out
}
