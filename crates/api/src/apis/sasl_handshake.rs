//! SaslHandshake: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{serve, Check, Gate};
use crate::{Broker, Reply};

/// SaslHandshake.
pub(crate) struct SaslHandshake;

impl Api for SaslHandshake {
    type Request = SaslHandshakeRequest;

    /// The versions Weir serves: v0 is followed by raw SASL tokens instead of SaslAuthenticate
    /// requests; every client of this decade speaks v1.
    fn versions() -> (i16, i16) {
        (1, super::valid(ApiKey::SaslHandshake).1)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::SaslHandshake(SaslHandshakeResponse::default().with_error_code(code))
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, _check: &Check, r: Self::Request, _v: i16) -> Gate {
        serve(RequestKind::SaslHandshake(r))
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { conn, .. } = *cx;
        now(ResponseKind::SaslHandshake(
            broker.sasl.handshake(request, conn),
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::s;
        use kafka_protocol::messages::*;
        use RequestKind as R;
        vec![
            (
                "a mechanism the listener does not offer",
                R::SaslHandshake(
                    SaslHandshakeRequest::default().with_mechanism(s("SCRAM-SHA-256")),
                ),
            ),
            (
                "an unknown mechanism",
                R::SaslHandshake(SaslHandshakeRequest::default().with_mechanism(s("GSSAPI"))),
            ),
        ]
    }
}
