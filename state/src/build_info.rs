//! What build a process is: the release version, the Git commit it was built from and the
//! compiler, as every process exposes them (`kmirror_build_info`).

/// The release version (the workspace's).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The version of the compiler that built this.
pub const RUSTC: &str = env!("KMIRROR_RUSTC_VERSION");

/// The Git commit, from `KMIRROR_GIT_SHA` at build time (the image build sets it from its
/// `GIT_SHA` argument); `unknown` when it was not given.
pub fn git_sha() -> &'static str {
    match option_env!("KMIRROR_GIT_SHA") {
        Some(sha) if !sha.trim().is_empty() => sha.trim(),
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_is_named() {
        assert_eq!(VERSION, env!("CARGO_PKG_VERSION"));
        assert!(
            RUSTC.split('.').count() == 3 && RUSTC.chars().next().unwrap().is_ascii_digit(),
            "{RUSTC}"
        );
        assert!(!git_sha().is_empty());
    }
}
