//! HTTPS for the streaming server (rustls with the ring provider).

use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config::TlsConfig;
use crate::Error;

pub(crate) fn acceptor(cfg: &TlsConfig) -> Result<TlsAcceptor, Error> {
    let cert_path = cfg.cert_file.display().to_string();
    let key_path = cfg.key_file.display().to_string();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cfg.cert_file)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| Error::Tls {
            path: cert_path.clone(),
            message: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(Error::Tls {
            path: cert_path,
            message: "no certificate in file".into(),
        });
    }
    let key = PrivateKeyDer::from_pem_file(&cfg.key_file).map_err(|e| Error::Tls {
        path: key_path,
        message: e.to_string(),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(certs, key))
        .map_err(|e| Error::Tls {
            path: "config".into(),
            message: e.to_string(),
        })?;
    // The upgrade protocols are HTTP/1.1 only.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
