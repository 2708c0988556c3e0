//! The hand-over from a reader task (a child's stdout, a legacy SSE stream) to the probe:
//! bounded by the bytes it holds as well as by its count.
//!
//! A count alone bounds nothing when each message may be as large as the response cap: 256
//! queued stdout lines of 8 MiB are 2 GiB, and the reader fills the queue whenever the probe is
//! not receiving (during a POST, after the last exchange, through the shutdown graces). Each
//! message here holds its size in permits of one semaphore of `bytes` (a message larger than
//! that takes all of it), given back when the probe takes it: at most `bytes` wait, whatever
//! the server sends.

use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

pub(crate) struct Sender<T> {
    tx: mpsc::Sender<(T, OwnedSemaphorePermit)>,
    bytes: Arc<Semaphore>,
    max: u32,
}

pub(crate) struct Receiver<T> {
    rx: mpsc::Receiver<(T, OwnedSemaphorePermit)>,
}

/// A queue of at most `count` messages holding at most `bytes` bytes between them.
pub(crate) fn channel<T>(count: usize, bytes: usize) -> (Sender<T>, Receiver<T>) {
    let max = u32::try_from(bytes)
        .unwrap_or(u32::MAX)
        .clamp(1, u32::try_from(Semaphore::MAX_PERMITS).unwrap_or(u32::MAX));
    let (tx, rx) = mpsc::channel(count);
    (
        Sender {
            tx,
            bytes: Arc::new(Semaphore::new(max as usize)),
            max,
        },
        Receiver { rx },
    )
}

impl<T> Sender<T> {
    /// Queues `item` of `size` bytes, waiting for room; `Err` once the receiver is gone.
    pub(crate) async fn send(&self, item: T, size: usize) -> Result<(), ()> {
        let n = u32::try_from(size).unwrap_or(u32::MAX).clamp(1, self.max);
        let permit = self
            .bytes
            .clone()
            .acquire_many_owned(n)
            .await
            .map_err(|_| ())?;
        self.tx.send((item, permit)).await.map_err(|_| ())
    }
}

impl<T> Receiver<T> {
    /// The next message (its bytes given back to the queue), or `None` once the sender is gone
    /// and the queue empty.
    pub(crate) async fn recv(&mut self) -> Option<T> {
        self.rx.recv().await.map(|(item, _)| item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_reader_waits_once_the_queued_bytes_reach_the_bound() {
        let (tx, mut rx) = channel::<Vec<u8>>(256, 100);
        tx.send(vec![0; 60], 60).await.unwrap();
        tx.send(vec![0; 40], 40).await.unwrap();
        // Full by bytes (2 of 256 messages): the next send waits until one is taken.
        {
            let third = tx.send(vec![0; 10], 10);
            tokio::pin!(third);
            assert!(
                tokio::time::timeout(Duration::from_millis(50), &mut third)
                    .await
                    .is_err()
            );
            assert_eq!(rx.recv().await.map(|v| v.len()), Some(60));
            third.await.unwrap();
        }
        // A message over the bound takes all of it, and still goes through.
        assert_eq!(rx.recv().await.map(|v| v.len()), Some(40));
        assert_eq!(rx.recv().await.map(|v| v.len()), Some(10));
        tx.send(vec![0; 500], 500).await.unwrap();
        assert_eq!(rx.recv().await.map(|v| v.len()), Some(500));
        drop(tx);
        assert_eq!(rx.recv().await, None);
    }
}
