//! Native encryption: the suites, wrapping keys, the unwrap of a dataset's master key, and the
//! decryption and authentication of encrypted blocks (facts from OpenZFS's zio_crypt.c,
//! dsl_crypt.c and libzfs_crypto.c).
//!
//! ```text
//!   user key (raw 32 bytes | 64 hex digits | passphrase → PBKDF2-HMAC-SHA1(salt, iters), 32 bytes)
//!     └ wrapping key: AES-256 in the suite's mode (CCM or GCM), 12-byte IV, 16-byte MAC,
//!       AAD = guid ‖ suite ‖ version (u64 little-endian each; none for version 0)
//!         └ master key (the suite's key length) ‖ HMAC key (64 bytes)
//!             └ per block: HKDF-SHA512(ikm = master key, salt = none, info = the bp's 8-byte
//!               salt) → the block's key; the bp holds the salt, the 12-byte IV and the MAC.
//! ```
//!
//! The AEAD code is RustCrypto's (aes, aes-gcm, ccm): well kept and constant time; what is
//! hand-written here is only what the format decides (which bytes are encrypted, which are
//! authenticated, and in what order).

use crate::bytes::u64_at;
use crate::error::{FormatError, Result};
use aes_gcm::aead::generic_array::GenericArray;
use aes_gcm::aead::{AeadInPlace, KeyInit};
/// Key material wiped when dropped (re-exported for the keystore's derived keys).
pub use zeroize::Zeroizing;

/// The length of a wrapping key (WRAPPING_KEY_LEN).
pub const WRAPPING_KEY_LEN: usize = 32;
/// The HMAC key kept beside the master key (SHA512_HMAC_KEYLEN).
pub const HMAC_KEY_LEN: usize = 64;
/// The longest master key (MASTER_KEY_MAX_LEN): the ZAP entry is always this long.
pub const MASTER_KEY_MAX_LEN: usize = 32;
/// IV, salt and MAC lengths of data blocks (ZIO_DATA_IV_LEN, ZIO_DATA_SALT_LEN, ZIO_DATA_MAC_LEN).
pub const IV_LEN: usize = 12;
pub const SALT_LEN: usize = 8;
pub const MAC_LEN: usize = 16;

/// `zio_encrypt`: the value of the `encryption` property and DSL_CRYPTO_SUITE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Suite {
    Aes128Ccm,
    Aes192Ccm,
    Aes256Ccm,
    Aes128Gcm,
    Aes192Gcm,
    Aes256Gcm,
}

pub const ZIO_CRYPT_INHERIT: u64 = 0;
pub const ZIO_CRYPT_ON: u64 = 1;
pub const ZIO_CRYPT_OFF: u64 = 2;

impl Suite {
    /// The suite of a stored `zio_encrypt` value (`on` is aes-256-gcm, as ZIO_CRYPT_ON_VALUE).
    pub fn from_u64(v: u64) -> Option<Suite> {
        Some(match v {
            ZIO_CRYPT_ON | 8 => Suite::Aes256Gcm,
            3 => Suite::Aes128Ccm,
            4 => Suite::Aes192Ccm,
            5 => Suite::Aes256Ccm,
            6 => Suite::Aes128Gcm,
            7 => Suite::Aes192Gcm,
            _ => return None,
        })
    }

    /// The property value (zio_crypt_table's name).
    pub fn name(self) -> &'static str {
        match self {
            Suite::Aes128Ccm => "aes-128-ccm",
            Suite::Aes192Ccm => "aes-192-ccm",
            Suite::Aes256Ccm => "aes-256-ccm",
            Suite::Aes128Gcm => "aes-128-gcm",
            Suite::Aes192Gcm => "aes-192-gcm",
            Suite::Aes256Gcm => "aes-256-gcm",
        }
    }

    /// The master key's (and each block key's) length in bytes.
    pub fn key_len(self) -> usize {
        match self {
            Suite::Aes128Ccm | Suite::Aes128Gcm => 16,
            Suite::Aes192Ccm | Suite::Aes192Gcm => 24,
            Suite::Aes256Ccm | Suite::Aes256Gcm => 32,
        }
    }

    fn gcm(self) -> bool {
        matches!(self, Suite::Aes128Gcm | Suite::Aes192Gcm | Suite::Aes256Gcm)
    }
}

/// `keyformat`: how the user's key material becomes the wrapping key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyFormat {
    Raw,
    Hex,
    Passphrase,
}

impl KeyFormat {
    /// ZFS_KEYFORMAT_* (0 is none).
    pub fn from_u64(v: u64) -> Option<KeyFormat> {
        match v {
            1 => Some(KeyFormat::Raw),
            2 => Some(KeyFormat::Hex),
            3 => Some(KeyFormat::Passphrase),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            KeyFormat::Raw => "raw",
            KeyFormat::Hex => "hex",
            KeyFormat::Passphrase => "passphrase",
        }
    }
}

/// The wrapping key from the user's key material, as libzfs derives it; the error says what
/// is wrong with the material in libzfs's words.
pub fn wrapping_key(format: KeyFormat, material: &[u8], salt: u64, iters: u64) -> std::result::Result<[u8; WRAPPING_KEY_LEN], String> {
    // Hex keys and passphrases are the first line of what was read (libzfs's getline).
    let m = material.split(|&b| b == b'\n').next().unwrap_or(material);
    let mut out = [0u8; WRAPPING_KEY_LEN];
    match format {
        KeyFormat::Raw => {
            // Taken whole: a trailing newline makes a raw key too long, as libzfs reads it.
            if material.len() != WRAPPING_KEY_LEN {
                return Err(format!("Raw key too {} (expected {WRAPPING_KEY_LEN}).", if material.len() < WRAPPING_KEY_LEN { "short" } else { "long" }));
            }
            out.copy_from_slice(material);
        }
        KeyFormat::Hex => {
            if m.len() != WRAPPING_KEY_LEN * 2 {
                return Err(format!("Hex key too {} (expected {}).", if m.len() < WRAPPING_KEY_LEN * 2 { "short" } else { "long" }, WRAPPING_KEY_LEN * 2));
            }
            if !m.iter().all(u8::is_ascii_hexdigit) {
                return Err("Invalid hex character detected.".into());
            }
            for (i, pair) in m.chunks(2).enumerate() {
                let s = std::str::from_utf8(pair).ok().and_then(|s| u8::from_str_radix(s, 16).ok());
                out[i] = s.ok_or_else(|| "Invalid hex character detected.".to_string())?;
            }
        }
        KeyFormat::Passphrase => {
            // Lengths are checked when a passphrase is set, not when one is tried.
            if iters == 0 {
                return Err("Invalid pbkdf2iters value of 0.".into());
            }
            // The passphrase ends at its first NUL (libzfs takes it with strlen); PBKDF2
            // gets the salt as its 8 bytes in little-endian order.
            let m = m.split(|&b| b == 0).next().unwrap_or(m);
            pbkdf2::pbkdf2_hmac::<sha1::Sha1>(m, &salt.to_le_bytes(), iters.min(u32::MAX as u64) as u32, &mut out);
        }
    }
    Ok(out)
}

/// One AEAD operation in the suite's mode with a key of any AES length; `Err` when the MAC
/// does not match (wrong key, or damaged bytes).
fn open(gcm: bool, key: &[u8], iv: &[u8; IV_LEN], aad: &[u8], buf: &mut [u8], mac: &[u8; MAC_LEN]) -> std::result::Result<(), ()> {
    let nonce = GenericArray::from_slice(iv);
    let tag = GenericArray::from_slice(mac);
    macro_rules! run {
        ($t:ty) => {{
            let c = <$t>::new_from_slice(key).map_err(|_| ())?;
            c.decrypt_in_place_detached(nonce, aad, buf, tag).map_err(|_| ())
        }};
    }
    type Gcm<A> = aes_gcm::AesGcm<A, aes_gcm::aead::consts::U12>;
    type Ccm<A> = ccm::Ccm<A, ccm::consts::U16, ccm::consts::U12>;
    match (gcm, key.len()) {
        (true, 16) => run!(Gcm<aes::Aes128>),
        (true, 24) => run!(Gcm<aes::Aes192>),
        (true, 32) => run!(Gcm<aes::Aes256>),
        (false, 16) => run!(Ccm<aes::Aes128>),
        (false, 24) => run!(Ccm<aes::Aes192>),
        (false, 32) => run!(Ccm<aes::Aes256>),
        _ => Err(()),
    }
}

/// A dataset's keys once unwrapped (zio_crypt_key_t's key material).
#[derive(Clone)]
pub struct MasterKey {
    pub suite: Suite,
    pub guid: u64,
    /// DSL_CRYPTO_VERSION: 0 for keys of OpenZFS 0.8.0's first format (what MACs cover differs).
    pub version: u64,
    pub master: Vec<u8>,
    pub hmac: [u8; HMAC_KEY_LEN],
}

impl Drop for MasterKey {
    /// Key material does not outlive its use in freed memory.
    fn drop(&mut self) {
        use zeroize::Zeroize;
        self.master.zeroize();
        self.hmac.zeroize();
    }
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MasterKey({}, guid {:#x})", self.suite.name(), self.guid)
    }
}

/// The wrapped keys of a DSL crypto key object (DSL_CRYPTO_* entries).
#[derive(Clone, Debug, Default)]
pub struct WrappedKey {
    pub suite: u64,
    pub guid: u64,
    pub version: u64,
    pub iv: Vec<u8>,
    pub mac: Vec<u8>,
    pub master: Vec<u8>,
    pub hmac: Vec<u8>,
}

/// zio_crypt_key_unwrap. `Ok(None)` when the wrapping key is wrong (the MAC does not match);
/// `Err` when the stored object is malformed.
pub fn unwrap_key(w: &WrappedKey, wkey: &[u8; WRAPPING_KEY_LEN]) -> Result<Option<MasterKey>> {
    let suite = Suite::from_u64(w.suite).ok_or_else(|| FormatError::invalid("DSL crypto key", format!("unknown suite {}", w.suite)))?;
    let klen = suite.key_len();
    if w.iv.len() != IV_LEN || w.mac.len() != MAC_LEN || w.master.len() < klen || w.hmac.len() != HMAC_KEY_LEN {
        return Err(FormatError::invalid(
            "DSL crypto key",
            format!(
            "iv {} mac {} master key {} hmac key {} bytes",
            w.iv.len(),
            w.mac.len(),
            w.master.len(),
            w.hmac.len()
        )));
    }
    let mut buf = Vec::with_capacity(klen + HMAC_KEY_LEN);
    buf.extend_from_slice(&w.master[..klen]);
    buf.extend_from_slice(&w.hmac);
    let mut aad = Vec::new();
    if w.version != 0 {
        aad.extend_from_slice(&w.guid.to_le_bytes());
        aad.extend_from_slice(&w.suite.to_le_bytes());
        aad.extend_from_slice(&w.version.to_le_bytes());
    }
    let iv: [u8; IV_LEN] = w.iv[..].try_into().expect("length checked");
    let mac: [u8; MAC_LEN] = w.mac[..].try_into().expect("length checked");
    // The wrapping key is always 32 bytes: AES-256 in the suite's mode.
    if open(suite.gcm(), wkey, &iv, &aad, &mut buf, &mac).is_err() {
        return Ok(None);
    }
    let mut hmac = [0u8; HMAC_KEY_LEN];
    hmac.copy_from_slice(&buf[klen..]);
    zeroize::Zeroize::zeroize(&mut buf[klen..]);
    buf.truncate(klen);
    Ok(Some(MasterKey { suite, guid: w.guid, version: w.version, master: buf, hmac }))
}

impl MasterKey {
    /// The key of blocks written with `salt` (zio_crypt_key_get_salt's HKDF), wiped when
    /// dropped.
    pub fn block_key(&self, salt: &[u8; SALT_LEN]) -> zeroize::Zeroizing<Vec<u8>> {
        let hk = hkdf::Hkdf::<sha2::Sha512>::new(None, &self.master);
        let mut out = zeroize::Zeroizing::new(vec![0u8; self.suite.key_len()]);
        hk.expand(salt, &mut out).expect("a key of at most 32 bytes is a valid HKDF-SHA512 length");
        out
    }

    /// Decrypt `buf` in place with the block key `key`: `Err(())` when the MAC does not match.
    pub fn open(&self, key: &[u8], iv: &[u8; IV_LEN], aad: &[u8], buf: &mut [u8], mac: &[u8; MAC_LEN]) -> std::result::Result<(), ()> {
        open(self.suite.gcm(), key, iv, aad, buf, mac)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// A DSL crypto key OpenZFS's ztest wrote (aes-192-ccm, raw key
    /// "abcdefghijklmnopqrstuvwxyz012345"), as OpenZFS's zdb dumps it.
    fn ztest_key() -> WrappedKey {
        WrappedKey {
            suite: 4,
            guid: (-3310550209707025077i64) as u64,
            version: 1,
            iv: h("a339e73e0ca5760c247eacf2"),
            mac: h("5813f9ec7bb8384b108aa84bc7db1338"),
            master: h("7e3c379739ece128a7bb18daed3934ad0c0eb02731d8bd46500875968f7f0000"),
            hmac: h("ea57afe676133f9f92c871a4dd57daace65d672016bb2fd4d884256201d0e1746e0c57755eee5a7b52299da296abefd4efc60d4fde920aca6a2c4753d7205392"),
        }
    }

    #[test]
    fn a_key_openzfs_wrapped_unwraps_with_its_wrapping_key_only() {
        let w = ztest_key();
        let good = wrapping_key(KeyFormat::Raw, b"abcdefghijklmnopqrstuvwxyz012345", 0, 0).unwrap();
        let k = unwrap_key(&w, &good).unwrap().expect("the right key opens it");
        assert_eq!(k.suite, Suite::Aes192Ccm);
        assert_eq!(k.master.len(), 24);
        let mut bad = good;
        bad[0] ^= 1;
        assert!(unwrap_key(&w, &bad).unwrap().is_none());
        let mut damaged = w.clone();
        damaged.guid ^= 1;
        assert!(unwrap_key(&damaged, &good).unwrap().is_none(), "the guid is authenticated");
    }

    #[test]
    fn key_material_is_checked_as_libzfs_checks_it() {
        assert!(wrapping_key(KeyFormat::Raw, b"short", 0, 0).unwrap_err().contains("too short"));
        assert!(wrapping_key(KeyFormat::Hex, &[b'0'; 63], 0, 0).unwrap_err().contains("too short"));
        assert!(wrapping_key(KeyFormat::Hex, &[b'g'; 64], 0, 0).unwrap_err().contains("Invalid hex character"));
        assert!(wrapping_key(KeyFormat::Raw, &[b'k'; 33], 0, 0).unwrap_err().contains("too long"));
        assert!(wrapping_key(KeyFormat::Hex, format!("+{}", "0".repeat(63)).as_bytes(), 0, 0).unwrap_err().contains("Invalid hex character"));
        let k = wrapping_key(KeyFormat::Hex, format!("{}\nsecond line", "ab".repeat(32)).as_bytes(), 0, 0).unwrap();
        assert_eq!(k, [0xab; 32], "only the first line is the key");
        assert_eq!(wrapping_key(KeyFormat::Hex, "00ff".repeat(16).as_bytes(), 0, 0).unwrap()[..2], [0, 0xff]);
        // RFC 6070's PBKDF2-HMAC-SHA1 vector, through the passphrase path (salt is 8 bytes here,
        // so only the shape is checked: 32 bytes, deterministic, salt-dependent).
        let a = wrapping_key(KeyFormat::Passphrase, b"password\n", 7, 1000).unwrap();
        assert_eq!(a, wrapping_key(KeyFormat::Passphrase, b"password", 7, 1000).unwrap());
        assert_ne!(a, wrapping_key(KeyFormat::Passphrase, b"password", 8, 1000).unwrap());
    }
}

/// The 32 bytes (24 for key version 0) a block pointer adds to a MAC's authenticated data
/// (blkptr_auth_buf_t: blk_prop with its non-portable fields zeroed, little-endian; the MAC
/// from the checksum's upper half; a zero pad).
fn bp_auth_buf(bp: &crate::blkptr::BlockPointer, version: u64, out: &mut Vec<u8>) {
    let mut prop = bp.raw_word(6);
    let hole = !bp.embedded && bp.raw_word(0) == 0 && bp.raw_word(1) == 0;
    let mac = if bp.typ != crate::types::DMU_OT_OBJSET { bp_params(bp).2 } else { [0u8; MAC_LEN] };
    const DEDUP: u64 = 1 << 62;
    const CHECKSUM: u64 = 0xff << 40;
    const PSIZE: u64 = 0xffff << 16;
    const COMPRESS: u64 = 0x7f << 32;
    const BYTEORDER: u64 = 1 << 63;
    if version == 0 {
        prop &= !(DEDUP | CHECKSUM | PSIZE);
    } else if hole {
        prop = 0;
    } else {
        if bp.level != 0 {
            prop &= !(BYTEORDER | COMPRESS | PSIZE);
        }
        prop &= !(DEDUP | CHECKSUM);
    }
    out.extend_from_slice(&prop.to_le_bytes());
    out.extend_from_slice(&mac);
    if version != 0 {
        out.extend_from_slice(&[0u8; 8]);
    }
}

/// The MAC an encrypted dataset's indirect block carries in its parent's pointer
/// (zio_crypt_do_indirect_mac_checksum): SHA-512 of the auth buffers of all its block
/// pointers, holes included, cut to 16 bytes. No key is needed. `le`: the block's byte order.
pub fn indirect_mac(block: &[u8], le: bool, version: u64) -> Result<[u8; MAC_LEN]> {
    use sha2::Digest;
    let mut h = sha2::Sha512::new();
    let mut buf = Vec::with_capacity(32);
    for chunk in block.chunks_exact(128) {
        let bp = crate::blkptr::BlockPointer::decode(chunk, le)?;
        buf.clear();
        bp_auth_buf(&bp, version, &mut buf);
        h.update(&buf);
    }
    let mut out = [0u8; MAC_LEN];
    out.copy_from_slice(&h.finalize()[..MAC_LEN]);
    Ok(out)
}

/// What an objset MAC takes of a dnode (zio_crypt_do_dnode_hmac_updates): its 64-byte core
/// with the multi-byte fields a reader would swap in little-endian order, its flags cut to the
/// spill flag and dn_used zeroed, then the auth buffers of its block pointers and spill
/// pointer. The bonus is left out. `d`: the dnode's bytes (its slots), in byte order `le`.
fn dnode_hmac_input(d: &[u8], le: bool, version: u64, out: &mut Vec<u8>) -> Result<()> {
    if d.len() < 512 {
        return Err(FormatError::invalid("objset dnode", format!("{} bytes", d.len())));
    }
    let mut core = d[..64].to_vec();
    if !le {
        core[8..10].reverse(); // dn_datablkszsec
        core[10..12].reverse(); // dn_bonuslen
        core[16..24].reverse(); // dn_maxblkid
    }
    core[7] &= DNODE_FLAG_SPILL_BLKPTR;
    core[24..32].fill(0); // dn_used
    out.extend_from_slice(&core);
    let nblkptr = (d[3] as usize).min(3);
    for j in 0..nblkptr {
        bp_auth_buf(&crate::blkptr::BlockPointer::decode(&d[64 + j * 128..], le)?, version, out);
    }
    if d[7] & DNODE_FLAG_SPILL_BLKPTR != 0 {
        bp_auth_buf(&crate::blkptr::BlockPointer::decode(&d[384..], le)?, version, out);
    }
    Ok(())
}

/// The MACs an encrypted objset block keeps at bytes 720 (portable) and 752 (local), made
/// again with the dataset's HMAC key (zio_crypt_do_objset_hmacs): the portable one over the
/// objset type (8 bytes, big-endian, as OpenZFS hashes it), its portable flags (none) and the
/// meta dnode; the local one over the flags and the accounting dnodes, zero when there is no
/// user accounting to cover. `block`: the objset block, in byte order `le`.
pub fn objset_macs(key: &MasterKey, block: &[u8], le: bool) -> Result<([u8; 32], [u8; 32])> {
    use hmac::Mac;
    type H = hmac::Hmac<sha2::Sha512>;
    if block.len() < 1024 {
        return Err(FormatError::invalid("objset", format!("{} bytes", block.len())));
    }
    let (os_type, os_flags) = (u64_at(block, 704, le, "objset")?, u64_at(block, 712, le, "objset")?);
    let mut input = Vec::with_capacity(1024);
    input.extend_from_slice(&os_type.to_be_bytes());
    input.extend_from_slice(&0u64.to_le_bytes());
    dnode_hmac_input(&block[..512], le, key.version, &mut input)?;
    let mut m = <H as Mac>::new_from_slice(&key.hmac).expect("HMAC takes any key length");
    m.update(&input);
    let mut portable = [0u8; 32];
    portable.copy_from_slice(&m.finalize().into_bytes()[..32]);
    let mut local = [0u8; 32];
    const USERACCOUNTING_COMPLETE: u64 = 1;
    let present = |o: usize| block.len() >= o + 512 && block[o] != 0;
    if os_flags & USERACCOUNTING_COMPLETE != 0 && block.len() > 1024 && (present(1024) || present(1536)) {
        input.clear();
        input.extend_from_slice(&os_flags.to_le_bytes());
        for (o, need) in [(1024, 2048), (1536, 2048), (2048, 4096)] {
            if block.len() >= need && present(o) {
                dnode_hmac_input(&block[o..o + 512], le, key.version, &mut input)?;
            }
        }
        let mut m = <H as Mac>::new_from_slice(&key.hmac).expect("HMAC takes any key length");
        m.update(&input);
        local.copy_from_slice(&m.finalize().into_bytes()[..32]);
    }
    Ok((portable, local))
}

/// The salt, IV and MAC of an encrypted block pointer (zio_crypt_decode_params_bp,
/// zio_crypt_decode_mac_bp): the bytes its words had in the memory of the host that wrote the
/// block, the salt in DVA 2's first word, the IV in its second and the fill word's upper half,
/// the MAC in the checksum's upper two words.
pub fn bp_params(bp: &crate::blkptr::BlockPointer) -> ([u8; SALT_LEN], [u8; IV_LEN], [u8; MAC_LEN]) {
    let order = |w: u64| if bp.little_endian { w.to_le_bytes() } else { w.to_be_bytes() };
    let salt = order(bp.raw_word(4));
    let mut iv = [0u8; IV_LEN];
    iv[..8].copy_from_slice(&order(bp.raw_word(5)));
    let iv2 = (bp.raw_word(11) >> 32) as u32;
    iv[8..].copy_from_slice(&if bp.little_endian { iv2.to_le_bytes() } else { iv2.to_be_bytes() });
    let mut mac = [0u8; MAC_LEN];
    mac[..8].copy_from_slice(&order(bp.raw_word(14)));
    mac[8..].copy_from_slice(&order(bp.raw_word(15)));
    (salt, iv, mac)
}

/// Open `ct` (the encrypted spans of a block, one after the other) and put each span's
/// plaintext back at its place in `out`.
fn open_spans(key: &MasterKey, bkey: &[u8], iv: &[u8; IV_LEN], aad: &[u8], mut ct: Vec<u8>, mac: &[u8; MAC_LEN], spans: Vec<std::ops::Range<usize>>, out: &mut [u8], what: &'static str) -> Result<()> {
    key.open(bkey, iv, aad, &mut ct, mac).map_err(|_| FormatError::Checksum { what })?;
    let mut at = 0;
    for s in spans {
        let len = s.len();
        out[s].copy_from_slice(&ct[at..at + len]);
        at += len;
    }
    Ok(())
}

/// DNODE_FLAG_SPILL_BLKPTR, the one dnode flag a MAC covers (DNODE_CRYPT_PORTABLE_FLAGS_MASK).
const DNODE_FLAG_SPILL_BLKPTR: u8 = 1 << 2;

/// Decrypt a dnode block of an encrypted dataset (zio_crypt_init_uios_dnode): each dnode's
/// bonus area is encrypted when its bonus type is an encrypted type (and it has a bonus);
/// everything else is plaintext and authenticated: the first 64 bytes of each dnode (its flags
/// cut to the spill flag, dn_used zeroed), each of its block pointers (and its spill pointer)
/// as `bp_auth_buf`, and a plaintext bonus area whole. `le`: the block's byte order.
pub fn open_dnode_block(key: &MasterKey, bkey: &[u8], iv: &[u8; IV_LEN], mac: &[u8; MAC_LEN], mut block: Vec<u8>, le: bool) -> Result<Vec<u8>> {
    let version = key.version;
    const SLOT: usize = 512;
    let n = block.len() / SLOT;
    let mut aad = Vec::with_capacity(block.len());
    let mut ct = Vec::new();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < n {
        let d = &block[i * SLOT..];
        // dnode_phys_t: dn_type 0, dn_nblkptr 3, dn_bonustype 4, dn_flags 7, dn_bonuslen 10,
        // dn_extra_slots 12, dn_used 24.
        let (typ, nblkptr, bonustype, flags, extra) = (d[0], d[3] as usize, d[4], d[7], d[12] as usize);
        let bonuslen = u16::from_le_bytes([d[10], d[11]]); // non-zero in either order
        let slots = (extra + 1).min(n - i);
        let end = slots * SLOT;
        let spill = flags & DNODE_FLAG_SPILL_BLKPTR != 0;
        let bonus_at = 64 + nblkptr * 128;
        let bonus_end = if spill { end.saturating_sub(128) } else { end };
        // A free slot has no block pointers: its "bonus" starts at byte 64, as DN_BONUS makes it.
        if bonus_at > bonus_end {
            return Err(FormatError::invalid("encrypted dnode block", format!("dnode {i}: {nblkptr} block pointers in {slots} slots")));
        }
        let mut core = d[..64].to_vec();
        core[7] &= DNODE_FLAG_SPILL_BLKPTR;
        core[24..32].fill(0); // dn_used
        aad.extend_from_slice(&core);
        for j in 0..nblkptr {
            let bp = crate::blkptr::BlockPointer::decode(&d[64 + j * 128..], le)?;
            bp_auth_buf(&bp, version, &mut aad);
        }
        if spill {
            let bp = crate::blkptr::BlockPointer::decode(&d[end - 128..], le)?;
            bp_auth_buf(&bp, version, &mut aad);
        }
        if typ != 0 && crate::types::ot_is_encrypted(bonustype) && bonuslen != 0 {
            let at = i * SLOT + bonus_at;
            ct.extend_from_slice(&block[at..i * SLOT + bonus_end]);
            spans.push(at..i * SLOT + bonus_end);
        } else {
            aad.extend_from_slice(&d[bonus_at..bonus_end]);
        }
        i += slots;
    }
    open_spans(key, bkey, iv, &aad, ct, mac, spans, &mut block, "encrypted dnode block MAC")?;
    Ok(block)
}

/// TX_WRITE and TX_CLONE_RANGE, the log records whose block pointers stay plaintext.
const TX_WRITE: u64 = 9;
const TX_CLONE_RANGE: u64 = 24;
/// sizeof (zil_chain_t), and its part a MAC covers (all but the embedded checksum).
const ZIL_CHAIN: usize = 184;
const ZIL_CHAIN_AUTH: usize = 144;

/// Decrypt an intent-log block of an encrypted dataset (zio_crypt_init_uios_zil): the chain
/// header (but its checksum) and each record's 32-byte lr_t are authenticated; a write
/// record's block pointer is authenticated and what lies between and after is encrypted; the
/// rest of every other record is encrypted. Bytes past `zc_nused` read as zeros.
pub fn open_zil_block(key: &MasterKey, bkey: &[u8], iv: &[u8; IV_LEN], mac: &[u8; MAC_LEN], block: Vec<u8>, le: bool) -> Result<Vec<u8>> {
    let u64_at = |b: &[u8], o: usize| u64_at(b, o, le, "encrypted log block");
    if block.len() < ZIL_CHAIN {
        return Err(FormatError::invalid("encrypted log block", format!("{} bytes", block.len())));
    }
    let nused = u64_at(&block, 136)?;
    if nused < ZIL_CHAIN as u64 || nused > block.len() as u64 {
        return Err(FormatError::invalid("encrypted log block", format!("zc_nused {nused} of {} bytes", block.len())));
    }
    let nused = nused as usize;
    let mut out = vec![0u8; block.len()];
    out[..ZIL_CHAIN].copy_from_slice(&block[..ZIL_CHAIN]);
    let mut aad = block[..ZIL_CHAIN_AUTH].to_vec();
    let mut ct = Vec::new();
    let mut spans = Vec::new();
    let mut at = ZIL_CHAIN;
    while at < nused {
        if nused - at < 32 {
            return Err(FormatError::invalid("encrypted log block", format!("record at {at} runs past zc_nused {nused}")));
        }
        let (txtype, reclen) = (u64_at(&block, at)?, u64_at(&block, at + 8)?);
        if reclen < 32 || reclen > (nused - at) as u64 {
            return Err(FormatError::invalid("encrypted log block", format!("record at {at}: length {reclen}")));
        }
        let reclen = reclen as usize;
        let rec = at..at + reclen;
        out[at..at + 32].copy_from_slice(&block[at..at + 32]);
        aad.extend_from_slice(&block[at..at + 32]);
        let mut enc = |r: std::ops::Range<usize>, ct: &mut Vec<u8>| {
            ct.extend_from_slice(&block[r.clone()]);
            spans.push(r);
        };
        let plain_from = |o: usize, out: &mut Vec<u8>, aad: &mut Vec<u8>, len: usize| {
            out[at + o..at + o + len].copy_from_slice(&block[at + o..at + o + len]);
            aad.extend_from_slice(&block[at + o..at + o + len]);
        };
        match txtype {
            TX_WRITE if reclen >= 192 => {
                enc(at + 32..at + 64, &mut ct);
                plain_from(64, &mut out, &mut aad, 128);
                if reclen > 192 {
                    enc(at + 192..rec.end, &mut ct);
                }
            }
            TX_CLONE_RANGE if reclen >= 64 => {
                enc(at + 32..at + 64, &mut ct);
                plain_from(64, &mut out, &mut aad, reclen - 64);
            }
            TX_WRITE | TX_CLONE_RANGE => {
                return Err(FormatError::invalid("encrypted log block", format!("record at {at}: type {txtype} of {reclen} bytes")));
            }
            _ => enc(at + 32..rec.end, &mut ct),
        }
        at += reclen;
    }
    open_spans(key, bkey, iv, &aad, ct, mac, spans, &mut out, "encrypted log block MAC")?;
    Ok(out)
}
