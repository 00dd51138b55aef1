//! The real `weir serve` on a private PostgreSQL (`--metadata-url postgres://...`): topics,
//! the object index and producer state live there, not in SQLite. Records produced before a
//! clean restart are read back from objects after it, and the data directory holds no SQLite
//! file.

mod common;

use common::{consume, produce, value, Broker};
use weir_meta::testing::PgServer;

#[test]
fn a_broker_on_postgres_keeps_its_data_across_a_restart() {
    let pg = PgServer::shared().expect("a private PostgreSQL");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let url = rt
        .block_on(pg.create_database())
        .expect("a database for the test");
    let dir = tempfile::tempdir().expect("temp dir");
    let env = [("WEIR_METADATA_URL", url.as_str())];
    const N: u64 = 2000;

    let b = Broker::start_in(dir.path(), "first", &env);
    produce(&b.bootstrap(), "pg", N);
    b.assert_no_panic();
    b.stop();
    assert!(
        !dir.path().join("data").join("meta.sqlite").exists(),
        "the metadata must be in PostgreSQL, not in SQLite"
    );

    let b = Broker::start_in(dir.path(), "second", &env);
    let got = consume(&b.bootstrap(), "pg", N);
    let want: Vec<String> = (0..N).map(value).collect();
    assert_eq!(got.len(), want.len(), "records read back after the restart");
    assert_eq!(got, want);
    b.stop();
}
