//! The committed CRD YAML is exactly what the types generate.

use std::path::Path;

#[test]
fn committed_crds_match_the_types() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(kmirror_crds::crdgen::CRD_PATH);
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    assert!(
        committed == kmirror_crds::crdgen::crds_yaml(),
        "{} is out of date: run `cargo run -p kmirror-crds --bin crdgen` and commit the result",
        path.display()
    );
}
