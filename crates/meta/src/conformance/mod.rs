//! The behaviour every metadata backend must show, run by each backend's tests.
//!
//! One module per part of the store, each runnable alone against a backend that implements only
//! that part (`object_index::run`, `catalog::run`, ...), and [`whole_store`] for what crosses
//! parts. [`run_all`] runs them all against a whole store.

pub mod acls;
pub mod catalog;
pub mod coordination;
pub mod credentials;
pub mod group_offsets;
pub mod group_states;
pub mod iceberg;
pub mod links;
pub mod object_index;
pub mod producer_snapshots;
pub mod quotas;
pub mod schemas;
pub mod share;
pub mod transactions;
pub mod whole_store;

use crate::{MetaError, MetaStore, ObjectCommit, ObjectIndex, RangeCommit};

/// Runs every suite, each check against a fresh, empty store from `open`.
pub async fn run_all(open: impl Fn() -> Box<dyn MetaStore>) {
    object_index::run(|| open()).await;
    catalog::run(|| open()).await;
    group_offsets::run(|| open()).await;
    group_states::run(|| open()).await;
    producer_snapshots::run(|| open()).await;
    coordination::run(|| open()).await;
    transactions::run(&open).await;
    credentials::run(|| open()).await;
    acls::run(|| open()).await;
    quotas::run(|| open()).await;
    links::run(|| open()).await;
    share::run(|| open()).await;
    schemas::run(|| open()).await;
    iceberg::run(|| open()).await;
    whole_store::run(open).await;
}

fn key(id: u64) -> String {
    format!("test/{id}")
}

fn range(stream_id: u64, epoch: u64, start: u64, end: u64) -> RangeCommit {
    RangeCommit {
        stream_id,
        epoch,
        start_offset: start,
        end_offset: end,
        position: start * 10,
        size: (end - start) * 10,
        max_timestamp: end as i64,
    }
}

/// Prepares an object and commits `ranges` in it.
async fn commit(m: &dyn ObjectIndex, ranges: Vec<RangeCommit>) -> Result<u64, MetaError> {
    let id = m.prepare_object(key).await?;
    m.commit_objects(vec![ObjectCommit {
        object_id: id,
        size: 1000,
        ranges,
    }])
    .await?;
    Ok(id)
}
