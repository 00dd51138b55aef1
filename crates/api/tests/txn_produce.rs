//! Transactions V2 produces (Produce v12+: the partition joins its transaction with the
//! batch) when a partition cannot join at first.

mod common;

use common::*;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use weir_api::samples::txn_batch;
use weir_meta::TxnState;

const TXN: &str = "txn-produce-test";

async fn init_producer_id(e: &Env) -> (i64, i16) {
    let r = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(s(TXN))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let ResponseKind::InitProducerId(r) =
        call(e, ApiKey::InitProducerId, 5, RequestKind::InitProducerId(r)).await
    else {
        panic!("not an InitProducerId answer");
    };
    assert_eq!(r.error_code, 0, "InitProducerId");
    (r.producer_id.0, r.producer_epoch)
}

/// A Produce v12 of one transactional batch to partition 1 of TOPIC: its error and base offset.
async fn produce(e: &Env, records: bytes::Bytes) -> (i16, i64) {
    let r = ProduceRequest::default()
        .with_transactional_id(Some(TransactionalId(s(TXN))))
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(topic(TOPIC))
            .with_partition_data(vec![
                produce_request::PartitionProduceData::default()
                    .with_index(1)
                    .with_records(Some(records)),
            ])]);
    let ResponseKind::Produce(r) = call(e, ApiKey::Produce, 12, RequestKind::Produce(r)).await
    else {
        panic!("not a Produce answer");
    };
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

async fn set_state(e: &Env, state: TxnState) {
    let mut r = e
        .meta
        .load_transaction(TXN)
        .await
        .expect("load the transaction")
        .expect("the transaction exists");
    r.state = state;
    r.version = e
        .meta
        .save_transaction(&r)
        .await
        .expect("save the transaction");
}

/// The client pipelines its batches: when the first one's partition cannot join the
/// transaction (here: the last transaction still ending), a later one must not be appended
/// before it, or the first (sent again) never fits after it and the producer is stuck until
/// its transaction times out. The later one is refused as out of order until the first joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_refused_on_joining_its_transaction_is_not_overtaken() {
    let e = env().await;
    open_partition(&e.topics, TOPIC, 1).await;
    let (pid, epoch) = init_producer_id(&e).await;

    set_state(&e, TxnState::PrepareAbort).await;
    let first = txn_batch(pid, epoch, 0, 3);
    let later = txn_batch(pid, epoch, 3, 2);
    let (error, _) = produce(&e, first.clone()).await;
    assert_eq!(
        error,
        ResponseError::NotEnoughReplicas.code(),
        "the first batch while the partition cannot join (retriable)"
    );

    set_state(&e, TxnState::Empty).await;
    let (error, _) = produce(&e, later.clone()).await;
    assert_eq!(
        error,
        ResponseError::OutOfOrderSequenceNumber.code(),
        "the later batch, before the first is in"
    );

    assert_eq!(
        produce(&e, first).await,
        (0, 0),
        "the first batch, sent again"
    );
    assert_eq!(
        produce(&e, later).await,
        (0, 3),
        "the later batch, sent again"
    );
}
