//! zfs_nicenum and zfs_nicebytes: a number with a unit suffix (K, M, G, …), as OpenZFS prints
//! sizes in listings.

/// OpenZFS's nicenum (zfs_nicenum_format, 1024-based, no "B"): "512", "1.50K", "7.27M".
pub fn nicenum(num: u64) -> String {
    const UNITS: [&str; 7] = ["", "K", "M", "G", "T", "P", "E"];
    let mut n = num;
    let mut index = 0;
    while n >= 1024 && index < 6 {
        n /= 1024;
        index += 1;
    }
    let u = UNITS[index];
    let base = 1024f64.powi(index as i32);
    if index == 0 || num % (1u64 << (10 * index)) == 0 {
        return format!("{n}{u}");
    }
    let val = num as f64 / base;
    for prec in (0..=2).rev() {
        let s = format!("{val:.prec$}{u}");
        if s.len() <= 5 || prec == 0 {
            return s;
        }
    }
    unreachable!()
}

/// OpenZFS's zfs_nicebytes: as `nicenum`, with "B" on counts under 1K ("0B", "512B").
pub fn nicebytes(num: u64) -> String {
    if num < 1024 {
        format!("{num}B")
    } else {
        nicenum(num)
    }
}

/// OpenZFS's zfs_nicetime (ZFS_NICENUM_TIME, 1000-based, whole units): "-" for 0 (a latency
/// without samples), "512ns", "12us", "1ms".
pub fn nicetime(num: u64) -> String {
    const UNITS: [&str; 5] = ["ns", "us", "ms", "s", "?"];
    if num == 0 {
        return "-".into();
    }
    let mut n = num;
    let mut index = 0;
    while n >= 1000 && index < 4 {
        n /= 1000;
        index += 1;
    }
    format!("{n}{}", UNITS[index])
}

#[cfg(test)]
mod tests {
    use super::{nicebytes, nicenum, nicetime};

    #[test]
    fn nicetime_as_zfs_nicetime() {
        assert_eq!(nicetime(0), "-");
        assert_eq!(nicetime(999), "999ns");
        assert_eq!(nicetime(1023), "1us");
        assert_eq!(nicetime(2_499_999), "2ms");
        assert_eq!(nicetime(1 << 35), "34s");
    }

    #[test]
    fn nicebytes_has_a_unit_below_1k() {
        assert_eq!((nicebytes(0), nicebytes(512), nicebytes(1536)), ("0B".to_string(), "512B".to_string(), "1.50K".to_string()));
    }

    #[test]
    fn nicenum_matches_zdb() {
        assert_eq!(nicenum(512), "512");
        assert_eq!(nicenum(1536), "1.50K");
        assert_eq!(nicenum(1024), "1K");
        assert_eq!(nicenum(16384), "16K");
        assert_eq!(nicenum(7_623_680), "7.27M");
        assert_eq!(nicenum(37_888), "37K");
        assert_eq!(nicenum(81_408), "79.5K");
        assert_eq!(nicenum(8_560_000), "8.16M");
    }
}
