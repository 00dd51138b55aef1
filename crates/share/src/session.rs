//! Share sessions (KIP-932): what a share consumer fetches from this broker, so that its next
//! ShareFetch names only what changed. One session per (group, member) on each broker it
//! fetches from; ShareFetch and ShareAcknowledge advance one epoch sequence:
//!
//! - epoch 0 opens a session (replacing any of that member) with the request's partitions; the
//!   next request must carry epoch 1;
//! - epoch N > 0 must be the session's next epoch: the request's partitions are added, its
//!   forgotten ones removed, and the epoch moves on (after `i32::MAX` comes 1);
//! - epoch -1 closes the session: the caller releases what the member holds.
//!
//! A session belongs to the connection that opened it: when that connection closes, the
//! session goes and the member's records are released, as Kafka's share session cache does.

use std::collections::{BTreeSet, HashMap};

/// A share-partition of a session: topic id and partition.
pub type Part = ([u8; 16], i32);

/// Why a session step was refused (Kafka's codes in [`SessionError::code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionError {
    /// SHARE_SESSION_NOT_FOUND.
    NotFound,
    /// INVALID_SHARE_SESSION_EPOCH.
    InvalidEpoch,
    /// SHARE_SESSION_LIMIT_REACHED.
    LimitReached,
}

impl SessionError {
    pub fn code(self) -> i16 {
        match self {
            SessionError::NotFound => 122,
            SessionError::InvalidEpoch => 123,
            SessionError::LimitReached => 133,
        }
    }
}

#[derive(Debug, Clone)]
struct Session {
    /// The epoch the next request must carry.
    next: i32,
    parts: BTreeSet<Part>,
    conn: u64,
}

/// What a session step leaves to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Fetch these partitions (the session's, after the request's changes). `opened` names
    /// the connection's first session of this member (epoch 0), to be released on close.
    Fetch { parts: Vec<Part>, opened: bool },
    /// The session was closed: release what the member holds of these partitions.
    Closed { parts: Vec<Part> },
}

/// The share sessions of one broker, by (group, member).
#[derive(Debug, Default)]
pub struct Sessions {
    by_member: HashMap<(String, String), Session>,
    max: usize,
}

impl Sessions {
    /// At most `max` sessions at once (`group.share.max.share.sessions`, 2,000).
    pub fn new(max: usize) -> Self {
        Sessions {
            by_member: HashMap::new(),
            max,
        }
    }

    pub fn len(&self) -> usize {
        self.by_member.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_member.is_empty()
    }

    /// One ShareFetch's (or, with `fetching` false, ShareAcknowledge's) session step on
    /// connection `conn`.
    pub fn step(
        &mut self,
        group: &str,
        member: &str,
        epoch: i32,
        conn: u64,
        add: &[Part],
        forget: &[Part],
    ) -> Result<Step, SessionError> {
        let key = (group.to_string(), member.to_string());
        match epoch {
            0 => {
                if !self.by_member.contains_key(&key) && self.by_member.len() >= self.max {
                    return Err(SessionError::LimitReached);
                }
                let parts: BTreeSet<Part> = add.iter().copied().collect();
                let opened = self.by_member.get(&key).is_none_or(|s| s.conn != conn);
                self.by_member.insert(
                    key,
                    Session {
                        next: 1,
                        parts: parts.clone(),
                        conn,
                    },
                );
                Ok(Step::Fetch {
                    parts: parts.into_iter().collect(),
                    opened,
                })
            }
            -1 => {
                let s = self.by_member.remove(&key).ok_or(SessionError::NotFound)?;
                Ok(Step::Closed {
                    parts: s.parts.into_iter().collect(),
                })
            }
            n => {
                let s = self.by_member.get_mut(&key).ok_or(SessionError::NotFound)?;
                if s.next != n {
                    return Err(SessionError::InvalidEpoch);
                }
                s.next = if n == i32::MAX { 1 } else { n + 1 };
                s.parts.extend(add.iter().copied());
                for f in forget {
                    s.parts.remove(f);
                }
                Ok(Step::Fetch {
                    parts: s.parts.iter().copied().collect(),
                    opened: false,
                })
            }
        }
    }

    /// The sessions of connection `conn`, gone with it: (group, member, partitions) each.
    pub fn disconnected(&mut self, conn: u64) -> Vec<(String, String, Vec<Part>)> {
        let gone: Vec<(String, String)> = self
            .by_member
            .iter()
            .filter(|(_, s)| s.conn == conn)
            .map(|(k, _)| k.clone())
            .collect();
        gone.into_iter()
            .filter_map(|k| {
                let s = self.by_member.remove(&k)?;
                Some((k.0, k.1, s.parts.into_iter().collect()))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: [u8; 16] = [1; 16];

    #[test]
    fn epochs_follow_one_sequence_from_zero() {
        let mut s = Sessions::new(10);
        assert_eq!(
            s.step("g", "m", 0, 7, &[(T, 0)], &[]),
            Ok(Step::Fetch {
                parts: vec![(T, 0)],
                opened: true
            })
        );
        assert_eq!(
            s.step("g", "m", 1, 7, &[(T, 1)], &[]),
            Ok(Step::Fetch {
                parts: vec![(T, 0), (T, 1)],
                opened: false
            })
        );
        assert_eq!(s.step("g", "m", 2, 7, &[], &[(T, 0)]).map(|_| ()), Ok(()));
        assert_eq!(
            s.step("g", "m", 2, 7, &[], &[]),
            Err(SessionError::InvalidEpoch)
        );
        assert_eq!(
            s.step("g", "x", 1, 7, &[], &[]),
            Err(SessionError::NotFound)
        );
        assert_eq!(
            s.step("g", "m", -1, 7, &[], &[]),
            Ok(Step::Closed {
                parts: vec![(T, 1)]
            })
        );
        assert_eq!(
            s.step("g", "m", -1, 7, &[], &[]),
            Err(SessionError::NotFound)
        );
    }

    #[test]
    fn the_session_limit_refuses_new_members_only() {
        let mut s = Sessions::new(1);
        s.step("g", "a", 0, 1, &[], &[]).expect("open");
        assert_eq!(
            s.step("g", "b", 0, 1, &[], &[]),
            Err(SessionError::LimitReached)
        );
        assert!(
            s.step("g", "a", 0, 1, &[], &[]).is_ok(),
            "a reopens its own"
        );
    }

    #[test]
    fn a_closed_connection_takes_its_sessions_with_it() {
        let mut s = Sessions::new(10);
        s.step("g", "a", 0, 1, &[(T, 0)], &[]).expect("open");
        s.step("g", "b", 0, 2, &[(T, 0)], &[]).expect("open");
        assert_eq!(
            s.disconnected(1),
            vec![("g".to_string(), "a".to_string(), vec![(T, 0)])]
        );
        assert_eq!(s.len(), 1);
        assert!(s.disconnected(1).is_empty());
    }
}
