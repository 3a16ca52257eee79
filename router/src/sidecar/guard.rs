//! The SSRF guard: which prefill hosts the sidecar may call.
//!
//! `x-prefiller-host-port` is written by whoever sends the request, so without a guard the
//! sidecar would POST to any address a client names, from inside the cluster. The rules:
//!
//! - The header is parsed strictly ([`PrefillTarget`]): `IPv4:PORT`, `[IPv6]:PORT` or
//!   `dns-name:PORT`, port 1-65535; anything else is malformed (400). Unspecified, multicast
//!   and broadcast addresses are malformed too: they never name a prefill pod, and `0.0.0.0`
//!   would reach this very pod.
//! - An IP literal is allowed when a CIDR of the [`AllowList`] contains it and its port is a
//!   serving port ([`CidrPorts`]: by default the ports of this pod's own layout, the local
//!   engine's and the sidecar's, since prefill pods run the same engine; `--prefill-port` names
//!   others), or when it is listed exactly (`--prefill-host`). A CIDR alone would let a client
//!   reach every port of every pod in it (kubelets, admin ports, databases) and tell open ports
//!   from closed ones. IPv4-mapped IPv6 addresses count as their IPv4.
//! - A name is allowed only when listed exactly, port included. Names are never resolved to
//!   be matched against CIDRs: what a name resolves to can change between the check and the
//!   connection (DNS rebinding), so only the operator's own list vouches for one.
//! - An empty allow list allows nothing.
//!
//! The list is a plain value so that its source can change: today the flags build it once;
//! a Kubernetes watch of the prefill pools' pod IPs would build one per change and publish it
//! through [`super::SidecarHandle::set_allow_list`].

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// A prefill host as named by `x-prefiller-host-port` or `--prefill-host`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PrefillHost {
    /// Canonical: an IPv4-mapped IPv6 address is stored as its IPv4.
    Ip(IpAddr),
    /// Lower case (DNS names compare case-insensitively).
    Name(String),
}

/// `HOST:PORT`, parsed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PrefillTarget {
    pub host: PrefillHost,
    pub port: u16,
}

/// Why a prefill host cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("`{0}` is not HOST:PORT")]
    NoPort(String),
    #[error("`{0}`: the port must be a number from 1 to 65535")]
    BadPort(String),
    #[error("`{0}`: the host is neither an IP address (IPv6 in brackets) nor a DNS name")]
    BadHost(String),
    #[error("`{0}`: not a unicast address")]
    NotUnicast(String),
    #[error("the header is given more than once")]
    Several,
    #[error("the header is not printable ASCII")]
    NotText,
}

impl FromStr for PrefillTarget {
    type Err = TargetError;

    fn from_str(s: &str) -> Result<Self, TargetError> {
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (ip, after) = rest
                .split_once(']')
                .ok_or_else(|| TargetError::BadHost(s.to_owned()))?;
            let ip: Ipv6Addr = ip.parse().map_err(|_| TargetError::BadHost(s.to_owned()))?;
            let port = after
                .strip_prefix(':')
                .ok_or_else(|| TargetError::NoPort(s.to_owned()))?;
            (PrefillHost::Ip(IpAddr::V6(ip)), port)
        } else {
            let (host, port) = s
                .rsplit_once(':')
                .ok_or_else(|| TargetError::NoPort(s.to_owned()))?;
            if let Ok(ip) = host.parse::<Ipv4Addr>() {
                (PrefillHost::Ip(IpAddr::V4(ip)), port)
            } else if is_dns_name(host) {
                (PrefillHost::Name(host.to_ascii_lowercase()), port)
            } else {
                // Bare IPv6 (colons without brackets), userinfo (`user@host`), spaces, ...
                return Err(TargetError::BadHost(s.to_owned()));
            }
        };
        // `u16::from_str` takes a leading `+`; a port is digits only.
        let port =
            if !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit()) {
                port.parse::<u16>().ok().filter(|p| *p != 0)
            } else {
                None
            }
            .ok_or_else(|| TargetError::BadPort(s.to_owned()))?;
        let host = match host {
            PrefillHost::Ip(ip) => {
                let ip = ip.to_canonical();
                if !is_unicast(ip) {
                    return Err(TargetError::NotUnicast(s.to_owned()));
                }
                PrefillHost::Ip(ip)
            }
            name => name,
        };
        Ok(PrefillTarget { host, port })
    }
}

impl fmt::Display for PrefillTarget {
    /// As an URI authority: IPv6 in brackets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            PrefillHost::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]:{}", self.port),
            PrefillHost::Ip(IpAddr::V4(ip)) => write!(f, "{ip}:{}", self.port),
            PrefillHost::Name(name) => write!(f, "{name}:{}", self.port),
        }
    }
}

impl PrefillTarget {
    /// The prefill host a request names: `None` without the header (or with an empty one, as
    /// llm-d's sidecar treats it), an error when it is malformed or given twice.
    pub fn from_header(
        values: http::header::GetAll<'_, http::HeaderValue>,
    ) -> Result<Option<Self>, TargetError> {
        let mut values = values.iter();
        let Some(value) = values.next() else {
            return Ok(None);
        };
        if values.next().is_some() {
            return Err(TargetError::Several);
        }
        let text = value.to_str().map_err(|_| TargetError::NotText)?.trim();
        if text.is_empty() {
            return Ok(None);
        }
        text.parse().map(Some)
    }
}

fn is_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => !(v4.is_unspecified() || v4.is_multicast() || v4.is_broadcast()),
        IpAddr::V6(v6) => !(v6.is_unspecified() || v6.is_multicast()),
    }
}

/// RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens, at most 63
/// bytes each and 253 in all. The last label may not be all digits, so that `127.1` or
/// `10.0.0.300` (which some resolvers read as addresses) are not names either.
fn is_dns_name(s: &str) -> bool {
    if s.is_empty() || s.len() > 253 {
        return false;
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    s.split('.').all(label_ok)
        && !s
            .rsplit('.')
            .next()
            .is_some_and(|last| last.bytes().all(|b| b.is_ascii_digit()))
}

/// An IP network, `10.0.0.0/8` or `fd00::/8`; a bare address is a single host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    /// Host bits cleared.
    net: IpAddr,
    prefix: u8,
}

/// Why a CIDR cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    #[error("`{0}`: not an IP address")]
    Address(String),
    #[error("`{0}`: the prefix length must be a number up to 32 (IPv4) or 128 (IPv6)")]
    Prefix(String),
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, CidrError> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let ip: IpAddr = addr.parse().map_err(|_| CidrError::Address(s.to_owned()))?;
        let bits = if ip.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= bits)
                .ok_or_else(|| CidrError::Prefix(s.to_owned()))?,
            Some(_) => return Err(CidrError::Prefix(s.to_owned())),
        };
        // `::ffff:10.0.0.0/104` is `10.0.0.0/8`: targets are matched in canonical form.
        let (ip, prefix) = match ip {
            IpAddr::V6(v6) if prefix >= 96 => match v6.to_ipv4_mapped() {
                Some(v4) => (IpAddr::V4(v4), prefix - 96),
                None => (ip, prefix),
            },
            _ => (ip, prefix),
        };
        // Host bits are dropped (`10.1.2.3/16` is `10.1.0.0/16`), as `ip route` reads it.
        let net = match ip {
            IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask32(prefix))),
            IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask128(prefix))),
        };
        Ok(Cidr { net, prefix })
    }
}

fn mask32(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask128(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

impl Cidr {
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                u32::from(ip) & mask32(self.prefix) == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                u128::from(ip) & mask128(self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }

    /// The prefix length (0: every address of the family).
    pub fn prefix(&self) -> u8 {
        self.prefix
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.prefix)
    }
}

/// The ports an address allowed by a CIDR may be called on (an exact `--prefill-host` entry
/// names its own).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum CidrPorts {
    /// The serving ports of this pod's layout (the local engine's and the sidecar's listen
    /// port), which [`super::start`] fills in: prefill pods run the same engine on the same
    /// port, or the same sidecar in front of it.
    #[default]
    Serving,
    /// Exactly these (`--prefill-port`).
    Listed(Vec<u16>),
    /// Every port (`--prefill-port any`): the operator says every port of the networks serves
    /// prefills.
    Any,
}

/// Why `--prefill-port` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortsError {
    #[error("`{0}`: a port is a number from 1 to 65535, or `any`")]
    Port(String),
    #[error("`any` allows every port: it cannot be given with ports")]
    AnyWithPorts,
}

impl CidrPorts {
    /// From `--prefill-port` values: none is [`Self::Serving`], `any` alone is [`Self::Any`].
    pub fn from_flags(values: &[String]) -> Result<Self, PortsError> {
        if values.is_empty() {
            return Ok(Self::Serving);
        }
        if values.iter().any(|v| v.trim() == "any") {
            return if values.len() == 1 {
                Ok(Self::Any)
            } else {
                Err(PortsError::AnyWithPorts)
            };
        }
        values
            .iter()
            .map(|v| {
                let v = v.trim();
                v.bytes()
                    .all(|b| b.is_ascii_digit())
                    .then(|| v.parse::<u16>().ok())
                    .flatten()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| PortsError::Port(v.to_owned()))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Self::Listed)
    }
}

/// The prefill hosts the sidecar may call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    cidrs: Vec<Cidr>,
    hosts: Vec<PrefillTarget>,
    ports: CidrPorts,
}

impl AllowList {
    /// `cidrs`: IP literals in these networks, on the serving ports ([`CidrPorts::Serving`];
    /// see [`Self::on_ports`]). `hosts`: exactly these `HOST:PORT`.
    pub fn new(cidrs: Vec<Cidr>, hosts: Vec<PrefillTarget>) -> Self {
        Self {
            cidrs,
            hosts,
            ports: CidrPorts::Serving,
        }
    }

    /// The ports the CIDRs' addresses may be called on.
    pub fn on_ports(mut self, ports: CidrPorts) -> Self {
        self.ports = ports;
        self
    }

    /// [`CidrPorts::Serving`] made concrete: these ports.
    pub(crate) fn serving_on(mut self, serving: &[u16]) -> Self {
        if self.ports == CidrPorts::Serving {
            let mut ports = serving.to_vec();
            ports.sort_unstable();
            ports.dedup();
            self.ports = CidrPorts::Listed(ports);
        }
        self
    }

    pub fn ports(&self) -> &CidrPorts {
        &self.ports
    }

    /// Nothing is allowed.
    pub fn is_empty(&self) -> bool {
        self.cidrs.is_empty() && self.hosts.is_empty()
    }

    pub fn cidrs(&self) -> &[Cidr] {
        &self.cidrs
    }

    pub fn allows(&self, target: &PrefillTarget) -> bool {
        let port_serves = match &self.ports {
            CidrPorts::Any => true,
            CidrPorts::Listed(ports) => ports.contains(&target.port),
            // Not yet made concrete: no port is known to serve.
            CidrPorts::Serving => false,
        };
        self.hosts.contains(target)
            || match target.host {
                PrefillHost::Ip(ip) => port_serves && self.cidrs.iter().any(|c| c.contains(ip)),
                PrefillHost::Name(_) => false,
            }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> PrefillTarget {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn targets_parse_strictly() {
        assert_eq!(
            t("10.1.2.3:8000"),
            PrefillTarget {
                host: PrefillHost::Ip("10.1.2.3".parse().unwrap()),
                port: 8000
            }
        );
        assert_eq!(t("[fd00::1]:80").to_string(), "[fd00::1]:80");
        // IPv4-mapped IPv6 is its IPv4.
        assert_eq!(t("[::ffff:10.0.0.1]:80").to_string(), "10.0.0.1:80");
        assert_eq!(
            t("Prefill-0.NS.svc:8000").to_string(),
            "prefill-0.ns.svc:8000"
        );
        for bad in [
            "10.0.0.1",
            "10.0.0.1:",
            "10.0.0.1:0",
            "10.0.0.1:65536",
            "10.0.0.1:+80",
            "10.0.0.1:80/x",
            ":80",
            "fd00::1:80",
            "[fd00::1]80",
            "[fd00::1:80",
            "[fe80::1%eth0]:80",
            "user@host:80",
            "a b:80",
            "host/x:80",
            "-bad:80",
            "127.1:80",
            "10.0.0.300:80",
            "0.0.0.0:80",
            "[::]:80",
            "224.0.0.1:80",
            "255.255.255.255:80",
            "a,b:80",
            "http://10.0.0.1:80",
        ] {
            assert!(bad.parse::<PrefillTarget>().is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn the_header_is_optional_single_and_text() {
        let mut h = http::HeaderMap::new();
        let get = |h: &http::HeaderMap| PrefillTarget::from_header(h.get_all("x-p"));
        assert_eq!(get(&h), Ok(None));
        h.insert("x-p", http::HeaderValue::from_static(""));
        assert_eq!(get(&h), Ok(None));
        h.insert("x-p", http::HeaderValue::from_static("10.0.0.1:80"));
        assert_eq!(get(&h), Ok(Some(t("10.0.0.1:80"))));
        h.append("x-p", http::HeaderValue::from_static("10.0.0.2:80"));
        assert_eq!(get(&h), Err(TargetError::Several));
        h.insert("x-p", http::HeaderValue::from_bytes(b"\xff:80").unwrap());
        assert_eq!(get(&h), Err(TargetError::NotText));
    }

    #[test]
    fn cidrs_match_addresses_of_their_family_only() {
        let c: Cidr = "10.1.2.3/16".parse().unwrap();
        assert_eq!(c.to_string(), "10.1.0.0/16");
        assert!(c.contains("10.1.255.1".parse().unwrap()));
        assert!(!c.contains("10.2.0.1".parse().unwrap()));
        assert!(c.contains("::ffff:10.1.0.9".parse().unwrap()));
        assert!(!c.contains("fd00::1".parse().unwrap()));
        let mapped: Cidr = "::ffff:10.0.0.0/104".parse().unwrap();
        assert_eq!(mapped.to_string(), "10.0.0.0/8");
        let v6: Cidr = "fd00::/8".parse().unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.contains("fe80::1".parse().unwrap()));
        let host: Cidr = "10.0.0.7".parse().unwrap();
        assert_eq!(host.to_string(), "10.0.0.7/32");
        assert!(host.contains("10.0.0.7".parse().unwrap()));
        assert!(!host.contains("10.0.0.8".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("192.0.2.1".parse().unwrap()));
        for bad in [
            "10.0.0.0/33",
            "fd00::/129",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "host/8",
            "",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn the_allow_list_never_resolves_and_an_empty_one_allows_nothing() {
        assert!(!AllowList::default().allows(&t("10.0.0.1:80")));
        let list = AllowList::new(
            vec!["127.0.0.0/8".parse().unwrap()],
            vec![t("prefill.ns.svc:8000"), t("[fd00::5]:9000")],
        )
        .on_ports(CidrPorts::Any);
        assert!(list.allows(&t("127.0.0.1:1")));
        assert!(list.allows(&t("127.9.9.9:65535")));
        assert!(!list.allows(&t("10.0.0.1:80")));
        // A name that resolves into an allowed network is still not allowed.
        assert!(!list.allows(&t("localhost:80")));
        assert!(list.allows(&t("PREFILL.ns.svc:8000")));
        assert!(!list.allows(&t("prefill.ns.svc:8001")));
        assert!(list.allows(&t("[fd00:0::5]:9000")));
        assert!(!list.allows(&t("[fd00::5]:9001")));
    }

    #[test]
    fn a_cidr_allows_only_the_serving_ports_unless_told_otherwise() {
        let cidrs = || vec!["10.0.0.0/8".parse().unwrap()];
        let exact = || vec![t("10.9.9.9:7000")];
        // Not yet made concrete: nothing by CIDR, exact entries still.
        let unresolved = AllowList::new(cidrs(), exact());
        assert!(!unresolved.allows(&t("10.1.1.1:8000")));
        assert!(unresolved.allows(&t("10.9.9.9:7000")));
        // The pod's own layout: engine on 8000, sidecar on 8080.
        let serving = AllowList::new(cidrs(), exact()).serving_on(&[8000, 8080, 8000]);
        assert_eq!(serving.ports(), &CidrPorts::Listed(vec![8000, 8080]));
        assert!(serving.allows(&t("10.1.1.1:8000")));
        assert!(serving.allows(&t("10.1.1.1:8080")));
        for other in [
            "10.1.1.1:10250",
            "10.1.1.1:9090",
            "10.1.1.1:22",
            "10.9.9.9:8001",
        ] {
            assert!(!serving.allows(&t(other)), "{other}");
        }
        assert!(serving.allows(&t("10.9.9.9:7000")));
        // Listed ports are kept as they are; so is `any`.
        let listed = AllowList::new(cidrs(), vec![])
            .on_ports(CidrPorts::Listed(vec![8200]))
            .serving_on(&[8000]);
        assert!(listed.allows(&t("10.1.1.1:8200")));
        assert!(!listed.allows(&t("10.1.1.1:8000")));
        let any = AllowList::new(cidrs(), vec![])
            .on_ports(CidrPorts::Any)
            .serving_on(&[8000]);
        assert!(any.allows(&t("10.1.1.1:1")));
        assert!(!any.allows(&t("192.168.1.1:8000")));
    }

    #[test]
    fn port_flags_parse_strictly() {
        let flags = |v: &[&str]| {
            CidrPorts::from_flags(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(flags(&[]), Ok(CidrPorts::Serving));
        assert_eq!(flags(&["any"]), Ok(CidrPorts::Any));
        assert_eq!(
            flags(&["8000", " 8200"]),
            Ok(CidrPorts::Listed(vec![8000, 8200]))
        );
        assert_eq!(flags(&["any", "8000"]), Err(PortsError::AnyWithPorts));
        for bad in ["0", "65536", "+80", "-1", "", "8000-8010", "http"] {
            assert_eq!(
                flags(&[bad]),
                Err(PortsError::Port(bad.to_owned())),
                "{bad}"
            );
        }
    }
}
