"""Native encryption, read side, against pools OpenZFS's ztest wrote (it encrypts datasets with
every suite, under its raw key ZTEST_KEY): oxzfs unwraps each dataset's keys, decrypts every
encrypted block and checks its MAC (`zdb -K`), shows the encryption properties as OpenZFS's
zdb records them, and loads and unloads keys with zfs load-key / unload-key as OpenZFS words
them. A pool with encryption active imports read-write: its other datasets are written, every
change to an encrypted one is refused, and OpenZFS's zdb and libzpool accept the pool after."""
import os
import re
import subprocess

import pytest

from conftest import copy_vdevs
import oracle_pools
import test_write
from test_removal import zhack_rw

CRYPT = "zt-crypt"
SUITES = {3: "aes-128-ccm", 4: "aes-192-ccm", 5: "aes-256-ccm", 6: "aes-128-gcm", 7: "aes-192-gcm", 8: "aes-256-gcm"}


@pytest.fixture(scope="module")
def key_files(work_dir):
    d = os.path.join(work_dir, "encryption-keys")
    os.makedirs(d, exist_ok=True)
    good, bad = os.path.join(d, "ztest.key"), os.path.join(d, "wrong.key")
    with open(good, "wb") as f:
        f.write(oracle_pools.ZTEST_KEY)
    with open(bad, "wb") as f:
        f.write(bytes(reversed(oracle_pools.ZTEST_KEY)))
    return good, bad


def expected(vdevs, pool):
    """{dataset name: (suite name, encryption root name)} of the encrypted datasets (heads), from
    OpenZFS's zdb: dataset → its DSL directory → crypto key object → suite and root directory."""
    keys, dir_key, ds_dir = oracle_pools.crypto_keys(vdevs, pool)
    r = subprocess.run([oracle_pools.ZDB, "-e", "-p", vdevs, "-d", pool], capture_output=True, text=True, timeout=300)
    names = {int(m.group(2)): m.group(1) for m in re.finditer(r"^Dataset (\S+) \[\w+\], ID (\d+),", r.stdout, re.M)}
    heads = {ds_dir[ds]: n for ds, n in names.items() if "@" not in n and ds in ds_dir}
    out = {}
    for ds, name in names.items():
        if "@" in name or ds_dir.get(ds) not in dir_key:
            continue
        k = keys[dir_key[ds_dir[ds]]]
        out[name] = (SUITES[int(k["DSL_CRYPTO_SUITE"])], heads[int(k["DSL_CRYPTO_ROOT_DDOBJ"])])
    return out


def decrypted(out):
    m = re.search(r"encrypted blocks decrypted and authenticated: (\d+)", out)
    return int(m.group(1)) if m else None


def test_every_encrypted_block_decrypts_and_authenticates(oxzfs, ztest_pools, key_files):
    """zdb -K -cc over every ztest pool: each encrypted dataset's key unwraps, every encrypted
    block (data, dnode blocks with their encrypted bonuses, gang blocks) decrypts with its MAC
    right, in every suite ztest used; a wrong key opens nothing."""
    good, bad = key_files
    suites = set()
    for pool, d in sorted(ztest_pools.items()):
        vdevs = os.path.join(d, "vdevs")
        enc = expected(vdevs, pool)
        if not enc:
            continue  # ztest made no encrypted dataset here (zt-crypt always has some)
        suites |= {s for s, _ in enc.values()}
        r = oxzfs.zdb("-e", "-p", vdevs, "-K", good, "-cc", pool, timeout=900)
        assert r.returncode == 0 and "Got error" not in r.stdout, f"{pool}:\n{r!r}"
        n = decrypted(r.stdout)
        assert n and n > 0, f"{pool} has encrypted datasets {sorted(enc)} but nothing was decrypted:\n{r!r}"
        # Each encrypted dataset's objset MACs (snapshots' too) were made again and match.
        m = re.search(r"encrypted objsets whose MACs match: (\d+)", r.stdout)
        assert m and int(m.group(1)) >= len(enc), f"{pool}: objset MACs of {sorted(enc)}:\n{r!r}"
        if pool == CRYPT:
            w = oxzfs.zdb("-e", "-p", vdevs, "-K", bad, "-cc", pool, timeout=900)
            assert "Incorrect key provided" in w.stderr, w
            assert decrypted(w.stdout) is None and "Got error" not in w.stdout, w
    assert CRYPT in ztest_pools and suites, f"{CRYPT} was made with encrypted datasets, but OpenZFS's zdb shows none"


def test_properties_and_keys(oxzfs, ztest_pools, key_files, work_dir):
    good, bad = key_files
    vdevs = copy_vdevs(os.path.join(ztest_pools[CRYPT], "vdevs"), os.path.join(work_dir, "encryption", "vdevs"))
    enc = expected(vdevs, CRYPT)
    roots = sorted({root for _, root in enc.values()})
    oxzfs.zpool("import", "-f", "-N", "-o", "readonly=on", "-d", vdevs, CRYPT, check=True)
    try:
        # The properties, as OpenZFS's zdb records them.
        r = oxzfs.zfs("get", "-H", "-o", "name,property,value,source", "encryption,encryptionroot,keyformat,keystatus",
                      "-r", CRYPT, check=True)
        got = {}
        for line in r.stdout.splitlines():
            name, prop, value, source = line.split("\t")
            got.setdefault(name, {})[prop] = (value, source)
        for name, props in got.items():
            if "@" in name:
                continue
            if name in enc:
                suite, root = enc[name]
                assert props["encryption"] == (suite, "-"), (name, props)
                assert props["encryptionroot"][0] == root, (name, props)
                assert props["keyformat"][0] == "raw" and props["keystatus"][0] == "unavailable", (name, props)
            else:
                assert props["encryption"] == ("off", "default"), (name, props)
        # load-key: the wrong key, the right one, twice; a dataset that is not encrypted.
        root = roots[0]
        r = oxzfs.zfs("load-key", "-L", f"file://{bad}", root)
        assert r.returncode == 1 and f"Key load error: Incorrect key provided for '{root}'." in r.stderr, r
        oxzfs.zfs("load-key", "-L", f"file://{good}", root, check=True)
        assert oxzfs.zfs("get", "-H", "-o", "value", "keystatus", root, check=True).stdout.strip() == "available"
        r = oxzfs.zfs("load-key", "-L", f"file://{good}", root)
        assert r.returncode == 1 and f"Key already loaded for '{root}'." in r.stderr, r
        r = oxzfs.zfs("load-key", "-L", f"file://{good}", CRYPT)
        assert r.returncode == 1 and f"'{CRYPT}' is not encrypted." in r.stderr, r
        r = oxzfs.zfs("load-key", "-L", "file:///nonexistent/key", roots[-1])
        assert r.returncode == 1 and "Failed to open key material file: No such file or directory" in r.stderr, r
        # -a: only the roots not loaded yet are tried; the last one's key from standard input.
        oxzfs.zfs("unload-key", root, check=True)
        for x in roots[:-1]:
            oxzfs.zfs("load-key", "-L", f"file://{good}", x, check=True)
        r = oxzfs.zfs("load-key", "-a", "-L", "prompt", input=oracle_pools.ZTEST_KEY.decode() + "\n")
        assert r.returncode == 1 and "Raw key too long (expected 32)." in r.stderr and "0 / 1 key(s)" in r.stdout, r
        r = oxzfs.zfs("load-key", "-a", "-L", "prompt", input=oracle_pools.ZTEST_KEY.decode())
        assert r.returncode == 0 and "1 / 1 key(s) successfully loaded" in r.stdout, r
        r = oxzfs.zfs("get", "-H", "-o", "name,value", "keystatus", "-r", CRYPT, check=True)
        status = dict(line.split("\t") for line in r.stdout.splitlines())
        assert all(status[n] == "available" for n in enc), status
        r = oxzfs.zfs("unload-key", "-a")
        assert r.returncode == 0 and f"{len(roots)} / {len(roots)} key(s) successfully unloaded" in r.stdout, r
        assert all(oxzfs.zfs("get", "-H", "-o", "value", "keystatus", n, check=True).stdout.strip() == "unavailable"
                   for n in enc), "a key is still loaded after unload-key -a"
        r = oxzfs.zfs("unload-key", root)
        assert r.returncode == 1 and f"Key unload error: Key already unloaded for '{root}'." in r.stderr, r
        # A file system whose key is not loaded is not mounted.
        r = oxzfs.zfs("mount", root)
        assert r.returncode == 1 and f"cannot mount '{root}': encryption key not loaded" in r.stderr, r
        r = oxzfs.zfs("load-key")
        assert r.returncode == 2 and "missing dataset argument" in r.stderr and "load-key [-rn]" in r.stderr, r
    finally:
        oxzfs.zpool("export", CRYPT)


def test_read_write_import_leaves_encrypted_datasets_alone(oxzfs, ztest_pools, key_files, work_dir):
    """Imported read-write, the pool's unencrypted datasets change as usual; every change to an
    encrypted one is refused by name (its blocks, MACs and key objects would need writing);
    after export OpenZFS's zdb finds no leak, libzpool imports and changes the pool, and every
    encrypted block still decrypts and authenticates."""
    good, _ = key_files
    vdevs = copy_vdevs(os.path.join(ztest_pools[CRYPT], "vdevs"), os.path.join(work_dir, "encryption-rw", "vdevs"))
    enc = expected(vdevs, CRYPT)
    before = decrypted(oxzfs.zdb("-e", "-p", vdevs, "-K", good, "-cc", CRYPT, check=True, timeout=900).stdout)
    assert before and before > 0
    root = sorted({r for _, r in enc.values()})[0]
    oxzfs.zpool("import", "-f", "-N", "-d", vdevs, CRYPT, check=True)
    try:
        snaps = [line for line in oxzfs.zfs("list", "-H", "-o", "name", "-t", "snapshot", "-r", CRYPT, check=True).stdout.split()
                 if line.split("@")[0] in enc]
        refused = [
            (("snapshot", f"{root}@new"), f"cannot create snapshot '{root}@new'"),
            (("create", f"{root}/child"), f"cannot create '{root}/child'"),
            (("destroy", root), f"cannot destroy '{root}'"),
            (("rename", root, f"{CRYPT}/moved"), f"cannot rename '{root}'"),
            (("create", "-u", "-o", "encryption=off", f"{CRYPT}/plain"), None),
            (("create", "-u", "-o", "encryption=aes-256-gcm", f"{CRYPT}/new"), f"cannot create '{CRYPT}/new': encryption=aes-256-gcm"),
            (("rename", f"{CRYPT}/plain", f"{root}/plain"), f"cannot rename to '{root}/plain'"),
        ]
        if snaps:
            refused += [(("destroy", snaps[0]), f"cannot destroy '{snaps[0]}'"),
                        (("clone", snaps[0], f"{CRYPT}/clone"), f"cannot create '{CRYPT}/clone'"),
                        # -r destroys the later snapshots first: refused there.
                        (("rollback", "-r", snaps[0]), "")]
        for args, msg in refused:
            r = oxzfs.zfs(*args)
            if msg is None:
                assert r.returncode == 0, r
                continue
            assert r.returncode == 1 and r.stderr.startswith("cannot ") and f"{msg}: encrypted datasets are read-only in oxzfs" in r.stderr, r
        assert oxzfs.zfs("get", "-H", "-o", "value", "encryption", f"{CRYPT}/plain", check=True).stdout.strip() == "off"
        oxzfs.zfs("snapshot", f"{CRYPT}/plain@s", check=True)
        # A stream received under an encrypted file system is refused before anything is made.
        stream = os.path.join(work_dir, "encryption-rw", "plain.stream")
        with open(stream, "wb") as f:
            cp = subprocess.run([oxzfs.binary, "zfs", "send", f"{CRYPT}/plain@s"], env=oxzfs.env, stdout=f, stderr=subprocess.PIPE, text=True, timeout=300)
        assert cp.returncode == 0, cp.stderr
        with open(stream, "rb") as f:
            cp = subprocess.run([oxzfs.binary, "zfs", "receive", f"{root}/got"], env=oxzfs.env, stdin=f, capture_output=True, text=True, timeout=300)
        assert cp.returncode == 1 and f"cannot receive new filesystem stream into '{root}/got': encrypted datasets are read-only in oxzfs" in cp.stderr, cp
        oxzfs.zfs("destroy", f"{CRYPT}/plain@s", check=True)
        # destroy -r meets the encrypted datasets before it destroys anything.
        r = oxzfs.zfs("destroy", "-r", CRYPT)
        assert r.returncode == 1 and "encrypted datasets are read-only in oxzfs" in r.stderr, r
        assert oxzfs.zfs("list", "-H", "-o", "name", f"{CRYPT}/plain").returncode == 0, "destroy -r destroyed part of the pool"
        # An encryption root's keylocation is the one thing of it that changes (no MAC covers
        # it); `zfs mount -l` then loads the key from there before mounting. (ztest's datasets
        # hold no file system, so the mount itself fails after the key is loaded.)
        r = oxzfs.zfs("set", "keylocation=prompt", f"{CRYPT}/plain")
        assert r.returncode == 1 and "'keylocation' can only be set on encryption roots" in r.stderr, r
        r = oxzfs.zfs("set", "keylocation=nowhere", root)
        assert r.returncode == 1 and "invalid keylocation 'nowhere'" in r.stderr, r
        oxzfs.zfs("set", f"keylocation=file://{good}", root, check=True)
        r = oxzfs.zfs("get", "-H", "-o", "value,source", "keylocation", root, check=True)
        assert r.stdout.split() == [f"file://{good}", "local"], r
        r = oxzfs.zfs("mount", "-l", root)
        assert "Key load error" not in r.stderr, r
        assert oxzfs.zfs("get", "-H", "-o", "value", "keystatus", root, check=True).stdout.strip() == "available"
    finally:
        oxzfs.zpool("export", CRYPT, check=True)
    test_write.zdb_check(vdevs, CRYPT)
    zhack_rw(vdevs, "feature", "enable", CRYPT, "com.example:enc_rw")
    after = oxzfs.zdb("-e", "-p", vdevs, "-K", good, "-cc", CRYPT, check=True, timeout=900)
    assert decrypted(after.stdout) == before and "Got error" not in after.stdout, after
    # zpool import -l: the roots' keys are loaded from their keylocations as the pool comes in
    # (the root whose keylocation was set above; ztest's others have none to load from).
    r = oxzfs.zpool("import", "-l", "-N", "-d", vdevs, CRYPT)
    try:
        status = dict(line.split("\t") for line in oxzfs.zfs("get", "-H", "-o", "name,value", "keystatus", "-r", CRYPT,
                                                              check=True).stdout.splitlines())
        assert status[root] == "available", (status, r)
        assert all(status[n] == "unavailable" for n in enc if enc[n][1] != root), status
    finally:
        oxzfs.zpool("export", CRYPT, check=True)
