//! SASL through the API layer: SCRAM users made with AlterUserScramCredentials (as a client
//! salts them), then SaslHandshake and SaslAuthenticate on a SASL listener's connection, with
//! SCRAM's two round trips and PLAIN; wrong passwords, unknown users, a handshake for a
//! mechanism the listener does not offer, re-authentication as someone else, and the limit on
//! failures per address.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use weir_api::{Conn, ListenerSecurity, Reply};
use weir_auth::scram::client::Client;
use weir_auth::scram::Mechanism;
use weir_auth::{Principal, SaslMechanism, SecurityProtocol};

mod common;

use common::{env, s, Env};

fn header(key: ApiKey, v: i16) -> RequestHeader {
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(v)
        .with_correlation_id(1)
}

async fn answer(e: &Env, key: ApiKey, v: i16, request: RequestKind, conn: &Conn) -> ResponseKind {
    match e.broker.handle_on(&header(key, v), request, conn).await {
        Reply::Now(r) => *r,
        Reply::Later(f) => f.await,
        _ => panic!("{key:?}: no response"),
    }
}

fn conn(port: u16, reauth_ms: u64) -> Conn {
    Conn::on_listener(
        SocketAddr::from(([10, 0, 0, 1], port)),
        false,
        None,
        Arc::new(ListenerSecurity {
            name: "SASL_PLAINTEXT".into(),
            protocol: SecurityProtocol::SaslPlaintext,
            mechanisms: SaslMechanism::ALL.to_vec(),
            reauth_ms,
            peer_secret: None,
            legacy_peer_hello: false,
        }),
    )
}

/// Creates `user` with `password` for `m`, as a Kafka admin client does (it salts and hashes).
async fn create_user(e: &Env, user: &str, password: &str, m: Mechanism) {
    let salt = b"0123456789abcdef".to_vec();
    let salted = m.salted_password(password.as_bytes(), &salt, 4096);
    let request = AlterUserScramCredentialsRequest::default().with_upsertions(vec![
        alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
            .with_name(s(user))
            .with_mechanism(m.kafka_type())
            .with_iterations(4096)
            .with_salt(Bytes::from(salt))
            .with_salted_password(Bytes::from(salted)),
    ]);
    let ResponseKind::AlterUserScramCredentials(r) = answer(
        e,
        ApiKey::AlterUserScramCredentials,
        0,
        RequestKind::AlterUserScramCredentials(request),
        &Conn::from_host("admin"),
    )
    .await
    else {
        panic!("not an AlterUserScramCredentials response")
    };
    assert_eq!(r.results.len(), 1);
    assert_eq!(
        r.results[0].error_code, 0,
        "{:?}",
        r.results[0].error_message
    );
}

async fn handshake(e: &Env, c: &Conn, mechanism: &str) -> SaslHandshakeResponse {
    let ResponseKind::SaslHandshake(r) = answer(
        e,
        ApiKey::SaslHandshake,
        1,
        RequestKind::SaslHandshake(SaslHandshakeRequest::default().with_mechanism(s(mechanism))),
        c,
    )
    .await
    else {
        panic!("not a SaslHandshake response")
    };
    r
}

async fn authenticate(e: &Env, c: &Conn, bytes: Vec<u8>) -> SaslAuthenticateResponse {
    let ResponseKind::SaslAuthenticate(r) = answer(
        e,
        ApiKey::SaslAuthenticate,
        2,
        RequestKind::SaslAuthenticate(
            SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(bytes)),
        ),
        c,
    )
    .await
    else {
        panic!("not a SaslAuthenticate response")
    };
    r
}

/// A whole SCRAM exchange on `c`; the final response.
async fn scram(
    e: &Env,
    c: &Conn,
    m: Mechanism,
    user: &str,
    password: &str,
) -> SaslAuthenticateResponse {
    let h = handshake(e, c, m.name()).await;
    assert_eq!(h.error_code, 0);
    let client = Client::new(m, user, password, "cnonce-1234");
    let first = authenticate(e, c, client.first()).await;
    if first.error_code != 0 {
        return first;
    }
    let (last, expected) = client.last(&first.auth_bytes).expect("server first");
    let r = authenticate(e, c, last).await;
    if r.error_code == 0 {
        assert_eq!(
            r.auth_bytes.as_ref(),
            expected.as_slice(),
            "the server's signature"
        );
    }
    r
}

#[tokio::test(flavor = "multi_thread")]
async fn scram_and_plain_authenticate_users_made_with_alter_user_scram_credentials() {
    let e = env().await;
    create_user(&e, "alice", "alice-secret", Mechanism::Sha256).await;
    create_user(&e, "bob", "bob-secret", Mechanism::Sha512).await;

    let c = conn(1, 0);
    assert!(
        !c.may_serve(Instant::now()),
        "nothing before authentication"
    );
    let r = scram(&e, &c, Mechanism::Sha256, "alice", "alice-secret").await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    assert_eq!(c.principal(), Some(Principal::user("alice")));
    assert!(c.may_serve(Instant::now()));
    assert!(!c.closing());

    let c = conn(2, 0);
    let r = scram(&e, &c, Mechanism::Sha512, "bob", "bob-secret").await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);

    // PLAIN checks the password against the SCRAM credential, whichever mechanism it is of.
    for (user, password) in [("alice", "alice-secret"), ("bob", "bob-secret")] {
        let c = conn(3, 0);
        assert_eq!(handshake(&e, &c, "PLAIN").await.error_code, 0);
        let r = authenticate(&e, &c, format!("\0{user}\0{password}").into_bytes()).await;
        assert_eq!(r.error_code, 0, "{:?}", r.error_message);
        assert_eq!(c.principal(), Some(Principal::user(user)));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_passwords_and_unknown_users_fail_and_close_the_connection() {
    let e = env().await;
    create_user(&e, "alice", "alice-secret", Mechanism::Sha256).await;
    let failed = ResponseError::SaslAuthenticationFailed.code();

    let c = conn(10, 0);
    let r = scram(&e, &c, Mechanism::Sha256, "alice", "wrong").await;
    assert_eq!(r.error_code, failed);
    assert!(r
        .error_message
        .as_deref()
        .is_some_and(|m| m.contains("invalid credentials")));
    assert!(c.closing() && !c.may_serve(Instant::now()));

    // A user without a credential of that mechanism fails the same way, at the first message.
    let c = conn(11, 0);
    let r = scram(&e, &c, Mechanism::Sha512, "alice", "alice-secret").await;
    assert_eq!(r.error_code, failed);
    let c = conn(12, 0);
    let r = scram(&e, &c, Mechanism::Sha256, "mallory", "x").await;
    assert_eq!(r.error_code, failed);
    assert!(c.closing());

    let c = conn(13, 0);
    assert_eq!(handshake(&e, &c, "PLAIN").await.error_code, 0);
    let r = authenticate(&e, &c, b"\0alice\0wrong".to_vec()).await;
    assert_eq!(r.error_code, failed);
    assert_eq!(c.principal(), None);

    // SaslAuthenticate without a handshake first.
    let c = conn(14, 0);
    let r = authenticate(&e, &c, b"n,,n=alice,r=x".to_vec()).await;
    assert_eq!(r.error_code, ResponseError::IllegalSaslState.code());
    assert!(c.closing());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mechanism_not_offered_is_refused_with_the_ones_that_are() {
    let e = env().await;
    let c = Conn::on_listener(
        SocketAddr::from(([10, 0, 0, 2], 1)),
        false,
        None,
        Arc::new(ListenerSecurity {
            name: "SASL_SSL".into(),
            protocol: SecurityProtocol::SaslSsl,
            mechanisms: vec![SaslMechanism::Scram(Mechanism::Sha512)],
            reauth_ms: 0,
            peer_secret: None,
            legacy_peer_hello: false,
        }),
    );
    for wanted in ["PLAIN", "SCRAM-SHA-256", "GSSAPI"] {
        let r = handshake(&e, &c, wanted).await;
        assert_eq!(
            r.error_code,
            ResponseError::UnsupportedSaslMechanism.code(),
            "{wanted}"
        );
        let offered: Vec<&str> = r.mechanisms.iter().map(|m| m.as_str()).collect();
        assert_eq!(offered, ["SCRAM-SHA-512"]);
    }
    // On a listener without SASL, the SASL requests are out of place.
    let plain = Conn::from_host("10.0.0.3");
    let r = handshake(&e, &plain, "SCRAM-SHA-512").await;
    assert_eq!(r.error_code, ResponseError::IllegalSaslState.code());
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_end_after_the_reauthentication_time_and_reauthentication_keeps_the_principal() {
    let e = env().await;
    create_user(&e, "alice", "alice-secret", Mechanism::Sha256).await;
    create_user(&e, "bob", "bob-secret", Mechanism::Sha256).await;
    let c = conn(20, 60_000);
    let r = scram(&e, &c, Mechanism::Sha256, "alice", "alice-secret").await;
    assert_eq!(r.error_code, 0);
    assert_eq!(
        r.session_lifetime_ms, 60_000,
        "KIP-368: the client is told when to re-authenticate"
    );
    assert!(c.may_serve(Instant::now()));
    assert!(
        !c.may_serve(Instant::now() + Duration::from_secs(61)),
        "the session ends"
    );

    // Re-authenticating as the same user renews the session...
    let r = scram(&e, &c, Mechanism::Sha256, "alice", "alice-secret").await;
    assert_eq!(r.error_code, 0);
    // ...as another user fails: a connection's principal does not change.
    let r = scram(&e, &c, Mechanism::Sha256, "bob", "bob-secret").await;
    assert_eq!(r.error_code, ResponseError::SaslAuthenticationFailed.code());
    assert!(c.closing());
    assert_eq!(c.principal(), Some(Principal::user("alice")));
}

/// A password rotation: a stale client keeps failing from the same address, far more than ten
/// times; the new password is never refused, over SCRAM or PLAIN. (A lockout by address and
/// user refused it before, for a minute after every ten failures.)
#[tokio::test(flavor = "multi_thread")]
async fn a_right_password_is_never_refused_after_failures_from_its_address() {
    let e = env().await;
    create_user(&e, "alice", "old-secret", Mechanism::Sha512).await;
    create_user(&e, "alice", "new-secret", Mechanism::Sha512).await;
    let plain = |c: Conn, password: &'static str| {
        let e = &e;
        async move {
            assert_eq!(handshake(e, &c, "PLAIN").await.error_code, 0);
            authenticate(e, &c, format!("\0alice\0{password}").into_bytes()).await
        }
    };
    for i in 0..30 {
        let r = scram(
            &e,
            &conn(100 + i, 0),
            Mechanism::Sha512,
            "alice",
            "old-secret",
        )
        .await;
        assert_eq!(r.error_code, ResponseError::SaslAuthenticationFailed.code());
        let r = plain(conn(300 + i, 0), "old-secret").await;
        assert_eq!(r.error_code, ResponseError::SaslAuthenticationFailed.code());
    }
    let r = scram(&e, &conn(200, 0), Mechanism::Sha512, "alice", "new-secret").await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let r = plain(conn(201, 0), "new-secret").await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let m = &e.broker.sasl.meters;
    assert_eq!(m.refused.get(), 0);
    // The stale PLAIN password was checked once; its 29 retries were answered from memory.
    assert_eq!(
        m.password_checks.get(),
        2,
        "old-secret once, new-secret once"
    );
}

/// A PLAIN guesser from one address gets its budget of checks (a burst, then ten a second,
/// waiting its turn), and past five seconds of waiting its attempts fail unchecked; another
/// address's right password goes on meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a_plain_guesser_gets_its_budget_of_checks_and_no_more() {
    use weir_auth::checks::{MAX_WAIT, PER_ADDRESS_BURST, PER_ADDRESS_RATE};
    let e = env().await;
    create_user(&e, "alice", "alice-secret", Mechanism::Sha256).await;
    let e = Arc::new(e);
    let guesses =
        PER_ADDRESS_BURST as u16 + (PER_ADDRESS_RATE * MAX_WAIT.as_secs_f64()) as u16 + 10;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..guesses {
        let e = Arc::clone(&e);
        tasks.spawn(async move {
            let c = conn(1000 + i, 0);
            assert_eq!(handshake(&e, &c, "PLAIN").await.error_code, 0);
            authenticate(&e, &c, format!("\0alice\0guess-{i}").into_bytes()).await
        });
    }
    // Another address, while the guesses wait their turns.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let other = Conn::on_listener(
        SocketAddr::from(([10, 9, 9, 9], 1)),
        false,
        None,
        Arc::clone(&conn(0, 0).listener),
    );
    assert_eq!(handshake(&e, &other, "PLAIN").await.error_code, 0);
    let r = authenticate(&e, &other, b"\0alice\0alice-secret".to_vec()).await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    while let Some(r) = tasks.join_next().await {
        let r = r.expect("task");
        assert_eq!(r.error_code, ResponseError::SaslAuthenticationFailed.code());
    }
    let m = &e.broker.sasl.meters;
    assert!(m.refused.get() >= 9, "refused {}", m.refused.get());
    assert!(m.password_checks.get() <= u64::from(guesses) - 9 + 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn alter_user_scram_credentials_checks_each_user_as_kafka_does() {
    let e = env().await;
    create_user(&e, "alice", "pw", Mechanism::Sha256).await;
    let up = |name: &str, mechanism: i8, iterations: i32| {
        alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
            .with_name(s(name))
            .with_mechanism(mechanism)
            .with_iterations(iterations)
            .with_salt(Bytes::from_static(b"salt"))
            .with_salted_password(Bytes::from_static(&[1; 32]))
    };
    let del = |name: &str, mechanism: i8| {
        alter_user_scram_credentials_request::ScramCredentialDeletion::default()
            .with_name(s(name))
            .with_mechanism(mechanism)
    };
    let request = AlterUserScramCredentialsRequest::default()
        .with_upsertions(vec![
            up("few", 1, 1000),
            up("many", 1, 20_000),
            up("mech", 9, 4096),
            up("twice", 1, 4096),
            up("carol", 2, 4096),
            up("", 1, 4096),
        ])
        .with_deletions(vec![del("twice", 1), del("ghost", 1), del("alice", 1)]);
    let ResponseKind::AlterUserScramCredentials(r) = answer(
        &e,
        ApiKey::AlterUserScramCredentials,
        0,
        RequestKind::AlterUserScramCredentials(request),
        &Conn::from_host("admin"),
    )
    .await
    else {
        panic!("not an AlterUserScramCredentials response")
    };
    let code = |user: &str| {
        r.results
            .iter()
            .find(|x| x.user.as_str() == user)
            .map(|x| x.error_code)
            .unwrap_or_else(|| panic!("no result for {user:?}"))
    };
    assert_eq!(code("few"), ResponseError::UnacceptableCredential.code());
    assert_eq!(code("many"), ResponseError::UnacceptableCredential.code());
    assert_eq!(code("mech"), ResponseError::UnsupportedSaslMechanism.code());
    assert_eq!(code("twice"), ResponseError::DuplicateResource.code());
    assert_eq!(code("ghost"), ResponseError::ResourceNotFound.code());
    assert_eq!(code(""), ResponseError::UnacceptableCredential.code());
    assert_eq!(code("carol"), 0);
    assert_eq!(code("alice"), 0);

    let ResponseKind::DescribeUserScramCredentials(d) = answer(
        &e,
        ApiKey::DescribeUserScramCredentials,
        0,
        RequestKind::DescribeUserScramCredentials(DescribeUserScramCredentialsRequest::default()),
        &Conn::from_host("admin"),
    )
    .await
    else {
        panic!("not a DescribeUserScramCredentials response")
    };
    let users: Vec<(&str, Vec<(i8, i32)>)> = d
        .results
        .iter()
        .map(|u| {
            (
                u.user.as_str(),
                u.credential_infos
                    .iter()
                    .map(|c| (c.mechanism, c.iterations))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        users,
        vec![("carol", vec![(2, 4096)])],
        "alice's one credential was deleted"
    );
}
