//! [`Acls`]: the cluster's ACL bindings.

use crate::{AclBinding, Acls};

/// Runs every check of the part, each against a fresh, empty store from `open`.
pub async fn run(open: impl Fn() -> Box<dyn Acls>) {
    an_empty_store_has_no_bindings(&*open()).await;
    bindings_are_listed_in_order(&*open()).await;
    creating_is_idempotent(&*open()).await;
    deleting_removes_exactly_the_bindings_named(&*open()).await;
    names_are_exact_and_any_text(&*open()).await;
}

// Kafka's codes, for readable bindings (the store does not interpret them).
const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const CLUSTER: i8 = 4;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const ALL: i8 = 2;
const READ: i8 = 3;
const WRITE: i8 = 4;
const DENY: i8 = 2;
const ALLOW: i8 = 3;

/// `principal` may read the topic `name`, from any host.
fn read(name: &str, principal: &str) -> AclBinding {
    AclBinding {
        resource_type: TOPIC,
        resource_name: name.to_string(),
        pattern_type: LITERAL,
        principal: principal.to_string(),
        host: "*".to_string(),
        operation: READ,
        permission_type: ALLOW,
    }
}

fn sorted(mut bindings: Vec<AclBinding>) -> Vec<AclBinding> {
    bindings.sort();
    bindings
}

pub async fn an_empty_store_has_no_bindings(m: &dyn Acls) {
    assert!(m.acls().await.expect("list").is_empty());
    assert_eq!(m.delete_acls(vec![]).await.expect("delete nothing"), 0);
    assert_eq!(
        m.delete_acls(vec![read("t", "User:alice")])
            .await
            .expect("delete what is not there"),
        0
    );
    m.create_acls(vec![]).await.expect("create nothing");
    assert!(m.acls().await.expect("list").is_empty());
}

pub async fn bindings_are_listed_in_order(m: &dyn Acls) {
    // Each field decides the order when those before it tie; names in byte order (not a
    // locale's: "Zed" before "alice", "é" after "z"); codes as numbers, negative ones and the
    // extremes included (the store keeps any i8).
    let bindings = vec![
        read("t", "User:bob"),
        read("t", "User:alice"),
        read("Zed", "User:alice"),
        read("alice", "User:alice"),
        read("é", "User:alice"),
        read("z", "User:alice"),
        read("10", "User:alice"),
        read("9", "User:alice"),
        AclBinding {
            resource_type: GROUP,
            ..read("a", "User:alice")
        },
        AclBinding {
            resource_type: CLUSTER,
            resource_name: "kafka-cluster".to_string(),
            operation: ALL,
            ..read("", "User:*")
        },
        AclBinding {
            resource_type: -1,
            ..read("t", "User:alice")
        },
        AclBinding {
            resource_type: i8::MAX,
            pattern_type: i8::MIN,
            operation: i8::MIN,
            permission_type: i8::MAX,
            ..read("t", "User:alice")
        },
        AclBinding {
            pattern_type: PREFIXED,
            ..read("t", "User:alice")
        },
        AclBinding {
            host: "10.0.0.1".to_string(),
            ..read("t", "User:alice")
        },
        AclBinding {
            operation: WRITE,
            ..read("t", "User:alice")
        },
        AclBinding {
            permission_type: DENY,
            ..read("t", "User:alice")
        },
    ];
    // Created in two calls, neither in order.
    m.create_acls(bindings[8..].to_vec()).await.expect("create");
    m.create_acls(bindings[..8].to_vec()).await.expect("create");
    let listed = m.acls().await.expect("list");
    assert_eq!(listed, sorted(bindings.clone()));
    assert_eq!(listed.len(), 16);
    assert_eq!(listed[0].resource_type, -1);
    assert_eq!(listed[15].resource_type, i8::MAX);
}

pub async fn creating_is_idempotent(m: &dyn Acls) {
    let a = read("t", "User:alice");
    let b = read("t", "User:bob");
    // The same binding twice in one call: one.
    m.create_acls(vec![a.clone(), a.clone()])
        .await
        .expect("create");
    assert_eq!(m.acls().await.expect("list"), vec![a.clone()]);
    // Again in a later call, and again beside a new one: one each.
    m.create_acls(vec![a.clone()]).await.expect("create again");
    m.create_acls(vec![b.clone(), a.clone(), b.clone()])
        .await
        .expect("create with a new one");
    assert_eq!(m.acls().await.expect("list"), vec![a.clone(), b.clone()]);
    // One delete removes it: there was one row, however often it was created.
    assert_eq!(m.delete_acls(vec![a]).await.expect("delete"), 1);
    assert_eq!(m.acls().await.expect("list"), vec![b]);
}

pub async fn deleting_removes_exactly_the_bindings_named(m: &dyn Acls) {
    let base = read("t", "User:alice");
    // Each differs from `base` in one field only.
    let neighbours = vec![
        AclBinding {
            resource_type: GROUP,
            ..base.clone()
        },
        AclBinding {
            resource_name: "t2".to_string(),
            ..base.clone()
        },
        AclBinding {
            pattern_type: PREFIXED,
            ..base.clone()
        },
        AclBinding {
            principal: "User:bob".to_string(),
            ..base.clone()
        },
        AclBinding {
            host: "10.0.0.1".to_string(),
            ..base.clone()
        },
        AclBinding {
            operation: WRITE,
            ..base.clone()
        },
        AclBinding {
            permission_type: DENY,
            ..base.clone()
        },
    ];
    let mut all = neighbours.clone();
    all.push(base.clone());
    m.create_acls(all.clone()).await.expect("create");
    assert_eq!(m.acls().await.expect("list"), sorted(all));

    // The count is of bindings removed: one named twice counts once, one that is not there not
    // at all.
    let absent = read("other", "User:carol");
    assert_eq!(
        m.delete_acls(vec![base.clone(), absent.clone(), base.clone()])
            .await
            .expect("delete"),
        1
    );
    assert_eq!(m.acls().await.expect("list"), sorted(neighbours.clone()));
    // Gone: deleting it again removes nothing.
    assert_eq!(m.delete_acls(vec![base.clone()]).await.expect("again"), 0);
    assert_eq!(m.delete_acls(vec![]).await.expect("nothing"), 0);
    assert_eq!(m.acls().await.expect("list"), sorted(neighbours.clone()));

    // Several at once, mixed with absent ones.
    assert_eq!(
        m.delete_acls(vec![
            neighbours[6].clone(),
            absent,
            neighbours[0].clone(),
            base.clone(),
            neighbours[3].clone(),
        ])
        .await
        .expect("delete several"),
        3
    );
    let left = vec![
        neighbours[1].clone(),
        neighbours[2].clone(),
        neighbours[4].clone(),
        neighbours[5].clone(),
    ];
    assert_eq!(m.acls().await.expect("list"), sorted(left.clone()));
    // A deleted binding can be created again.
    m.create_acls(vec![base.clone()])
        .await
        .expect("create again");
    let mut back = left;
    back.push(base);
    assert_eq!(m.acls().await.expect("list"), sorted(back.clone()));
    assert_eq!(m.delete_acls(back).await.expect("delete all"), 5);
    assert!(m.acls().await.expect("list").is_empty());
}

pub async fn names_are_exact_and_any_text(m: &dyn Acls) {
    // Names that differ only in case, that hold SQL's pattern characters, quotes, spaces,
    // newlines and any Unicode, and the empty name: each is its own binding.
    let names = [
        "Topic",
        "topic",
        "TOPIC",
        "a%",
        "a_c",
        "abc",
        "*",
        "it's \"quoted\"",
        " spaced ",
        "line\nbreak",
        "主题",
        "тема-🦀",
        "",
    ];
    let mut bindings: Vec<AclBinding> = names.iter().map(|n| read(n, "User:alice")).collect();
    bindings.push(read("Topic", "User:Alice"));
    bindings.push(read("Topic", "User:ALICE"));
    bindings.push(AclBinding {
        host: "fe80::1%eth0".to_string(),
        ..read("Topic", "User:Ålice")
    });
    m.create_acls(bindings.clone()).await.expect("create");
    assert_eq!(m.acls().await.expect("list"), sorted(bindings.clone()));

    // Deleting matches exactly: no case folding, no patterns, no trimming.
    assert_eq!(
        m.delete_acls(vec![
            read("topic", "User:alice"),
            read("a%", "User:alice"),
            read("*", "User:alice"),
            read("Topic", "User:Alice"),
            read("spaced", "User:alice"),
            read("tOpIc", "User:alice"),
            read("主题", "User:alice"),
        ])
        .await
        .expect("delete"),
        5
    );
    let gone = [
        read("topic", "User:alice"),
        read("a%", "User:alice"),
        read("*", "User:alice"),
        read("Topic", "User:Alice"),
        read("主题", "User:alice"),
    ];
    let left: Vec<AclBinding> = bindings.into_iter().filter(|b| !gone.contains(b)).collect();
    assert_eq!(left.len(), 11);
    assert_eq!(m.acls().await.expect("list"), sorted(left));
}
