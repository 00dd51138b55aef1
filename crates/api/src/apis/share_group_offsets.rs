//! What the share group offset APIs (DescribeShareGroupOffsets, AlterShareGroupOffsets,
//! DeleteShareGroupOffsets) share: finding the share group on its coordinator, and the
//! share-partitions' start offsets in the metadata store.

use kafka_protocol::ResponseError as E;
use weir_group::ShareGroupLookup;

use crate::Broker;

/// The group as the offset APIs need it: a share group coordinated here, or the error (and
/// message) the request gets.
pub(crate) async fn share_group(
    broker: &Broker,
    group: &str,
    must_be_empty: bool,
) -> Result<(), (i16, String)> {
    match broker.groups.share_group_lookup(group).await {
        Err(code) => Err((code, String::new())),
        Ok(ShareGroupLookup::Absent) => Err((
            E::GroupIdNotFound.code(),
            format!("Group {group} not found."),
        )),
        Ok(ShareGroupLookup::OtherKind) => Err((
            E::GroupIdNotFound.code(),
            format!("Group {group} is not a share group."),
        )),
        Ok(ShareGroupLookup::Share { members }) if must_be_empty && members > 0 => Err((
            E::NonEmptyGroup.code(),
            format!("Share group {group} has members; stop them first."),
        )),
        Ok(ShareGroupLookup::Share { .. }) => Ok(()),
    }
}
