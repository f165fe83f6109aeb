//! Writes the kmirror CRDs to `charts/kmirror/crds/` (or prints them with `--stdout`).

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let yaml = kmirror_crds::crdgen::crds_yaml();
    if std::env::args().any(|a| a == "--stdout") {
        print!("{yaml}");
        return Ok(());
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(kmirror_crds::crdgen::CRD_PATH);
    std::fs::create_dir_all(path.parent().expect("CRD path has a parent"))?;
    std::fs::write(&path, yaml)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}
