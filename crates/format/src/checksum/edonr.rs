//! Edon-R 512 (the SHA-3 candidate with OpenZFS's tweak), as OpenZFS's `edonr` checksum uses
//! it: 128-byte blocks of sixteen little-endian words, a double pipe of sixteen words, four
//! rows of quasigroup e-transformations built from two orthogonal Latin squares per block,
//! padding with a single 1 bit and the message length in bits in the last word.

const IV: [u64; 16] = [
    0x8081828384858687, 0x88898a8b8c8d8e8f, 0x9091929394959697, 0x98999a9b9c9d9e9f,
    0xa0a1a2a3a4a5a6a7, 0xa8a9aaabacadaeaf, 0xb0b1b2b3b4b5b6b7, 0xb8b9babbbcbdbebf,
    0xc0c1c2c3c4c5c6c7, 0xc8c9cacbcccdcecf, 0xd0d1d2d3d4d5d6d7, 0xd8d9dadbdcdddedf,
    0xe0e1e2e3e4e5e6e7, 0xe8e9eaebecedeeef, 0xf0f1f2f3f4f5f6f7, 0xf8f9fafbfcfdfeff,
];
const DEFIX: u64 = 0xaaaaaaaaaaaaaaaa;
pub const BLOCK: usize = 128;

fn ls1(c: u64, x: [u64; 8]) -> [u64; 8] {
    let [x0, x1, x2, x3, x4, x5, x6, x7] = x;
    let x04 = x0.wrapping_add(x4);
    let x17 = x1.wrapping_add(x7);
    let x07 = x04.wrapping_add(x17);
    let x23 = x2.wrapping_add(x3);
    let x56 = x5.wrapping_add(x6);
    let x26 = x23.wrapping_add(x56);
    [
        c.wrapping_add(x07).wrapping_add(x2),
        x07.wrapping_add(x3).rotate_left(5),
        x07.wrapping_add(x6).rotate_left(15),
        x26.wrapping_add(x7).rotate_left(22),
        x26.wrapping_add(x1).rotate_left(31),
        x04.wrapping_add(x23).wrapping_add(x5).rotate_left(40),
        x17.wrapping_add(x56).wrapping_add(x0).rotate_left(50),
        x26.wrapping_add(x4).rotate_left(59),
    ]
}

fn ls2(c: u64, y: [u64; 8]) -> [u64; 8] {
    let [y0, y1, y2, y3, y4, y5, y6, y7] = y;
    let y01 = y0.wrapping_add(y1);
    let y25 = y2.wrapping_add(y5);
    let y05 = y01.wrapping_add(y25);
    let y34 = y3.wrapping_add(y4);
    let y04 = y01.wrapping_add(y34);
    let y67 = y6.wrapping_add(y7);
    let y37 = y34.wrapping_add(y67);
    let y27 = y25.wrapping_add(y67);
    [
        (!c).wrapping_add(y05).wrapping_add(y7),
        y04.wrapping_add(y6).rotate_left(10),
        y05.wrapping_add(y3).rotate_left(19),
        y37.wrapping_add(y2).rotate_left(29),
        y04.wrapping_add(y5).rotate_left(36),
        y27.wrapping_add(y4).rotate_left(44),
        y27.wrapping_add(y1).rotate_left(48),
        y37.wrapping_add(y0).rotate_left(55),
    ]
}

fn exform(s: [u64; 8], t: [u64; 8]) -> [u64; 8] {
    let s04 = s[0] ^ s[4];
    let t01 = t[0] ^ t[1];
    let t67 = t[6] ^ t[7];
    let s23 = s[2] ^ s[3];
    let t34 = t[3] ^ t[4];
    let s56 = s[5] ^ s[6];
    let t25 = t[2] ^ t[5];
    let s17 = s[1] ^ s[7];
    [
        (s04 ^ s[1]).wrapping_add(t01 ^ t[5]),
        (s04 ^ s[7]).wrapping_add(t[2] ^ t67),
        (s17 ^ s[6]).wrapping_add(t01 ^ t[3]),
        (s23 ^ s[4]).wrapping_add(t[0] ^ t34),
        (s[0] ^ s17).wrapping_add(t[1] ^ t25),
        (s[3] ^ s56).wrapping_add(t34 ^ t[6]),
        (s[2] ^ s56).wrapping_add(t25 ^ t[7]),
        (s23 ^ s[5]).wrapping_add(t[4] ^ t67),
    ]
}

fn q(c: u64, a: [u64; 8], b: [u64; 8]) -> [u64; 8] {
    exform(ls1(c, a), ls2(c, b))
}

fn compress(p: &mut [u64; 16], block: &[u8]) {
    let mut d = [0u64; 16];
    for (i, w) in d.iter_mut().enumerate() {
        *w = u64::from_le_bytes(block[i * 8..i * 8 + 8].try_into().unwrap());
    }
    let lo = |a: &[u64]| -> [u64; 8] { a[..8].try_into().unwrap() };
    let rev = |a: &[u64]| -> [u64; 8] { [a[7], a[6], a[5], a[4], a[3], a[2], a[1], a[0]] };
    // Row 1
    let mut pp = q(DEFIX, rev(&d[8..16]), lo(&d[0..8]));
    let mut qq = q(DEFIX, pp, lo(&d[8..16]));
    // Row 2
    pp = q(DEFIX, lo(&p[8..16]), pp);
    qq = q(DEFIX, pp, qq);
    // Row 3
    pp = q(DEFIX, pp, lo(&p[0..8]));
    qq = q(DEFIX, qq, pp);
    // Row 4
    pp = q(DEFIX, rev(&d[0..8]), pp);
    qq = q(DEFIX, pp, qq);
    for i in 0..8 {
        p[i] ^= d[8 + i] ^ pp[i];
        p[8 + i] ^= d[i] ^ qq[i];
    }
}

/// Streaming Edon-R 512.
#[derive(Clone)]
pub struct EdonR512 {
    p: [u64; 16],
    buf: Vec<u8>,
    bits: u64,
}

impl Default for EdonR512 {
    fn default() -> Self {
        EdonR512 { p: IV, buf: Vec::with_capacity(BLOCK), bits: 0 }
    }
}

impl EdonR512 {
    pub fn update(&mut self, mut data: &[u8]) {
        self.bits = self.bits.wrapping_add((data.len() as u64) * 8);
        if !self.buf.is_empty() {
            let take = (BLOCK - self.buf.len()).min(data.len());
            self.buf.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.buf.len() == BLOCK {
                let b = std::mem::take(&mut self.buf);
                compress(&mut self.p, &b);
                self.buf = b;
                self.buf.clear();
            }
        }
        while data.len() >= BLOCK {
            compress(&mut self.p, &data[..BLOCK]);
            data = &data[BLOCK..];
        }
        self.buf.extend_from_slice(data);
    }

    pub fn finalize(mut self) -> [u8; 64] {
        let n = self.buf.len();
        let mut last = vec![0u8; if n < 120 { BLOCK } else { 2 * BLOCK }];
        last[..n].copy_from_slice(&self.buf);
        last[n] = 0x80;
        let l = last.len();
        last[l - 8..].copy_from_slice(&self.bits.to_le_bytes());
        for b in last.chunks(BLOCK) {
            compress(&mut self.p, b);
        }
        let mut out = [0u8; 64];
        for i in 0..8 {
            out[i * 8..i * 8 + 8].copy_from_slice(&self.p[8 + i].to_le_bytes());
        }
        out
    }
}

pub fn edonr512(data: &[u8]) -> [u8; 64] {
    let mut h = EdonR512::default();
    h.update(data);
    h.finalize()
}

/// The state OpenZFS keys with the pool's salt: H(salt) ‖ H(H(salt)) as one full block.
pub fn salted(salt: &[u8; 32]) -> EdonR512 {
    let h1 = edonr512(salt);
    let h2 = edonr512(&h1);
    let mut st = EdonR512::default();
    st.update(&h1);
    st.update(&h2);
    st
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_answer() {
        let d = super::edonr512(b"abc");
        assert_eq!(&d[..8], &[0x1b, 0x14, 0xdb, 0x15, 0x5f, 0x1d, 0x40, 0x65]);
        assert_eq!(&d[56..], &[0xad, 0xc9, 0x0c, 0x62, 0x83, 0x72, 0xc2, 0x2b]);
        let m2 = b"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
        let d2 = super::edonr512(m2);
        assert_eq!(&d2[..8], &[0x53, 0x51, 0x07, 0x0d, 0xc5, 0x1c, 0x3b, 0x2b]);
        // Streaming in pieces gives the same digest.
        let mut h = super::EdonR512::default();
        for c in m2.chunks(7) {
            h.update(c);
        }
        assert_eq!(h.finalize(), d2);
    }
}
