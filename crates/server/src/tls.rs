//! TLS for the `tls` and `wss` listeners: rustls on the ring provider, with
//! the certificate chain and key read from PEM files, or a self-signed pair
//! generated once and kept (so a wallet that pinned it keeps trusting it).
//!
//! The files are watched, not read once: a Let's Encrypt renewal replaces
//! them, and new connections must get the new certificate without a
//! restart. rustls asks [`ReloadingCert`] for the key at each handshake; it
//! hands out the current one, and before a handshake [`Tls::accept`] looks
//! at the files' modification time and length (at most every
//! [`RELOAD_CHECK_INTERVAL`]) and swaps in the new pair when they changed.
//! A new pair that does not parse, or whose key does not match its
//! certificate (a renewal caught half-written), is logged and the old one
//! kept; it is tried again when the files change again.

use anyhow::{bail, Context};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};
// Tokio's clock, which tests can pause and advance.
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// Where the certificate and key of the TLS listeners are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain, the server's certificate first.
    pub cert_file: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 RSA or SEC1 EC).
    pub key_file: PathBuf,
    /// When neither file exists, generate a self-signed pair there first.
    pub self_signed: bool,
}

/// How often, at most, the files are looked at for a renewal.
pub const RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(2);
/// Largest certificate or key file read (a chain is a few kilobytes).
const PEM_BYTES_MAX: u64 = 1 << 20;

/// The TLS side of the listeners: an acceptor whose certificate follows the
/// files.
pub(crate) struct Tls {
    acceptor: TlsAcceptor,
    cert: Arc<ReloadingCert>,
}

impl Tls {
    /// Loads the pair (generating a self-signed one first if asked and
    /// there is none).
    ///
    /// # Errors
    /// Missing, unreadable or mismatched files, named in the message.
    pub fn new(files: TlsFiles) -> anyhow::Result<Tls> {
        if files.self_signed {
            ensure_self_signed(&files)?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let stamp = stamp(&files);
        let key = load(&files, &provider)?;
        tracing::info!(
            cert = %files.cert_file.display(),
            key = %files.key_file.display(),
            self_signed = files.self_signed,
            "TLS certificate loaded; it is reloaded when these files change"
        );
        let cert = Arc::new(ReloadingCert {
            files,
            provider: Arc::clone(&provider),
            current: Mutex::new(Current {
                key: Arc::new(key),
                stamp,
                checked: Instant::now(),
            }),
        });
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(&cert) as Arc<dyn ResolvesServerCert>);
        Ok(Tls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            cert,
        })
    }

    /// The TLS handshake of a new connection, with the newest certificate.
    ///
    /// # Errors
    /// A failed handshake (a plain-text client on the TLS port, say).
    pub async fn accept<S>(&self, stream: S) -> std::io::Result<TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        self.cert.reload_if_changed();
        self.acceptor.accept(stream).await
    }
}

/// The certified key rustls presents, swapped when the files change.
#[derive(Debug)]
struct ReloadingCert {
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    current: Mutex<Current>,
}

#[derive(Debug)]
struct Current {
    key: Arc<CertifiedKey>,
    /// The files as they were when last loaded, or last failed to load.
    stamp: Stamp,
    checked: Instant,
}

/// Modification time and length of the certificate and key files.
type Stamp = [Option<(SystemTime, u64)>; 2];

fn stamp(files: &TlsFiles) -> Stamp {
    [&files.cert_file, &files.key_file].map(|path| {
        let meta = std::fs::metadata(path).ok()?;
        Some((meta.modified().ok()?, meta.len()))
    })
}

impl ReloadingCert {
    fn reload_if_changed(&self) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.checked.elapsed() < RELOAD_CHECK_INTERVAL {
            return;
        }
        current.checked = Instant::now();
        let stamp = stamp(&self.files);
        if stamp == current.stamp {
            return;
        }
        current.stamp = stamp;
        match load(&self.files, &self.provider) {
            Ok(key) => {
                current.key = Arc::new(key);
                tracing::info!(
                    cert = %self.files.cert_file.display(),
                    "TLS certificate files changed: new connections get the new certificate"
                );
            }
            Err(e) => tracing::error!(
                "TLS certificate files changed but cannot be used, keeping the previous certificate: {e:#}"
            ),
        }
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        Some(Arc::clone(&current.key))
    }
}

/// Reads the pair and checks that the key is the certificate's.
fn load(files: &TlsFiles, provider: &CryptoProvider) -> anyhow::Result<CertifiedKey> {
    let cert_pem = read_bounded(&files.cert_file)?;
    let key_pem = read_bounded(&files.key_file)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("certificate file {}", files.cert_file.display()))?;
    if chain.is_empty() {
        bail!(
            "certificate file {}: no CERTIFICATE in it",
            files.cert_file.display()
        );
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .with_context(|| format!("key file {}", files.key_file.display()))?;
    CertifiedKey::from_der(chain, key, provider).with_context(|| {
        format!(
            "key file {} with certificate file {}",
            files.key_file.display(),
            files.cert_file.display()
        )
    })
}

fn read_bounded(path: &Path) -> anyhow::Result<Vec<u8>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(PEM_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {}", path.display()))?;
    if bytes.len() as u64 > PEM_BYTES_MAX {
        bail!("{} is larger than {PEM_BYTES_MAX} bytes", path.display());
    }
    Ok(bytes)
}

/// Generates a self-signed pair at the files' paths unless both exist.
fn ensure_self_signed(files: &TlsFiles) -> anyhow::Result<()> {
    let (cert, key) = (&files.cert_file, &files.key_file);
    match (cert.exists(), key.exists()) {
        (true, true) => return Ok(()),
        (false, false) => {}
        // Never overwrite a key: the user decides which file is stale.
        (true, false) | (false, true) => bail!(
            "only one of {} and {} exists: delete it to get a new self-signed certificate",
            cert.display(),
            key.display()
        ),
    }
    // Wallets pin a self-signed certificate instead of checking its name.
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .context("self-signed certificate parameters")?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Osprey Electrum server");
    let signing_key = rcgen::KeyPair::generate().context("generating a TLS key")?;
    let certificate = params
        .self_signed(&signing_key)
        .context("signing the self-signed certificate")?;
    for path in [cert, key] {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
    }
    write_private(key, signing_key.serialize_pem().as_bytes())
        .with_context(|| format!("writing {}", key.display()))?;
    std::fs::write(cert, certificate.pem())
        .with_context(|| format!("writing {}", cert.display()))?;
    tracing::info!(
        cert = %cert.display(),
        key = %key.display(),
        "generated a self-signed TLS certificate; it is kept and reused, wallets pin it on first use"
    );
    Ok(())
}

/// Writes a file only its owner can read (a private key).
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)?.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path) -> TlsFiles {
        TlsFiles {
            cert_file: dir.join("cert.pem"),
            key_file: dir.join("key.pem"),
            self_signed: true,
        }
    }

    #[test]
    fn a_self_signed_pair_is_made_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let files = files(dir.path());
        ensure_self_signed(&files).unwrap();
        let first = std::fs::read(&files.cert_file).unwrap();
        let provider = rustls::crypto::ring::default_provider();
        load(&files, &provider).unwrap();
        ensure_self_signed(&files).unwrap();
        assert_eq!(std::fs::read(&files.cert_file).unwrap(), first);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&files.key_file)
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "the key is private: {mode:o}");
        }
        std::fs::remove_file(&files.key_file).unwrap();
        let err = ensure_self_signed(&files).unwrap_err().to_string();
        assert!(err.contains("only one of"), "{err}");
    }

    #[test]
    fn bad_or_mismatched_files_are_named_and_the_old_key_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let files = files(dir.path());
        ensure_self_signed(&files).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = Arc::new(load(&files, &provider).unwrap());
        let cert = ReloadingCert {
            files: files.clone(),
            provider: Arc::clone(&provider),
            current: Mutex::new(Current {
                key: Arc::clone(&key),
                stamp: stamp(&files),
                checked: Instant::now() - RELOAD_CHECK_INTERVAL,
            }),
        };
        // Another key with the old certificate: refused, the old pair kept.
        let other = rcgen::KeyPair::generate().unwrap();
        std::fs::write(&files.key_file, other.serialize_pem()).unwrap();
        let err = format!("{:#}", load(&files, &provider).unwrap_err());
        assert!(err.contains("key file"), "{err}");
        cert.reload_if_changed();
        let current = cert.current.lock().unwrap();
        assert!(Arc::ptr_eq(&current.key, &key));
        assert_eq!(
            current.stamp,
            stamp(&files),
            "not retried until they change"
        );
        drop(current);
        std::fs::write(&files.cert_file, "not a certificate").unwrap();
        let err = format!("{:#}", load(&files, &provider).unwrap_err());
        assert!(err.contains("no CERTIFICATE"), "{err}");
    }
}
