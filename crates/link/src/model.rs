//! A link's record in the metadata store: its definition and the state of each topic it
//! mirrors, kept as JSON (the store does not interpret it) and changed by compare-and-set.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::LinkSpec;
use crate::LinkError;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkBody {
    pub spec: LinkSpec,
    /// The topics the link made mirrors of, by name.
    #[serde(default)]
    pub topics: BTreeMap<String, MirrorTopic>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MirrorTopic {
    pub state: TopicState,
    /// Why it failed, or what the last step did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// While promoting: where each partition must get to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promotion: Option<Promotion>,
}

/// A promotion under way: each partition's source end when it was asked for (every record the
/// source had acknowledged then), and the partitions whose mirror has got there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Promotion {
    pub targets: BTreeMap<i32, i64>,
    #[serde(default)]
    pub reached: BTreeMap<i32, i64>,
    /// Milliseconds since the epoch after which it gives up (the topic goes on mirroring).
    pub deadline_ms: i64,
}

impl MirrorTopic {
    pub fn mirroring() -> MirrorTopic {
        MirrorTopic {
            state: TopicState::Mirroring,
            reason: None,
            promotion: None,
        }
    }

    pub fn failed(reason: String) -> MirrorTopic {
        MirrorTopic {
            state: TopicState::Failed,
            reason: Some(reason),
            promotion: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TopicState {
    /// Records, partitions and configs follow the source; read-only for clients.
    Mirroring,
    /// Catching up to the source's end before it becomes writable.
    Promoting,
    /// An ordinary topic now; the link no longer touches it.
    Promoted,
    /// Not mirrored, with the reason.
    Failed,
}

impl TopicState {
    pub fn name(self) -> &'static str {
        match self {
            TopicState::Mirroring => "mirroring",
            TopicState::Promoting => "promoting",
            TopicState::Promoted => "promoted",
            TopicState::Failed => "failed",
        }
    }
}

impl LinkBody {
    pub fn decode(json: &str) -> Result<LinkBody, LinkError> {
        serde_json::from_str(json)
            .map_err(|e| LinkError::Config(format!("a link record that does not parse: {e}")))
    }

    pub fn encode(&self) -> String {
        // A struct of strings and maps: serialising cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}
