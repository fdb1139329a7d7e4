"""`zpool get all` lists what OpenZFS 2.1 lists, in its order: the visible pool properties in
zpool_prop_t order, then feature@ for every spa_feature_t — both read at test time from the
OpenZFS 2.1 source mirror (the headers and zpool_prop.c / zfeature_common.c) — and after them
the newer features oxzfs knows."""
import os
import re
import subprocess

import pytest

from test_write import new_pool

MIRROR = "/work/.mirror/openzfs+zfs/repo"
TAG = "zfs-2.1.9"


def source(path):
    if not os.path.isdir(MIRROR):
        pytest.fail(f"the OpenZFS source mirror is missing at {MIRROR} (needed to read zpool_prop_t)")
    return subprocess.run(["git", "-C", MIRROR, "show", f"{TAG}:{path}"], capture_output=True, text=True,
                          check=True).stdout


def enum(text, first, last):
    body = text[text.index(first):]
    body = body[:body.index(last)]
    return re.findall(r"\b(ZPOOL_PROP_\w+|SPA_FEATURE_\w+)\b", body)


def openzfs_order():
    props = enum(source("include/sys/fs/zfs.h"), "ZPOOL_PROP_NAME,", "ZPOOL_NUM_PROPS")
    reg = source("module/zcommon/zpool_prop.c")
    names = dict(re.findall(r"zprop_register_\w+\((ZPOOL_PROP_\w+),\s*\"([^\"]+)\"", reg))
    hidden = set(re.findall(r"zprop_register_hidden\((ZPOOL_PROP_\w+)", reg))
    visible = [names[p] for p in props if p in names and p not in hidden]
    feats = enum(source("include/zfeature_common.h"), "SPA_FEATURE_ASYNC_DESTROY", "SPA_FEATURES\n")
    fc = source("module/zcommon/zfeature_common.c")
    fnames = dict(re.findall(r"zfeature_register\((SPA_FEATURE_\w+),\s*\"[^\"]+\",\s*\"([^\"]+)\"", fc, re.S))
    return visible + [f"feature@{fnames[f]}" for f in feats]


def test_zpool_get_all_lists_openzfs_properties_in_order(oxzfs):
    pool = "wprops"
    new_pool(oxzfs, pool, "props", 1)
    r = oxzfs.zpool("get", "-H", "all", pool)
    assert r.returncode == 0, repr(r)
    rows = [line.split("\t") for line in r.stdout.splitlines()]
    names, order = [row[1] for row in rows], openzfs_order()
    # OpenZFS 2.1's list, then only the features oxzfs knows that 2.1 does not (blake3, ...).
    assert names[:len(order)] == order
    assert all(n.startswith("feature@") and n not in order for n in names[len(order):]), names[len(order):]
    got = {row[1]: (row[2], row[3]) for row in rows}
    assert got["compatibility"] == ("off", "default") and got["checkpoint"] == ("-", "-")
    assert got["feature@lz4_compress"] == ("active", "local")
    assert got["feature@encryption"] == ("disabled", "local")
    assert int(got["load_guid"][0]) > 0 and got["load_guid"][0] != got["guid"][0]
    assert oxzfs.export(pool).returncode == 0
