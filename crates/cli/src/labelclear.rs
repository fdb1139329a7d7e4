//! `zpool labelclear [-f] <vdev>`: the ZFS labels of a device that no imported pool uses wiped,
//! as zpool_do_labelclear and zpool_clear_label do: every label with a valid config has its
//! config and uberblocks zeroed (its leading pad left alone), and a cache device's L2ARC
//! header too. A device of a pool imported here is refused; one of an exported or possibly
//! active pool only with -f.

use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::opts::{parse, verb_opts};
use crate::verb::{Out, State};
use oxzfs_format::label::{label_offset, VDEV_LABELS, VDEV_LABEL_SIZE, VDEV_LABEL_START_SIZE, VDEV_PAD_SIZE};

pub const LABELCLEAR_USAGE: &str = "usage:\n\tlabelclear [-f] <vdev>\n";

verb_opts!(
    /// `zpool labelclear`'s options.
    LabelclearOpts {
    #[arg(short = 'f')]
    force: bool,
});

/// Label `state` values (pool_state_t). A destroyed pool's device (2) is not in use: its
/// labels are cleared without -f.
const POOL_STATE_ACTIVE: u64 = 0;
const POOL_STATE_EXPORTED: u64 = 1;
const POOL_STATE_L2CACHE: u64 = 4;
/// sizeof (l2arc_dev_hdr_phys_t), at the start of a cache device's data area.
const L2ARC_DEV_HDR_SIZE: usize = 512;

fn fail(msg: String) -> Out {
    (String::new(), msg, 1)
}

pub fn labelclear(st: &mut State, args: &[String], cwd: &Path) -> Out {
    let o: LabelclearOpts = match parse(args) {
        Ok(o) => o,
        Err(e) => return (String::new(), format!("{e}\n{LABELCLEAR_USAGE}"), 2),
    };
    let arg = match o.operands.as_slice() {
        [] => return (String::new(), format!("missing vdev name\n{LABELCLEAR_USAGE}"), 2),
        [a] => a,
        _ => return (String::new(), format!("too many arguments\n{LABELCLEAR_USAGE}"), 2),
    };
    let path = crate::vdevspec::resolve(cwd, arg);
    let file = match std::fs::OpenOptions::new().read(true).write(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !arg.starts_with('/') => {
            return fail(format!("failed to find device {arg}, try specifying absolute path instead\n"));
        }
        Err(e) => return fail(format!("failed to open {}: {}\n", path.display(), crate::verb::strerror(&e))),
    };
    let dev = match oxzfs::spa::probe(&path) {
        Ok(d) => d,
        Err(_) => return fail(format!("failed to read label from {}\n", path.display())),
    };
    let shown = path.display().to_string();
    let name = dev.config.get_str("name").unwrap_or_default().to_string();
    // zpool_in_use: a pool imported here is active; an active label of a pool that is not
    // imported here may be in use on another system.
    let imported = st.pools.values().any(|i| i.pool.guid() == dev.pool_guid && dev.pool_guid != 0);
    if imported {
        let more = if o.force { ". Offline the disk first to clear its label." } else { "" };
        return fail(format!("{shown} is a member (ACTIVE) of pool \"{name}\"{more}\n"));
    }
    match dev.state {
        POOL_STATE_EXPORTED if !o.force => {
            return fail(format!("use '-f' to override the following error:\n{shown} is a member of exported pool \"{name}\"\n"));
        }
        POOL_STATE_ACTIVE if !o.force => {
            return fail(format!("use '-f' to override the following error:\n{shown} is a member of potentially active pool \"{name}\"\n"));
        }
        _ => {}
    }
    let size = match file.metadata() {
        Ok(m) if m.len() > 0 => m.len(),
        // A block device: its size from the end.
        _ => match std::io::Seek::seek(&mut &file, std::io::SeekFrom::End(0)) {
            Ok(n) => n,
            Err(e) => return fail(format!("failed to clear label for {shown}: {}\n", crate::verb::strerror(&e))),
        },
    };
    let size = size / VDEV_LABEL_SIZE * VDEV_LABEL_SIZE;
    // Only the labels that hold a config in a known state, as zpool_clear_label.
    let valid = |cfg: &oxzfs_format::nvlist::NvList| cfg.get_u64("guid").unwrap_or(0) != 0 && cfg.get_u64("state").is_some_and(|s| s <= POOL_STATE_L2CACHE);
    let mut cleared = false;
    let mut l2cache = false;
    let zeros = vec![0u8; (VDEV_LABEL_SIZE - 2 * VDEV_PAD_SIZE) as usize];
    for l in 0..VDEV_LABELS {
        let off = label_offset(l, size);
        let mut buf = vec![0u8; VDEV_LABEL_SIZE as usize];
        if file.read_exact_at(&mut buf, off).is_err() {
            continue;
        }
        let cfg_off = 16usize << 10;
        let Ok(cfg) = oxzfs_format::label::decode_label_config(&buf[cfg_off..cfg_off + (112 << 10)], off + cfg_off as u64) else { continue };
        if !valid(&cfg) {
            continue;
        }
        l2cache |= cfg.get_u64("state") == Some(POOL_STATE_L2CACHE);
        if file.write_all_at(&zeros, off + 2 * VDEV_PAD_SIZE).is_ok() {
            cleared = true;
        }
    }
    if l2cache && file.write_all_at(&[0u8; L2ARC_DEV_HDR_SIZE], VDEV_LABEL_START_SIZE).is_err() {
        cleared = false;
    }
    let _ = file.sync_all();
    if !cleared {
        return fail(format!("failed to clear label for {shown}\n"));
    }
    (String::new(), String::new(), 0)
}
