//! drr: the replication stream's records (`zfs send` / `zfs receive`, OpenZFS's
//! dmu_replay_record_t of include/sys/zfs_ioctl.h), as a little-endian sender writes them.
//!
//! Every record is `RECORD_SIZE` bytes: its type (u32), a payload length only BEGIN uses (u32),
//! then the fields of its type; its last 32 bytes (`TRAILER`, but in BEGIN, where they are
//! the end of the snapshot's name) hold the fletcher-4 of the stream up to them, which runs over
//! every record and payload (`fletcher4_more`). Payload lengths come from the fields: an
//! OBJECT's bonus rounded up to 8, a WRITE's logical (or compressed) size, a SPILL's length.

pub const DMU_BACKUP_MAGIC: u64 = 0x2F5bacbac;
/// drr_versioninfo's header types (its bits 0-1; the feature flags are bits 2-31).
pub const DMU_SUBSTREAM: u64 = 0x1;
pub const DMU_COMPOUNDSTREAM: u64 = 0x2;

pub const DMU_BACKUP_FEATURE_DEDUP: u64 = 1 << 0;
pub const DMU_BACKUP_FEATURE_DEDUPPROPS: u64 = 1 << 1;
pub const DMU_BACKUP_FEATURE_SA_SPILL: u64 = 1 << 2;
pub const DMU_BACKUP_FEATURE_EMBED_DATA: u64 = 1 << 16;
pub const DMU_BACKUP_FEATURE_LZ4: u64 = 1 << 17;
pub const DMU_BACKUP_FEATURE_LARGE_BLOCKS: u64 = 1 << 19;
pub const DMU_BACKUP_FEATURE_RESUMING: u64 = 1 << 20;
pub const DMU_BACKUP_FEATURE_REDACTED: u64 = 1 << 21;
pub const DMU_BACKUP_FEATURE_COMPRESSED: u64 = 1 << 22;
pub const DMU_BACKUP_FEATURE_LARGE_DNODE: u64 = 1 << 23;
pub const DMU_BACKUP_FEATURE_RAW: u64 = 1 << 24;
pub const DMU_BACKUP_FEATURE_ZSTD: u64 = 1 << 25;
pub const DMU_BACKUP_FEATURE_HOLDS: u64 = 1 << 26;

pub const DRR_BEGIN: u32 = 0;
pub const DRR_OBJECT: u32 = 1;
pub const DRR_FREEOBJECTS: u32 = 2;
pub const DRR_WRITE: u32 = 3;
pub const DRR_FREE: u32 = 4;
pub const DRR_END: u32 = 5;
pub const DRR_WRITE_BYREF: u32 = 6;
pub const DRR_SPILL: u32 = 7;
pub const DRR_WRITE_EMBEDDED: u32 = 8;
pub const DRR_OBJECT_RANGE: u32 = 9;
pub const DRR_REDACT: u32 = 10;

/// drr_begin.drr_flags.
pub const DRR_FLAG_CLONE: u32 = 1 << 0;
pub const DRR_FLAG_CI_DATA: u32 = 1 << 1;
pub const DRR_FLAG_FREERECORDS: u32 = 1 << 2;
pub const DRR_FLAG_SPILL_BLOCK: u32 = 1 << 3;
/// drr_object.drr_flags and drr_write.drr_flags.
pub const DRR_CHECKSUM_DEDUP: u8 = 1 << 0;
pub const DRR_OBJECT_SPILL: u8 = 1 << 2;
/// drr_spill.drr_flags.
pub const DRR_SPILL_UNMODIFIED: u8 = 1 << 2;

/// sizeof (dmu_replay_record_t), and where its checksum trailer starts.
pub const RECORD_SIZE: usize = 312;
pub const TRAILER: usize = RECORD_SIZE - 32;
/// The largest block a stream without -L carries whole (SPA_OLD_MAXBLOCKSIZE).
pub const OLD_MAXBLOCKSIZE: u64 = 128 << 10;
/// SPA_MAXBLOCKSIZE: no block of any stream is larger.
pub const MAX_BLOCKSIZE: u64 = 16 << 20;
/// DMU_OBJECT_END: a free to the end of an object.
pub const OBJECT_END: u64 = u64::MAX;

/// Fletcher-4 over more of a stream: `zc` the sums so far, `data` read as little-endian 32-bit
/// words (a tail of fewer than 4 bytes is left out, as fletcher_4_incremental_native does).
pub fn fletcher4_more(zc: &mut [u64; 4], data: &[u8]) {
    let [mut a, mut b, mut c, mut d] = *zc;
    for w in data.chunks_exact(4) {
        a = a.wrapping_add(u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as u64);
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    *zc = [a, b, c, d];
}

/// The u32 at byte `at` of a record.
pub fn u32_at(r: &[u8; RECORD_SIZE], at: usize) -> u32 {
    u32::from_le_bytes(r[at..at + 4].try_into().expect("4 bytes within the record"))
}

/// The u64 at byte `at` of a record.
pub fn u64_at(r: &[u8; RECORD_SIZE], at: usize) -> u64 {
    u64::from_le_bytes(r[at..at + 8].try_into().expect("8 bytes within the record"))
}

pub fn put32(r: &mut [u8; RECORD_SIZE], at: usize, v: u32) {
    r[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn put64(r: &mut [u8; RECORD_SIZE], at: usize, v: u64) {
    r[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// A record of type `typ`, every other byte zero.
pub fn record(typ: u32) -> [u8; RECORD_SIZE] {
    let mut r = [0u8; RECORD_SIZE];
    put32(&mut r, 0, typ);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incremental_fletcher_matches_whole() {
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut zc = [0u64; 4];
        fletcher4_more(&mut zc, &data[..312]);
        fletcher4_more(&mut zc, &data[312..1000]);
        fletcher4_more(&mut zc, &data[1000..]);
        assert_eq!(zc, crate::checksum::fletcher4(&data, true));
    }
}
