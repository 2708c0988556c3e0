//! Certificates made at test time, for HTTPS fakes ([`FakeHttp::start_tls`](crate::FakeHttp::start_tls)).
//!
//! A [`TestCa`] is a throwaway certificate authority (ECDSA P-256, made with `rcgen` on `ring`);
//! it issues server certificates for `127.0.0.1` and `localhost` with any validity period, so a
//! test can serve a certificate that expires in five days, or expired yesterday, and hand the
//! CA's PEM to `mcpulse probe --ca-file`. Nothing is read from or written to the system's trust
//! store; the PEM goes wherever the test writes it.
//!
//! Dates are whole days (UTC midnight): `rcgen` takes a calendar date, and the tests need days,
//! not seconds.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A certificate authority that lives as long as the test.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

/// A server certificate (DER) and its key, ready for [`TestCa::server_config`].
pub struct ServerCert {
    pub cert_der: Vec<u8>,
    pub key_der: Vec<u8>,
    /// The certificate's `notAfter`, in seconds since the Unix epoch.
    pub not_after_unix: i64,
}

impl TestCa {
    /// A new CA, valid from yesterday for a year.
    pub fn new() -> TestCa {
        let key = KeyPair::generate().expect("generating the test CA's key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params
            .distinguished_name
            .push(DnType::CommonName, "mcpulse test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        set_validity(&mut params, days_from_now(-1), days_from_now(365));
        let cert = params.self_signed(&key).expect("self-signing the test CA");
        TestCa {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// The CA certificate, PEM: what `--ca-file` reads.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A server certificate for `127.0.0.1` and `localhost`, valid from 30 days before today
    /// (or before its expiry, for one that expired) until midnight UTC of the day
    /// `expires_in_days` from today (negative: it expired that many days ago).
    pub fn server_cert(&self, expires_in_days: i64) -> ServerCert {
        self.server_cert_for(&["127.0.0.1", "localhost"], expires_in_days)
    }

    /// Like [`TestCa::server_cert`], for these names only: a certificate for another host, served
    /// on loopback, is one for the wrong name.
    pub fn server_cert_for(&self, names: &[&str], expires_in_days: i64) -> ServerCert {
        let key = KeyPair::generate().expect("generating a server key");
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).expect("server certificate parameters");
        params
            .distinguished_name
            .push(DnType::CommonName, "mcpulse test server");
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let after = days_from_now(expires_in_days);
        set_validity(&mut params, after.min(days_from_now(0)) - 30, after);
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("signing a server certificate");
        ServerCert {
            cert_der: cert.der().to_vec(),
            key_der: key.serialize_der(),
            not_after_unix: after * 86_400,
        }
    }

    /// A rustls server configuration serving `cert` (HTTP/1.1 only).
    pub fn server_config(cert: &ServerCert) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = vec![rustls::pki_types::CertificateDer::from(
            cert.cert_der.clone(),
        )];
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(
            rustls::pki_types::PrivatePkcs8KeyDer::from(cert.key_der.clone()),
        );
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS protocol versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("the server certificate and key");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

/// A self-signed server certificate for `127.0.0.1` and `localhost` that is also a CA
/// (basicConstraints CA:TRUE), as `openssl req -x509` makes one by default, and its PEM.
/// TLS clients refuse it as a server's certificate even when they trust it.
pub fn self_signed_ca_cert() -> (ServerCert, String) {
    let key = KeyPair::generate().expect("generating a self-signed key");
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".into()])
        .expect("self-signed certificate parameters");
    params
        .distinguished_name
        .push(DnType::CommonName, "mcpulse self-signed");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let (from, until) = (days_from_now(-1), days_from_now(365));
    set_validity(&mut params, from, until);
    let cert = params.self_signed(&key).expect("self-signing");
    (
        ServerCert {
            cert_der: cert.der().to_vec(),
            key_der: key.serialize_der(),
            not_after_unix: until * 86_400,
        },
        cert.pem(),
    )
}

impl Default for TestCa {
    fn default() -> Self {
        TestCa::new()
    }
}

/// Today plus `n` days, as days since the Unix epoch (UTC).
pub fn days_from_now(n: i64) -> i64 {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    secs.div_euclid(86_400) + n
}

/// Sets `notBefore` and `notAfter` to midnight UTC of these days (counted from the epoch).
fn set_validity(params: &mut CertificateParams, from: i64, until: i64) {
    let (y, m, d) = civil_from_days(from);
    params.not_before = rcgen::date_time_ymd(y, m, d);
    let (y, m, d) = civil_from_days(until);
    params.not_after = rcgen::date_time_ymd(y, m, d);
}

/// The proleptic Gregorian date of a day counted from 1970-01-01 (H. Hinnant's algorithm).
pub fn civil_from_days(z: i64) -> (i32, u8, u8) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let y = (yoe + era * 400 + i64::from(m <= 2)) as i32;
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
    }
}
