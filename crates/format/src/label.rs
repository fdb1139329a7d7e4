//! Vdev labels: four 256 KiB copies, two at the front of each leaf device and two at the end.
//!
//! ```text
//!   label (256K):  0 pad (8K) | 8K boot env (8K) | 16K config nvlist (112K, sha256 trailer)
//!                  | 128K uberblock ring (128K)
//!   device:        L0 | L1 | boot reserve (3.5M) | allocatable space ... | L2 | L3
//!                  (L2/L3 end at the device size rounded down to 256K)
//! ```
//! Each config block carries an embedded sha256 whose verifier is its absolute device offset,
//! so a block copied to another place does not verify.

use crate::checksum::{verify_embedded, write_embedded, ZIO_CHECKSUM_LABEL};
use crate::nvlist::NvList;
use crate::{FormatError, Result};

pub const VDEV_LABEL_SIZE: u64 = 256 << 10;
pub const VDEV_LABELS: usize = 4;
pub const VDEV_PAD_SIZE: u64 = 8 << 10;
pub const VDEV_BOOT_RESERVE: u64 = 7 << 19; // 3.5 MiB
/// Two labels plus the boot reserve: where allocatable space starts.
pub const VDEV_LABEL_START_SIZE: u64 = 2 * VDEV_LABEL_SIZE + VDEV_BOOT_RESERVE;
pub const VDEV_LABEL_END_SIZE: u64 = 2 * VDEV_LABEL_SIZE;
pub const VDEV_PHYS_OFFSET: u64 = 16 << 10;
pub const VDEV_PHYS_SIZE: usize = 112 << 10;
pub const VDEV_UBERBLOCK_RING_OFFSET: u64 = 128 << 10;
pub const VDEV_UBERBLOCK_RING: usize = 128 << 10;

/// Absolute offset of label `index` on a device of `device_size` bytes.
pub fn label_offset(index: usize, device_size: u64) -> u64 {
    let psize = device_size & !(VDEV_LABEL_SIZE - 1);
    let base = index as u64 * VDEV_LABEL_SIZE;
    if index < VDEV_LABELS / 2 {
        base
    } else {
        // (A device smaller than four labels has no valid end labels; never underflow.)
        base + psize.saturating_sub(VDEV_LABELS as u64 * VDEV_LABEL_SIZE)
    }
}

/// Verify and decode a label's config block (`phys` = the 112K block at device offset `phys_offset`).
pub fn decode_label_config(phys: &[u8], phys_offset: u64) -> Result<NvList> {
    if phys.len() != VDEV_PHYS_SIZE {
        return Err(FormatError::Truncated { what: "label config", need: VDEV_PHYS_SIZE, have: phys.len() });
    }
    if !verify_embedded(phys, ZIO_CHECKSUM_LABEL, [phys_offset, 0, 0, 0])? {
        return Err(FormatError::Checksum { what: "label config" });
    }
    NvList::decode_packed(&phys[..VDEV_PHYS_SIZE - 40])
}

/// A label config block: the packed nvlist, zero padding, the checksum trailer.
pub fn encode_label_config(config: &NvList, phys_offset: u64) -> Result<Vec<u8>> {
    let packed = config.encode_xdr();
    if packed.len() > VDEV_PHYS_SIZE - 40 {
        return Err(FormatError::invalid("label config", format!("{} bytes do not fit in 112K", packed.len())));
    }
    let mut b = vec![0u8; VDEV_PHYS_SIZE];
    b[..packed.len()].copy_from_slice(&packed);
    write_embedded(&mut b, ZIO_CHECKSUM_LABEL, [phys_offset, 0, 0, 0], cfg!(target_endian = "little"));
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets() {
        let size = (64 << 20) + 1000;
        assert_eq!(label_offset(0, size), 0);
        assert_eq!(label_offset(1, size), 256 << 10);
        assert_eq!(label_offset(2, size), (64 << 20) - (512 << 10));
        assert_eq!(label_offset(3, size), (64 << 20) - (256 << 10));
        assert_eq!(label_offset(3, 1000), 3 * VDEV_LABEL_SIZE, "tiny device: no underflow");
        assert_eq!(VDEV_LABEL_START_SIZE, 4 << 20);
    }

    #[test]
    fn config_round_trip_and_offset_binding() {
        let mut l = NvList::new();
        l.add_str("name", "tank");
        l.add_u64("txg", 42);
        let b = encode_label_config(&l, 16384).unwrap();
        assert_eq!(decode_label_config(&b, 16384).unwrap(), l);
        assert!(decode_label_config(&b, 16384 + 262144).is_err(), "a label moved elsewhere does not verify");
        assert!(decode_label_config(&b[..1000], 16384).is_err());
    }

    /// Label 0's config block of the `basic` fixture, rebuilt from its nvlist and trailer.
    fn real_config_block() -> Vec<u8> {
        let mut b = crate::nvlist::real_label_nvlist();
        b.resize(VDEV_PHYS_SIZE - 40, 0);
        b.extend(hex::decode("117a0cb17ada10026dedc22105406ad3036e55941e5135ef1f2485b586cc18a84e2b37b6f3450bab").unwrap());
        b
    }

    #[test]
    fn real_config_block_verifies_and_reencodes_byte_identical() {
        let b = real_config_block();
        let l = decode_label_config(&b, VDEV_PHYS_OFFSET).unwrap();
        assert_eq!(l.get_str("name"), Some("tank-basic"));
        assert_eq!(encode_label_config(&l, VDEV_PHYS_OFFSET).unwrap(), b);
        // The same bytes as label 1 do not verify (the verifier is the offset).
        assert_eq!(
            decode_label_config(&b, VDEV_LABEL_SIZE + VDEV_PHYS_OFFSET),
            Err(FormatError::Checksum { what: "label config" })
        );
        let mut bad = b.clone();
        bad[100] ^= 0x40;
        assert!(decode_label_config(&bad, VDEV_PHYS_OFFSET).is_err());
    }
}
