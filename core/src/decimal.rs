//! Integers written as decimal text on the stack, for the arguments the module
//! replicates: no allocation, no formatting machinery.

/// "00", "01", ... "99" back to back.
const PAIRS: [u8; 200] = {
    let mut table = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        table[2 * i] = b'0' + (i / 10) as u8;
        table[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    table
};

/// Writes the two digits of `n` (below 100) at `at`.
fn put_pair(buf: &mut [u8; 20], at: usize, n: usize) {
    buf[at..at + 2].copy_from_slice(&PAIRS[2 * n..2 * n + 2]);
}

/// An `i64` written as decimal ASCII digits, with a leading `-` when negative.
pub struct Decimal {
    buf: [u8; 20],
    start: usize,
}

impl Decimal {
    /// Writes `n` (`i64::MIN` included: 19 digits and a sign fill the 20 bytes), several
    /// digits per division: the profile showed one division per digit at a tenth of
    /// the cost of replicating a grant.
    pub fn new(n: i64) -> Self {
        let mut buf = [0u8; 20];
        let mut start = buf.len();
        let mut rest = n.unsigned_abs();
        // Four digits per division while there are more (fences have 16, times 13),
        // then two at a time.
        while rest >= 10_000 {
            let four = (rest % 10_000) as usize;
            rest /= 10_000;
            start -= 4;
            put_pair(&mut buf, start, four / 100);
            put_pair(&mut buf, start + 2, four % 100);
        }
        while rest >= 100 {
            let pair = (rest % 100) as usize;
            rest /= 100;
            start -= 2;
            put_pair(&mut buf, start, pair);
        }
        if rest >= 10 {
            start -= 2;
            put_pair(&mut buf, start, rest as usize);
        } else {
            start -= 1;
            buf[start] = b'0' + rest as u8;
        }
        if n < 0 {
            start -= 1;
            buf[start] = b'-';
        }
        Self { buf, start }
    }

    /// The digits.
    pub fn digits(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_what_to_string_writes() {
        for n in [
            0,
            1,
            -1,
            9,
            10,
            99,
            100,
            -101,
            -10,
            1_700_000_000_000,
            (1 << 53) - 1,
            i64::MAX,
            i64::MIN,
        ] {
            assert_eq!(Decimal::new(n).digits(), n.to_string().as_bytes(), "{n}");
        }
        // Both sides of every power of ten, and a spread of others.
        let mut power: i64 = 1;
        let mut spread: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..19 {
            for n in [power - 1, power, power + 1, -power, -(power - 1)] {
                assert_eq!(Decimal::new(n).digits(), n.to_string().as_bytes(), "{n}");
            }
            power = power.saturating_mul(10);
        }
        for _ in 0..10_000 {
            spread = spread
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let n = (spread >> (spread % 60)) as i64;
            assert_eq!(Decimal::new(n).digits(), n.to_string().as_bytes(), "{n}");
        }
    }
}
