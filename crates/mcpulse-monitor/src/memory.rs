//! The monitor's memory budget for probes: what bounds the memory of everything it probes at
//! once, scheduled checks and `/probe` requests together.
//!
//! A count of probes in flight does not bound memory: one probe of a hostile server may hold
//! up to [`of_probe`] bytes (its replies within `--max-response-size`, decoded within the
//! judge's budget, and the contract taken from them), and 64 of them at once would be gigabytes.
//! So each probe also takes its weight in MiB from one semaphore of [`DEFAULT_PROBE_MEMORY`]
//! bytes, and holds it until it is judged: at most that much is held by probes at any time,
//! whatever the servers send. Waiting for memory is waiting for a slot (a `/probe` that cannot
//! get one within its scrape budget is a 503, as when the count is exhausted).

use std::sync::Arc;
use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};

/// All probes in flight together may hold this much, by default: with the default 8 MiB
/// response cap (168 MiB a probe), 12 probes at once.
pub const DEFAULT_PROBE_MEMORY: usize = 2 << 30;

const MIB: usize = 1 << 20;

/// The most memory one probe with a response cap of `max_response_bytes` may hold: its decoded
/// replies (the judge's budget) and the contract's canonical copy of them with its `$ref`
/// expansions, plus its raw replies and the transport's buffers (four times the cap).
pub fn of_probe(max_response_bytes: usize) -> usize {
    mcpulse_judge::replies::budget(max_response_bytes)
        .saturating_mul(2)
        .saturating_add(mcpulse_judge::contract::EXPANSION_BUDGET)
        .saturating_add(max_response_bytes.saturating_mul(4))
}

/// The memory budget shared by the monitor's probes. Cheap to clone.
#[derive(Clone, Debug)]
pub struct MemoryBudget {
    mib: Arc<Semaphore>,
    total_mib: u32,
}

impl MemoryBudget {
    /// A budget of `bytes` (at least 1 MiB).
    pub fn new(bytes: usize) -> MemoryBudget {
        let total_mib = u32::try_from(bytes.div_ceil(MIB))
            .unwrap_or(u32::MAX)
            .max(1);
        MemoryBudget {
            mib: Arc::new(Semaphore::new(total_mib as usize)),
            total_mib,
        }
    }

    /// The budget, in bytes.
    pub fn total(&self) -> usize {
        self.total_mib as usize * MIB
    }

    /// Waits until a probe with this response cap fits, and reserves its weight until the
    /// permit is dropped. A probe heavier than the whole budget takes the whole budget (it runs
    /// alone).
    pub async fn acquire(
        &self,
        max_response_bytes: usize,
    ) -> Result<OwnedSemaphorePermit, AcquireError> {
        let weight = u32::try_from(of_probe(max_response_bytes).div_ceil(MIB))
            .unwrap_or(u32::MAX)
            .clamp(1, self.total_mib);
        self.mib.clone().acquire_many_owned(weight).await
    }
}

impl Default for MemoryBudget {
    fn default() -> MemoryBudget {
        MemoryBudget::new(DEFAULT_PROBE_MEMORY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn probes_wait_for_memory() {
        let budget = MemoryBudget::new(400 * MIB);
        assert_eq!(of_probe(8 * MIB), 168 * MIB);
        let a = budget.acquire(8 * MIB).await.unwrap();
        let b = budget.acquire(8 * MIB).await.unwrap();
        // A third default probe does not fit beside two (480 MiB > 400 MiB)...
        let third = budget.acquire(8 * MIB);
        tokio::pin!(third);
        assert!(
            tokio::time::timeout(std::time::Duration::from_secs(1), &mut third)
                .await
                .is_err()
        );
        drop(a);
        // ...until one is done.
        let c = third.await.unwrap();
        // A probe heavier than the whole budget runs alone.
        drop((b, c));
        let huge = budget.acquire(1 << 30).await.unwrap();
        assert_eq!(huge.num_permits(), 400);
    }
}
