//! Which zone a client is in.
//!
//! In this order: a tag in its `client.id` (`weir_az=ZONE`, and for drop-in migration the tags
//! of AutoMQ, WarpStream, Aiven's diskless topics and a plain `zone=`), the `RackId` of its
//! fetches (KIP-392's `client.rack`), the zone of the listener it connected to, and the CIDR map
//! kept in the metadata store. A client none of these place is in no zone and is routed as
//! Kafka routes (to the leader).

use std::net::IpAddr;

/// The `client.id` tags that name a zone, most specific first.
const TAGS: [&str; 6] = [
    "weir_az",
    "automq_az",
    "warpstream_az",
    "ws_az",
    "diskless_az",
    "zone",
];

/// The zone a `client.id` names, if any. Tags are `key=value` pairs separated by `,`, `;`, `&`,
/// `|` or spaces anywhere in the id (`app-1,weir_az=use1-az1`), so that an id that also names
/// the application keeps working. The first tag of [`TAGS`]'s order wins.
pub fn zone_from_client_id(client_id: &str) -> Option<&str> {
    if !client_id.contains('=') {
        return None;
    }
    let pairs = || {
        client_id
            .split([',', ';', '&', '|', ' '])
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.trim(), v.trim()))
            .filter(|(_, v)| !v.is_empty())
    };
    TAGS.iter()
        .find_map(|tag| pairs().find(|(k, _)| k.eq_ignore_ascii_case(tag)))
        .map(|(_, v)| v)
}

/// One entry of the CIDR map: addresses in `network/prefix` are in `zone`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CidrZone {
    network: IpAddr,
    prefix: u8,
    pub zone: String,
}

impl CidrZone {
    /// Parses `10.0.1.0/24` (or an address alone, a /32 or /128).
    pub fn parse(cidr: &str, zone: &str) -> Result<CidrZone, String> {
        let (addr, prefix) = match cidr.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (cidr.trim(), None),
        };
        let network: IpAddr = addr
            .parse()
            .map_err(|e| format!("{cidr:?} is not an address or CIDR block: {e}"))?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{cidr:?}: the prefix length must be 0 to {max}"))?,
            None => max,
        };
        if zone.trim().is_empty() {
            return Err(format!("{cidr:?}: the zone is empty"));
        }
        Ok(CidrZone {
            network,
            prefix,
            zone: zone.trim().to_string(),
        })
    }

    pub fn cidr(&self) -> String {
        format!("{}/{}", self.network, self.prefix)
    }

    fn contains(&self, ip: IpAddr) -> bool {
        let bits = |ip: IpAddr| -> Option<u128> {
            match (self.network, ip) {
                (IpAddr::V4(_), IpAddr::V4(a)) => Some(u128::from(u32::from(a)) << 96),
                (IpAddr::V6(_), IpAddr::V6(a)) => Some(u128::from(a)),
                (IpAddr::V4(_), IpAddr::V6(a)) => {
                    a.to_ipv4_mapped().map(|a| u128::from(u32::from(a)) << 96)
                }
                _ => None,
            }
        };
        let (Some(net), Some(addr)) = (bits(self.network), bits(ip)) else {
            return false;
        };
        // IPv4 addresses sit in the top 32 bits, so the prefix counts from the top either way.
        let len = u32::from(self.prefix);
        if len == 0 {
            return true;
        }
        let mask = u128::MAX << (128 - len);
        net & mask == addr & mask
    }
}

/// The key of the CIDR map in the metadata store.
pub const CIDR_MAP_KEY: &str = "zones.cidrs";

/// Parses a CIDR map: one `CIDR ZONE` per line; blank lines and `#` comments are skipped.
pub fn parse_cidr_map(text: &str) -> Result<Vec<CidrZone>, String> {
    let mut map = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(cidr), Some(zone), None) = (words.next(), words.next(), words.next()) else {
            return Err(format!(
                "line {}: expected `CIDR ZONE`, got {line:?}",
                n + 1
            ));
        };
        map.push(CidrZone::parse(cidr, zone).map_err(|e| format!("line {}: {e}", n + 1))?);
    }
    Ok(map)
}

/// The zone of `ip` by the longest matching prefix of `map`.
pub fn zone_of_address(map: &[CidrZone], ip: IpAddr) -> Option<&str> {
    map.iter()
        .filter(|c| c.contains(ip))
        .max_by_key(|c| c.prefix)
        .map(|c| c.zone.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_id_tags_name_the_zone() {
        assert_eq!(zone_from_client_id("weir_az=use1-az1"), Some("use1-az1"));
        assert_eq!(zone_from_client_id("app-7,weir_az=z2"), Some("z2"));
        assert_eq!(zone_from_client_id("automq_az=a;x=y"), Some("a"));
        assert_eq!(zone_from_client_id("svc ws_az=b"), Some("b"));
        assert_eq!(zone_from_client_id("warpstream_az=c"), Some("c"));
        assert_eq!(zone_from_client_id("diskless_az=d"), Some("d"));
        assert_eq!(zone_from_client_id("zone=e"), Some("e"));
        // weir_az wins over the others wherever it stands.
        assert_eq!(zone_from_client_id("zone=e,weir_az=w"), Some("w"));
        assert_eq!(zone_from_client_id("rdkafka"), None);
        assert_eq!(zone_from_client_id("weir_az="), None);
        assert_eq!(zone_from_client_id("myzone=x"), None);
    }

    #[test]
    fn cidr_maps_parse_line_by_line() {
        let map =
            parse_cidr_map("# zones\n10.0.0.0/16 use1-az1\n\n10.1.0.0/16 use1-az2 # b\n").unwrap();
        assert_eq!(map.len(), 2);
        assert_eq!(map[1].zone, "use1-az2");
        assert!(parse_cidr_map("10.0.0.0/16")
            .unwrap_err()
            .contains("line 1"));
        assert!(parse_cidr_map("ok 1 2").is_err());
        assert!(parse_cidr_map("10.0.0.0/40 z")
            .unwrap_err()
            .contains("line 1"));
    }

    #[test]
    fn the_longest_prefix_places_an_address() {
        let map = vec![
            CidrZone::parse("10.0.0.0/8", "wide").unwrap(),
            CidrZone::parse("10.1.0.0/16", "z1").unwrap(),
            CidrZone::parse("fd00::/8", "v6").unwrap(),
            CidrZone::parse("192.168.1.7", "one").unwrap(),
        ];
        let at = |s: &str| zone_of_address(&map, s.parse().unwrap());
        assert_eq!(at("10.1.2.3"), Some("z1"));
        assert_eq!(at("10.2.2.3"), Some("wide"));
        assert_eq!(at("::ffff:10.1.0.9"), Some("z1"));
        assert_eq!(at("fd12::1"), Some("v6"));
        assert_eq!(at("192.168.1.7"), Some("one"));
        assert_eq!(at("192.168.1.8"), None);
        assert!(CidrZone::parse("10.0.0.0/33", "z").is_err());
        assert!(CidrZone::parse("nope/8", "z").is_err());
        assert!(CidrZone::parse("10.0.0.0/8", " ").is_err());
        assert_eq!(
            CidrZone::parse("0.0.0.0/0", "all").unwrap().cidr(),
            "0.0.0.0/0"
        );
        assert_eq!(
            zone_of_address(
                &[CidrZone::parse("0.0.0.0/0", "all").unwrap()],
                "1.2.3.4".parse().unwrap()
            ),
            Some("all")
        );
    }
}
