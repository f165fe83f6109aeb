//! Records the compiler's version for the build information the processes expose
//! (`kmirror_build_info{rustc}`).

use std::process::Command;

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        // "rustc 1.95.0 (hash date)"
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_string))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=KMIRROR_RUSTC_VERSION={version}");
    println!("cargo:rerun-if-changed=build.rs");
}
