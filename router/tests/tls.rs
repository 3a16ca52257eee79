//! TLS on the API listener: HTTP/1.1 and HTTP/2 chosen by ALPN, and what a client that does
//! not speak TLS, or says nothing, gets (a closed connection, counted), with the router serving
//! on. Certificates come from rcgen, made fresh per test.

mod common;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

struct Certs {
    dir: PathBuf,
    cert_pem: String,
}

impl Certs {
    fn new(test: &str) -> Certs {
        let dir =
            std::env::temp_dir().join(format!("warmpath-tls-it-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(dir.join("tls.crt"), c.cert.pem()).unwrap();
        std::fs::write(dir.join("tls.key"), c.signing_key.serialize_pem()).unwrap();
        Certs {
            cert_pem: c.cert.pem(),
            dir,
        }
    }

    fn yaml(&self) -> String {
        format!(
            "tls:\n  cert_file: {}\n  key_file: {}\ntimeouts:\n  client_ms: 300\n",
            self.dir.join("tls.crt").display(),
            self.dir.join("tls.key").display()
        )
    }

    fn connector(&self, alpn: &[u8]) -> TlsConnector {
        let mut roots = RootCertStore::empty();
        let der = rustls_pki_types::pem::PemObject::from_pem_slice(self.cert_pem.as_bytes())
            .expect("certificate PEM");
        roots.add(der).unwrap();
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![alpn.to_vec()];
        TlsConnector::from(Arc::new(config))
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One completion over TLS with the protocol ALPN settles on: (status, body, protocol).
async fn complete_over_tls(certs: &Certs, addr: SocketAddr, alpn: &[u8]) -> (u16, String, Vec<u8>) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let tls = certs
        .connector(alpn)
        .connect(name, tcp)
        .await
        .expect("handshake");
    let negotiated = tls.get_ref().1.alpn_protocol().unwrap_or_default().to_vec();
    let req = http::Request::post("/v1/completions")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(completion("over tls", 2))))
        .unwrap();
    let io = TokioIo::new(tls);
    let resp = if negotiated == b"h2" {
        let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .unwrap();
        tokio::spawn(conn);
        send.send_request(req).await.unwrap()
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        send.send_request(req).await.unwrap()
    };
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        String::from_utf8_lossy(&body).into_owned(),
        negotiated,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_and_http2_over_tls_by_alpn() {
    let certs = Certs::new("alpn");
    let s = Setup::new(&["--timing", "zero"], &certs.yaml()).await;
    for alpn in [&b"h2"[..], b"http/1.1"] {
        let (status, body, negotiated) = complete_over_tls(&certs, s.router.addr, alpn).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(negotiated, alpn);
        assert!(body.contains("\"choices\""), "{body}");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_and_silent_clients_are_closed_and_counted() {
    let certs = Certs::new("plain");
    let s = Setup::new(&["--timing", "zero"], &certs.yaml()).await;
    // Plain HTTP at a TLS listener: no HTTP answer, the connection closes.
    let mut c = TcpStream::connect(s.router.addr).await.unwrap();
    c.write_all(b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "closed, not held");
    assert!(!buf.starts_with(b"HTTP/1.1 200"), "no plain answer");
    // A client that connects and says nothing is closed after timeouts.client_ms.
    let mut silent = TcpStream::connect(s.router.addr).await.unwrap();
    let read = tokio::time::timeout(Duration::from_secs(5), silent.read_to_end(&mut buf)).await;
    assert!(
        read.is_ok(),
        "a silent connection is closed after the handshake bound"
    );
    let m = router_metrics(s.router.admin_addr).await;
    assert_eq!(
        metric(&m, "warmpath_tls_handshake_failures_total", &[]),
        2.0,
        "{m}"
    );
    // Still serving over TLS.
    let (status, body, _) = complete_over_tls(&certs, s.router.addr, b"h2").await;
    assert_eq!(status, 200, "{body}");
    s.stop().await;
}
