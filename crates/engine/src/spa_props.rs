//! spa_props: pool properties (`zpool set`, the MOS's pool_props ZAP) and the pool's history
//! log (spa_history: `zpool history` records of each command).

use crate::dsl_pool::now;
use crate::spa::SPA_VERSION_FEATURES;
use crate::spa_feature::supported_feature;
use crate::dsl_pool::PoolW;
use crate::{Result, ZfsError};
use oxzfs_format::nvlist::NvList;
use oxzfs_format::types;

impl PoolW {
    /// `zpool set`: the comment goes into the config; the other properties into the MOS's
    /// pool_props ZAP (as spa_sync_props stores them). Values are OpenZFS's.
    pub fn set_pool_prop(&mut self, k: &str, v: &str) -> Result<()> {
        if let Some(f) = k.strip_prefix("feature@") {
            // zpool_valid_proplist's words; then spa_feature_enable in the open txg.
            let Some(&(guid, ..)) = supported_feature(f) else {
                return Err(ZfsError::Invalid(format!("feature '{f}' unsupported by kernel")));
            };
            if v != "enabled" {
                return Err(ZfsError::Invalid(format!("property '{k}' can only be set to 'enabled'")));
            }
            if self.version < SPA_VERSION_FEATURES {
                return Err(ZfsError::Invalid("pool must be upgraded to enable features".into()));
            }
            return self.feature_enable(guid);
        }
        let bad = || ZfsError::Invalid(format!("invalid value '{v}' for property '{k}'"));
        let onoff = |v: &str| match v {
            "on" => Ok(1u64),
            "off" => Ok(0),
            _ => Err(bad()),
        };
        let num = match k {
            "comment" => {
                if v.len() > 32 || v.chars().any(|c| c.is_control()) {
                    return Err(ZfsError::Invalid("comment must be at most 32 printable characters".into()));
                }
                self.config_nv.add_str("comment", v);
                self.config_dirty = true;
                return Ok(());
            }
            "cachefile" => return Ok(()), // no cache file: pools are found by scanning
            "autoexpand" | "autoreplace" | "listsnapshots" | "delegation" | "autotrim" | "multihost" => onoff(v)?,
            "failmode" => match v {
                "wait" => 0,
                "continue" => 1,
                "panic" => 2,
                _ => return Err(bad()),
            },
            "ashift" | "size" | "free" | "allocated" | "capacity" | "health" | "guid" | "version" | "readonly" | "altroot" => {
                return Err(ZfsError::Invalid(format!("property '{k}' is readonly")))
            }
            _ => return Err(ZfsError::Invalid(format!("property '{k}' is not a valid pool property"))),
        };
        self.pool_props_store(k, num)
    }

    /// The pool's guid as its config has it: the one the labels, the MOS config and the
    /// uberblock's guid sum are written with (a reguid changes it before the pool reopens).
    pub fn pool_guid(&self) -> u64 {
        self.config_nv.get_u64("pool_guid").unwrap_or(self.spa.guid)
    }

    /// spa_change_guid (`zpool reguid`): a new random guid for the pool, which must be healthy
    /// (every vdev online: ENXIO else), into the config (pool_guid and the root vdev's guid)
    /// and so into every label, the MOS config and the uberblock's guid sum; recorded in the
    /// history; synced. The caller reopens the pool by its new guid. (old, new).
    pub fn reguid(&mut self) -> Result<(u64, u64)> {
        if self.spa.root_vdev.state() != crate::vdev::VdevState::Online {
            return Err(ZfsError::Posix(libc::ENXIO, "one or more devices is currently unavailable".into()));
        }
        let old = self.pool_guid();
        let new = loop {
            let g = crate::zio::rand_u64();
            if g != 0 && g != old {
                break g;
            }
        };
        self.config_nv.add_u64("pool_guid", new);
        if let Some(mut tree) = self.config_nv.get_nvlist("vdev_tree").cloned() {
            tree.add_u64("guid", new);
            self.config_nv.add_nvlist("vdev_tree", tree);
        }
        self.config_dirty = true;
        self.log_history_internal("guid change", &format!("old={old} new={new}"))?;
        self.sync()?;
        Ok((old, new))
    }

    /// A numeric pool property as the MOS pool_props ZAP holds it (None: never set).
    pub(crate) fn pool_prop_num(&mut self, k: &str) -> Result<Option<u64>> {
        match self.mos.zap_lookup(1, "pool_props")? {
            Some(obj) => self.mos.zap_lookup(obj, k),
            None => Ok(None),
        }
    }

    /// A numeric pool property into the MOS pool_props ZAP (made on first use).
    pub(crate) fn pool_props_store(&mut self, k: &str, num: u64) -> Result<()> {
        let obj = match self.mos.zap_lookup(1, "pool_props")? {
            Some(o) => o,
            None => {
                let o = self.mos.create_zap(types::DMU_OT_POOL_PROPS, 0, 0, 0)?;
                self.mos.zap_add_u64(1, "pool_props", o)?;
                o
            }
        };
        self.mos.zap_add_u64(obj, k, num)
    }

    /// Append a command to the pool's history (the MOS "history" object: a log of packed
    /// nvlists, each after its u64 length, with the offsets in the bonus). The object is made on
    /// first use; when it is full, records are counted as lost (no ring wrap yet).
    pub fn log_history(&mut self, cmd: &str) -> Result<()> {
        let mut nv = NvList::new();
        nv.add_u64("history time", now());
        nv.add_str("history command", cmd);
        nv.add_u64("history who", unsafe { libc::getuid() } as u64);
        nv.add_str("history hostname", &self.hostname);
        self.history_append(&nv)
    }

    /// Append an internal event to the pool's history (spa_history_log_internal: what the
    /// pool did, in the open txg, shown by `zpool history -i` as "[txg:T] OPERATION MSG").
    pub fn log_history_internal(&mut self, operation: &str, msg: &str) -> Result<()> {
        let mut nv = NvList::new();
        nv.add_str("history internal str", msg);
        nv.add_str("internal_name", operation);
        nv.add_u64("history txg", self.txg);
        nv.add_u64("history time", now());
        nv.add_str("history hostname", &self.hostname);
        self.history_append(&nv)
    }

    /// Append one packed record to the history object.
    fn history_append(&mut self, nv: &NvList) -> Result<()> {
        const MAX: u64 = 1 << 20;
        let obj = match self.mos.zap_lookup(1, "history")? {
            Some(o) => o,
            None => {
                let o = self.mos.alloc_object(types::DMU_OT_SPA_HISTORY, 128 << 10, types::DMU_OT_SPA_HISTORY_OFFSETS, 40, 1)?;
                let mut b = vec![0u8; 40];
                b[8..16].copy_from_slice(&MAX.to_le_bytes());
                self.mos.set_bonus(o, &b)?;
                self.mos.zap_add_u64(1, "history", o)?;
                o
            }
        };
        let bonus = self.mos.bonus(obj)?;
        let w = |i: usize| u64::from_le_bytes(bonus[i * 8..i * 8 + 8].try_into().expect("8"));
        let (mut create_len, max, mut bof, mut eof, mut lost) = (w(0), w(1), w(2), w(3), w(4));
        let packed = nv.encode_xdr();
        let mut rec = (packed.len() as u64).to_le_bytes().to_vec();
        rec.extend_from_slice(&packed);
        if eof + rec.len() as u64 > max {
            lost += 1;
        } else {
            self.mos.write(obj, eof, &rec)?;
            eof += rec.len() as u64;
            if create_len == 0 {
                // The first record (the creation) is kept forever; the ring starts after it.
                create_len = eof;
                bof = eof;
            }
        }
        let mut b = vec![0u8; 40];
        for (i, v) in [create_len, max, bof, eof, lost].iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        self.mos.set_bonus(obj, &b)
    }
}
