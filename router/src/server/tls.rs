//! TLS on the API listener (rustls with the ring provider). The certificate chain and key are
//! PEM files, as a Kubernetes TLS Secret mounts them; they are read again when they change, so
//! a rotation (cert-manager renews well before expiry) takes effect without a restart. A new
//! pair that does not load is logged and the old one kept: a bad rotation must not take the
//! listener down.

pub use crate::errors::TlsError;
use parking_lot::Mutex;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio_rustls::rustls::crypto::{ring, CryptoProvider};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

/// How often a handshake may look whether the files changed (a `stat` of each).
const RECHECK: Duration = Duration::from_secs(10);

/// A TLS acceptor for `cert` and `key` (PEM), offering HTTP/2 and HTTP/1.1 by ALPN.
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, TlsError> {
    let provider = Arc::new(ring::default_provider());
    let resolver = Arc::new(ReloadingCert::load(cert, key, provider.clone())?);
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The pair in use, and the files' modification times it was read at.
#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    stamp: (Stamp, Stamp),
    checked: Instant,
}

#[derive(Debug)]
struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    loaded: Mutex<Loaded>,
}

/// What tells a changed file: a Secret update swaps a symlink to new files (another inode);
/// an edit in place changes the size or the modification time (coarse on some filesystems).
type Stamp = Option<(u64, u64, Option<SystemTime>)>;

fn stamp(path: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.size(), m.modified().ok()))
}

impl ReloadingCert {
    fn load(cert: &Path, key: &Path, provider: Arc<CryptoProvider>) -> Result<Self, TlsError> {
        let pair = read_pair(cert, key, &provider)?;
        Ok(Self {
            loaded: Mutex::new(Loaded {
                key: Arc::new(pair),
                stamp: (stamp(cert), stamp(key)),
                checked: Instant::now(),
            }),
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            provider,
        })
    }

    /// The current pair, read again first when the files changed since.
    fn current(&self) -> Arc<CertifiedKey> {
        let mut loaded = self.loaded.lock();
        if loaded.checked.elapsed() >= RECHECK {
            loaded.checked = Instant::now();
            let now = (stamp(&self.cert), stamp(&self.key));
            if now != loaded.stamp {
                // Whatever happens, this version of the files has been seen: a broken pair is
                // reported once, not on every handshake.
                loaded.stamp = now;
                match read_pair(&self.cert, &self.key, &self.provider) {
                    Ok(pair) => {
                        tracing::info!(cert = %self.cert.display(), "TLS certificate reloaded");
                        loaded.key = Arc::new(pair);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "new TLS certificate or key does not load; keeping the previous pair");
                    }
                }
            }
        }
        loaded.key.clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

fn read_pair(cert: &Path, key: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| TlsError::Read {
            path: path.to_path_buf(),
            source,
        })
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read(cert)?)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert.to_path_buf(),
        });
    }
    let private = PrivateKeyDer::from_pem_slice(&read(key)?).map_err(|e| TlsError::NoKey {
        path: key.to_path_buf(),
        message: e.to_string(),
    })?;
    CertifiedKey::from_der(chain, private, provider).map_err(|source| TlsError::Mismatch {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let c = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("rcgen");
        let (cert, key) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&cert, c.cert.pem()).expect("write cert");
        std::fs::write(&key, c.signing_key.serialize_pem()).expect("write key");
        (cert, key)
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("warmpath-tls-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    #[test]
    fn bad_files_are_refused_with_their_path() {
        let dir = scratch("bad");
        let (cert, key) = pair(&dir, "a");
        let (_, other_key) = pair(&dir, "b");
        let missing = dir.join("nope.pem");
        let e = acceptor(&missing, &key).err().expect("missing cert");
        assert!(e.to_string().contains("nope.pem"), "{e}");
        let e = acceptor(&key, &key).err().expect("a key is no certificate");
        assert!(matches!(e, TlsError::NoCertificate { .. }), "{e}");
        let e = acceptor(&cert, &cert)
            .err()
            .expect("a certificate is no key");
        assert!(matches!(e, TlsError::NoKey { .. }), "{e}");
        let e = acceptor(&cert, &other_key).err().expect("mismatched pair");
        assert!(matches!(e, TlsError::Mismatch { .. }), "{e}");
        acceptor(&cert, &key).expect("a good pair");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_rotated_pair_is_picked_up_and_a_broken_one_is_not() {
        let dir = scratch("rotate");
        let (cert, key) = pair(&dir, "live");
        let provider = Arc::new(ring::default_provider());
        let resolver = ReloadingCert::load(&cert, &key, provider).expect("load");
        let first = resolver.current();
        let due = |r: &ReloadingCert| r.loaded.lock().checked -= RECHECK;
        // A new pair, written as a Secret update would leave it.
        let (c2, k2) = pair(&dir, "next");
        std::fs::rename(&c2, &cert).expect("rotate cert");
        std::fs::rename(&k2, &key).expect("rotate key");
        // Not looked at before RECHECK has passed.
        assert!(Arc::ptr_eq(&first, &resolver.current()));
        due(&resolver);
        let second = resolver.current();
        assert!(!Arc::ptr_eq(&first, &second), "rotation picked up");
        assert_ne!(first.cert, second.cert);
        // A half-written rotation (garbage key) keeps the working pair.
        std::fs::write(&key, "not a key").expect("break key");
        let t = SystemTime::now() + Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&key)
            .and_then(|f| f.set_modified(t))
            .expect("touch");
        due(&resolver);
        assert!(Arc::ptr_eq(&second, &resolver.current()));
        let _ = std::fs::remove_dir_all(dir);
    }
}
