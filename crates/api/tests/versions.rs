//! Every API Weir advertises, at every version it advertises: its module's sample requests
//! (`Api::samples`: topics that exist and that do not, real record batches for the data APIs,
//! fields a version lacks left at their defaults) go through `Broker::handle` on a real engine, and each response must encode
//! at the request's version, as a client of that version would receive it. The error response
//! that stands in for a failed handler (`weir_api::error_response`) must encode at every version
//! too, and carry UNKNOWN_SERVER_ERROR.

use std::time::Duration;

use bytes::BytesMut;
use kafka_protocol::messages::*;
use weir_api::{encode_response, error_response, supported_versions, Reply};

mod common;

use common::{env, s};

/// Encodes `request` at `v` and decodes it back: what the broker sees from a client of that
/// version. Fails if the request sets a field the version lacks (a mistake of this test).
fn as_sent(key: ApiKey, v: i16, request: &RequestKind) -> Result<RequestKind, String> {
    let mut buf = BytesMut::new();
    request
        .encode(&mut buf, v)
        .map_err(|e| format!("the test's request does not encode: {e}"))?;
    RequestKind::decode(key, &mut buf.freeze(), v)
        .map_err(|e| format!("the test's request does not decode: {e}"))
}

fn decode_response(key: ApiKey, v: i16, bytes: BytesMut) -> Result<ResponseKind, String> {
    let mut b = bytes.freeze();
    // Length prefix, then the response header.
    let _len = bytes::Buf::get_i32(&mut b);
    ResponseHeader::decode(&mut b, key.response_header_version(v))
        .map_err(|e| format!("response header: {e}"))?;
    let r = ResponseKind::decode(key, &mut b, v).map_err(|e| format!("response body: {e}"))?;
    if bytes::Buf::has_remaining(&b) {
        return Err("trailing bytes after the response".into());
    }
    Ok(r)
}

use kafka_protocol::protocol::Decodable;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_answers_at_every_advertised_version() {
    let e = env().await;
    let mut failures = Vec::new();
    let mut checked = 0;
    for key in ApiKey::iter() {
        let Some((min, max)) = supported_versions(key) else {
            continue;
        };
        for v in min..=max {
            let samples = weir_api::samples::Samples {
                topics: &e.topics,
                topic_id: e.topic_id,
            };
            let requests = weir_api::samples_of(key, &samples, v)
                .await
                .unwrap_or_else(|| panic!("{key:?} is advertised but has no samples"));
            for (label, request) in requests {
                let what = format!("{key:?} v{v} ({label})");
                let request = match as_sent(key, v, &request) {
                    Ok(r) => r,
                    Err(err) => {
                        failures.push(format!("{what}: {err}"));
                        continue;
                    }
                };
                let header = RequestHeader::default()
                    .with_request_api_key(key as i16)
                    .with_request_api_version(v)
                    .with_correlation_id(7)
                    .with_client_id(Some(s("versions-test")));

                // The fallback answer for this request must encode at this version too.
                match error_response(&header, &request) {
                    None => failures.push(format!("{what}: no error response")),
                    Some(r) => match encode_response(&header, &r)
                        .map_err(|e| e.to_string())
                        .and_then(|b| decode_response(key, v, b.contiguous()))
                    {
                        Err(err) => failures.push(format!("{what}: error response: {err}")),
                        Ok(decoded) => {
                            let text = format!("{decoded:?}");
                            let names_nothing = matches!(
                                &request,
                                RequestKind::Metadata(m) if m.topics.as_ref().is_none_or(|t| t.is_empty())
                            );
                            if !text.contains("error_code: -1") && !names_nothing {
                                failures.push(format!(
                                    "{what}: error response carries no UNKNOWN_SERVER_ERROR: {text}"
                                ));
                            }
                        }
                    },
                }

                let reply = e.broker.handle(&header, request, "127.0.0.1").await;
                let response = match reply {
                    Reply::Now(r) => *r,
                    Reply::Later(f) => match tokio::time::timeout(Duration::from_secs(60), f).await
                    {
                        Ok(r) => r,
                        Err(_) => {
                            failures.push(format!("{what}: no answer"));
                            continue;
                        }
                    },
                    Reply::Silent(_) => {
                        failures.push(format!("{what}: no response"));
                        continue;
                    }
                    Reply::Unsupported => {
                        failures.push(format!("{what}: advertised but unsupported"));
                        continue;
                    }
                };
                checked += 1;
                match encode_response(&header, &response) {
                    Err(err) => failures.push(format!("{what}: {err}")),
                    Ok(bytes) => {
                        if let Err(err) = decode_response(key, v, bytes.contiguous()) {
                            failures.push(format!("{what}: {err}"));
                        }
                    }
                }
            }
        }
    }
    e.topics.close().await;
    e.engine.close().await.expect("close the engine");
    assert!(checked > 150, "only {checked} requests checked");
    assert!(
        failures.is_empty(),
        "{} of {checked} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
