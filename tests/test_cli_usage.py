"""Every zpool and zfs verb answers `VERB --help`, `VERB -?` and `VERB -h` as OpenZFS's commands do.

OpenZFS's zpool_main.c and zfs_main.c: `<cmd> <verb> --help` or `-?` as the first word after the verb
prints that verb's usage (get_usage(), after "usage:") on stderr and exits 2 (usage(B_FALSE) ends in
exit(2)); `-h` is an invalid option for every verb but `zpool iostat` (whose getopt string has 'h' and
whose case 'h' calls usage(B_FALSE)), so it prints "invalid option 'h'" and then the usage, exit 2.
`zpool -?` asks for the command list: stdout, exit 0.

The texts below are OpenZFS's get_usage() strings transcribed, limited to the options oxzfs takes (for
list, get and set OpenZFS goes on with its table of properties, which oxzfs does not print).
"""
import pytest

ZPOOL = {
    "create": (
        'usage:\n'
        '\tcreate [-fnd] [-o property=value] ... \n'
        '\t    [-O file-system-property=value] ... \n'
        '\t    [-m mountpoint] [-R root] <pool> <vdev> ...\n'
    ),
    "destroy": (
        'usage:\n'
        '\tdestroy [-f] <pool>\n'
    ),
    "add": (
        'usage:\n'
        '\tadd [-fgLnP] [-o property=value] <pool> <vdev> ...\n'
    ),
    "remove": (
        'usage:\n'
        '\tremove [-npsw] <pool> <device> ...\n'
        '\tremove -s <pool>\n'
    ),
    "labelclear": (
        'usage:\n'
        '\tlabelclear [-f] <vdev>\n'
    ),
    "sync": (
        'usage:\n'
        '\tsync [pool] ...\n'
    ),
    "list": (
        'usage:\n'
        '\tlist [-gHLpPv] [-o property[,...]] [-T d|u] [pool] ... \n'
        '\t    [interval [count]]\n'
    ),
    "iostat": (
        'usage:\n'
        '\tiostat [[[-c [script1,script2,...][-lq]]|[-rw]] [-T d | u] [-ghHLpPvy]\n'
        '\t    [[pool ...]|[pool vdev ...]|[vdev ...]] [[-n] interval [count]]\n'
    ),
    "status": (
        'usage:\n'
        '\tstatus [-c [script1,script2,...]] [-igLpPstvxD]  [-T d|u] [pool] ... \n'
        '\t    [interval [count]]\n'
    ),
    "online": (
        'usage:\n'
        '\tonline [-e] <pool> <device> ...\n'
    ),
    "offline": (
        'usage:\n'
        '\toffline [-f] [-t] <pool> <device> ...\n'
    ),
    "clear": (
        'usage:\n'
        '\tclear <pool> [device]\n'
    ),
    "attach": (
        'usage:\n'
        '\tattach [-fsw] [-o property=value] <pool> <device> <new-device>\n'
    ),
    "detach": (
        'usage:\n'
        '\tdetach <pool> <device>\n'
    ),
    "replace": (
        'usage:\n'
        '\treplace [-fsw] [-o property=value] <pool> <device> [new-device]\n'
    ),
    "scrub": (
        'usage:\n'
        '\tscrub [-s | -p] [-w] <pool> ...\n'
    ),
    "trim": (
        'usage:\n'
        '\ttrim [-dw] [-r <rate>] [-c | -s] <pool> [<device> ...]\n'
    ),
    "reguid": (
        'usage:\n'
        '\treguid <pool>\n'
    ),
    "import": (
        'usage:\n'
        '\timport [-d dir] [-D]\n'
        '\timport [-o mntopts] [-o property=value] ...\n'
        '\t    [-d dir | -c cachefile] [-D] [-l] [-f] [-m] [-N] [-R root] [-F [-n]] -a\n'
        '\timport [-o mntopts] [-o property=value] ...\n'
        '\t    [-d dir | -c cachefile] [-D] [-l] [-f] [-m] [-N] [-R root] [-F [-n]]\n'
        '\t    <pool | id> [newpool]\n'
    ),
    "export": (
        'usage:\n'
        '\texport [-af] <pool> ...\n'
    ),
    "upgrade": (
        'usage:\n'
        '\tupgrade\n'
        '\tupgrade -v\n'
        '\tupgrade [-V version] <-a | pool ...>\n'
    ),
    "history": (
        'usage:\n'
        '\thistory [-il] [<pool>] ...\n'
    ),
    "get": (
        'usage:\n'
        '\tget [-Hp] [-o "all" | field[,...]] <"all" | property[,...]> <pool> ...\n'
    ),
    "set": (
        'usage:\n'
        '\tset <property=value> <pool> \n'
    ),
    "wait": (
        'usage:\n'
        '\twait [-t <activity>[,...]] <pool>\n'
    ),
}

ZFS = {
    "create": (
        'usage:\n'
        '\tcreate [-Pnpuv] [-o property=value] ... <filesystem>\n'
        '\tcreate [-Pnpsv] [-b blocksize] [-o property=value] ... -V <size> <volume>\n'
    ),
    "destroy": (
        'usage:\n'
        '\tdestroy [-fnpRrv] <filesystem|volume>\n'
        '\tdestroy [-d] <filesystem|volume>@<snap>\n'
        '\tdestroy <filesystem|volume>#<bookmark>\n'
    ),
    "snapshot": (
        'usage:\n'
        '\tsnapshot [-r] [-o property=value] ... <filesystem|volume>@<snap> ...\n'
    ),
    "rollback": (
        'usage:\n'
        '\trollback [-rRf] <snapshot>\n'
    ),
    "clone": (
        'usage:\n'
        '\tclone [-p] [-o property=value] ... <snapshot> <filesystem|volume>\n'
    ),
    "promote": (
        'usage:\n'
        '\tpromote <clone-filesystem>\n'
    ),
    "bookmark": (
        'usage:\n'
        '\tbookmark <snapshot|bookmark> <newbookmark>\n'
    ),
    "hold": (
        'usage:\n'
        '\thold [-r] <tag> <snapshot> ...\n'
    ),
    "holds": (
        'usage:\n'
        '\tholds [-rHp] <snapshot> ...\n'
    ),
    "release": (
        'usage:\n'
        '\trelease [-r] <tag> <snapshot> ...\n'
    ),
    "diff": (
        'usage:\n'
        '\tdiff [-FHth] <snapshot> [snapshot|filesystem]\n'
    ),
    "rename": (
        'usage:\n'
        '\trename [-f] <filesystem|volume|snapshot> <filesystem|volume|snapshot>\n'
        '\trename -p [-f] <filesystem|volume> <filesystem|volume>\n'
        '\trename -u [-f] <filesystem> <filesystem>\n'
        '\trename -r <snapshot> <snapshot>\n'
    ),
    "list": (
        'usage:\n'
        '\tlist [-Hp] [-r|-d max] [-o property[,...]] [-s property]...\n'
        '\t    [-S property]... [-t type[,...]] [filesystem|volume|snapshot] ...\n'
    ),
    "set": (
        'usage:\n'
        '\tset <property=value> ... <filesystem|volume|snapshot> ...\n'
    ),
    "get": (
        'usage:\n'
        '\tget [-rHp] [-d max] [-o "all" | field[,...]]\n'
        '\t    [-t type[,...]] [-s source[,...]]\n'
        '\t    <"all" | property[,...]> [filesystem|volume|snapshot|bookmark] ...\n'
    ),
    "inherit": (
        'usage:\n'
        '\tinherit [-rS] <property> <filesystem|volume|snapshot> ...\n'
    ),
    "userspace": (
        'usage:\n'
        '\tuserspace [-Hinp] [-o field[,...]] [-s field] ...\n'
        '\t    [-S field] ... [-t type[,...]] <filesystem|snapshot|path>\n'
    ),
    "groupspace": (
        'usage:\n'
        '\tgroupspace [-Hinp] [-o field[,...]] [-s field] ...\n'
        '\t    [-S field] ... [-t type[,...]] <filesystem|snapshot|path>\n'
    ),
    "projectspace": (
        'usage:\n'
        '\tprojectspace [-Hp] [-o field[,...]] [-s field] ... \n'
        '\t    [-S field] ... <filesystem|snapshot|path>\n'
    ),
    "project": (
        'usage:\n'
        '\tproject [-d|-r] <directory|file ...>\n'
        '\tproject -c [-0] [-d|-r] [-p id] <directory|file ...>\n'
        '\tproject -C [-k] [-r] <directory ...>\n'
        '\tproject [-p id] [-r] [-s] <directory ...>\n'
    ),
    "mount": (
        'usage:\n'
        '\tmount\n'
        '\tmount [-flvO] [-o opts] <-a | filesystem>\n'
    ),
    "unmount": (
        'usage:\n'
        '\tunmount [-fu] <-a | filesystem|mountpoint>\n'
    ),
    "send": (
        'usage:\n'
        '\tsend [-nPpRvLec] [-[iI] snapshot] <snapshot>\n'
    ),
    "receive": (
        'usage:\n'
        '\treceive [-vnFu] [-o <property>=<value>] ... [-x <property>] ...\n'
        '\t    <filesystem|volume|snapshot>\n'
        '\treceive [-vnFu] [-o <property>=<value>] ... [-x <property>] ... \n'
        '\t    [-d | -e] <filesystem>\n'
    ),
    "load-key": (
        'usage:\n'
        '\tload-key [-rn] [-L <keylocation>] <-a | filesystem|volume>\n'
    ),
    "unload-key": (
        'usage:\n'
        '\tunload-key [-r] <-a | filesystem|volume>\n'
    ),
}

CASES = [("zpool", v, u) for v, u in ZPOOL.items()] + [("zfs", v, u) for v, u in ZFS.items()]


@pytest.mark.parametrize("cmd,verb,text", CASES, ids=[f"{c}-{v}" for c, v, _ in CASES])
def test_help_prints_the_verbs_usage(oxzfs, cmd, verb, text):
    for flag in ("--help", "-?"):
        r = oxzfs.run(cmd, verb, flag)
        assert (r.stdout, r.stderr, r.returncode) == ("", text, 2), f"{cmd} {verb} {flag}: {r!r}"
    r = oxzfs.run(cmd, verb, "-h")
    # -h is an option of zpool iostat (no-op here) and of zfs diff (paths as they are).
    want = {("zpool", "iostat"): text, ("zfs", "diff"): "must provide at least one snapshot name\n" + text}.get((cmd, verb), "invalid option 'h'\n" + text)
    assert (r.stdout, r.stderr, r.returncode) == ("", want, 2), f"{cmd} {verb} -h: {r!r}"
    assert r.stderr.startswith(("usage:", "invalid option 'h'\nusage:", "must provide"))


def test_short_verb_names(oxzfs):
    assert oxzfs.zfs("snap", "--help").stderr == ZFS["snapshot"]
    assert oxzfs.zfs("umount", "-?").stderr == ZFS["unmount"]


def test_usage_errors(oxzfs):
    r = oxzfs.zpool("create", "-x")
    assert (r.stderr, r.returncode) == ("invalid option 'x'\n" + ZPOOL["create"], 2)
    r = oxzfs.zpool("create")
    assert (r.stderr, r.returncode) == ("missing pool name argument\n" + ZPOOL["create"], 2)
    r = oxzfs.zfs("list", "-o")
    assert (r.stderr, r.returncode) == ("missing argument for 'o' option\n" + ZFS["list"], 2)
    r = oxzfs.zpool("import", "-d", "/nonexistent", "a", "b", "c")
    assert (r.stderr, r.returncode) == ("too many arguments\n" + ZPOOL["import"], 2)


def test_command_lists(oxzfs):
    for cmd, verbs in (("zpool", ZPOOL), ("zfs", ZFS)):
        r = oxzfs.run(cmd, "-?")
        assert r.returncode == 0, r
        assert r.stdout.startswith(f"usage: {cmd} command args ...\nwhere 'command' is one of the following:\n"), r
        assert [l.strip() for l in r.stdout.splitlines()[3:]] == list(verbs)
    r = oxzfs.zpool("frobnicate")
    assert r.returncode == 2 and r.stderr.startswith("unrecognized command 'frobnicate'\nusage: zpool command args ..."), r
