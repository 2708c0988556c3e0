//! A hand-over between tasks bounded by the bytes it holds as well as by its count: from a
//! reader task (a child's stdout, a legacy SSE stream) to the probe, and in the gateway from a
//! stdio child's reader to the client's stream.
//!
//! A count alone bounds nothing when each message may be as large as the response cap: 256
//! queued stdout lines of 8 MiB are 2 GiB, and the reader fills the queue whenever the probe is
//! not receiving (during a POST, after the last exchange, through the shutdown graces). Each
//! message here holds its size in permits of one semaphore of `bytes` (a message larger than
//! that takes all of it, so it passes alone), given back when the message is taken, or, taken
//! as [`Charged`], when that is dropped: at most `bytes` wait, whatever the server sends.

use bytes::Bytes;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

/// The sending half of a [`channel`].
pub struct Sender<T> {
    tx: mpsc::Sender<(T, OwnedSemaphorePermit)>,
    bytes: Arc<Semaphore>,
    max: u32,
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        Sender {
            tx: self.tx.clone(),
            bytes: self.bytes.clone(),
            max: self.max,
        }
    }
}

/// The receiving half of a [`channel`].
pub struct Receiver<T> {
    rx: mpsc::Receiver<(T, OwnedSemaphorePermit)>,
}

/// A message taken from the queue that still counts against its bytes until it is dropped
/// (or turned into its [`Bytes`]): for a message handed on further before it is done with.
pub struct Charged<T> {
    pub item: T,
    _bytes: OwnedSemaphorePermit,
}

impl From<Charged<Bytes>> for Bytes {
    /// The message; its bytes are given back to the queue.
    fn from(c: Charged<Bytes>) -> Bytes {
        c.item
    }
}

/// Why [`Sender::try_send`] did not queue a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// The queue holds its count of messages, or its bytes.
    Full,
    /// The receiver is gone.
    Closed,
}

/// A queue of at most `count` messages holding at most `bytes` bytes between them.
pub fn channel<T>(count: usize, bytes: usize) -> (Sender<T>, Receiver<T>) {
    let max = u32::try_from(bytes)
        .unwrap_or(u32::MAX)
        .clamp(1, u32::try_from(Semaphore::MAX_PERMITS).unwrap_or(u32::MAX));
    let (tx, rx) = mpsc::channel(count.max(1));
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
    fn permits(&self, size: usize) -> u32 {
        u32::try_from(size).unwrap_or(u32::MAX).clamp(1, self.max)
    }

    /// Queues `item` of `size` bytes, waiting for room; `Err` once the receiver is gone.
    pub async fn send(&self, item: T, size: usize) -> Result<(), ()> {
        let permit = self
            .bytes
            .clone()
            .acquire_many_owned(self.permits(size))
            .await
            .map_err(|_| ())?;
        self.tx.send((item, permit)).await.map_err(|_| ())
    }

    /// Queues `item` of `size` bytes if there is room now, never waiting.
    pub fn try_send(&self, item: T, size: usize) -> Result<(), Full> {
        if self.tx.is_closed() {
            return Err(Full::Closed);
        }
        let permit = self
            .bytes
            .clone()
            .try_acquire_many_owned(self.permits(size))
            .map_err(|_| Full::Full)?;
        self.tx.try_send((item, permit)).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => Full::Full,
            mpsc::error::TrySendError::Closed(_) => Full::Closed,
        })
    }

    /// Whether the receiver is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

impl<T> Receiver<T> {
    /// The next message (its bytes given back to the queue), or `None` once the sender is gone
    /// and the queue empty.
    pub async fn recv(&mut self) -> Option<T> {
        self.rx.recv().await.map(|(item, _)| item)
    }

    /// The next message, still counted against the queue's bytes while it is held.
    pub async fn recv_charged(&mut self) -> Option<Charged<T>> {
        self.rx.recv().await.map(|(item, permit)| Charged {
            item,
            _bytes: permit,
        })
    }

    /// [`Receiver::recv_charged`], polled by hand (for a body fed by the queue).
    pub fn poll_recv_charged(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Charged<T>>> {
        self.rx.poll_recv(cx).map(|m| {
            m.map(|(item, permit)| Charged {
                item,
                _bytes: permit,
            })
        })
    }

    /// A message already queued, if any, still counted while it is held.
    pub fn try_recv_charged(&mut self) -> Option<Charged<T>> {
        self.rx.try_recv().ok().map(|(item, permit)| Charged {
            item,
            _bytes: permit,
        })
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

    #[test]
    fn try_send_refuses_past_the_bytes_and_a_charged_message_holds_them_until_dropped() {
        let (tx, mut rx) = channel::<Bytes>(256, 100);
        assert_eq!(tx.try_send(Bytes::from(vec![0; 60]), 60), Ok(()));
        assert_eq!(tx.try_send(Bytes::from(vec![0; 50]), 50), Err(Full::Full));
        let first = rx.try_recv_charged();
        // Taken but still held: no room yet.
        assert_eq!(tx.try_send(Bytes::from(vec![0; 50]), 50), Err(Full::Full));
        let bytes: Bytes = first.map(Bytes::from).unwrap_or_default();
        assert_eq!(bytes.len(), 60);
        assert_eq!(tx.try_send(Bytes::from(vec![0; 50]), 50), Ok(()));
        // Larger than the whole bound: only alone.
        assert_eq!(tx.try_send(Bytes::from(vec![0; 500]), 500), Err(Full::Full));
        drop(rx.try_recv_charged());
        assert_eq!(tx.try_send(Bytes::from(vec![0; 500]), 500), Ok(()));
        // By count too.
        let (tx, rx) = channel::<u8>(2, 1000);
        assert_eq!(tx.try_send(1, 1), Ok(()));
        assert_eq!(tx.try_send(2, 1), Ok(()));
        assert_eq!(tx.try_send(3, 1), Err(Full::Full));
        drop(rx);
        assert!(tx.is_closed());
        assert_eq!(tx.try_send(4, 1), Err(Full::Closed));
    }
}
