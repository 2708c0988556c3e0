//! Running a short-lived program under a time limit: the pieces the monitor's command sink and
//! the gateway's command checks share. The program runs in a process group of its own (the
//! caller sets `process_group(0)`); [`Group`] kills that whole group when the limit passes or
//! the caller is dropped, so a script's children go with it; [`capture`] reads a pipe to its
//! end in a task of its own, keeping a bounded prefix, so that a chatty program never blocks
//! on a full pipe and a grandchild holding the pipe open cannot hold the caller.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinHandle;

/// `program args...` with a clean environment ([`crate::stdio::inherited_env`]: what a program
/// needs to run, not the caller's credentials) plus the caller's variables named in `pass`
/// (those that are set), in a process group of its own (for [`Group`]), killed if dropped.
/// The caller sets stdin, stdout and stderr.
pub fn clean(program: &str, args: &[String], pass: &[String]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    cmd.env_clear()
        .envs(crate::stdio::inherited_env())
        .envs(
            pass.iter()
                .filter_map(|k| std::env::var_os(k).map(|v| (k, v))),
        )
        .args(args)
        .process_group(0)
        .kill_on_drop(true);
    cmd
}

/// Kills the process group on drop unless disarmed: covers the time limit and an aborted task.
#[derive(Debug)]
pub struct Group(Option<i32>);

impl Group {
    /// The group led by this child (its pid, as `process_group(0)` makes it).
    pub fn of(pid: Option<u32>) -> Group {
        Group(pid.and_then(|p| i32::try_from(p).ok()))
    }

    /// SIGKILL to the whole group, once.
    pub fn kill(&mut self) {
        if let Some(pgid) = self.0.take() {
            // The leader is our unreaped child, so the id cannot have been reused.
            crate::stdio::kill_group(pgid, libc::SIGKILL);
        }
    }

    /// The leader was reaped: from here on its id may be reused, so it is never signalled.
    pub fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A pipe being read in the background: its first `cap` bytes.
#[derive(Debug)]
pub struct Captured {
    buf: Arc<Mutex<Vec<u8>>>,
    task: Option<JoinHandle<()>>,
}

/// Starts reading `pipe` (if any) to its end, keeping its first `cap` bytes.
pub fn capture(pipe: Option<impl AsyncRead + Unpin + Send + 'static>, cap: usize) -> Captured {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let task = pipe.map(|mut pipe| {
        let buf = Arc::clone(&buf);
        tokio::spawn(async move {
            let mut chunk = [0u8; 1024];
            loop {
                match pipe.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let mut b = buf.lock().unwrap_or_else(|p| p.into_inner());
                        let room = cap.saturating_sub(b.len());
                        b.extend_from_slice(&chunk[..n.min(room)]);
                    }
                }
            }
        })
    });
    Captured { buf, task }
}

impl Captured {
    /// After the program exited: waits at most `grace` for the pipe's end (a child it left
    /// behind can hold it open), then returns what was kept.
    pub async fn finish(mut self, grace: Duration) -> Vec<u8> {
        if let Some(mut t) = self.task.take()
            && tokio::time::timeout(grace, &mut t).await.is_err()
        {
            t.abort();
        }
        self.take()
    }

    /// Stops reading; what was kept so far.
    pub fn abort(mut self) -> Vec<u8> {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        self.take()
    }

    fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *self.buf.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Drop for Captured {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use std::process::Stdio;

    #[tokio::test]
    async fn a_flood_is_kept_to_its_cap_and_never_blocks_the_program() {
        let mut cmd = clean(
            "sh",
            &["-c".into(), "head -c 1000000 /dev/zero".into()],
            &[],
        );
        cmd.stdout(Stdio::piped()).stdin(Stdio::null());
        let mut child = cmd.spawn().unwrap();
        let mut group = Group::of(child.id());
        let out = capture(child.stdout.take(), 100);
        let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
            .await
            .unwrap()
            .unwrap();
        group.disarm();
        assert!(status.success());
        assert_eq!(out.finish(Duration::from_secs(1)).await.len(), 100);
    }

    #[tokio::test]
    async fn the_environment_is_clean_but_for_what_is_passed() {
        // cargo sets CARGO_MANIFEST_DIR for the tests it runs: a variable of ours to pass.
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        let script = "echo \"${PATH:+path}-${CARGO_MANIFEST_DIR:+passed}\"".to_string();
        for (pass, want) in [
            (vec![], "path-\n"),
            (vec!["CARGO_MANIFEST_DIR".to_string()], "path-passed\n"),
        ] {
            let mut cmd = clean("sh", &["-c".into(), script.clone()], &pass);
            cmd.stdout(Stdio::piped());
            let out = cmd.output().await.unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout), want);
        }
    }
}
