use super::*;

fn member(name: &str) -> Arc<str> {
    Arc::from(name)
}

fn fresh(limits: Limits, start: i64) -> SharePartition {
    SharePartition::load(
        limits,
        &ShareState {
            state_epoch: 0,
            leader_epoch: 1,
            start_offset: start,
            batches: vec![],
        },
    )
}

fn acq(first: i64, last: i64, count: i16) -> Acquired {
    Acquired {
        first_offset: first,
        last_offset: last,
        delivery_count: count,
    }
}

fn ack(first: i64, last: i64, ty: i8) -> AckBatch {
    AckBatch {
        first_offset: first,
        last_offset: last,
        types: vec![ty],
    }
}

const ACCEPT: i8 = 1;
const RELEASE: i8 = 2;
const REJECT: i8 = 3;

#[test]
fn new_records_are_acquired_once_and_accepted_records_move_the_start() {
    let (a, b) = (member("a"), member("b"));
    let mut p = fresh(Limits::default(), 0);
    assert_eq!(p.acquire(&a, &[(0, 4), (5, 9)], 500, 0), vec![acq(0, 9, 1)]);
    assert_eq!(
        (p.start_offset(), p.end_offset(), p.next_fetch_offset()),
        (0, 10, 10)
    );
    // What a holds is not offered to b.
    assert_eq!(p.acquire(&b, &[(0, 4), (5, 9)], 500, 0), vec![]);
    assert_eq!(p.acknowledge("a", &[ack(0, 4, ACCEPT)]), Ok(true));
    assert_eq!((p.start_offset(), p.in_flight()), (5, 5));
    assert_eq!(p.acknowledge("a", &[ack(5, 9, ACCEPT)]), Ok(true));
    assert_eq!((p.start_offset(), p.in_flight()), (10, 0));
}

#[test]
fn a_released_record_goes_to_the_next_fetch_with_its_count_and_a_rejected_one_never() {
    let (a, b) = (member("a"), member("b"));
    let mut p = fresh(Limits::default(), 0);
    p.acquire(&a, &[(0, 3)], 500, 0);
    let batch = AckBatch {
        first_offset: 0,
        last_offset: 3,
        types: vec![ACCEPT, RELEASE, REJECT, RELEASE],
    };
    assert_eq!(p.acknowledge("a", &[batch]), Ok(true));
    assert_eq!(p.start_offset(), 1);
    assert_eq!(p.next_fetch_offset(), 1);
    // The log is read again from offset 1; offsets 1 and 3 come back, 2 does not.
    assert_eq!(
        p.acquire(&b, &[(0, 3)], 500, 0),
        vec![acq(1, 1, 2), acq(3, 3, 2)]
    );
    assert_eq!(
        p.acknowledge("b", &[ack(1, 1, ACCEPT), ack(3, 3, ACCEPT)]),
        Ok(true)
    );
    assert_eq!((p.start_offset(), p.in_flight()), (4, 0));
}

#[test]
fn a_lock_that_expires_makes_the_record_available_to_others() {
    let (a, b) = (member("a"), member("b"));
    let limits = Limits {
        lock_ms: 1_000,
        ..Limits::default()
    };
    let mut p = fresh(limits, 0);
    p.acquire(&a, &[(0, 1)], 500, 10_000);
    assert_eq!(p.next_deadline(), Some(11_000));
    assert!(!p.expire(10_999));
    assert_eq!(p.acquire(&b, &[(0, 1)], 500, 10_999), vec![]);
    assert!(p.expire(11_000));
    assert_eq!(p.acquire(&b, &[(0, 1)], 500, 11_000), vec![acq(0, 1, 2)]);
    // a's lock is gone: its late acknowledgement is refused and changes nothing.
    assert!(matches!(
        p.acknowledge("a", &[ack(0, 1, ACCEPT)]),
        Err(AckError::InvalidRecordState(_))
    ));
    assert_eq!(p.acknowledge("b", &[ack(0, 1, ACCEPT)]), Ok(true));
    assert_eq!(p.start_offset(), 2);
}

#[test]
fn a_record_is_archived_once_delivered_the_limit_times() {
    let a = member("a");
    let limits = Limits {
        delivery_limit: 3,
        ..Limits::default()
    };
    let mut p = fresh(limits, 0);
    for delivery in 1..=3 {
        assert_eq!(p.acquire(&a, &[(0, 0)], 500, 0), vec![acq(0, 0, delivery)]);
        assert_eq!(p.acknowledge("a", &[ack(0, 0, RELEASE)]), Ok(true));
    }
    assert_eq!(p.acquire(&a, &[(0, 0)], 500, 0), vec![], "archived after 3");
    assert_eq!(p.start_offset(), 1);
    // The same through lock timeouts.
    for delivery in 1..=3 {
        assert_eq!(p.acquire(&a, &[(1, 1)], 500, 0), vec![acq(1, 1, delivery)]);
        assert!(p.expire(u64::MAX));
    }
    assert_eq!(p.start_offset(), 2);
}

#[test]
fn acknowledgements_are_applied_all_or_none() {
    let (a, b) = (member("a"), member("b"));
    let mut p = fresh(Limits::default(), 0);
    p.acquire(&a, &[(0, 4)], 500, 0);
    p.acquire(&b, &[(5, 9)], 500, 0);
    // The second batch names b's records: nothing of the first is applied either.
    assert!(matches!(
        p.acknowledge("a", &[ack(0, 4, ACCEPT), ack(5, 5, ACCEPT)]),
        Err(AckError::InvalidRecordState(_))
    ));
    assert_eq!(p.start_offset(), 0);
    assert!(matches!(
        p.acknowledge("a", &[ack(0, 10, ACCEPT)]),
        Err(AckError::InvalidRecordState(_))
    ));
    assert!(matches!(
        p.acknowledge("a", &[ack(20, 20, ACCEPT)]),
        Err(AckError::InvalidRequest(_))
    ));
    assert_eq!(p.acknowledge("a", &[ack(0, 4, ACCEPT)]), Ok(true));
    // Offsets below the start are done with: skipped, not an error.
    assert_eq!(p.acknowledge("a", &[ack(0, 4, ACCEPT)]), Ok(false));
}

#[test]
fn malformed_acknowledgement_batches_are_invalid_requests() {
    let a = member("a");
    let mut p = fresh(Limits::default(), 0);
    p.acquire(&a, &[(0, 9)], 500, 0);
    let bad = [
        vec![ack(5, 4, ACCEPT)],
        vec![ack(5, 6, ACCEPT), ack(0, 1, ACCEPT)],
        vec![AckBatch {
            first_offset: 0,
            last_offset: 2,
            types: vec![],
        }],
        vec![AckBatch {
            first_offset: 0,
            last_offset: 2,
            types: vec![ACCEPT, ACCEPT],
        }],
        vec![ack(0, 0, 4)],
        vec![ack(0, 0, 5)],
        vec![ack(0, 0, -1)],
    ];
    for batches in bad {
        assert!(
            matches!(
                p.acknowledge("a", &batches),
                Err(AckError::InvalidRequest(_))
            ),
            "{batches:?}"
        );
    }
    assert_eq!(p.in_flight(), 10);
    assert_eq!(p.next_deadline(), Some(30_000), "all still acquired");
}

#[test]
fn the_window_stops_growing_at_the_record_lock_limit() {
    let (a, b) = (member("a"), member("b"));
    let limits = Limits {
        max_record_locks: 10,
        ..Limits::default()
    };
    let mut p = fresh(limits, 0);
    // A batch is taken whole even past the limit; the next one is not.
    assert_eq!(
        p.acquire(&a, &[(0, 5), (6, 11), (12, 15)], 500, 0),
        vec![acq(0, 11, 1)]
    );
    assert!(!p.can_acquire());
    assert_eq!(p.acquire(&b, &[(12, 15)], 500, 0), vec![]);
    // Accepting the first batch makes room.
    assert_eq!(p.acknowledge("a", &[ack(0, 5, ACCEPT)]), Ok(true));
    assert!(p.can_acquire());
    assert_eq!(p.acquire(&b, &[(12, 15)], 500, 0), vec![acq(12, 15, 1)]);
    // A released record inside a full window is offered again.
    assert_eq!(p.acknowledge("a", &[ack(6, 6, RELEASE)]), Ok(true));
    assert_eq!(p.in_flight(), 10);
    assert_eq!(
        p.acquire(&b, &[(6, 11), (12, 15)], 500, 0),
        vec![acq(6, 6, 2)]
    );
}

#[test]
fn max_records_ends_a_fetch_at_a_batch_boundary() {
    let a = member("a");
    let mut p = fresh(Limits::default(), 0);
    assert_eq!(
        p.acquire(&a, &[(0, 2), (3, 5), (6, 8)], 4, 0),
        vec![acq(0, 5, 1)]
    );
    assert_eq!(p.next_fetch_offset(), 6);
}

#[test]
fn offsets_missing_from_the_log_are_archived_as_they_are_passed() {
    let (a, b) = (member("a"), member("b"));
    let mut p = fresh(Limits::default(), 0);
    // Offsets 3..=6 were compacted away.
    assert_eq!(
        p.acquire(&a, &[(0, 2), (7, 9)], 500, 0),
        vec![acq(0, 2, 1), acq(7, 9, 1)]
    );
    assert_eq!(p.acknowledge("a", &[ack(0, 2, ACCEPT)]), Ok(true));
    assert_eq!(p.start_offset(), 7, "the gap does not hold the start back");
    assert_eq!(p.acquire(&b, &[(7, 9)], 500, 0), vec![]);
}

#[test]
fn closing_a_members_session_releases_only_its_records() {
    let (a, b) = (member("a"), member("b"));
    let mut p = fresh(Limits::default(), 0);
    p.acquire(&a, &[(0, 1)], 500, 0);
    p.acquire(&b, &[(2, 3)], 500, 0);
    assert!(p.release("a"));
    assert!(!p.release("a"));
    assert_eq!(p.next_fetch_offset(), 0);
    assert_eq!(p.acquire(&b, &[(0, 1), (2, 3)], 500, 0), vec![acq(0, 1, 2)]);
}

#[test]
fn the_stored_state_brings_back_counts_and_fates_but_no_locks() {
    let (a, b) = (member("a"), member("b"));
    let mut p = fresh(Limits::default(), 100);
    p.acquire(&a, &[(100, 109)], 500, 0);
    let batch = AckBatch {
        first_offset: 100,
        last_offset: 104,
        types: vec![RELEASE, ACCEPT, REJECT, ACCEPT, RELEASE],
    };
    assert_eq!(p.acknowledge("a", &[batch]), Ok(true));
    let stored = p.to_state();
    assert_eq!(stored.start_offset, 100);
    let stored_batches: Vec<_> = stored
        .batches
        .iter()
        .map(|b| (b.first_offset, b.last_offset, b.state, b.delivery_count))
        .collect();
    use DeliveryState::*;
    assert_eq!(
        stored_batches,
        vec![
            (100, 100, Available, 1),
            (101, 101, Acknowledged, 1),
            (102, 102, Archived, 1),
            (103, 103, Acknowledged, 1),
            // 105..=109 are still acquired by a: stored as available, the delivery counted.
            (104, 109, Available, 1),
        ]
    );
    assert_eq!(stored.check(), Ok(()));
    // A new leader: a's locks are gone; everything not final is offered again.
    let mut q = SharePartition::load(Limits::default(), &stored);
    assert_eq!(q.next_deadline(), None);
    assert_eq!((q.start_offset(), q.end_offset()), (100, 110));
    assert_eq!(
        q.acquire(&b, &[(100, 109)], 500, 0),
        vec![acq(100, 100, 2), acq(104, 109, 2)]
    );
    assert_eq!(q.to_state().start_offset, 100);
}

#[test]
fn a_log_start_past_the_start_offset_drops_what_is_below_it() {
    let a = member("a");
    let mut p = fresh(Limits::default(), 0);
    p.acquire(&a, &[(0, 9)], 500, 0);
    assert!(p.move_log_start(5));
    assert!(!p.move_log_start(3));
    assert_eq!((p.start_offset(), p.in_flight()), (5, 5));
    // a's acknowledgement of what is gone is skipped; the rest applies.
    assert_eq!(p.acknowledge("a", &[ack(0, 9, ACCEPT)]), Ok(true));
    assert_eq!((p.start_offset(), p.in_flight()), (10, 0));
    assert!(p.move_log_start(20));
    assert_eq!((p.start_offset(), p.end_offset()), (20, 20));
}

#[test]
fn skipped_batches_are_archived_not_acquired() {
    let a = member("a");
    let mut p = fresh(Limits::default(), 0);
    // An aborted transaction at 3..=5 between two committed batches.
    assert_eq!(
        p.acquire_skipping(&a, &[(0, 2, false), (3, 5, true), (6, 8, false)], 500, 0),
        vec![acq(0, 2, 1), acq(6, 8, 1)]
    );
    assert_eq!(p.acknowledge("a", &[ack(0, 2, ACCEPT)]), Ok(true));
    assert_eq!(p.start_offset(), 6, "the aborted records are done with");
    assert_eq!(p.acknowledge("a", &[ack(6, 8, ACCEPT)]), Ok(true));
    assert_eq!(p.start_offset(), 9);
}

#[test]
fn renew_restarts_a_lock_and_stores_nothing() {
    let a = member("a");
    let limits = Limits {
        lock_ms: 1_000,
        ..Limits::default()
    };
    let mut p = fresh(limits, 0);
    p.acquire(&a, &[(0, 1)], 500, 0);
    assert_eq!(p.acknowledge_at("a", &[ack(0, 1, 4)], true, 900), Ok(false));
    assert_eq!(p.next_deadline(), Some(1_900));
    assert!(!p.expire(1_500), "renewed at 900 for 1 s");
    assert!(matches!(
        p.acknowledge_at("b", &[ack(0, 1, 4)], true, 900),
        Err(AckError::InvalidRecordState(_))
    ));
    assert_eq!(
        p.acknowledge_at("a", &[ack(0, 1, ACCEPT)], true, 1_600),
        Ok(true)
    );
    assert_eq!(p.start_offset(), 2);
}

#[test]
fn the_record_limit_mode_splits_a_batch() {
    let (a, b) = (member("a"), member("b"));
    let mut p = fresh(Limits::default(), 0);
    assert_eq!(
        p.acquire_mode(&a, &[(0, 9, false)], 4, true, 0),
        vec![acq(0, 3, 1)]
    );
    assert_eq!(p.next_fetch_offset(), 4);
    assert_eq!(
        p.acquire_mode(&b, &[(0, 9, false)], 100, true, 0),
        vec![acq(4, 9, 1)]
    );
}
