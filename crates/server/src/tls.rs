//! TLS for a second listener beside the plain one (issue 28), with
//! memcached's `-Z` options: a certificate chain (`ssl_chain_cert`), its
//! key (`ssl_key`) and optionally a CA (`ssl_ca_cert`) whose certificates
//! clients must then present. rustls on the ring provider; TLS 1.2 and
//! 1.3.

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::Arc;
use tokio_rustls::rustls;

/// Why the TLS configuration could not be built (file names, never key
/// material).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate file has no usable PEM certificate.
    #[error("{path}: no PEM certificate in it ({why})")]
    Cert {
        /// The file as named on the command line.
        path: String,
        /// What reading or parsing it failed with.
        why: String,
    },
    /// The key file has no usable PEM private key.
    #[error("{path}: no PEM private key in it ({why})")]
    Key {
        /// The file as named on the command line.
        path: String,
        /// What reading or parsing it failed with.
        why: String,
    },
    /// rustls refused the configuration (its message).
    #[error("TLS: {0}")]
    Rustls(String),
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bad = |why: String| TlsError::Cert {
        path: path.display().to_string(),
        why,
    };
    let v: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if v.is_empty() {
        return Err(bad("empty".into()));
    }
    Ok(v)
}

/// The server configuration: `cert` (chain, PEM), `key` (PEM), and with
/// `ca` a client certificate signed by it required.
pub fn server_config(
    cert: &Path,
    key: &Path,
    ca: Option<&Path>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = certs(cert)?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::Key {
        path: key.display().to_string(),
        why: e.to_string(),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let r = |e: rustls::Error| TlsError::Rustls(e.to_string());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(r)?;
    let builder = match ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in certs(ca)? {
                roots.add(c).map_err(r)?;
            }
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| TlsError::Rustls(e.to_string()))?;
            builder.with_client_cert_verifier(v)
        }
        None => builder.with_no_client_auth(),
    };
    let cfg = builder.with_single_cert(chain, key).map_err(r)?;
    Ok(Arc::new(cfg))
}
