//! The chaos soak, short and with a fixed seed (the long run is `make soak`): kmirror under
//! traffic on the replicated pair while a seeded schedule of faults runs, then every partition
//! verified. Passes only with nothing lost, duplicated, mismatched or stuck without a reason.
//! `KMIRROR_SHORT_SOAK_MINUTES` (default 3) and `KMIRROR_SHORT_SOAK_SEED` (default 11) change it.
//! Seed 11's three minutes hold a zombie fetcher, a killed operator leader and a frozen one
//! that thaws believing it leads (two operators overlap).

use kmirror_e2e::soak::{Options, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_short_seeded_soak_loses_duplicates_and_shifts_nothing() {
    let var = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
    let minutes: f64 = var("KMIRROR_SHORT_SOAK_MINUTES", "3")
        .parse()
        .expect("KMIRROR_SHORT_SOAK_MINUTES is a number");
    let seed: u64 = var("KMIRROR_SHORT_SOAK_SEED", "11")
        .parse()
        .expect("KMIRROR_SHORT_SOAK_SEED is a number");
    let (table, passed) = run(&Options {
        minutes,
        seed,
        keep: false,
    })
    .await
    .expect("the soak could not run");
    println!("{table}");
    assert!(passed, "the soak's verdict is FAIL (seed {seed}):\n{table}");
}
