//! `server.tls`: the certificate and key the HTTPS listener presents, loaded once at start.
//!
//! TLS is rustls (through tokio-rustls) with the ring provider: no OpenSSL on the host, no C
//! toolchain beyond what ring's own build needs. Only the dashboard and the API are meant to
//! be reached this way; firmware and iPXE fetch boot files over plain HTTP on `server.http`
//! (a stock iPXE trusts no certificate of ours), so the HTTPS port serves the same routes and
//! nothing else changes for clients.

use crate::config::Tls;
use anyhow::{Context, bail};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;

/// The acceptor for `tls`, or an error naming the file (and the key of pools.yaml) at fault.
pub fn acceptor(tls: &Tls) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&tls.cert)
        .and_then(|all| all.collect::<Result<_, _>>())
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("server.tls.cert: reading {}", tls.cert.display()))?;
    if certs.is_empty() {
        bail!(
            "server.tls.cert: {} holds no PEM certificate (BEGIN CERTIFICATE)",
            tls.cert.display()
        );
    }
    let key = PrivateKeyDer::from_pem_file(&tls.key)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| {
            format!(
                "server.tls.key: {} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)",
                tls.key.display()
            )
        })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .with_context(|| {
            format!(
                "server.tls: the key in {} does not fit the certificate in {}",
                tls.key.display(),
                tls.cert.display()
            )
        })?;
    // HTTP/1.1 only, as on the plain port.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}
