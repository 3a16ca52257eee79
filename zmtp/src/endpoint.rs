//! `tcp://HOST:PORT` endpoints, as ZeroMQ spells them (`*` for every interface when binding).

use std::net::SocketAddr;

use crate::Error;

/// A parsed `tcp://HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    host: String,
    port: u16,
}

impl Endpoint {
    pub fn parse(endpoint: &str) -> Result<Self, Error> {
        let bad = || Error::Endpoint(endpoint.to_owned());
        let rest = endpoint.strip_prefix("tcp://").ok_or_else(bad)?;
        let (host, port) = rest.rsplit_once(':').ok_or_else(bad)?;
        let port = port.parse().map_err(|_| bad())?;
        if host.is_empty() {
            return Err(bad());
        }
        Ok(Self {
            host: host.to_owned(),
            port,
        })
    }

    /// `HOST:PORT` for the resolver and the listener; libzmq's `*` is every IPv4 interface.
    fn authority(&self) -> String {
        let host = if self.host == "*" {
            "0.0.0.0"
        } else {
            &self.host
        };
        format!("{host}:{}", self.port)
    }

    /// Every address the host has now (a name is looked up again on each call).
    pub async fn resolve(&self) -> Result<Vec<SocketAddr>, Error> {
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host(self.authority()).await?.collect();
        if addrs.is_empty() {
            return Err(Error::Unresolved(self.to_string()));
        }
        Ok(addrs)
    }

    pub(crate) async fn listen(&self) -> Result<tokio::net::TcpListener, Error> {
        Ok(tokio::net::TcpListener::bind(self.authority()).await?)
    }

    pub(crate) async fn connect(&self) -> Result<tokio::net::TcpStream, Error> {
        let mut last = None;
        for addr in self.resolve().await? {
            match tokio::net::TcpStream::connect(addr).await {
                Ok(stream) => {
                    stream.set_nodelay(true)?;
                    return Ok(stream);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.map_or_else(|| Error::Unresolved(self.to_string()), Error::Io))
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tcp://{}:{}", self.host, self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        let e = Endpoint::parse("tcp://*:5557").unwrap();
        assert_eq!(e.authority(), "0.0.0.0:5557");
        assert_eq!(
            Endpoint::parse("tcp://[::1]:80").unwrap().authority(),
            "[::1]:80"
        );
        assert_eq!(e.to_string(), "tcp://*:5557");
        for bad in ["udp://a:1", "tcp://a", "tcp://:1", "tcp://a:99999", "a:1"] {
            assert!(
                matches!(Endpoint::parse(bad), Err(Error::Endpoint(_))),
                "{bad}"
            );
        }
    }
}
