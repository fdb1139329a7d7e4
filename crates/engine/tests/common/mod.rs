//! Shared by the fixture tests: where the shared fixture pools are, and unpacking one.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `$OXZFS_SHARED_FIXTURES`, or `../shared/fixtures` beside the repository.
pub fn fixtures_root() -> PathBuf {
    match std::env::var_os("OXZFS_SHARED_FIXTURES") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures"),
    }
}

/// Decompress a fixture's vdev files into a fresh directory named after `prefix` and `tag`.
pub fn unpack(fixture: &Path, prefix: &str, tag: &str) -> PathBuf {
    let name = fixture.file_name().unwrap().to_string_lossy().into_owned();
    let dir = std::env::temp_dir().join(format!("oxzfs-{prefix}-{name}{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(fixture).unwrap() {
        let p = e.unwrap().path();
        if p.extension().map_or(false, |x| x == "zst") {
            let out = dir.join(p.file_stem().unwrap());
            let st = Command::new("zstd")
                .args(["-d", "-q", "--sparse", "-f"])
                .arg(&p)
                .arg("-o")
                .arg(&out)
                .status()
                .expect("zstd must be installed to unpack the fixtures");
            assert!(st.success(), "zstd -d {}", p.display());
        }
    }
    dir
}
