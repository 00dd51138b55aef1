//! The admin API's ACL routes (`/v1/acls`): every binding the broker enforces, of Kafka's
//! resource types and of the schema registry's (SUBJECT, REGISTRY), which Kafka's clients cannot
//! name and so are managed here (`weir acls`). A binding in JSON names its codes as Kafka's tools
//! print them:
//!
//! ```json
//! {"resource_type": "SUBJECT", "name": "orders-", "pattern": "PREFIXED",
//!  "principal": "User:alice", "host": "*", "operation": "WRITE", "permission": "ALLOW"}
//! ```
//!
//! `pattern` (LITERAL), `host` (`*`) and `permission` (ALLOW) may be left out.

use serde::{Deserialize, Serialize};
use weir_auth::acl::{Acl, Operation, PatternType, Permission, ResourceType};

/// One binding as the routes read and write it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AclJson {
    pub resource_type: String,
    pub name: String,
    #[serde(default = "literal")]
    pub pattern: String,
    pub principal: String,
    #[serde(default = "any_host")]
    pub host: String,
    pub operation: String,
    #[serde(default = "allow")]
    pub permission: String,
}

fn literal() -> String {
    "LITERAL".into()
}
fn any_host() -> String {
    "*".into()
}
fn allow() -> String {
    "ALLOW".into()
}

impl AclJson {
    pub fn of(a: &Acl) -> AclJson {
        AclJson {
            resource_type: a.resource_type.name().into(),
            name: a.name.clone(),
            pattern: a.pattern.name().into(),
            principal: a.principal.clone(),
            host: a.host.clone(),
            operation: a.operation.name().into(),
            permission: a.permission.name().into(),
        }
    }

    /// The binding, checked as CreateAcls checks one; what is wrong with it otherwise.
    pub fn acl(&self) -> Result<Acl, String> {
        fn code<T>(
            what: &str,
            text: &str,
            parse: fn(&str) -> Option<T>,
            code: fn(T) -> i8,
        ) -> Result<i8, String> {
            parse(text)
                .map(code)
                .ok_or_else(|| format!("unknown {what} `{text}`"))
        }
        Acl::new(
            code(
                "resource type",
                &self.resource_type,
                ResourceType::from_name,
                ResourceType::code,
            )?,
            &self.name,
            code(
                "pattern type",
                &self.pattern,
                PatternType::from_name,
                PatternType::code,
            )?,
            &self.principal,
            &self.host,
            code(
                "operation",
                &self.operation,
                Operation::from_name,
                Operation::code,
            )?,
            code(
                "permission",
                &self.permission,
                Permission::from_name,
                Permission::code,
            )?,
        )
    }
}

/// The bindings of a request body: one binding or a list of them.
pub fn parse_body(body: &[u8]) -> Result<Vec<Acl>, String> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Body {
        One(AclJson),
        Many(Vec<AclJson>),
    }
    let parsed: Body =
        serde_json::from_slice(body).map_err(|e| format!("an ACL binding in JSON: {e}"))?;
    let list = match parsed {
        Body::One(a) => vec![a],
        Body::Many(v) => v,
    };
    if list.is_empty() {
        return Err("no ACL binding given".into());
    }
    list.iter().map(AclJson::acl).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bindings_read_with_defaults_and_refused_with_reasons() {
        let acls = parse_body(
            br#"{"resource_type": "subject", "name": "orders-value",
                 "principal": "User:alice", "operation": "write"}"#,
        )
        .expect("valid");
        let a = &acls[0];
        assert_eq!(a.resource_type, ResourceType::Subject);
        assert_eq!(a.pattern, PatternType::Literal);
        assert_eq!(a.host, "*");
        assert_eq!(a.permission, Permission::Allow);
        let back = AclJson::of(a);
        assert_eq!(back.resource_type, "SUBJECT");
        assert_eq!(back.operation, "WRITE");

        let many = parse_body(
            br#"[{"resource_type": "REGISTRY", "name": "schema-registry", "principal": "User:a",
                  "operation": "DESCRIBE_CONFIGS", "permission": "DENY"},
                 {"resource_type": "TOPIC", "name": "t-", "pattern": "PREFIXED",
                  "principal": "User:a", "operation": "READ"}]"#,
        )
        .expect("valid");
        assert_eq!(many.len(), 2);

        for (body, why) in [
            (&br#"{"resource_type": "SUBJEKT", "name": "s", "principal": "User:a", "operation": "READ"}"#[..], "resource type"),
            (br#"{"resource_type": "SUBJECT", "name": "s", "principal": "User:a", "operation": "FLY"}"#, "operation"),
            (br#"{"resource_type": "SUBJECT", "name": "s", "principal": "alice", "operation": "READ"}"#, "principal"),
            (br#"{"resource_type": "REGISTRY", "name": "x", "principal": "User:a", "operation": "READ"}"#, "REGISTRY"),
            (br#"{"resource_type": "SUBJECT", "name": "s", "principal": "User:a", "operation": "READ", "extra": 1}"#, "ACL binding"),
            (br#"[]"#, "no ACL"),
        ] {
            let e = parse_body(body).expect_err(why);
            assert!(e.contains(why), "{why}: {e}");
        }
    }
}
