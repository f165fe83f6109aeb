//! `kubectl-mirror`: run as `kubectl mirror <command>`.

use clap::Parser;
use kubectl_mirror::cli::{Cli, Command};
use kubectl_mirror::completion::KUBECTL_COMPLETE;
use kubectl_mirror::error::EXIT_FAILURE;

fn main() {
    // kubectl 1.26+ completes `kubectl mirror …` by running `kubectl_complete-mirror` (a link
    // to this program) with the words typed so far.
    let program = std::env::args_os().next().unwrap_or_default();
    if std::path::Path::new(&program).file_name() == Some(KUBECTL_COMPLETE.as_ref()) {
        let words: Vec<String> = std::env::args().skip(1).collect();
        print!("{}", kubectl_mirror::completion::complete(&words));
        return;
    }
    // Usage errors exit with 2, --help and --version with 0 (clap's convention).
    let cli = Cli::try_parse().unwrap_or_else(|e| e.exit());
    if let Command::Completion(args) = &cli.command {
        print!("{}", kubectl_mirror::completion::script(args.shell));
        return;
    }
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
