//! A group's state as the metadata store keeps it ([`weir_meta::GroupStates`]): what another
//! coordinator (or this one after a restart) needs to take a Stable group over without a
//! rebalance, or to continue an Empty group's generations.
//!
//! The bytes are versioned: a version byte, then that version's fields, big-endian. A coordinator
//! refuses a version it does not know (the group then starts Empty; its offsets are elsewhere),
//! so a new field means a new version that older brokers ignore rather than misread.
//!
//! Version 1:
//!
//! ```text
//! u8 version = 1
//! u8 state (0 Empty, 1 Stable)
//! i32 generation
//! opt_str protocol_type, opt_str protocol_name, opt_str leader
//! u32 members, each:
//!   str member_id, opt_str group_instance_id, str client_id, str client_host,
//!   u32 session_timeout_ms, u32 rebalance_timeout_ms,
//!   u32 protocols, each: str name, bytes metadata
//!   bytes assignment
//! ```
//!
//! `str` and `bytes` are a u32 length and that many bytes (UTF-8 for `str`); `opt_str` is a u8
//! (0 absent, 1 present) and then a `str` if present.

use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};

const VERSION: u8 = 1;

/// Only these two states are stored: the others are a rebalance under way, which is not resumed
/// from the store (the members rejoin the last Stable generation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoredState {
    Empty,
    Stable,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupSnapshot {
    pub state: StoredState,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub members: Vec<MemberSnapshot>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberSnapshot {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
}

/// Why stored bytes were not taken as a group state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SnapshotError {
    Empty,
    UnknownVersion(u8),
    Malformed(&'static str),
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::Empty => write!(f, "no bytes"),
            SnapshotError::UnknownVersion(v) => {
                write!(
                    f,
                    "version {v} is unknown to this broker (it reads {VERSION})"
                )
            }
            SnapshotError::Malformed(what) => write!(f, "malformed: {what}"),
        }
    }
}

impl GroupSnapshot {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.members.len() * 256);
        out.put_u8(VERSION);
        out.put_u8(match self.state {
            StoredState::Empty => 0,
            StoredState::Stable => 1,
        });
        out.put_i32(self.generation);
        put_opt_str(&mut out, self.protocol_type.as_deref());
        put_opt_str(&mut out, self.protocol_name.as_deref());
        put_opt_str(&mut out, self.leader.as_deref());
        put_len(&mut out, self.members.len());
        for m in &self.members {
            put_str(&mut out, &m.id);
            put_opt_str(&mut out, m.instance_id.as_deref());
            put_str(&mut out, &m.client_id);
            put_str(&mut out, &m.client_host);
            out.put_u32(millis(m.session_timeout));
            out.put_u32(millis(m.rebalance_timeout));
            put_len(&mut out, m.protocols.len());
            for (name, metadata) in &m.protocols {
                put_str(&mut out, name);
                put_bytes(&mut out, metadata);
            }
            put_bytes(&mut out, &m.assignment);
        }
        out
    }

    /// Decodes and checks stored bytes: a state that decodes is one the group can be in.
    pub(crate) fn decode(data: &[u8]) -> Result<GroupSnapshot, SnapshotError> {
        let mut b = data;
        if b.is_empty() {
            return Err(SnapshotError::Empty);
        }
        let version = b.get_u8();
        if version != VERSION {
            return Err(SnapshotError::UnknownVersion(version));
        }
        let state = match get_u8(&mut b)? {
            0 => StoredState::Empty,
            1 => StoredState::Stable,
            _ => return Err(SnapshotError::Malformed("unknown state")),
        };
        need(&b, 4)?;
        let generation = b.get_i32();
        let protocol_type = get_opt_str(&mut b)?;
        let protocol_name = get_opt_str(&mut b)?;
        let leader = get_opt_str(&mut b)?;
        let count = get_len(&mut b)?;
        let mut members = Vec::with_capacity(count.min(1024));
        for _ in 0..count {
            let id = get_str(&mut b)?;
            let instance_id = get_opt_str(&mut b)?;
            let client_id = get_str(&mut b)?;
            let client_host = get_str(&mut b)?;
            need(&b, 8)?;
            let session_timeout = Duration::from_millis(u64::from(b.get_u32()));
            let rebalance_timeout = Duration::from_millis(u64::from(b.get_u32()));
            let n = get_len(&mut b)?;
            let mut protocols = Vec::with_capacity(n.min(64));
            for _ in 0..n {
                let name = get_str(&mut b)?;
                protocols.push((name, get_bytes(&mut b)?));
            }
            let assignment = get_bytes(&mut b)?;
            members.push(MemberSnapshot {
                id,
                instance_id,
                client_id,
                client_host,
                session_timeout,
                rebalance_timeout,
                protocols,
                assignment,
            });
        }
        if b.has_remaining() {
            return Err(SnapshotError::Malformed("bytes after the last member"));
        }
        let s = GroupSnapshot {
            state,
            generation,
            protocol_type,
            protocol_name,
            leader,
            members,
        };
        s.check()?;
        Ok(s)
    }

    /// What the group's invariants require of a state it is restored to.
    fn check(&self) -> Result<(), SnapshotError> {
        let malformed = |what| Err(SnapshotError::Malformed(what));
        if self.generation < 0 {
            return malformed("negative generation");
        }
        let mut ids = HashSet::new();
        let mut instances = HashSet::new();
        for m in &self.members {
            if !ids.insert(m.id.as_str()) {
                return malformed("a member twice");
            }
            if let Some(i) = &m.instance_id {
                if !instances.insert(i.as_str()) {
                    return malformed("an instance id twice");
                }
            }
        }
        match self.state {
            StoredState::Empty => {
                if !self.members.is_empty() || self.leader.is_some() {
                    return malformed("an Empty group with members");
                }
            }
            StoredState::Stable => {
                if self.members.is_empty() {
                    return malformed("a Stable group without members");
                }
                if self.protocol_name.is_none() {
                    return malformed("a Stable group without a protocol");
                }
                if !self.leader.as_deref().is_some_and(|l| ids.contains(l)) {
                    return malformed("a Stable group whose leader is not a member");
                }
            }
        }
        Ok(())
    }
}

/// Session and rebalance timeouts come from the protocol's int32 milliseconds.
fn millis(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    // Lengths here are of strings and byte arrays from Kafka requests (int16/int32 sized) and of
    // member lists, all far below 4 GiB.
    out.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_len(out, b.len());
    out.put_slice(b);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_bytes(out, s.as_bytes());
}

fn put_opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        None => out.put_u8(0),
        Some(s) => {
            out.put_u8(1);
            put_str(out, s);
        }
    }
}

fn need(b: &&[u8], n: usize) -> Result<(), SnapshotError> {
    if b.remaining() < n {
        Err(SnapshotError::Malformed("truncated"))
    } else {
        Ok(())
    }
}

fn get_u8(b: &mut &[u8]) -> Result<u8, SnapshotError> {
    need(b, 1)?;
    Ok(b.get_u8())
}

fn get_len(b: &mut &[u8]) -> Result<usize, SnapshotError> {
    need(b, 4)?;
    let len = b.get_u32() as usize;
    // Every element takes at least one byte: a longer count is corrupt, not a reason to allocate.
    if len > b.remaining() {
        return Err(SnapshotError::Malformed("a length past the end"));
    }
    Ok(len)
}

fn get_bytes(b: &mut &[u8]) -> Result<Bytes, SnapshotError> {
    let len = get_len(b)?;
    let out = Bytes::copy_from_slice(&b[..len]);
    b.advance(len);
    Ok(out)
}

fn get_str(b: &mut &[u8]) -> Result<String, SnapshotError> {
    let bytes = get_bytes(b)?;
    String::from_utf8(bytes.to_vec()).map_err(|_| SnapshotError::Malformed("a string not UTF-8"))
}

fn get_opt_str(b: &mut &[u8]) -> Result<Option<String>, SnapshotError> {
    match get_u8(b)? {
        0 => Ok(None),
        1 => get_str(b).map(Some),
        _ => Err(SnapshotError::Malformed("an optional string flag")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stable() -> GroupSnapshot {
        let member = |id: &str, instance: Option<&str>| MemberSnapshot {
            id: id.to_string(),
            instance_id: instance.map(str::to_string),
            client_id: "client".to_string(),
            client_host: "/10.0.0.1".to_string(),
            session_timeout: Duration::from_millis(10_000),
            rebalance_timeout: Duration::from_millis(300_000),
            protocols: vec![
                ("range".to_string(), Bytes::from_static(b"\x00\x01meta")),
                ("roundrobin".to_string(), Bytes::new()),
            ],
            assignment: Bytes::from_static(b"\x00\xffassigned"),
        };
        GroupSnapshot {
            state: StoredState::Stable,
            generation: 7,
            protocol_type: Some("consumer".to_string()),
            protocol_name: Some("range".to_string()),
            leader: Some("b".to_string()),
            members: vec![member("a", None), member("b", Some("instance-b"))],
        }
    }

    #[test]
    fn round_trips() {
        let s = stable();
        assert_eq!(GroupSnapshot::decode(&s.encode()), Ok(s));
        let empty = GroupSnapshot {
            state: StoredState::Empty,
            generation: 3,
            protocol_type: Some("consumer".to_string()),
            protocol_name: None,
            leader: None,
            members: Vec::new(),
        };
        assert_eq!(GroupSnapshot::decode(&empty.encode()), Ok(empty));
    }

    #[test]
    fn unknown_versions_and_damage_are_refused() {
        let mut data = stable().encode();
        assert_eq!(GroupSnapshot::decode(&[]), Err(SnapshotError::Empty));
        data[0] = 2;
        assert_eq!(
            GroupSnapshot::decode(&data),
            Err(SnapshotError::UnknownVersion(2))
        );
        data[0] = VERSION;
        // Every truncation fails; none panics.
        for len in 1..data.len() {
            assert!(GroupSnapshot::decode(&data[..len]).is_err(), "length {len}");
        }
        data.push(0);
        assert!(GroupSnapshot::decode(&data).is_err());
        // A huge member count does not allocate.
        let mut huge = stable();
        huge.members.clear();
        let mut data = huge.encode();
        let at = data.len() - 4;
        data[at..].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(GroupSnapshot::decode(&data).is_err());
    }

    #[test]
    fn states_a_group_cannot_be_in_are_refused() {
        let mut s = stable();
        s.leader = Some("nobody".to_string());
        assert!(GroupSnapshot::decode(&s.encode()).is_err());
        let mut s = stable();
        s.members[1].id = "a".to_string();
        assert!(GroupSnapshot::decode(&s.encode()).is_err());
        let mut s = stable();
        s.state = StoredState::Empty;
        assert!(GroupSnapshot::decode(&s.encode()).is_err());
        let mut s = stable();
        s.protocol_name = None;
        assert!(GroupSnapshot::decode(&s.encode()).is_err());
    }
}
