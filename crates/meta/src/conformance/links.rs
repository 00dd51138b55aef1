//! [`Links`]: cluster links, one record per link, changed by compare-and-set on its version.

use crate::{LinkRecord, Links};

/// Runs every check of the part, each against a fresh, empty store from `open`.
pub async fn run(open: impl Fn() -> Box<dyn Links>) {
    an_empty_store_has_no_links(&*open()).await;
    a_link_is_created_once(&*open()).await;
    an_update_applies_only_at_the_version_it_read(&*open()).await;
    deleting_removes_only_that_link(&*open()).await;
    links_are_listed_by_name_in_byte_order(&*open()).await;
}

fn record(name: &str, body: &str, version: u64) -> LinkRecord {
    LinkRecord {
        name: name.to_string(),
        body: body.to_string(),
        version,
    }
}

pub async fn an_empty_store_has_no_links(m: &dyn Links) {
    assert!(m.links().await.expect("list").is_empty());
    assert!(!m.delete_link("none").await.expect("delete nothing"));
    assert_eq!(
        m.update_link("none", "{}", 1)
            .await
            .expect("update nothing"),
        None
    );
    assert!(m.links().await.expect("list").is_empty());
}

pub async fn a_link_is_created_once(m: &dyn Links) {
    assert!(m.create_link("a", r#"{"x":1}"#).await.expect("create"));
    assert!(!m
        .create_link("a", r#"{"x":2}"#)
        .await
        .expect("create again"));
    assert_eq!(
        m.links().await.expect("list"),
        vec![record("a", r#"{"x":1}"#, 1)],
        "the second create changed nothing"
    );
}

pub async fn an_update_applies_only_at_the_version_it_read(m: &dyn Links) {
    m.create_link("a", "v1").await.expect("create");
    assert_eq!(m.update_link("a", "v2", 1).await.expect("update"), Some(2));
    // A writer that read version 1 lost the race: nothing changes.
    assert_eq!(
        m.update_link("a", "stale", 1).await.expect("stale update"),
        None
    );
    assert_eq!(m.update_link("a", "v3", 2).await.expect("update"), Some(3));
    assert_eq!(m.links().await.expect("list"), vec![record("a", "v3", 3)]);
}

pub async fn deleting_removes_only_that_link(m: &dyn Links) {
    m.create_link("a", "1").await.expect("create");
    m.create_link("b", "2").await.expect("create");
    assert!(m.delete_link("a").await.expect("delete"));
    assert!(!m.delete_link("a").await.expect("delete again"));
    assert_eq!(m.links().await.expect("list"), vec![record("b", "2", 1)]);
    // A link of the same name made again starts over.
    assert!(m.create_link("a", "new").await.expect("create again"));
    assert_eq!(
        m.update_link("a", "newer", 2).await.expect("old version"),
        None
    );
}

pub async fn links_are_listed_by_name_in_byte_order(m: &dyn Links) {
    for name in ["b", "B", "a-2", "a_1", "é"] {
        m.create_link(name, name).await.expect("create");
    }
    let names: Vec<String> = m
        .links()
        .await
        .expect("list")
        .into_iter()
        .map(|l| l.name)
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    assert_eq!(names.len(), 5);
}
