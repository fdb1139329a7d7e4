#![no_main]
//! Native encryption's decoders: arbitrary bytes as an encrypted dnode block, an encrypted
//! intent-log block, a DSL crypto key's wrapped keys and a user's key material. The keys are
//! fixed, so the MACs fail: what is fuzzed is everything before that (the parsing of the
//! block into authenticated and encrypted parts), which must end in an error, never a panic.
use libfuzzer_sys::fuzz_target;
use oxzfs_format::crypt::{self, KeyFormat, MasterKey, Suite, WrappedKey, IV_LEN, MAC_LEN, SALT_LEN};
use oxzfs_format::zil;

const SUITES: [Suite; 6] = [Suite::Aes128Ccm, Suite::Aes192Ccm, Suite::Aes256Ccm, Suite::Aes128Gcm, Suite::Aes192Gcm, Suite::Aes256Gcm];

fn key(sel: u8) -> MasterKey {
    let suite = SUITES[(sel as usize) % SUITES.len()];
    let master: Vec<u8> = (0..suite.key_len() as u8).map(|i| i.wrapping_mul(37).wrapping_add(11)).collect();
    let mut hmac = [0u8; crypt::HMAC_KEY_LEN];
    for (i, b) in hmac.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(91) ^ 0x5a;
    }
    // Key version 0 (OpenZFS 0.8.0's first format) and 1 authenticate block pointers differently.
    MasterKey { suite, guid: 0x09b2_e4cc_5e1a_32c9, version: ((sel >> 3) & 1) as u64, master, hmac }
}

/// `n` bytes from `d` at `*at` (fewer at the end), moving `*at` on.
fn take<'a>(d: &'a [u8], at: &mut usize, n: usize) -> &'a [u8] {
    let s = &d[(*at).min(d.len())..(*at + n).min(d.len())];
    *at += n;
    s
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let (sel, rest) = (data[0], &data[1..]);
    let k = key(sel);
    let le = sel & 0x10 != 0;
    let salt: [u8; SALT_LEN] = [sel, 1, 2, 3, 4, 5, 6, 7];
    let bkey = k.block_key(&salt);
    let iv = [sel; IV_LEN];
    let mac = [sel ^ 0xff; MAC_LEN];
    match (sel >> 5) & 3 {
        // A dnode block (whole 512-byte slots are what the walk visits; the rest is ignored).
        0 => {
            let _ = crypt::open_dnode_block(&k, &bkey, &iv, &mac, rest.to_vec(), le);
        }
        // An intent-log block: raw, then with its MAC where an encrypted one keeps it, and
        // its embedded checksum checked as a block of an encrypted dataset.
        1 => {
            let _ = crypt::open_zil_block(&k, &bkey, &iv, &mac, rest.to_vec(), le);
            if let Some(m) = rest.get(168..184) {
                let mut zmac = [0u8; MAC_LEN];
                zmac.copy_from_slice(m);
                let _ = crypt::open_zil_block(&k, &bkey, &iv, &zmac, rest.to_vec(), le);
            }
            for slim in [true, false] {
                if let Ok(b) = zil::decode_log_block_of(rest, [0, 0, 0, 1], slim, true) {
                    for r in zil::records(b.records, b.le) {
                        let _ = r;
                    }
                }
            }
        }
        // A DSL crypto key object's entries, each of a length the input picks (all of them
        // are checked before use), unwrapped with a wrapping key from the input.
        2 => {
            let mut at = 0;
            let lens = take(rest, &mut at, 4).to_vec();
            let len = |i: usize, dflt: usize| lens.get(i).map_or(dflt, |&l| if l & 0x80 != 0 { dflt } else { l as usize });
            let num = |s: &[u8]| s.iter().fold(0u64, |a, &b| (a << 8) | b as u64);
            let suite = num(take(rest, &mut at, 1));
            let version = num(take(rest, &mut at, 1));
            let guid = num(take(rest, &mut at, 8));
            let w = WrappedKey {
                suite,
                guid,
                version,
                iv: take(rest, &mut at, len(0, IV_LEN)).to_vec(),
                mac: take(rest, &mut at, len(1, MAC_LEN)).to_vec(),
                master: take(rest, &mut at, len(2, crypt::MASTER_KEY_MAX_LEN)).to_vec(),
                hmac: take(rest, &mut at, len(3, crypt::HMAC_KEY_LEN)).to_vec(),
            };
            let mut wkey = [0u8; crypt::WRAPPING_KEY_LEN];
            let wk = take(rest, &mut at, crypt::WRAPPING_KEY_LEN);
            wkey[..wk.len()].copy_from_slice(wk);
            if let Ok(Some(m)) = crypt::unwrap_key(&w, &wkey) {
                let _ = m.block_key(&salt);
            }
        }
        // Key material in each format (a passphrase with few PBKDF2 iterations: the count is
        // the pool's, and time is not what is fuzzed here).
        _ => {
            for f in [KeyFormat::Raw, KeyFormat::Hex, KeyFormat::Passphrase] {
                let iters = (sel & 0x7) as u64; // 0 is refused
                let _ = crypt::wrapping_key(f, rest, u64::from(sel) << 17, iters);
            }
        }
    }
});
