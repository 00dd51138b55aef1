//! The subject of a client certificate, as Kafka names an mTLS principal: with the default
//! `ssl.principal.mapping.rules`, `User:` followed by the subject's distinguished name as Java's
//! `X500Principal.getName()` prints it (RFC 2253: the last RDN first, `CN=client,O=Weir,C=DE`).
//!
//! Only the few DER structures on the way to the subject are read, so that no X.509 library
//! is needed: rustls has already checked the certificate's chain and validity.

/// One DER element: its tag, its contents, and what follows it.
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |a, &b| (a << 8) | b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;

/// The subject distinguished name of a DER certificate, in RFC 2253 form; `None` if the bytes
/// are not a certificate.
pub fn subject_name(cert: &[u8]) -> Option<String> {
    let (SEQUENCE, certificate, _) = element(cert)? else {
        return None;
    };
    let (SEQUENCE, tbs, _) = element(certificate)? else {
        return None;
    };
    let mut rest = tbs;
    // version [0] EXPLICIT, optional; serial, signature algorithm, issuer, validity; subject.
    let (tag, _, after) = element(rest)?;
    if tag == 0xa0 {
        rest = after;
    }
    for _ in 0..4 {
        rest = element(rest)?.2;
    }
    let (SEQUENCE, name, _) = element(rest)? else {
        return None;
    };
    let mut rdns = Vec::new();
    let mut rest = name;
    while !rest.is_empty() {
        let (SET, set, after) = element(rest)? else {
            return None;
        };
        rest = after;
        let mut attributes = Vec::new();
        let mut inner = set;
        while !inner.is_empty() {
            let (SEQUENCE, atv, after) = element(inner)? else {
                return None;
            };
            inner = after;
            let (OID, oid, value) = element(atv)? else {
                return None;
            };
            attributes.push(attribute(oid, value)?);
        }
        rdns.push(attributes.join("+"));
    }
    rdns.reverse();
    Some(rdns.join(","))
}

/// `TYPE=value`: a keyword of RFC 2253 with its string escaped, or else the dotted OID with the
/// value's DER in hex, as Java prints them.
fn attribute(oid: &[u8], value: &[u8]) -> Option<String> {
    let keyword = match oid {
        [0x55, 0x04, 0x03] => Some("CN"),
        [0x55, 0x04, 0x06] => Some("C"),
        [0x55, 0x04, 0x07] => Some("L"),
        [0x55, 0x04, 0x08] => Some("ST"),
        [0x55, 0x04, 0x09] => Some("STREET"),
        [0x55, 0x04, 0x0a] => Some("O"),
        [0x55, 0x04, 0x0b] => Some("OU"),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19] => Some("DC"),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01] => Some("UID"),
        _ => None,
    };
    let (tag, text, _) = element(value)?;
    let text = match tag {
        // UTF8String, PrintableString, IA5String, TeletexString (read as Latin-1 by most).
        0x0c | 0x13 | 0x16 => std::str::from_utf8(text).ok().map(str::to_string),
        0x14 => Some(text.iter().map(|&b| b as char).collect()),
        // BMPString: UTF-16BE.
        0x1e if text.len() % 2 == 0 => {
            let units: Vec<u16> = text
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    };
    match (keyword, text) {
        (Some(k), Some(t)) => Some(format!("{k}={}", escape(&t))),
        _ => {
            let hex: String = value.iter().map(|b| format!("{b:02x}")).collect();
            Some(format!("{}=#{hex}", dotted(oid)?))
        }
    }
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let last = s.chars().count().saturating_sub(1);
    for (i, c) in s.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn dotted(oid: &[u8]) -> Option<String> {
    let (&first, rest) = oid.split_first()?;
    let mut parts = vec![(first / 40) as u64, (first % 40) as u64];
    let mut acc = 0u64;
    for &b in rest {
        acc = (acc << 7) | (b & 0x7f) as u64;
        if b & 0x80 == 0 {
            parts.push(acc);
            acc = 0;
        }
    }
    Some(
        parts
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join("."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DER TLV (short or long length).
    fn tlv(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        if body.len() < 0x80 {
            v.push(body.len() as u8);
        } else {
            v.push(0x82);
            v.extend_from_slice(&(body.len() as u16).to_be_bytes());
        }
        v.extend_from_slice(body);
        v
    }

    fn rdn(oid: &[u8], tag: u8, value: &str) -> Vec<u8> {
        let atv = [tlv(OID, oid), tlv(tag, value.as_bytes())].concat();
        tlv(SET, &tlv(SEQUENCE, &atv))
    }

    fn cert(subject: &[u8]) -> Vec<u8> {
        let tbs = [
            tlv(0xa0, &tlv(0x02, &[2])),
            tlv(0x02, &[1, 2, 3]),
            tlv(SEQUENCE, &tlv(OID, &[0x2a, 0x86, 0x48])),
            tlv(SEQUENCE, &rdn(&[0x55, 4, 3], 0x0c, "Issuer CA")),
            tlv(
                SEQUENCE,
                &[tlv(0x17, b"250101000000Z"), tlv(0x17, b"350101000000Z")].concat(),
            ),
            tlv(SEQUENCE, subject),
            tlv(SEQUENCE, &vec![0u8; 300]),
        ]
        .concat();
        tlv(
            SEQUENCE,
            &[tlv(SEQUENCE, &tbs), tlv(SEQUENCE, &[]), tlv(0x03, &[0])].concat(),
        )
    }

    #[test]
    fn the_subject_prints_as_javas_rfc_2253_name() {
        let subject = [
            rdn(&[0x55, 4, 6], 0x13, "DE"),
            rdn(&[0x55, 4, 10], 0x0c, "Weir, Inc."),
            rdn(&[0x55, 4, 3], 0x0c, "client-1"),
        ]
        .concat();
        assert_eq!(
            subject_name(&cert(&subject)).as_deref(),
            Some("CN=client-1,O=Weir\\, Inc.,C=DE")
        );
    }

    #[test]
    fn unknown_attributes_print_as_oid_and_hex() {
        let email = [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01];
        let subject = [rdn(&email, 0x16, "a@b"), rdn(&[0x55, 4, 3], 0x0c, "x")].concat();
        assert_eq!(
            subject_name(&cert(&subject)).as_deref(),
            Some("CN=x,1.2.840.113549.1.9.1=#1603614062")
        );
    }

    #[test]
    fn garbage_is_not_a_certificate() {
        for bad in [
            &b""[..],
            b"\x30",
            b"\x30\x05abc",
            b"\x30\x84\xff\xff\xff\xff",
            b"\x04\x00",
        ] {
            assert_eq!(subject_name(bad), None, "{bad:?}");
        }
        let mut c = cert(&rdn(&[0x55, 4, 3], 0x0c, "x"));
        c.truncate(c.len() / 2);
        assert_eq!(subject_name(&c), None);
    }
}
