//! Just enough X.509 to read a certificate's validity period.
//!
//! Written by hand on purpose: the security grade needs one field (`notAfter`, and `notBefore`)
//! from the peer certificate, and the full X.509 parsers pull in a parser-combinator stack that
//! would double this project's build time for two timestamps. This walks the DER structure
//! `Certificate → tbsCertificate → [version] serial signature issuer validity` with bounds
//! checks on every length, and returns `None` on anything it does not understand.

/// A certificate's validity period, in seconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub not_before: i64,
    pub not_after: i64,
}

/// One DER element: tag, contents, and the rest of the input after it.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | *b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// Reads the validity period of a DER-encoded certificate.
pub fn validity(der: &[u8]) -> Option<Validity> {
    let (0x30, cert, _) = element(der)? else {
        return None;
    };
    let (0x30, tbs, _) = element(cert)? else {
        return None;
    };
    let mut rest = tbs;
    // [0] EXPLICIT version, optional
    if rest.first() == Some(&0xa0) {
        rest = element(rest)?.2;
    }
    rest = element(rest)?.2; // serialNumber
    rest = element(rest)?.2; // signature AlgorithmIdentifier
    rest = element(rest)?.2; // issuer Name
    let (0x30, validity, _) = element(rest)? else {
        return None;
    };
    let (t1, nb, after) = element(validity)?;
    let (t2, na, _) = element(after)?;
    Some(Validity {
        not_before: time(t1, nb)?,
        not_after: time(t2, na)?,
    })
}

/// UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`) to Unix seconds.
fn time(tag: u8, v: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(v).ok()?.strip_suffix('Z')?;
    let digits = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    let (year, off) = match tag {
        0x17 => {
            let yy = digits(0..2)?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, 2)
        }
        0x18 => (digits(0..4)?, 4),
        _ => return None,
    };
    let (mo, d, h, mi, sec) = (
        digits(off..off + 2)?,
        digits(off + 2..off + 4)?,
        digits(off + 4..off + 6)?,
        digits(off + 6..off + 8)?,
        digits(off + 8..off + 10)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    Some(days_from_civil(year, mo, d) * 86_400 + h * 3600 + mi * 60 + sec)
}

/// Days since 1970-01-01 (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal certificate-shaped DER structure with the given validity times.
    fn cert(nb: (u8, &str), na: (u8, &str)) -> Vec<u8> {
        fn el(tag: u8, content: &[u8]) -> Vec<u8> {
            let mut v = vec![tag];
            if content.len() < 128 {
                v.push(content.len() as u8);
            } else {
                v.push(0x82);
                v.extend_from_slice(&(content.len() as u16).to_be_bytes());
            }
            v.extend_from_slice(content);
            v
        }
        let validity = [el(nb.0, nb.1.as_bytes()), el(na.0, na.1.as_bytes())].concat();
        let tbs = [
            el(0xa0, &el(0x02, &[2])),
            el(0x02, &[1, 2, 3]),
            el(0x30, &el(0x06, &[42])),
            el(0x30, &[0u8; 200]),
            el(0x30, &validity),
            el(0x30, b"subject"),
        ]
        .concat();
        el(
            0x30,
            &[el(0x30, &tbs), el(0x30, &[1]), el(0x03, &[0])].concat(),
        )
    }

    #[test]
    fn reads_utc_and_generalized_times() {
        let v = validity(&cert((0x17, "260101000000Z"), (0x18, "20270215123000Z"))).unwrap();
        assert_eq!(v.not_before, 1_767_225_600);
        assert_eq!(v.not_after, 1_802_694_600);
    }

    #[test]
    fn garbage_is_none_never_a_panic() {
        assert_eq!(validity(&[]), None);
        assert_eq!(validity(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(validity(&cert((0x17, "991399000000Z"), (0x17, "x"))), None);
        let good = cert((0x17, "260101000000Z"), (0x18, "20270215123000Z"));
        for cut in 0..good.len() {
            let _ = validity(&good[..cut]);
        }
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0xff;
            let _ = validity(&bad);
        }
    }
}
