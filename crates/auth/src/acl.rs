//! ACLs as Kafka's `StandardAuthorizer` reads them: bindings of a resource pattern (type,
//! name, LITERAL or PREFIXED) to a principal, a host, an operation and ALLOW or DENY; the
//! filters of DescribeAcls and DeleteAcls; and the decision for one request.
//!
//! The decision, for a principal on a host wanting an operation on a resource:
//! 1. a super user is allowed everything;
//! 2. any DENY binding that matches (resource by literal name, the literal `*` or a prefix;
//!    principal or `User:*`; host or `*`; the operation or ALL) denies;
//! 3. any ALLOW binding that matches allows, where READ, WRITE, DELETE and ALTER each imply
//!    DESCRIBE, and ALTER_CONFIGS implies DESCRIBE_CONFIGS;
//! 4. with no binding at all on the resource, `allow.everyone.if.no.acl.found` decides;
//!    otherwise the answer is no.

use std::collections::HashSet;

use crate::Principal;

macro_rules! codes {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $code:literal => $text:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($variant),* }

        impl $name {
            pub fn code(self) -> i8 {
                match self { $($name::$variant => $code),* }
            }

            pub fn from_code(code: i8) -> Option<$name> {
                match code { $($code => Some($name::$variant),)* _ => None }
            }

            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $text),* }
            }

            /// The value of a name, in any case (`"read"`, `"READ"`).
            pub fn from_name(name: &str) -> Option<$name> {
                $(if name.eq_ignore_ascii_case($text) { return Some($name::$variant); })*
                None
            }
        }
    };
}

codes!(
    /// Kafka's `ResourceType` (UNKNOWN is not a value: it is refused), and the schema
    /// registry's two of Weir's own (Redpanda's model): a SUBJECT by name, and the REGISTRY as a
    /// whole (its global config and mode). Those two have codes no Kafka client knows and never
    /// pass through the Kafka ACL APIs ([`ResourceType::is_kafka`]); they are managed through
    /// the admin API.
    ResourceType {
        Any = 1 => "ANY",
        Topic = 2 => "TOPIC",
        Group = 3 => "GROUP",
        Cluster = 4 => "CLUSTER",
        TransactionalId = 5 => "TRANSACTIONAL_ID",
        DelegationToken = 6 => "DELEGATION_TOKEN",
        User = 7 => "USER",
        Subject = 64 => "SUBJECT",
        Registry = 65 => "REGISTRY",
    }
);

impl ResourceType {
    /// Whether Kafka's ACL APIs know the type (the registry's types are Weir's own).
    pub fn is_kafka(self) -> bool {
        !matches!(self, ResourceType::Subject | ResourceType::Registry)
    }
}

codes!(
    /// Kafka's `PatternType`: ANY and MATCH are for filters only.
    PatternType {
        Any = 1 => "ANY",
        Match = 2 => "MATCH",
        Literal = 3 => "LITERAL",
        Prefixed = 4 => "PREFIXED",
    }
);

codes!(
    /// Kafka's `AclOperation`.
    Operation {
        Any = 1 => "ANY",
        All = 2 => "ALL",
        Read = 3 => "READ",
        Write = 4 => "WRITE",
        Create = 5 => "CREATE",
        Delete = 6 => "DELETE",
        Alter = 7 => "ALTER",
        Describe = 8 => "DESCRIBE",
        ClusterAction = 9 => "CLUSTER_ACTION",
        DescribeConfigs = 10 => "DESCRIBE_CONFIGS",
        AlterConfigs = 11 => "ALTER_CONFIGS",
        IdempotentWrite = 12 => "IDEMPOTENT_WRITE",
        CreateTokens = 13 => "CREATE_TOKENS",
        DescribeTokens = 14 => "DESCRIBE_TOKENS",
    }
);

codes!(
    /// Kafka's `AclPermissionType`.
    Permission {
        Any = 1 => "ANY",
        Deny = 2 => "DENY",
        Allow = 3 => "ALLOW",
    }
);

/// The literal name that stands for every resource of a type.
pub const WILDCARD: &str = "*";
/// The name of the one CLUSTER resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// The name of the one REGISTRY resource.
pub const REGISTRY_NAME: &str = "schema-registry";

/// One binding, checked: a concrete resource type, LITERAL or PREFIXED, an operation other
/// than ANY, ALLOW or DENY.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Acl {
    pub resource_type: ResourceType,
    pub name: String,
    pub pattern: PatternType,
    pub principal: String,
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

impl Acl {
    /// A binding as CreateAcls carries it; what is wrong with it, in Kafka's words, if it
    /// cannot be stored.
    pub fn new(
        resource_type: i8,
        name: &str,
        pattern: i8,
        principal: &str,
        host: &str,
        operation: i8,
        permission: i8,
    ) -> Result<Acl, String> {
        let resource_type = ResourceType::from_code(resource_type)
            .filter(|t| *t != ResourceType::Any)
            .ok_or("Invalid resource type")?;
        let pattern = PatternType::from_code(pattern)
            .filter(|p| matches!(p, PatternType::Literal | PatternType::Prefixed))
            .ok_or("Invalid pattern type: only LITERAL and PREFIXED ACLs can be created")?;
        let operation = Operation::from_code(operation)
            .filter(|o| *o != Operation::Any)
            .ok_or("Invalid operation")?;
        let permission = Permission::from_code(permission)
            .filter(|p| *p != Permission::Any)
            .ok_or("Invalid permission type")?;
        if name.is_empty() {
            return Err("Resource name must not be empty".into());
        }
        if resource_type == ResourceType::Cluster && name != CLUSTER_NAME {
            return Err(format!(
                "The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
            ));
        }
        if resource_type == ResourceType::Registry && name != REGISTRY_NAME {
            return Err(format!(
                "The only valid name for the REGISTRY resource is {REGISTRY_NAME}"
            ));
        }
        let Some((kind, who)) = principal.split_once(':') else {
            return Err(format!("Could not parse principal from `{principal}` (no colon is present separating the principal type from the principal name)"));
        };
        if kind.is_empty() || who.is_empty() {
            return Err(format!("Invalid principal {principal}"));
        }
        if host.is_empty() {
            return Err("Host must not be empty".into());
        }
        Ok(Acl {
            resource_type,
            name: name.to_string(),
            pattern,
            principal: principal.to_string(),
            host: host.to_string(),
            operation,
            permission,
        })
    }

    /// A binding from Kafka's CreateAcls: as [`Acl::new`], without the registry's types
    /// (Kafka's clients do not know them; a Kafka tool that lists ACLs could not show them).
    pub fn from_kafka(
        resource_type: i8,
        name: &str,
        pattern: i8,
        principal: &str,
        host: &str,
        operation: i8,
        permission: i8,
    ) -> Result<Acl, String> {
        let acl = Acl::new(
            resource_type,
            name,
            pattern,
            principal,
            host,
            operation,
            permission,
        )?;
        if !acl.resource_type.is_kafka() {
            return Err("Invalid resource type".into());
        }
        Ok(acl)
    }

    /// Whether the binding's pattern covers the resource `name` of its type.
    fn covers(&self, name: &str) -> bool {
        match self.pattern {
            PatternType::Literal => self.name == name || self.name == WILDCARD,
            PatternType::Prefixed => name.starts_with(&self.name),
            _ => false,
        }
    }

    fn applies_to(&self, principal: &str, host: &str) -> bool {
        (self.principal == principal || self.principal == "User:*")
            && (self.host == host || self.host == WILDCARD)
    }
}

/// A filter of DescribeAcls and DeleteAcls (`None`: any).
#[derive(Debug, Clone)]
pub struct AclFilter {
    pub resource_type: ResourceType,
    pub name: Option<String>,
    pub pattern: PatternType,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Operation,
    pub permission: Permission,
}

impl AclFilter {
    /// A filter as Kafka's requests carry it; an error for codes Kafka does not know. It
    /// matches only bindings of Kafka's resource types, even with ANY.
    pub fn new(
        resource_type: i8,
        name: Option<&str>,
        pattern: i8,
        principal: Option<&str>,
        host: Option<&str>,
        operation: i8,
        permission: i8,
    ) -> Result<AclFilter, String> {
        Ok(AclFilter {
            resource_type: ResourceType::from_code(resource_type)
                .filter(|t| t.is_kafka())
                .ok_or("Invalid resource type")?,
            name: name.map(str::to_string),
            pattern: PatternType::from_code(pattern).ok_or("Invalid pattern type")?,
            principal: principal.map(str::to_string),
            host: host.map(str::to_string),
            operation: Operation::from_code(operation).ok_or("Invalid operation")?,
            permission: Permission::from_code(permission).ok_or("Invalid permission type")?,
        })
    }

    pub fn matches(&self, acl: &Acl) -> bool {
        let resource = match self.pattern {
            PatternType::Any => self.name.as_ref().is_none_or(|n| *n == acl.name),
            // The bindings that would apply to the named resource.
            PatternType::Match => self.name.as_ref().is_none_or(|n| acl.covers(n)),
            p => p == acl.pattern && self.name.as_ref().is_none_or(|n| *n == acl.name),
        };
        resource
            && acl.resource_type.is_kafka()
            && (self.resource_type == ResourceType::Any || self.resource_type == acl.resource_type)
            && self.principal.as_ref().is_none_or(|p| *p == acl.principal)
            && self.host.as_ref().is_none_or(|h| *h == acl.host)
            && (self.operation == Operation::Any || self.operation == acl.operation)
            && (self.permission == Permission::Any || self.permission == acl.permission)
    }
}

/// Whether an ALLOW of `granted` allows `wanted`.
fn allows(granted: Operation, wanted: Operation) -> bool {
    granted == Operation::All
        || granted == wanted
        || (wanted == Operation::Describe
            && matches!(
                granted,
                Operation::Read | Operation::Write | Operation::Delete | Operation::Alter
            ))
        || (wanted == Operation::DescribeConfigs && granted == Operation::AlterConfigs)
}

/// The ACLs in force, and the settings that decide around them.
#[derive(Debug, Clone, Default)]
pub struct Authorizer {
    acls: Vec<Acl>,
    super_users: HashSet<String>,
    allow_if_no_acl: bool,
}

impl Authorizer {
    /// `super_users`: principals such as `User:admin`.
    pub fn new(acls: Vec<Acl>, super_users: HashSet<String>, allow_if_no_acl: bool) -> Authorizer {
        Authorizer {
            acls,
            super_users,
            allow_if_no_acl,
        }
    }

    pub fn acls(&self) -> &[Acl] {
        &self.acls
    }

    pub fn is_super_user(&self, principal: &Principal) -> bool {
        self.super_users.contains(&principal.to_string())
    }

    /// Whether `principal` on `host` may do `operation` on the resource `name` of `kind`.
    pub fn authorize(
        &self,
        principal: &Principal,
        host: &str,
        operation: Operation,
        kind: ResourceType,
        name: &str,
    ) -> bool {
        if self.is_super_user(principal) {
            return true;
        }
        let who = principal.to_string();
        let mut any = false;
        let mut allowed = false;
        for acl in self
            .acls
            .iter()
            .filter(|a| a.resource_type == kind && a.covers(name))
        {
            any = true;
            if !acl.applies_to(&who, host) {
                continue;
            }
            match acl.permission {
                Permission::Deny
                    if acl.operation == operation || acl.operation == Operation::All =>
                {
                    return false
                }
                Permission::Allow if allows(acl.operation, operation) => allowed = true,
                _ => {}
            }
        }
        allowed || (!any && self.allow_if_no_acl)
    }

    /// Whether `principal` may do `operation` on some resource of `kind` (Kafka's
    /// `authorizeByResourceType`, e.g. an idempotent producer's WRITE on any topic): an ALLOW
    /// for it on any pattern, unless a DENY covers every resource of the type.
    pub fn authorize_any(
        &self,
        principal: &Principal,
        host: &str,
        operation: Operation,
        kind: ResourceType,
    ) -> bool {
        if self.is_super_user(principal) {
            return true;
        }
        let who = principal.to_string();
        let of_kind: Vec<&Acl> = self
            .acls
            .iter()
            .filter(|a| a.resource_type == kind)
            .collect();
        let denied_everywhere = of_kind.iter().any(|a| {
            a.permission == Permission::Deny
                && a.applies_to(&who, host)
                && (a.operation == operation || a.operation == Operation::All)
                && a.pattern == PatternType::Literal
                && a.name == WILDCARD
        });
        if denied_everywhere {
            return false;
        }
        of_kind.iter().any(|a| {
            a.permission == Permission::Allow
                && a.applies_to(&who, host)
                && allows(a.operation, operation)
        }) || (of_kind.is_empty() && self.allow_if_no_acl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(
        kind: ResourceType,
        name: &str,
        pattern: PatternType,
        who: &str,
        op: Operation,
        perm: Permission,
    ) -> Acl {
        Acl::new(
            kind.code(),
            name,
            pattern.code(),
            who,
            "*",
            op.code(),
            perm.code(),
        )
        .expect("valid")
    }

    fn alice() -> Principal {
        Principal::user("alice")
    }

    #[test]
    fn literal_prefixed_and_wildcard_bindings_cover_what_kafka_says() {
        use Operation::*;
        use PatternType::*;
        use Permission::*;
        use ResourceType::*;
        let a = Authorizer::new(
            vec![
                acl(Topic, "orders", Literal, "User:alice", Write, Allow),
                acl(Topic, "logs-", Prefixed, "User:alice", Read, Allow),
                acl(Group, "*", Literal, "User:*", Read, Allow),
            ],
            HashSet::new(),
            false,
        );
        let p = alice();
        assert!(a.authorize(&p, "10.0.0.1", Write, Topic, "orders"));
        assert!(
            a.authorize(&p, "10.0.0.1", Describe, Topic, "orders"),
            "WRITE implies DESCRIBE"
        );
        assert!(!a.authorize(&p, "10.0.0.1", Read, Topic, "orders"));
        assert!(
            !a.authorize(&p, "10.0.0.1", Write, Topic, "orders2"),
            "literal is exact"
        );
        assert!(a.authorize(&p, "10.0.0.1", Read, Topic, "logs-app"));
        assert!(!a.authorize(&p, "10.0.0.1", Read, Topic, "log"));
        assert!(a.authorize(&Principal::user("bob"), "h", Read, Group, "any-group"));
        assert!(!a.authorize(&Principal::user("bob"), "h", Write, Topic, "orders"));
    }

    #[test]
    fn deny_wins_and_is_exact_about_its_operation() {
        use Operation::*;
        use PatternType::*;
        use Permission::*;
        use ResourceType::*;
        let a = Authorizer::new(
            vec![
                acl(Topic, "*", Literal, "User:alice", All, Allow),
                acl(Topic, "secret", Literal, "User:alice", Read, Deny),
            ],
            HashSet::new(),
            true,
        );
        let p = alice();
        assert!(!a.authorize(&p, "h", Read, Topic, "secret"));
        assert!(
            a.authorize(&p, "h", Describe, Topic, "secret"),
            "a READ deny does not deny DESCRIBE"
        );
        assert!(a.authorize(&p, "h", Write, Topic, "public"));
    }

    #[test]
    fn hosts_super_users_and_no_acl_found() {
        use Operation::*;
        use Permission::*;
        use ResourceType::*;
        let from = Acl::new(
            Topic.code(),
            "t",
            PatternType::Literal.code(),
            "User:alice",
            "10.0.0.5",
            Read.code(),
            Allow.code(),
        )
        .expect("valid");
        let supers: HashSet<String> = ["User:admin".to_string()].into();
        let a = Authorizer::new(vec![from], supers.clone(), true);
        assert!(a.authorize(&alice(), "10.0.0.5", Read, Topic, "t"));
        assert!(
            !a.authorize(&alice(), "10.0.0.6", Read, Topic, "t"),
            "another host"
        );
        assert!(a.authorize(&Principal::user("admin"), "x", Alter, Cluster, CLUSTER_NAME));
        // No binding on the resource at all: allow.everyone.if.no.acl.found decides.
        assert!(a.authorize(&alice(), "x", Write, Topic, "untouched"));
        let strict = Authorizer::new(a.acls().to_vec(), supers, false);
        assert!(!strict.authorize(&alice(), "x", Write, Topic, "untouched"));
    }

    #[test]
    fn by_resource_type_needs_an_allow_somewhere_and_no_deny_everywhere() {
        use Operation::*;
        use PatternType::*;
        use Permission::*;
        use ResourceType::*;
        let a = Authorizer::new(
            vec![acl(Topic, "orders", Literal, "User:alice", Write, Allow)],
            HashSet::new(),
            false,
        );
        assert!(a.authorize_any(&alice(), "h", Write, Topic));
        assert!(!a.authorize_any(&Principal::user("bob"), "h", Write, Topic));
        let denied = Authorizer::new(
            vec![
                acl(Topic, "orders", Literal, "User:alice", Write, Allow),
                acl(Topic, "*", Literal, "User:alice", Write, Deny),
            ],
            HashSet::new(),
            false,
        );
        assert!(!denied.authorize_any(&alice(), "h", Write, Topic));
    }

    #[test]
    fn filters_match_as_describe_and_delete_acls_do() {
        use Operation::*;
        use PatternType::*;
        use Permission::*;
        use ResourceType::*;
        let lit = acl(Topic, "orders", Literal, "User:alice", Write, Allow);
        let pre = acl(Topic, "ord", Prefixed, "User:bob", Read, Allow);
        let star = acl(Topic, "*", Literal, "User:bob", Read, Deny);
        let f =
            |kind: ResourceType, name: Option<&str>, pattern: PatternType, who: Option<&str>| {
                AclFilter::new(
                    kind.code(),
                    name,
                    pattern.code(),
                    who,
                    None,
                    Operation::Any.code(),
                    Permission::Any.code(),
                )
                .expect("filter")
            };
        let all = f(ResourceType::Any, None, PatternType::Any, None);
        assert!([&lit, &pre, &star].iter().all(|a| all.matches(a)));
        let m = f(Topic, Some("orders"), Match, None);
        assert!(m.matches(&lit) && m.matches(&pre) && m.matches(&star));
        let exact = f(Topic, Some("orders"), Literal, None);
        assert!(exact.matches(&lit) && !exact.matches(&pre) && !exact.matches(&star));
        let any_pattern = f(Topic, Some("ord"), PatternType::Any, None);
        assert!(any_pattern.matches(&pre) && !any_pattern.matches(&lit));
        assert!(!f(Group, None, PatternType::Any, None).matches(&lit));
        assert!(f(Topic, None, PatternType::Any, Some("User:bob")).matches(&pre));
    }

    #[test]
    fn bindings_that_cannot_be_stored_are_refused_with_a_reason() {
        let ok = |t, n: &str, p, who: &str, o, perm| Acl::new(t, n, p, who, "*", o, perm);
        assert!(ok(2, "t", 3, "User:a", 3, 3).is_ok());
        for (bad, why) in [
            (ok(1, "t", 3, "User:a", 3, 3), "resource type"),
            (ok(2, "t", 2, "User:a", 3, 3), "pattern"),
            (ok(2, "t", 3, "alice", 3, 3), "principal"),
            (ok(2, "t", 3, "User:a", 1, 3), "operation"),
            (ok(2, "t", 3, "User:a", 3, 1), "permission"),
            (ok(4, "other", 3, "User:a", 7, 3), "CLUSTER"),
            (ok(2, "", 3, "User:a", 3, 3), "empty"),
        ] {
            let e = bad.expect_err(why);
            assert!(e.to_lowercase().contains(&why.to_lowercase()), "{why}: {e}");
        }
    }

    #[test]
    fn the_registrys_types_decide_like_kafkas_and_stay_out_of_kafkas_apis() {
        use Operation::*;
        use PatternType::*;
        use Permission::*;
        use ResourceType::*;
        let a = Authorizer::new(
            vec![
                acl(Subject, "orders-", Prefixed, "User:alice", Write, Allow),
                acl(
                    Registry,
                    REGISTRY_NAME,
                    Literal,
                    "User:alice",
                    DescribeConfigs,
                    Allow,
                ),
                acl(Topic, "orders", Literal, "User:alice", Read, Allow),
            ],
            HashSet::new(),
            false,
        );
        let p = alice();
        assert!(a.authorize(&p, "h", Write, Subject, "orders-value"));
        assert!(a.authorize(&p, "h", Describe, Subject, "orders-value"));
        assert!(!a.authorize(&p, "h", Read, Subject, "orders-value"));
        assert!(!a.authorize(&p, "h", Write, Subject, "payments-value"));
        assert!(
            !a.authorize(&p, "h", Write, Topic, "orders-value"),
            "a subject's binding says nothing of a topic of the same name"
        );
        assert!(a.authorize(&p, "h", DescribeConfigs, Registry, REGISTRY_NAME));
        assert!(!a.authorize(&p, "h", AlterConfigs, Registry, REGISTRY_NAME));

        // Kafka's APIs: not created, not filtered, not matched by ANY.
        let subject = acl(Subject, "s", Literal, "User:alice", Read, Allow);
        assert!(Acl::from_kafka(64, "s", 3, "User:a", "*", 3, 3).is_err());
        assert!(Acl::from_kafka(2, "s", 3, "User:a", "*", 3, 3).is_ok());
        assert!(Acl::new(65, "other", 3, "User:a", "*", 3, 3).is_err());
        assert!(AclFilter::new(64, None, 1, None, None, 1, 1).is_err());
        let any = AclFilter::new(1, None, 1, None, None, 1, 1).expect("filter");
        assert!(!any.matches(&subject));
        assert_eq!(ResourceType::from_name("subject"), Some(Subject));
        assert_eq!(
            Operation::from_name("DESCRIBE_CONFIGS"),
            Some(DescribeConfigs)
        );
    }
}
