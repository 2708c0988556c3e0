//! The single-writer lock: one monitor writes a history file, any number of programs read it.
//!
//! The database itself is opened with SQLite's normal locking (WAL), so `sqlite3`, a backup
//! (`.backup`, `VACUUM INTO`), Litestream or a dashboard can read it while the daemon writes.
//! What keeps a second monitor from writing the same file (which would double every alert) is
//! an advisory lock on a sidecar file, `<database>.lock`, taken before the database is opened
//! and held for the [`super::Store`]'s life:
//!
//! - it is `flock(2)` (through `libc`, already a dependency; `File::try_lock` is newer than
//!   the workspace's minimum Rust, 1.88, and `fs2`/`fs4` would add a crate for one call): the
//!   kernel drops it when the process ends however it ends (SIGKILL, OOM kill, panic), so a
//!   crash never leaves a stale lock to clean up by hand;
//! - readers never take it, so it never blocks them; SQLite's own locks keep their reads
//!   consistent;
//! - the file holds the holder's pid, only to name it in the error a second monitor gets; the
//!   lock is the `flock`, not the file's existence, so the file is left in place at exit (a
//!   remove-on-exit would race with a monitor starting at that moment).
//!
//! NFS: Linux emulates `flock` on NFS with byte-range locks, which the server may drop on a
//! network partition; SQLite's WAL also needs shared memory the hosts of a network file system do
//! not share. Keep the history on a local disk.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The most of a lock file read to find the holder's pid: a pid and a newline are a few bytes;
/// a lock file someone replaced with something large is not read further.
const MAX_LOCK_FILE: u64 = 64;

/// Why the lock could not be taken.
#[derive(Debug)]
pub(super) enum LockFail {
    /// Another process holds it; its pid, when the lock file names one.
    Held { lock: PathBuf, pid: Option<u32> },
    /// The lock file could not be created or locked.
    Io {
        lock: PathBuf,
        error: std::io::Error,
    },
}

/// The held lock: released when dropped (the file is closed) or when the process ends.
#[derive(Debug)]
pub(super) struct WriterLock {
    _file: File,
}

/// The sidecar lock file of a database: `<database>.lock` (`mcpulse.db` → `mcpulse.db.lock`).
pub fn lock_path(db: &Path) -> PathBuf {
    let mut s = db.as_os_str().to_owned();
    s.push(".lock");
    PathBuf::from(s)
}

impl WriterLock {
    /// Takes the lock of `db` without waiting, and writes this process's pid into it.
    pub(super) fn acquire(db: &Path) -> Result<WriterLock, LockFail> {
        let lock = lock_path(db);
        let io = |error| LockFail::Io {
            lock: lock.clone(),
            error,
        };
        // Not truncated at open: the holder's pid must stay readable for the one refused.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock)
            .map_err(io)?;
        match try_flock(&file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let pid = read_pid(&mut file);
                return Err(LockFail::Held { lock, pid });
            }
            Err(e) => return Err(io(e)),
        }
        // Ours: the pid is informative only, so failing to write it is not fatal.
        let _ = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .and_then(|()| file.flush());
        Ok(WriterLock { _file: file })
    }
}

/// `flock(LOCK_EX | LOCK_NB)`: an exclusive lock of the open file, or `WouldBlock` at once.
fn try_flock(file: &File) -> std::io::Result<()> {
    loop {
        // SAFETY: flock(2) on a file descriptor `file` owns and keeps open for the call; it
        // reads no memory of ours.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The pid a lock file names, if it names one (bounded read: the file is not trusted).
fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.take(MAX_LOCK_FILE).read_to_string(&mut text).ok()?;
    text.trim().parse().ok().filter(|&p| p > 0)
}
