//! `kmirror-soak`: the chaos soak against the test bed (`make soak`). Options: `--minutes M`
//! (default `SOAK_MINUTES` or 20), `--seed N` (default `SOAK_SEED`, else drawn and printed),
//! `--keep` (leave the namespace and topics). Exit status 0 when the verdict passes, 1 when it
//! fails, 2 when the soak could not run.

use kmirror_e2e::soak::{Options, run};

fn parse() -> Result<Options, String> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let mut minutes = env("SOAK_MINUTES").unwrap_or_else(|| "20".into());
    let mut seed = env("SOAK_SEED");
    let mut keep = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--minutes" => minutes = args.next().ok_or("--minutes needs a value")?,
            "--seed" => seed = Some(args.next().ok_or("--seed needs a value")?),
            "--keep" => keep = true,
            other => {
                return Err(format!(
                    "unknown argument {other} (--minutes M, --seed N, --keep)"
                ));
            }
        }
    }
    let minutes: f64 = minutes
        .parse()
        .map_err(|_| format!("--minutes: not a number: {minutes}"))?;
    let seed = match seed {
        Some(s) => s
            .parse()
            .map_err(|_| format!("--seed: not a number: {s}"))?,
        None => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(1);
            u64::from(nanos % 100_000) + 1
        }
    };
    Ok(Options {
        minutes,
        seed,
        keep,
    })
}

fn main() {
    let opts = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("kmirror-soak: {e}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(&opts)) {
        Ok((_, true)) => {}
        Ok((_, false)) => std::process::exit(1),
        Err(e) => {
            eprintln!(
                "kmirror-soak: the soak could not run (seed {}): {e:#}",
                opts.seed
            );
            std::process::exit(2);
        }
    }
}
