//! The fetcher's memory budget: librdkafka's fetch, prefetch and producer-queue sizes derived
//! from one number, so that a process's peak memory follows its configuration, not the
//! clients' defaults (which let one fetcher reach ~300 MB).

/// One mebibyte.
pub const MIB: u64 = 1 << 20;

/// The budget of a fetcher process given none (96Mi, `--memory-budget`'s default).
pub const DEFAULT_MEMORY_BUDGET: u64 = kmirror_crds::v1alpha1::DEFAULT_FETCHER_MEMORY_BUDGET;

/// What the process needs besides the clients' buffers: code, threads, the state reads,
/// allocator slack (measured: a process with every buffer at its least peaks near 30 MB).
const PROCESS_BASE: u64 = 28 * MIB;

/// What each partition adds besides (its queues, offset map, cursor).
const PER_PARTITION: u64 = MIB;

/// The clients hold up to about this many times the sizes they are given: decompressed copies
/// of fetched batches, compressed batches in flight, allocator slack (measured: a process of six
/// partitions given 37 MiB of buffers peaked at 122 MiB, 28 of them the process itself).
const CLIENT_OVERHEAD: u64 = 2;

/// The least left to the buffers, however small the budget.
const MIN_BUFFERS: u64 = 4 * MIB;

/// The clients' buffer sizes for one budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferSizes {
    /// Consumer `fetch.max.bytes`: one fetch response (a quarter of the buffers, 1–50 MiB).
    pub fetch_max_bytes: u64,
    /// Consumer `max.partition.fetch.bytes`: the fetch response shared among the partitions
    /// (1–8 MiB; a larger first batch still comes whole).
    pub partition_fetch_bytes: u64,
    /// Consumer `queued.max.messages.kbytes`: records fetched ahead of the producer, all
    /// partitions together (a quarter).
    pub consumer_queue_kbytes: u64,
    /// Producer `queue.buffering.max.kbytes`: records handed over and not yet acknowledged
    /// (three eighths).
    pub producer_queue_kbytes: u64,
    /// Producer `batch.size` (at most 1 MB, a sixteenth).
    pub batch_size: u64,
}

impl BufferSizes {
    /// Sizes for a process with `budget` bytes that copies `partitions` partitions.
    pub fn for_budget(budget: u64, partitions: usize) -> BufferSizes {
        let partitions = partitions.max(1) as u64;
        let fixed = PROCESS_BASE + PER_PARTITION * partitions;
        let buffers = (budget.saturating_sub(fixed) / CLIENT_OVERHEAD).max(MIN_BUFFERS);
        let fetch_max_bytes = (buffers / 4).clamp(MIB, 50 * MIB);
        BufferSizes {
            fetch_max_bytes,
            partition_fetch_bytes: (fetch_max_bytes / partitions).clamp(MIB, 8 * MIB),
            consumer_queue_kbytes: buffers / 4 / 1024,
            producer_queue_kbytes: buffers * 3 / 8 / 1024,
            batch_size: (buffers / 16).clamp(64 * 1024, 1_000_000),
        }
    }

    /// The producer queue with room for the largest record the producer may send
    /// (`message.max.bytes`) and a mebibyte more: librdkafka refuses a record larger than the
    /// whole queue as "queue full" forever, which would stall the partition.
    pub fn producer_queue_kbytes_for(&self, message_max_bytes: u64) -> u64 {
        self.producer_queue_kbytes
            .max(message_max_bytes.div_ceil(1024) + 1024)
    }
}

/// Caps glibc's malloc arenas at two. Each of the clients' many threads otherwise gets an arena
/// of its own, and what is freed in one is not reused by another (measured: 80 → 72 MB per
/// one-partition process). Call before any thread starts.
pub fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a tunable of the allocator; called before other threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kib(b: &BufferSizes) -> (u64, u64, u64, u64, u64) {
        (
            b.fetch_max_bytes / 1024,
            b.partition_fetch_bytes / 1024,
            b.consumer_queue_kbytes,
            b.producer_queue_kbytes,
            b.batch_size,
        )
    }

    #[test]
    fn the_default_budget_is_small_and_adds_up() {
        assert_eq!(DEFAULT_MEMORY_BUDGET, 96 * MIB);
        let b = BufferSizes::for_budget(DEFAULT_MEMORY_BUDGET, 1);
        assert_eq!(kib(&b), (8576, 8192, 8576, 12864, 1_000_000));
        let buffers =
            b.fetch_max_bytes + (b.consumer_queue_kbytes + b.producer_queue_kbytes) * 1024;
        assert!(
            CLIENT_OVERHEAD * buffers + PROCESS_BASE + PER_PARTITION <= DEFAULT_MEMORY_BUDGET,
            "what the clients hold at most and the process fit the budget"
        );
    }

    #[test]
    fn sizes_follow_the_budget_within_bounds() {
        // (budget MiB, partitions) → KiB of (fetch, per partition, consumer queue, producer
        // queue) and the batch size in bytes
        for (budget, partitions, want) in [
            (32, 1, (1024, 1024, 1024, 1536, 262_144)),
            (32, 8, (1024, 1024, 1024, 1536, 262_144)),
            (96, 6, (7936, 1322, 7936, 11904, 1_000_000)),
            (256, 4, (28672, 7168, 28672, 43008, 1_000_000)),
            (1024, 100, (51200, 1024, 114_688, 172_032, 1_000_000)),
        ] {
            let b = BufferSizes::for_budget(budget * MIB, partitions);
            assert_eq!(kib(&b), want, "{budget} MiB, {partitions} partitions");
        }
        // Smaller than the process needs: the buffers keep their floor.
        assert_eq!(
            kib(&BufferSizes::for_budget(MIB, 1)),
            kib(&BufferSizes::for_budget(32 * MIB, 1))
        );
    }

    #[test]
    fn the_producer_queue_always_holds_the_largest_record() {
        let b = BufferSizes::for_budget(DEFAULT_MEMORY_BUDGET, 1);
        assert_eq!(b.producer_queue_kbytes_for(1_000_000), 12864);
        assert_eq!(
            b.producer_queue_kbytes_for(16 * MIB),
            17 * 1024,
            "a 16 MiB record and a mebibyte"
        );
    }
}
