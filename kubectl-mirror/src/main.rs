//! `kubectl-mirror`: run as `kubectl mirror <command>`.

use clap::Parser;
use kubectl_mirror::cli::Cli;
use kubectl_mirror::error::EXIT_FAILURE;

fn main() {
    // Usage errors exit with 2, --help and --version with 0 (clap's convention).
    let cli = Cli::try_parse().unwrap_or_else(|e| e.exit());
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            std::process::exit(EXIT_FAILURE);
        }
    };
    let code = match runtime.block_on(kubectl_mirror::run(cli)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    };
    std::process::exit(code);
}
