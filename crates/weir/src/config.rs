//! Configuration: one typed struct, read from a TOML file, then `WEIR_<SECTION>_<KEY>`
//! environment variables, then command-line flags, each overriding the one before.

use std::path::PathBuf;

use anyhow::Context;
use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub broker: BrokerConfig,
    pub wal: WalConfig,
    pub storage: StorageSection,
    pub metadata: MetadataConfig,
    pub object_store: ObjectStoreConfig,
    pub cluster: ClusterSection,
    pub zones: ZonesSection,
    pub cloud: CloudSection,
    pub balancer: BalancerSection,
    pub security: SecuritySection,
    pub schema_registry: SchemaRegistrySection,
    pub iceberg: IcebergSection,
}

/// Topics as Iceberg tables (topic config `weir.iceberg.mode`): where their files go and the
/// catalog that names them.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IcebergSection {
    /// The warehouse: `s3://bucket/prefix` (the object store's credentials and endpoint),
    /// `file:///path`. Empty: `iceberg/` under `object_store.url` (no tables with a `memory://`
    /// store).
    pub warehouse: String,
    /// `sql`: the catalog's tables in the metadata store (the JDBC catalogs' layout, which
    /// Spark's JdbcCatalog and pyiceberg's SqlCatalog read); `rest`: an Iceberg REST catalog
    /// at `rest_uri` (Polaris, Unity, Glue's and S3 Tables' REST endpoints).
    pub catalog: String,
    /// The REST catalog's base URL (`https://host/api/catalog`).
    pub rest_uri: String,
    /// OAuth2 client credentials, `client_id:client_secret`, exchanged for a token at
    /// `rest_oauth2_server_uri` (default: the catalog's `v1/oauth/tokens`).
    pub rest_credential: String,
    /// A bearer token, instead of credentials.
    pub rest_token: String,
    pub rest_oauth2_server_uri: String,
    /// The OAuth2 scope (default `catalog`).
    pub rest_scope: String,
    /// The `warehouse` the catalog is asked for (Polaris: the catalog's name); empty: none.
    pub rest_warehouse: String,
    /// The catalog's name, as clients configure it (`SqlCatalog("weir", ...)`).
    pub catalog_name: String,
    /// The namespace of the topics' tables.
    pub namespace: String,
    /// How often the translator looks for topics due (each is translated every half of its
    /// `weir.iceberg.target.lag.ms`).
    pub interval_ms: u64,
    /// Record bytes read from one partition in one translation at most.
    pub max_bytes_per_partition: u64,
}

impl Default for IcebergSection {
    fn default() -> Self {
        IcebergSection {
            warehouse: String::new(),
            catalog: "sql".into(),
            rest_uri: String::new(),
            rest_credential: String::new(),
            rest_token: String::new(),
            rest_oauth2_server_uri: String::new(),
            rest_scope: String::new(),
            rest_warehouse: String::new(),
            catalog_name: "weir".into(),
            namespace: "kafka".into(),
            interval_ms: 1_000,
            max_bytes_per_partition: 64 << 20,
        }
    }
}

/// The schema registry (Confluent's REST API), served by every broker over the metadata store.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchemaRegistrySection {
    /// host:port of the registry's HTTP listener (Confluent's port by default); empty: no
    /// registry on this broker. Port 0: any free port (the log says which).
    pub listen: String,
    /// `none`, or `basic`: HTTP Basic with the broker's SCRAM users (checked as SASL PLAIN).
    pub authentication: String,
    /// HTTPS, with the Kafka TLS listeners' certificate (`security.ssl_keystore_location`).
    pub tls: bool,
}

impl Default for SchemaRegistrySection {
    fn default() -> Self {
        SchemaRegistrySection {
            listen: "127.0.0.1:8081".into(),
            authentication: "none".into(),
            tls: false,
        }
    }
}

/// Listeners and how clients on them prove who they are, with Kafka's names (`listeners`,
/// `advertised.listeners`, `listener.security.protocol.map`, `ssl.*`, `sasl.*`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecuritySection {
    /// Kafka listeners, `NAME://host:port,...` (e.g. `PLAINTEXT://127.0.0.1:9092,
    /// SASL_SSL://0.0.0.0:9093`). Empty: one PLAINTEXT listener on `broker.listen`. When set,
    /// `broker.listen` is not used.
    pub listeners: String,
    /// Where clients reach each listener, `NAME://host:port,...`; a listener left out is
    /// advertised at its own address (the first one at `broker.advertised`, if set).
    pub advertised_listeners: String,
    /// `NAME:PROTOCOL,...` for listeners not named after their protocol (PLAINTEXT, SSL,
    /// SASL_PLAINTEXT, SASL_SSL).
    pub listener_security_protocol_map: String,
    /// PEM file: the broker's certificate chain, and its private key unless
    /// `ssl_key_location` names another file (Kafka's PEM keystore).
    pub ssl_keystore_location: String,
    /// PEM file with the private key, if not in the keystore file.
    pub ssl_key_location: String,
    /// PEM file: the CAs client certificates must chain to (mTLS).
    pub ssl_truststore_location: String,
    /// `none`, `requested` or `required`: whether clients of SSL listeners present
    /// certificates (their subject is then their principal). Not applied to SASL_SSL
    /// listeners, whose clients authenticate with SASL (as in Kafka since KIP-684).
    pub ssl_client_auth: String,
    /// How often the TLS files are checked for a renewal (read again if changed).
    pub ssl_reload_interval_ms: u64,
    /// SASL mechanisms offered on SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.
    pub sasl_enabled_mechanisms: String,
    /// OAUTHBEARER: where the identity provider's keys are, a JWKS file (`file:///path` or a
    /// path; read again when it changes).
    pub sasl_oauthbearer_jwks_endpoint_url: String,
    /// OAUTHBEARER: the `iss` tokens must carry (empty: not checked).
    pub sasl_oauthbearer_expected_issuer: String,
    /// OAUTHBEARER: audiences, comma-separated, one of which a token's `aud` must name (empty:
    /// not checked).
    pub sasl_oauthbearer_expected_audience: String,
    /// OAUTHBEARER: the claim that names the principal.
    pub sasl_oauthbearer_sub_claim_name: String,
    /// OAUTHBEARER: how far a token's `exp` and `nbf` may be off this broker's clock.
    pub sasl_oauthbearer_clock_skew_seconds: i64,
    /// A SASL session lasts this long before the client must authenticate again on its
    /// connection (KIP-368); 0: sessions do not end.
    pub connections_max_reauth_ms: u64,
    /// `acl` turns ACL checks on (Kafka's `authorizer.class.name`; its StandardAuthorizer and
    /// AclAuthorizer class names are accepted too). Empty: every request is allowed.
    pub authorizer: String,
    /// Principals allowed everything, `;`-separated (`User:admin;User:ops`).
    pub super_users: String,
    /// `allow.everyone.if.no.acl.found`: a resource without any ACL is open to everyone.
    pub allow_everyone_if_no_acl_found: bool,
    /// `quota.window.num`: client quotas are measured over this many samples...
    pub quota_window_num: u32,
    /// ...of `quota.window.size.seconds` each.
    pub quota_window_size_seconds: u64,
    /// A broker reads the ACLs and client quotas again whenever a change to the cluster is
    /// announced (every change to them is), and at least this often: the bound on how long a
    /// change goes unseen when an announcement was lost.
    pub acl_refresh_interval_ms: u64,
}

impl Default for SecuritySection {
    fn default() -> Self {
        SecuritySection {
            listeners: String::new(),
            advertised_listeners: String::new(),
            listener_security_protocol_map: String::new(),
            ssl_keystore_location: String::new(),
            ssl_key_location: String::new(),
            ssl_truststore_location: String::new(),
            ssl_client_auth: "none".into(),
            ssl_reload_interval_ms: 10_000,
            // PLAIN sends the password itself: offered only where asked for.
            sasl_enabled_mechanisms: "SCRAM-SHA-256,SCRAM-SHA-512".into(),
            connections_max_reauth_ms: 0,
            sasl_oauthbearer_jwks_endpoint_url: String::new(),
            sasl_oauthbearer_expected_issuer: String::new(),
            sasl_oauthbearer_expected_audience: String::new(),
            sasl_oauthbearer_sub_claim_name: "sub".into(),
            sasl_oauthbearer_clock_skew_seconds: 30,
            authorizer: String::new(),
            super_users: String::new(),
            allow_everyone_if_no_acl_found: false,
            acl_refresh_interval_ms: 30_000,
            quota_window_num: 11,
            quota_window_size_seconds: 1,
        }
    }
}

/// Load reports and the controller's balancer: which partitions move so that no broker is over
/// its capacity and brokers' bytes in and out stay near the mean.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BalancerSection {
    /// Whether the controller moves partitions to balance load (brokers report their load
    /// either way).
    pub enabled: bool,
    /// How often brokers report their load and the controller runs a round.
    pub interval_ms: u64,
    /// How far from the mean a broker's bytes in or out may be, in percent.
    pub tolerance_percent: u64,
    /// Moves per round at most.
    pub max_moves_per_round: usize,
    /// A partition moved this recently is not moved again.
    pub cooldown_ms: u64,
    /// A broker's bytes in plus out per second not to exceed (0: no limit); also what
    /// `weir_cluster_load_ratio` compares the cluster's load with.
    pub capacity_bytes_per_sec: u64,
    /// Imbalances smaller than this many bytes per second are left alone (partition counts
    /// decide instead).
    pub min_bytes_per_sec: u64,
}

impl Default for BalancerSection {
    fn default() -> Self {
        let d = weir_cluster::balance::BalancerConfig::default();
        BalancerSection {
            enabled: d.enabled,
            interval_ms: d.interval.as_millis() as u64,
            tolerance_percent: (d.tolerance * 100.0).round() as u64,
            max_moves_per_round: d.max_moves,
            cooldown_ms: d.cooldown.as_millis() as u64,
            capacity_bytes_per_sec: d.capacity_bytes_per_sec as u64,
            min_bytes_per_sec: d.min_bytes_per_sec as u64,
        }
    }
}

/// Zone routing: clients of a zone are served by brokers of their zone (`broker.zone` is this
/// broker's).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ZonesSection {
    /// How topics that do not set `weir.zone.routing` serve clients outside their leader's
    /// zone: `in-zone` (through a broker of the client's zone, by way of object storage; no
    /// data byte crosses a zone) or `leader` (straight to the leader, as Kafka does).
    pub routing: String,
    /// How long a produce forwarded to another zone's leader waits for others to share its
    /// hand-off object.
    pub handoff_linger_ms: u64,
    /// A hand-off object is written once it holds this many bytes.
    pub handoff_bytes: usize,
    /// Hand-off objects being written or waiting for their leaders at once.
    pub handoff_max_in_flight: usize,
    /// Hand-off objects a second at most, per broker, that are not full (0: no bound): a
    /// PUT costs the same whatever it holds, so at low rates this bounds the bill ($0.005 per
    /// 1,000 PUTs: 20 a second is about $260 a month) at the price of a longer linger (up to
    /// 1/rate). Full objects are never held back.
    pub handoff_max_puts_per_sec: f64,
    /// How often a leader uploads what partitions read from other zones hold beyond object
    /// storage (only for `file` WAL partitions: those zones' consumers read objects only).
    pub remote_upload_interval_ms: u64,
    /// The zone of every client of this broker's Kafka listener that nothing else places (one
    /// listener per zone). Empty: none.
    pub listener_zone: String,
}

impl Default for ZonesSection {
    fn default() -> Self {
        let h = weir_zone::HandoffConfig::default();
        ZonesSection {
            routing: "in-zone".into(),
            handoff_linger_ms: h.linger.as_millis() as u64,
            handoff_bytes: h.max_bytes,
            handoff_max_in_flight: h.max_in_flight,
            handoff_max_puts_per_sec: h.max_puts_per_sec,
            remote_upload_interval_ms: 200,
            listener_zone: String::new(),
        }
    }
}

/// Where the broker runs: the cloud's instance metadata (`broker.zone = "auto"`, interruption
/// notices of spot and preemptible machines) and, in a pod, the Kubernetes API.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CloudSection {
    /// The instance metadata service (AWS, GCP and Azure all answer at this address).
    pub metadata_url: String,
    /// In a pod: the Kubernetes API. Empty: from `KUBERNETES_SERVICE_HOST` and
    /// `KUBERNETES_SERVICE_PORT`.
    pub kubernetes_api_url: String,
    /// Where the pod's service-account token and the cluster's CA are (`token`, `ca.crt`).
    pub kubernetes_credentials_dir: String,
    /// How long each request to the metadata service or the Kubernetes API may take.
    pub request_timeout_ms: u64,
    /// Spot and preemptible machines: `auto` watches the notices of the cloud the broker finds
    /// itself on (AWS, GCP, Azure) and leaves as on SIGTERM when its machine is to be taken
    /// back; `off` does not look.
    pub interruption_watch: String,
    /// How often the notices are read.
    pub interruption_poll_ms: u64,
}

impl Default for CloudSection {
    fn default() -> Self {
        CloudSection {
            metadata_url: "http://169.254.169.254".into(),
            kubernetes_api_url: String::new(),
            kubernetes_credentials_dir: "/var/run/secrets/kubernetes.io/serviceaccount".into(),
            request_timeout_ms: 2000,
            interruption_watch: "auto".into(),
            interruption_poll_ms: 5000,
        }
    }
}

/// The cluster protocol's timings and the internal listener.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSection {
    /// Broker-to-broker listener, host:port. Empty: the Kafka listener's host on a free port;
    /// brokers find each other's internal address in the metadata store, so three brokers on
    /// one machine need no setting for it.
    pub internal_listen: String,
    /// The internal listener's address as peers reach it, host:port, when not the advertised
    /// host and the bound port (a NAT, a proxy, a Kubernetes service). Empty: those.
    pub internal_advertised: String,
    /// A broker that has not renewed its session for this long (plus the drift margin) is
    /// fenced and its WAL recovered by a peer; it stops acknowledging writes after this long by
    /// its own clock (Kafka's `broker.session.timeout.ms` is 9000).
    pub session_timeout_ms: u64,
    /// How often a broker renews its session (`broker.heartbeat.interval.ms`, 2000 in Kafka).
    pub heartbeat_interval_ms: u64,
    /// The controller lease: the longest a dead controller holds up decisions.
    pub controller_lease_ms: u64,
    /// How often the controller looks at the cluster when no change is announced.
    pub controller_interval_ms: u64,
    /// How long SIGTERM waits for the broker's partitions to move to other brokers.
    pub shutdown_timeout_ms: u64,
    /// How much past a session's expiry the controller waits before fencing the broker: how
    /// far brokers' clocks may drift from the metadata store's over one session timeout.
    pub clock_drift_margin_ms: u64,
    /// When no live broker could open a fenced broker's WAL, how long until they try again.
    pub wal_retry_interval_ms: u64,
    /// A secret every broker of the cluster shares: a broker proves it (HMAC, never the secret
    /// itself) when it connects to a peer's internal listener, which serves nothing before.
    /// Empty: the internal listener serves any connection (keep it on a private network).
    /// The listener challenges each connection with a nonce the proof must sign, so a hello
    /// seen on the wire cannot be replayed.
    pub internal_secret: String,
    /// Accept (and send) the hello of versions before the challenge, whose proof signs the
    /// time and could be replayed for ten minutes: only while a cluster is upgraded from them,
    /// on every broker, and off again once all run this version.
    pub legacy_peer_hello: bool,
}

impl Default for ClusterSection {
    fn default() -> Self {
        let d = weir_cluster::ClusterConfig::default();
        ClusterSection {
            internal_listen: String::new(),
            internal_advertised: String::new(),
            session_timeout_ms: d.session_timeout.as_millis() as u64,
            heartbeat_interval_ms: d.heartbeat_interval.as_millis() as u64,
            controller_lease_ms: d.controller_lease.as_millis() as u64,
            controller_interval_ms: d.controller_interval.as_millis() as u64,
            shutdown_timeout_ms: d.shutdown_timeout.as_millis() as u64,
            clock_drift_margin_ms: d.clock_drift_margin.as_millis() as u64,
            wal_retry_interval_ms: d.wal_retry_interval.as_millis() as u64,
            internal_secret: String::new(),
            legacy_peer_hello: false,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BrokerConfig {
    /// Unset: 1 on the embedded SQLite store (a single broker); allocated by the metadata store
    /// (above 1000) on PostgreSQL.
    pub node_id: Option<i32>,
    /// Kafka listener.
    pub listen: String,
    /// Address clients are told to connect to; defaults to `listen`.
    pub advertised: String,
    /// Admin HTTP: /metrics, /healthz, /readyz, the /v1 API. On loopback by default; bind it
    /// elsewhere only with `admin_token` set.
    pub admin_listen: String,
    /// If set, admin HTTP requests (all but /healthz and /readyz) must carry
    /// `Authorization: Bearer <admin_token>`.
    pub admin_token: String,
    pub data_dir: PathBuf,
    pub zone: String,
    /// `auto.create.topics.enable`
    pub auto_create_topics: bool,
    /// `num.partitions`
    pub num_partitions: u32,
    /// `socket.request.max.bytes`
    pub max_request_bytes: usize,
    /// `fetch.max.bytes` (Kafka's default, 55 MiB): record bytes of one Fetch response at most,
    /// whatever the request asks; the first partition with data still returns one whole batch
    /// (KIP-74), so a consumer is never stuck behind a batch larger than the limits.
    pub fetch_max_bytes: usize,
    /// `max.incremental.fetch.session.cache.slots` (Kafka's default, 1,000): fetch sessions
    /// (KIP-227) open at once. A session keeps its client's partitions and what it was last
    /// told of each (about 200 bytes a partition), so that its fetches name and answer only
    /// what changed. When all are taken, a stale session's slot (idle 2 minutes) or the
    /// smallest one's, if smaller, goes to a new one; otherwise the client fetches in full.
    /// 0: no sessions.
    pub fetch_session_cache_slots: usize,
    /// `max.connections`: Kafka connections open at once; more are closed at accept and counted
    /// (`weir_connections_refused_total`). Kafka's default is unlimited; 10000 is above what
    /// one broker is expected to serve (Kafka's guidance is a few thousand per broker), and
    /// keeps a connection storm (a misconfigured client fleet reconnecting in a loop) from
    /// taking every file descriptor and the memory of two tasks and buffers per connection
    /// before the process limit is met. 0: no limit.
    pub max_connections: usize,
    /// `queued.max.request.bytes`: request bytes read but not yet answered (produce payloads
    /// waiting for durability included), all connections together. At the bound, connections
    /// stop reading and TCP pushes back on clients. Kafka's default is unbounded; 256 MiB holds
    /// about a second and a half of this broker's measured peak produce rate in flight, far more
    /// than a healthy WAL needs, so it binds only when the WAL or storage stalls. 0: no limit.
    pub queued_max_request_bytes: usize,
    /// The same bound for one connection (Weir pipelines a connection's requests; Kafka reads
    /// one request at a time per connection), so that one client cannot take the whole budget.
    /// 64 MiB: far above a producer's usual in-flight bytes (`max.in.flight` x batch size), and
    /// a quarter of the total. A single request larger than the bound is still read, alone.
    /// 0: no limit.
    pub queued_max_request_bytes_per_connection: usize,
    /// `message.max.bytes`
    pub message_max_bytes: usize,
    /// `log.retention.ms`
    pub log_retention_ms: i64,
    /// `log.retention.bytes`
    pub log_retention_bytes: i64,
    /// `group.initial.rebalance.delay.ms` (Kafka's default is 3000; 0 suits a single node).
    pub group_initial_rebalance_delay_ms: u64,
    /// `group.consumer.session.timeout.ms`: a consumer group (KIP-848) member not heard from
    /// for this long is removed.
    pub group_consumer_session_timeout_ms: u64,
    /// `group.consumer.heartbeat.interval.ms`: how often consumer group members heartbeat
    /// (they learn of a new assignment at their next heartbeat).
    pub group_consumer_heartbeat_interval_ms: u64,
    /// `group.classic.max.size`: members of one classic group at most (Kafka's default is
    /// unbounded; 1000 here: every group's members are scanned under the coordinator's one
    /// lock, and a member beyond the group's partitions has nothing to consume).
    pub group_classic_max_size: usize,
    /// `group.consumer.max.size`: the same for consumer groups (KIP-848).
    pub group_consumer_max_size: usize,
    /// `group.share.max.size`: members of one share group at most (KIP-932; Kafka's default).
    pub group_share_max_size: usize,
    /// `group.share.max.share.sessions`: share sessions open on this broker at once; a new
    /// member beyond is answered SHARE_SESSION_LIMIT_REACHED (Kafka's default).
    pub group_share_max_share_sessions: usize,
    /// `group.streams.session.timeout.ms`: a streams group (KIP-1071) member not heard from for
    /// this long is removed and its tasks go to the others (Kafka's default).
    pub group_streams_session_timeout_ms: u64,
    /// `group.streams.heartbeat.interval.ms`: how often streams group members heartbeat.
    pub group_streams_heartbeat_interval_ms: u64,
    /// `group.streams.initial.rebalance.delay.ms`: the first assignment of a streams group
    /// waits this long for more instances (Kafka's default).
    pub group_streams_initial_rebalance_delay_ms: u64,
    /// `group.streams.num.standby.replicas`: standby tasks per stateful task.
    pub group_streams_num_standby_replicas: usize,
    /// `group.streams.max.size`: members (stream threads) of one streams group at most.
    pub group_streams_max_size: usize,
    /// How often idempotent-producer state is snapshotted to the metadata store (idle
    /// producers are expired at the same time).
    pub producer_snapshot_interval_ms: u64,
    /// How often the committed offsets of the groups this broker coordinates are read for
    /// `weir_consumer_group_committed_offset` (one metadata-store read per group); 0: never.
    pub group_offsets_meter_interval_ms: u64,
    /// `producer.id.expiration.ms`: an idempotent producer that has not written for this long
    /// is forgotten, as in Kafka (its next batch may start at any sequence).
    pub producer_id_expiration_ms: i64,
    /// `log.cleaner.backoff.ms`: how often compacted partitions are checked for enough dirty
    /// data to clean.
    pub log_cleaner_backoff_ms: u64,
    /// Chaos drills and tests: the admin API's `PUT /v1/faults` switches the WAL's and the
    /// object store's fault injection while the broker runs. Off by default; never on in
    /// production.
    pub fault_switch: bool,
    /// A Kafka request in flight longer than this (or than twice the wait it asks for itself:
    /// a fetch's max wait, a produce's timeout, a join's rebalance timeout) is stuck: logged at
    /// WARN, counted (`weir_stuck_requests_total`), and `/readyz` fails while any is, so that an
    /// orchestrator replaces the broker. 120 s: twice the longest wait a request has without
    /// asking for it (a metadata store call retried for a minute).
    pub request_stuck_ms: u64,
    /// After SIGTERM, the broker hands its partitions over, uploads what its WAL holds and
    /// stops; if that is not done within this bound (a metadata store that does not answer),
    /// it exits anyway, as after a crash: what was not handed over fails over, and nothing
    /// acknowledged is lost (the WAL is durable). 0: no bound. (`cluster.shutdown_timeout_ms`
    /// is the part of it spent waiting for the partitions to move.)
    pub shutdown_deadline_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WalConfig {
    /// `file` (a file or block device, the default) or `object` (no WAL file: every partition
    /// this broker leads is acknowledged once its data is in object storage). Also the default
    /// of the topic config `weir.wal.kind`.
    pub kind: String,
    /// Object WAL: an object is sealed once its first batch has waited this long...
    pub object_linger_ms: u64,
    /// ...or once it holds this many bytes.
    pub object_bytes: u64,
    /// Object WAL: objects being written (PUT, then commit) at once.
    pub object_max_in_flight: usize,
    /// Object WAL: at most this many objects a second, unless they fill (`object_bytes`); 0
    /// for no budget. A quiet broker's PUTs a month are then known in advance.
    pub object_max_puts_per_sec: f64,
    /// Object WAL: the longest an object's PUT may take (all its attempts) before its batches
    /// fail, retriably.
    pub object_put_timeout_ms: u64,
    /// Defaults to `<data_dir>/wal`.
    pub path: Option<PathBuf>,
    pub capacity: u64,
    pub direct_io: bool,
    /// Zero-fill a new WAL file once, before use, so that syncs do not wait for filesystem
    /// journal commits.
    pub format: bool,
    /// How long a produce waits for WAL space before failing with a retriable error.
    pub full_wait_ms: u64,
    /// Fault injection, for tests and chaos drills: share of group writes whose `pwrite` fails
    /// (0.0-1.0), failing their appends and every append queued behind them.
    pub fault_write_error_rate: f64,
    /// Fault injection: share of group writes whose `fdatasync` fails.
    pub fault_sync_error_rate: f64,
    /// Fault injection: latency added to every group write.
    pub fault_latency_ms: u64,
    /// Fault injection: seed of the draws (the same seed fails the same writes).
    pub fault_seed: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageSection {
    pub upload_bytes: u64,
    pub upload_interval_ms: u64,
    pub stream_object_bytes: u64,
    pub block_bytes: u64,
    pub log_cache_bytes: u64,
    pub block_cache_bytes: u64,
    /// Memory for the indexes of objects read (LRU, bounded in bytes).
    pub index_cache_bytes: u64,
    pub readahead_max_bytes: u64,
    pub delete_grace_ms: u64,
    pub orphan_grace_ms: u64,
    pub maintenance_interval_ms: u64,
    pub multipart_part_bytes: u64,
    pub compaction_target_bytes: u64,
    pub compaction_min_ranges: usize,
    /// Bandwidth budget of compaction, bytes/s (0: unlimited).
    pub background_bytes_per_sec: u64,
    /// Bandwidth budget of catch-up reads from object storage, bytes/s (0: unlimited).
    pub catchup_bytes_per_sec: u64,
    /// Nice steps below the broker's other threads of catch-up reads, and of uploads the WAL
    /// does not wait for (0: no threads of their own).
    pub catchup_nice: i32,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetadataConfig {
    /// `sqlite://path` or `postgres://user:password@host:port/db`; defaults to
    /// `sqlite://<data_dir>/meta.sqlite`.
    pub url: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ObjectStoreConfig {
    /// `file:///path`, `memory://`, `s3://bucket/prefix`, `gs://bucket/prefix`,
    /// `az://container/prefix`; defaults to `file://<data_dir>/objects`. Cloud credentials,
    /// region and endpoint come from the usual `AWS_*`, `GOOGLE_*`, `AZURE_*` variables.
    pub url: Option<String>,
    /// Requests in flight at most.
    pub max_concurrent_requests: usize,
    /// Fault injection, for tests and chaos drills: share of PUTs that fail (0.0-1.0).
    pub fault_put_error_rate: f64,
    /// Fault injection: share of GETs that fail.
    pub fault_get_error_rate: f64,
    /// Fault injection: latency added to every request.
    pub fault_latency_ms: u64,
    /// Fault injection: latency added to every PUT (each part of a multipart upload too), on
    /// top of `fault_latency_ms`: a slow store for writes, as the object WAL's benchmarks use.
    pub fault_put_latency_ms: u64,
    /// `file://` stores only: write and read objects with `O_DIRECT` (where the filesystem allows
    /// it; tmpfs does not) instead of through the page cache. Off by default: it lowers the
    /// produce tail and CPU per byte, but catch-up reads then come from the disk (slower than
    /// from the page cache on the bench machine). Uploads the WAL is waiting for are written
    /// directly either way.
    pub local_direct_io: bool,
}

impl Default for ObjectStoreConfig {
    fn default() -> Self {
        ObjectStoreConfig {
            url: None,
            max_concurrent_requests: 64,
            fault_put_error_rate: 0.0,
            fault_get_error_rate: 0.0,
            fault_latency_ms: 0,
            fault_put_latency_ms: 0,
            local_direct_io: false,
        }
    }
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            node_id: None,
            listen: "127.0.0.1:9092".into(),
            advertised: String::new(),
            admin_listen: "127.0.0.1:9644".into(),
            admin_token: String::new(),
            data_dir: PathBuf::from("./data"),
            zone: String::new(),
            auto_create_topics: true,
            num_partitions: 1,
            max_request_bytes: 100 << 20,
            fetch_max_bytes: 55 << 20,
            fetch_session_cache_slots: 1000,
            max_connections: 10_000,
            queued_max_request_bytes: 256 << 20,
            queued_max_request_bytes_per_connection: 64 << 20,
            message_max_bytes: 1_048_588,
            log_retention_ms: 604_800_000,
            log_retention_bytes: -1,
            group_initial_rebalance_delay_ms: 0,
            group_consumer_session_timeout_ms: 45_000,
            group_consumer_heartbeat_interval_ms: 5_000,
            group_classic_max_size: weir_group::DEFAULT_MAX_SIZE,
            group_consumer_max_size: weir_group::DEFAULT_MAX_SIZE,
            group_share_max_size: 200,
            group_share_max_share_sessions: 2000,
            group_streams_session_timeout_ms: 45_000,
            group_streams_heartbeat_interval_ms: 5_000,
            group_streams_initial_rebalance_delay_ms: 3_000,
            group_streams_num_standby_replicas: 0,
            group_streams_max_size: weir_group::DEFAULT_MAX_SIZE,
            producer_snapshot_interval_ms: 30_000,
            group_offsets_meter_interval_ms: 30_000,
            producer_id_expiration_ms: 86_400_000,
            log_cleaner_backoff_ms: 15_000,
            fault_switch: false,
            request_stuck_ms: 120_000,
            shutdown_deadline_ms: 120_000,
        }
    }
}

impl Default for WalConfig {
    fn default() -> Self {
        let d = weir_storage::StorageConfig::default();
        WalConfig {
            kind: "file".into(),
            object_linger_ms: d.object_wal_linger.as_millis() as u64,
            object_bytes: d.object_wal_bytes,
            object_max_in_flight: d.object_wal_max_in_flight,
            object_max_puts_per_sec: d.object_wal_max_puts_per_sec,
            object_put_timeout_ms: d.object_wal_put_timeout.as_millis() as u64,
            path: None,
            capacity: 2 << 30,
            direct_io: true,
            format: true,
            full_wait_ms: 10_000,
            fault_write_error_rate: 0.0,
            fault_sync_error_rate: 0.0,
            fault_latency_ms: 0,
            fault_seed: 0,
        }
    }
}

impl Default for StorageSection {
    fn default() -> Self {
        let d = weir_storage::StorageConfig::default();
        StorageSection {
            upload_bytes: d.upload_bytes,
            upload_interval_ms: d.upload_interval.as_millis() as u64,
            stream_object_bytes: d.stream_object_bytes,
            block_bytes: d.block_bytes,
            log_cache_bytes: d.log_cache_bytes,
            block_cache_bytes: d.block_cache_bytes,
            index_cache_bytes: d.index_cache_bytes,
            readahead_max_bytes: d.readahead_max_bytes,
            delete_grace_ms: d.delete_grace.as_millis() as u64,
            orphan_grace_ms: d.orphan_grace.as_millis() as u64,
            maintenance_interval_ms: d.maintenance_interval.as_millis() as u64,
            multipart_part_bytes: d.multipart_part_bytes,
            compaction_target_bytes: d.compaction_target_bytes,
            compaction_min_ranges: d.compaction_min_ranges,
            background_bytes_per_sec: d.background_bytes_per_sec,
            catchup_bytes_per_sec: d.catchup_bytes_per_sec,
            catchup_nice: d.catchup_nice,
        }
    }
}

const SECTIONS: [&str; 12] = [
    "schema_registry",
    "iceberg",
    "security",
    "cloud",
    "object_store",
    "balancer",
    "zones",
    "broker",
    "wal",
    "storage",
    "metadata",
    "cluster",
];

/// A scalar from an environment variable or flag: number, boolean, else string.
fn scalar(v: &str) -> toml::Value {
    if let Ok(i) = v.parse::<i64>() {
        toml::Value::Integer(i)
    } else if let Ok(f) = v.parse::<f64>() {
        toml::Value::Float(f)
    } else if let Ok(b) = v.parse::<bool>() {
        toml::Value::Boolean(b)
    } else {
        toml::Value::String(v.to_string())
    }
}

fn set(table: &mut toml::Table, section: &str, key: &str, value: toml::Value) {
    let entry = table
        .entry(section.to_string())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if let toml::Value::Table(t) = entry {
        t.insert(key.to_string(), value);
    }
}

impl Config {
    /// Loads the file (if any), then applies `env` (`WEIR_<SECTION>_<KEY>`), then `overrides`
    /// (section, key, value) from flags.
    pub fn load(
        file: Option<&std::path::Path>,
        env: impl Iterator<Item = (String, String)>,
        overrides: &[(&str, &str, String)],
    ) -> anyhow::Result<Config> {
        let mut table = match file {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("reading config file {}", p.display()))?;
                text.parse::<toml::Table>()
                    .with_context(|| format!("parsing config file {}", p.display()))?
            }
            None => toml::Table::new(),
        };
        for (k, v) in env {
            let Some(rest) = k.strip_prefix("WEIR_") else {
                continue;
            };
            let rest = rest.to_ascii_lowercase();
            let Some(section) = SECTIONS.iter().find(|s| rest.starts_with(&format!("{s}_"))) else {
                continue;
            };
            let key = &rest[section.len() + 1..];
            set(&mut table, section, key, scalar(&v));
        }
        for (section, key, v) in overrides {
            set(&mut table, section, key, scalar(v));
        }
        let config: Config = toml::Value::Table(table)
            .try_into()
            .context("invalid configuration")?;
        config
            .wal_kind()
            .map_err(|e| anyhow::anyhow!("wal.kind: {e}"))?;
        config
            .store_options()
            .faults
            .validate()
            .map_err(|e| anyhow::anyhow!("object_store: {e}"))?;
        config
            .wal_faults()
            .validate()
            .map_err(|e| anyhow::anyhow!("wal: {e}"))?;
        crate::listeners::listeners(&config).map_err(|e| anyhow::anyhow!("security: {e}"))?;
        if !matches!(
            config.schema_registry.authentication.as_str(),
            "none" | "basic"
        ) {
            anyhow::bail!(
                "schema_registry.authentication: {:?} is not none or basic",
                config.schema_registry.authentication
            );
        }
        if config.schema_registry.tls {
            crate::listeners::tls_files(&config)
                .map_err(|e| anyhow::anyhow!("schema_registry.tls: {e}"))?;
        }
        Ok(config)
    }

    pub fn advertised(&self) -> &str {
        if self.broker.advertised.is_empty() {
            &self.broker.listen
        } else {
            &self.broker.advertised
        }
    }

    pub fn cluster(&self) -> weir_cluster::ClusterConfig {
        let c = &self.cluster;
        let ms = std::time::Duration::from_millis;
        weir_cluster::ClusterConfig {
            session_timeout: ms(c.session_timeout_ms.max(100)),
            heartbeat_interval: ms(c.heartbeat_interval_ms.max(10)),
            controller_lease: ms(c.controller_lease_ms.max(100)),
            controller_interval: ms(c.controller_interval_ms.max(10)),
            shutdown_timeout: ms(c.shutdown_timeout_ms),
            clock_drift_margin: ms(c.clock_drift_margin_ms),
            wal_retry_interval: ms(c.wal_retry_interval_ms.max(100)),
            // A single node on SQLite has no peer to take over: it never stops acknowledging.
            fence_acks: !self.metadata_url().starts_with("sqlite://"),
            balancer: {
                let b = &self.balancer;
                let interval = ms(b.interval_ms.max(100));
                weir_cluster::balance::BalancerConfig {
                    enabled: b.enabled,
                    interval,
                    tolerance: b.tolerance_percent as f64 / 100.0,
                    max_moves: b.max_moves_per_round,
                    cooldown: ms(b.cooldown_ms),
                    capacity_bytes_per_sec: b.capacity_bytes_per_sec as f64,
                    min_bytes_per_sec: b.min_bytes_per_sec as f64,
                    // Reports missed for four intervals: the broker is too slow to be given more.
                    stale_after: interval * 4,
                }
            },
        }
    }

    /// The internal listener's bind address.
    pub fn internal_listen(&self) -> String {
        if !self.cluster.internal_listen.is_empty() {
            return self.cluster.internal_listen.clone();
        }
        let first = crate::listeners::listeners(self)
            .ok()
            .and_then(|l| l.into_iter().next())
            .map_or_else(|| self.broker.listen.clone(), |l| l.bind);
        let host = first.rsplit_once(':').map_or("127.0.0.1", |(h, _)| h);
        let host = if host.is_empty() { "0.0.0.0" } else { host };
        format!("{host}:0")
    }

    /// The zone routing default, checked.
    pub fn zone_routing(&self) -> Result<weir_zone::Routing, String> {
        weir_zone::Routing::parse(&self.zones.routing).ok_or_else(|| {
            format!(
                "zones.routing is {:?}: it must be in-zone or leader",
                self.zones.routing
            )
        })
    }

    pub fn handoff(&self) -> weir_zone::HandoffConfig {
        weir_zone::HandoffConfig {
            linger: std::time::Duration::from_millis(self.zones.handoff_linger_ms),
            max_bytes: self.zones.handoff_bytes.max(1),
            max_in_flight: self.zones.handoff_max_in_flight.max(1),
            max_puts_per_sec: self.zones.handoff_max_puts_per_sec.max(0.0),
        }
    }

    pub fn wal_kind(&self) -> Result<weir_storage::WalKind, String> {
        self.wal.kind.parse()
    }

    pub fn wal_path(&self) -> PathBuf {
        self.wal
            .path
            .clone()
            .unwrap_or_else(|| self.broker.data_dir.join("wal"))
    }

    pub fn metadata_url(&self) -> String {
        self.metadata.url.clone().unwrap_or_else(|| {
            format!(
                "sqlite://{}",
                self.broker.data_dir.join("meta.sqlite").display()
            )
        })
    }

    pub fn object_store_url(&self) -> anyhow::Result<String> {
        match &self.object_store.url {
            Some(u) => Ok(u.clone()),
            None => {
                let dir = self.broker.data_dir.join("objects");
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
                let abs = dir
                    .canonicalize()
                    .with_context(|| format!("resolving {}", dir.display()))?;
                Ok(format!("file://{}", abs.display()))
            }
        }
    }

    pub fn store_options(&self) -> weir_storage::objstore::StoreOptions {
        let o = &self.object_store;
        weir_storage::objstore::StoreOptions {
            settings: Vec::new(),
            max_concurrent_requests: o.max_concurrent_requests,
            faults: weir_storage::objstore::FaultConfig {
                put_error_rate: o.fault_put_error_rate,
                get_error_rate: o.fault_get_error_rate,
                latency: std::time::Duration::from_millis(o.fault_latency_ms),
                put_latency: std::time::Duration::from_millis(o.fault_put_latency_ms),
            },
            fault_switch: self.broker.fault_switch,
            local_direct_io: o.local_direct_io,
        }
    }

    pub fn wal_faults(&self) -> weir_wal::WalFaults {
        let w = &self.wal;
        weir_wal::WalFaults {
            write_error_rate: w.fault_write_error_rate,
            sync_error_rate: w.fault_sync_error_rate,
            latency: std::time::Duration::from_millis(w.fault_latency_ms),
            seed: w.fault_seed,
        }
    }

    pub fn storage(&self) -> weir_storage::StorageConfig {
        use std::time::Duration;
        let s = &self.storage;
        weir_storage::StorageConfig {
            upload_bytes: s.upload_bytes,
            upload_interval: Duration::from_millis(s.upload_interval_ms),
            stream_object_bytes: s.stream_object_bytes,
            block_bytes: s.block_bytes,
            log_cache_bytes: s.log_cache_bytes,
            block_cache_bytes: s.block_cache_bytes,
            index_cache_bytes: s.index_cache_bytes,
            readahead_max_bytes: s.readahead_max_bytes,
            wal_full_wait: Duration::from_millis(self.wal.full_wait_ms),
            delete_grace: Duration::from_millis(s.delete_grace_ms),
            orphan_grace: Duration::from_millis(s.orphan_grace_ms),
            maintenance_interval: Duration::from_millis(s.maintenance_interval_ms),
            multipart_part_bytes: s.multipart_part_bytes,
            compaction_target_bytes: s.compaction_target_bytes,
            compaction_min_ranges: s.compaction_min_ranges,
            background_bytes_per_sec: s.background_bytes_per_sec,
            catchup_bytes_per_sec: s.catchup_bytes_per_sec,
            catchup_nice: s.catchup_nice.clamp(0, 19),
            object_wal_linger: Duration::from_millis(self.wal.object_linger_ms),
            object_wal_bytes: self.wal.object_bytes.max(1),
            object_wal_max_in_flight: self.wal.object_max_in_flight.max(1),
            object_wal_max_puts_per_sec: if self.wal.object_max_puts_per_sec.is_finite() {
                self.wal.object_max_puts_per_sec.max(0.0)
            } else {
                0.0
            },
            object_wal_put_timeout: Duration::from_millis(self.wal.object_put_timeout_ms.max(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_then_env_then_flags() {
        // Removed when the test ends (a directory named by the process id stayed behind).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("weir.toml");
        std::fs::write(
            &path,
            "[broker]\nlisten = \"127.0.0.1:1\"\nnode_id = 5\n[wal]\ncapacity = 1048576\n",
        )
        .unwrap();
        let env = vec![
            ("WEIR_BROKER_LISTEN".to_string(), "127.0.0.1:2".to_string()),
            ("WEIR_OBJECT_STORE_URL".to_string(), "memory://".to_string()),
            ("WEIR_WAL_DIRECT_IO".to_string(), "false".to_string()),
            (
                "WEIR_OBJECT_STORE_FAULT_PUT_ERROR_RATE".to_string(),
                "0.25".to_string(),
            ),
            ("OTHER".to_string(), "x".to_string()),
        ];
        let c = Config::load(
            Some(&path),
            env.into_iter(),
            &[("broker", "node_id", "7".to_string())],
        )
        .unwrap();
        assert_eq!(c.broker.listen, "127.0.0.1:2");
        assert_eq!(c.broker.node_id, Some(7));
        assert_eq!(c.wal.capacity, 1 << 20);
        assert!(!c.wal.direct_io);
        assert_eq!(c.object_store.fault_put_error_rate, 0.25);
        assert_eq!(c.object_store.url.as_deref(), Some("memory://"));
        assert_eq!(c.advertised(), "127.0.0.1:2");
    }

    #[test]
    fn defaults_and_errors() {
        let c = Config::load(None, std::iter::empty(), &[]).unwrap();
        assert_eq!(c.broker.listen, "127.0.0.1:9092");
        assert_eq!(c.broker.admin_listen, "127.0.0.1:9644");
        assert_eq!(c.broker.data_dir, PathBuf::from("./data"));
        // Kafka's default fetch.max.bytes; Weir's own bounds (see their doc comments).
        assert_eq!(c.broker.fetch_max_bytes, 57_671_680);
        assert_eq!(c.broker.max_connections, 10_000);
        assert_eq!(c.broker.queued_max_request_bytes, 256 << 20);
        assert_eq!(c.broker.queued_max_request_bytes_per_connection, 64 << 20);
        let bad = Config::load(
            None,
            vec![("WEIR_BROKER_NOPE".to_string(), "1".to_string())].into_iter(),
            &[],
        );
        assert!(bad.is_err(), "unknown keys are errors");
        let bad = Config::load(
            None,
            vec![("WEIR_BROKER_NODE_ID".to_string(), "x".to_string())].into_iter(),
            &[],
        );
        assert!(bad.is_err());
    }

    #[test]
    fn fault_switches_and_index_cache() {
        let env = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Vec<_>>()
                .into_iter()
        };
        let c = Config::load(None, std::iter::empty(), &[]).unwrap();
        assert!(!c.wal_faults().is_on(), "WAL faults are off by default");
        assert!(!c.store_options().faults.is_on());
        let c = Config::load(
            None,
            env(&[
                ("WEIR_WAL_FAULT_WRITE_ERROR_RATE", "0.1"),
                ("WEIR_WAL_FAULT_SYNC_ERROR_RATE", "1"),
                ("WEIR_WAL_FAULT_LATENCY_MS", "7"),
                ("WEIR_WAL_FAULT_SEED", "3"),
                ("WEIR_STORAGE_INDEX_CACHE_BYTES", "1000"),
            ]),
            &[],
        )
        .unwrap();
        let f = c.wal_faults();
        assert_eq!(
            (f.write_error_rate, f.sync_error_rate, f.seed),
            (0.1, 1.0, 3)
        );
        assert_eq!(f.latency, std::time::Duration::from_millis(7));
        assert_eq!(c.storage().index_cache_bytes, 1000);
        for bad in [
            ("WEIR_WAL_FAULT_SYNC_ERROR_RATE", "1.5"),
            ("WEIR_OBJECT_STORE_FAULT_GET_ERROR_RATE", "-1"),
        ] {
            let e = Config::load(None, env(&[bad]), &[]).expect_err("a rate above 1 or below 0");
            assert!(format!("{e:#}").contains("between 0.0 and 1.0"), "{e:#}");
        }
    }
}
