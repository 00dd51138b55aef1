//! [`GroupStates`]: consumer groups' membership, as opaque bytes.

use crate::GroupStates;

/// Runs every check of the part, each against a fresh, empty store from `open`.
pub async fn run(open: impl Fn() -> Box<dyn GroupStates>) {
    states_replace_each_other_and_delete(&*open()).await;
}

pub async fn states_replace_each_other_and_delete(m: &dyn GroupStates) {
    assert_eq!(m.load_group_state("g").await.expect("load"), None);
    assert!(m.group_state_ids().await.expect("ids").is_empty());
    // Deleting what is not there is not an error.
    m.delete_group_state("g").await.expect("delete nothing");

    // Any bytes: zeros, high bytes, nothing at all.
    let binary: Vec<u8> = (0..=255u8).chain([0, 0, 255]).collect();
    m.save_group_state("g", vec![1, 2, 3]).await.expect("save");
    m.save_group_state("a", binary.clone()).await.expect("save");
    m.save_group_state("B", Vec::new()).await.expect("save");
    m.save_group_state("g", vec![4]).await.expect("replace");
    assert_eq!(m.load_group_state("g").await.expect("load"), Some(vec![4]));
    assert_eq!(m.load_group_state("a").await.expect("load"), Some(binary));
    assert_eq!(
        m.load_group_state("B").await.expect("load"),
        Some(Vec::new())
    );
    // Byte order, whatever the database's collation.
    assert_eq!(
        m.group_state_ids().await.expect("ids"),
        vec!["B".to_string(), "a".to_string(), "g".to_string()]
    );

    m.delete_group_state("g").await.expect("delete");
    assert_eq!(m.load_group_state("g").await.expect("load"), None);
    assert_eq!(
        m.group_state_ids().await.expect("ids"),
        vec!["B".to_string(), "a".to_string()]
    );
    // A deleted group can have a state again.
    m.save_group_state("g", vec![5]).await.expect("save again");
    assert_eq!(m.load_group_state("g").await.expect("load"), Some(vec![5]));
}
