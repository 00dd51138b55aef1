//! SaslAuthenticate: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{serve, Check, Gate};
use crate::{Broker, Reply};

/// SaslAuthenticate.
pub(crate) struct SaslAuthenticate;

impl Api for SaslAuthenticate {
    type Request = SaslAuthenticateRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::SaslAuthenticate)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::SaslAuthenticate(SaslAuthenticateResponse::default().with_error_code(code))
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, _check: &Check, r: Self::Request, _v: i16) -> Gate {
        serve(RequestKind::SaslAuthenticate(r))
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { conn, v, .. } = *cx;
        let done = broker
            .sasl
            .authenticate(&*broker.meta, request, v, conn)
            .await;
        match done.delay {
            None => now(ResponseKind::SaslAuthenticate(done.response)),
            // The failure's answer waits without holding up the broker.
            Some(d) => Reply::Later(Box::pin(async move {
                tokio::time::sleep(d).await;
                ResponseKind::SaslAuthenticate(done.response)
            })),
        }
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use bytes::Bytes;
        use kafka_protocol::messages::*;
        use RequestKind as R;
        vec![(
            "without a handshake",
            R::SaslAuthenticate(
                SaslAuthenticateRequest::default()
                    .with_auth_bytes(Bytes::from_static(b"n,,n=u,r=x")),
            ),
        )]
    }
}
