//! [`Quotas`]: client quotas, a value per entity and key.

use crate::{ClientQuota, Quotas};

/// Runs every check of the part, each against a fresh, empty store from `open`.
pub async fn run(open: impl Fn() -> Box<dyn Quotas>) {
    an_empty_store_has_no_quotas(&*open()).await;
    setting_lists_and_setting_again_replaces(&*open()).await;
    removing_removes_only_that_key_of_that_entity(&*open()).await;
    changes_in_one_call_apply_together(&*open()).await;
    quotas_are_listed_by_entity_then_key_in_byte_order(&*open()).await;
    values_round_trip_exactly(&*open()).await;
    entities_and_keys_are_exact_and_any_text(&*open()).await;
}

const PRODUCE: &str = "producer_byte_rate";
const CONSUME: &str = "consumer_byte_rate";
const REQUEST: &str = "request_percentage";

fn set(entity: &str, key: &str, value: f64) -> (String, String, Option<f64>) {
    (entity.to_string(), key.to_string(), Some(value))
}

fn remove(entity: &str, key: &str) -> (String, String, Option<f64>) {
    (entity.to_string(), key.to_string(), None)
}

fn quota(entity: &str, key: &str, value: f64) -> ClientQuota {
    ClientQuota {
        entity: entity.to_string(),
        key: key.to_string(),
        value,
    }
}

/// By entity then key, in byte order (`String`'s `Ord`).
fn sorted(mut quotas: Vec<ClientQuota>) -> Vec<ClientQuota> {
    quotas.sort_by(|a, b| (&a.entity, &a.key).cmp(&(&b.entity, &b.key)));
    quotas
}

pub async fn an_empty_store_has_no_quotas(m: &dyn Quotas) {
    assert!(m.client_quotas().await.expect("list").is_empty());
    m.alter_client_quotas(vec![]).await.expect("alter nothing");
    // Removing what is not there is not an error.
    m.alter_client_quotas(vec![
        remove("user=alice", PRODUCE),
        remove("client-id=", CONSUME),
    ])
    .await
    .expect("remove what is not there");
    assert!(m.client_quotas().await.expect("list").is_empty());
}

pub async fn setting_lists_and_setting_again_replaces(m: &dyn Quotas) {
    m.alter_client_quotas(vec![set("user=alice", PRODUCE, 1048576.0)])
        .await
        .expect("set");
    assert_eq!(
        m.client_quotas().await.expect("list"),
        vec![quota("user=alice", PRODUCE, 1048576.0)]
    );
    // Again, another value: replaced, still one quota.
    m.alter_client_quotas(vec![set("user=alice", PRODUCE, 2048.0)])
        .await
        .expect("set again");
    assert_eq!(
        m.client_quotas().await.expect("list"),
        vec![quota("user=alice", PRODUCE, 2048.0)]
    );
    // The same value again: nothing changes.
    m.alter_client_quotas(vec![set("user=alice", PRODUCE, 2048.0)])
        .await
        .expect("set the same");
    assert_eq!(
        m.client_quotas().await.expect("list"),
        vec![quota("user=alice", PRODUCE, 2048.0)]
    );
    // A removed quota can be set again.
    m.alter_client_quotas(vec![remove("user=alice", PRODUCE)])
        .await
        .expect("remove");
    assert!(m.client_quotas().await.expect("list").is_empty());
    m.alter_client_quotas(vec![set("user=alice", PRODUCE, 0.5)])
        .await
        .expect("set after removal");
    assert_eq!(
        m.client_quotas().await.expect("list"),
        vec![quota("user=alice", PRODUCE, 0.5)]
    );
}

pub async fn removing_removes_only_that_key_of_that_entity(m: &dyn Quotas) {
    // Its neighbours: the same entity with other keys, other entities with the same key
    // (one that the removed entity's text begins, one that begins with it).
    let all = vec![
        quota("user=alice", PRODUCE, 1.0),
        quota("user=alice", CONSUME, 2.0),
        quota("user=alice", REQUEST, 3.0),
        quota("user=bob", PRODUCE, 4.0),
        quota("user=", PRODUCE, 5.0),
        quota("user=alice,client-id=app", PRODUCE, 6.0),
        quota("client-id=", PRODUCE, 7.0),
    ];
    m.alter_client_quotas(
        all.iter()
            .map(|q| set(&q.entity, &q.key, q.value))
            .collect(),
    )
    .await
    .expect("set");
    assert_eq!(m.client_quotas().await.expect("list"), sorted(all.clone()));

    m.alter_client_quotas(vec![remove("user=alice", PRODUCE)])
        .await
        .expect("remove");
    let left: Vec<ClientQuota> = all[1..].to_vec();
    assert_eq!(m.client_quotas().await.expect("list"), sorted(left.clone()));
    // Gone: removing it again, or a key the entity never had, changes nothing.
    m.alter_client_quotas(vec![remove("user=alice", PRODUCE)])
        .await
        .expect("remove again");
    m.alter_client_quotas(vec![remove("user=alice", "controller_mutation_rate")])
        .await
        .expect("remove a key never set");
    m.alter_client_quotas(vec![remove("user=carol", CONSUME)])
        .await
        .expect("remove from an entity never seen");
    assert_eq!(m.client_quotas().await.expect("list"), sorted(left));
}

pub async fn changes_in_one_call_apply_together(m: &dyn Quotas) {
    m.alter_client_quotas(vec![
        set("user=alice", PRODUCE, 100.0),
        set("user=alice", CONSUME, 200.0),
        set("user=bob", PRODUCE, 300.0),
        set("client-id=app", REQUEST, 50.0),
    ])
    .await
    .expect("set");

    // In one call: a new key of an existing entity, a new entity, a replaced value, two
    // removals, one of a key that is not there.
    m.alter_client_quotas(vec![
        set("user=alice", REQUEST, 25.0),
        remove("user=alice", CONSUME),
        set("user=bob", PRODUCE, 301.0),
        remove("client-id=app", REQUEST),
        remove("user=bob", CONSUME),
        set("user=carol", CONSUME, 1.5),
    ])
    .await
    .expect("alter several");
    assert_eq!(
        m.client_quotas().await.expect("list"),
        sorted(vec![
            quota("user=alice", PRODUCE, 100.0),
            quota("user=alice", REQUEST, 25.0),
            quota("user=bob", PRODUCE, 301.0),
            quota("user=carol", CONSUME, 1.5),
        ])
    );

    // A key named more than once in a call: the last change wins, whether it sets or removes.
    m.alter_client_quotas(vec![
        set("user=alice", PRODUCE, 1.0),
        set("user=alice", PRODUCE, 2.0),
        remove("user=bob", PRODUCE),
        set("user=bob", PRODUCE, 3.0),
        set("user=carol", CONSUME, 4.0),
        remove("user=carol", CONSUME),
        set("user=dave", CONSUME, 5.0),
        remove("user=dave", CONSUME),
    ])
    .await
    .expect("alter with repeats");
    assert_eq!(
        m.client_quotas().await.expect("list"),
        sorted(vec![
            quota("user=alice", PRODUCE, 2.0),
            quota("user=alice", REQUEST, 25.0),
            quota("user=bob", PRODUCE, 3.0),
        ])
    );

    // Removing every quota in one call.
    m.alter_client_quotas(vec![
        remove("user=bob", PRODUCE),
        remove("user=alice", REQUEST),
        remove("user=alice", PRODUCE),
    ])
    .await
    .expect("remove all");
    assert!(m.client_quotas().await.expect("list").is_empty());
}

pub async fn quotas_are_listed_by_entity_then_key_in_byte_order(m: &dyn Quotas) {
    // Entities first, keys when they tie; byte order, not a locale's: "Zed" before "alice",
    // "é" after "z", "10" before "9", a shorter prefix first ("user=" < "user=alice" <
    // "user=alice,client-id=app"), upper case before lower.
    let quotas = vec![
        quota("user=alice", REQUEST, 1.0),
        quota("user=alice", CONSUME, 2.0),
        quota("user=alice", PRODUCE, 3.0),
        quota("user=alice", "Producer_byte_rate", 4.0),
        quota("user=alice,client-id=app", PRODUCE, 5.0),
        quota("user=alice,client-id=", PRODUCE, 6.0),
        quota("user=", PRODUCE, 7.0),
        quota("user=Zed", PRODUCE, 8.0),
        quota("user=z", PRODUCE, 9.0),
        quota("user=é", PRODUCE, 10.0),
        quota("user=10", PRODUCE, 11.0),
        quota("user=9", PRODUCE, 12.0),
        quota("client-id=", CONSUME, 13.0),
        quota("client-id=app", CONSUME, 14.0),
        quota("ip=10.0.0.1", "connection_creation_rate", 15.0),
    ];
    // Set in two calls, neither in order.
    let changes: Vec<_> = quotas
        .iter()
        .map(|q| set(&q.entity, &q.key, q.value))
        .collect();
    m.alter_client_quotas(changes[7..].to_vec())
        .await
        .expect("set");
    m.alter_client_quotas(changes[..7].to_vec())
        .await
        .expect("set");
    let listed = m.client_quotas().await.expect("list");
    assert_eq!(listed, sorted(quotas));
    let order: Vec<(&str, &str)> = listed
        .iter()
        .map(|q| (q.entity.as_str(), q.key.as_str()))
        .collect();
    assert_eq!(
        order,
        vec![
            ("client-id=", CONSUME),
            ("client-id=app", CONSUME),
            ("ip=10.0.0.1", "connection_creation_rate"),
            ("user=", PRODUCE),
            ("user=10", PRODUCE),
            ("user=9", PRODUCE),
            ("user=Zed", PRODUCE),
            ("user=alice", "Producer_byte_rate"),
            ("user=alice", CONSUME),
            ("user=alice", PRODUCE),
            ("user=alice", REQUEST),
            ("user=alice,client-id=", PRODUCE),
            ("user=alice,client-id=app", PRODUCE),
            ("user=z", PRODUCE),
            ("user=é", PRODUCE),
        ]
    );
}

pub async fn values_round_trip_exactly(m: &dyn Quotas) {
    let values = [
        1048576.0,
        0.5,
        1e12,
        0.1,
        1.0 / 3.0,
        1234.5678,
        9_007_199_254_740_991.0, // 2^53 - 1
        1e-300,
        f64::MIN_POSITIVE,
        5e-324, // the smallest subnormal
        f64::MAX,
        f64::EPSILON,
        0.0,
        -1.0,
        -2.5e-7,
    ];
    m.alter_client_quotas(
        values
            .iter()
            .enumerate()
            .map(|(i, v)| set(&format!("user=u{i:02}"), PRODUCE, *v))
            .collect(),
    )
    .await
    .expect("set");
    let listed = m.client_quotas().await.expect("list");
    assert_eq!(listed.len(), values.len());
    for (i, (q, v)) in listed.iter().zip(values).enumerate() {
        assert_eq!(q.entity, format!("user=u{i:02}"));
        assert_eq!(
            q.value.to_bits(),
            v.to_bits(),
            "{v:e} came back as {:e}",
            q.value
        );
    }

    // Replacing with a value that differs in the last bit only is a change.
    let next = f64::from_bits(0.1f64.to_bits() + 1);
    m.alter_client_quotas(vec![set("user=u03", PRODUCE, next)])
        .await
        .expect("set");
    let listed = m.client_quotas().await.expect("list");
    assert_eq!(listed[3].value.to_bits(), next.to_bits());
}

pub async fn entities_and_keys_are_exact_and_any_text(m: &dyn Quotas) {
    // Entities that differ only in case, that hold SQL's pattern characters, quotes, spaces,
    // newlines and any Unicode, and the empty text: each is its own entity.
    let entities = [
        "user=Alice",
        "user=alice",
        "USER=alice",
        "user=a%",
        "user=a_c",
        "user=abc",
        "user=*",
        "user=it's \"quoted\"",
        "user= spaced ",
        "user=line\nbreak",
        "user=用户",
        "user=тема-🦀",
        "",
    ];
    let mut quotas: Vec<ClientQuota> = entities
        .iter()
        .enumerate()
        .map(|(i, e)| quota(e, PRODUCE, i as f64))
        .collect();
    quotas.push(quota("user=alice", "PRODUCER_BYTE_RATE", 100.0));
    quotas.push(quota("user=alice", "", 101.0));
    quotas.push(quota("user=alice", "key with 'quote'", 102.0));
    m.alter_client_quotas(
        quotas
            .iter()
            .map(|q| set(&q.entity, &q.key, q.value))
            .collect(),
    )
    .await
    .expect("set");
    assert_eq!(
        m.client_quotas().await.expect("list"),
        sorted(quotas.clone())
    );

    // Removing matches exactly: no case folding, no patterns, no trimming.
    m.alter_client_quotas(vec![
        remove("user=alice", PRODUCE),
        remove("user=a%", PRODUCE),
        remove("user=*", PRODUCE),
        remove("user=alice", ""),
        remove("user=spaced", PRODUCE),
        remove("user=aLiCe", PRODUCE),
        remove("user=a_", PRODUCE),
        remove("user=alice", "producer_BYTE_rate"),
        remove("user=用户", PRODUCE),
    ])
    .await
    .expect("remove");
    let gone = [
        ("user=alice", PRODUCE),
        ("user=a%", PRODUCE),
        ("user=*", PRODUCE),
        ("user=alice", ""),
        ("user=用户", PRODUCE),
    ];
    let left: Vec<ClientQuota> = quotas
        .into_iter()
        .filter(|q| !gone.contains(&(q.entity.as_str(), q.key.as_str())))
        .collect();
    assert_eq!(left.len(), 11);
    assert_eq!(m.client_quotas().await.expect("list"), sorted(left));
}
