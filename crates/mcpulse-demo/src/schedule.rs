//! The two demo servers whose behaviour changes with time: `flaky` (up, then down, in a cycle)
//! and `drifting` (its tools change every few minutes).
//!
//! Each has a switch the servers read on every request. By default the switch follows the clock
//! (`tokio::time`, so paused-time tests can drive it); a test, or a curious user, can pin it with
//! `force` and release it again with `force(None)`. Where the clock puts a switch is a pure
//! function of the elapsed time ([`flaky_up_at`], [`drift_stage_at`]).

use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// Whether `flaky` is up `elapsed` after it started: up for `up`, then down for `down`, again.
pub fn flaky_up_at(elapsed: Duration, up: Duration, down: Duration) -> bool {
    let cycle = up.as_millis() + down.as_millis();
    if cycle == 0 {
        return true;
    }
    elapsed.as_millis() % cycle < up.as_millis()
}

/// The stage `drifting` is in `elapsed` after it started: the next stage every `every`.
pub fn drift_stage_at(elapsed: Duration, every: Duration) -> DriftStage {
    stage_at(elapsed, every)
}

/// The stage of a cycle `elapsed` after it started: the next of [`Stage::ALL`] every `every`.
pub fn stage_at<S: Stage>(elapsed: Duration, every: Duration) -> S {
    let every = every.as_millis().max(1);
    let n = (elapsed.as_millis() / every) % S::ALL.len().max(1) as u128;
    S::ALL.get(n as usize).copied().unwrap_or(S::FIRST)
}

/// The stages of a server that changes on a timer, in the order it goes through them.
pub trait Stage: Copy + std::fmt::Debug + Send + Sync + 'static {
    const ALL: &'static [Self];
    /// Where the cycle starts.
    const FIRST: Self;
}

/// The `flaky` server's switch: up or down (HTTP 503 to everything).
#[derive(Debug)]
pub struct FlakySwitch {
    started: Instant,
    up: Duration,
    down: Duration,
    forced: Mutex<Option<bool>>,
}

impl FlakySwitch {
    pub fn new(up: Duration, down: Duration) -> FlakySwitch {
        FlakySwitch {
            started: Instant::now(),
            up,
            down,
            forced: Mutex::new(None),
        }
    }

    /// Whether the server answers now.
    pub fn is_up(&self) -> bool {
        match *self.forced.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(up) => up,
            None => flaky_up_at(self.started.elapsed(), self.up, self.down),
        }
    }

    /// Pins the server up (`Some(true)`) or down (`Some(false)`); `None` follows the cycle again.
    pub fn force(&self, up: Option<bool>) {
        *self.forced.lock().unwrap_or_else(|p| p.into_inner()) = up;
    }
}

/// What the `drifting` server's tools look like. Each step from one stage to the next is a
/// different class of drift, so a monitor shows each in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriftStage {
    /// The contract as first seen.
    Original,
    /// `lookup`'s description is reworded: a *risky* change (what the model reads changed).
    Reworded,
    /// `lookup` gains a required `region` parameter: a *breaking* change. The next stage is
    /// `Original` again (the parameter removed, also breaking).
    ParameterAdded,
}

impl Stage for DriftStage {
    const ALL: &'static [DriftStage] = &[
        DriftStage::Original,
        DriftStage::Reworded,
        DriftStage::ParameterAdded,
    ];
    const FIRST: DriftStage = DriftStage::Original;
}

impl DriftStage {
    pub const ALL: [DriftStage; 3] = [
        DriftStage::Original,
        DriftStage::Reworded,
        DriftStage::ParameterAdded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DriftStage::Original => "original",
            DriftStage::Reworded => "reworded",
            DriftStage::ParameterAdded => "parameter-added",
        }
    }
}

/// What the `shifting` server looks like: each step to the next stage changes one signal the
/// monitor alerts on (other than the status), so that every alert kind shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShiftStage {
    /// A healthy legacy server, negotiating the newest legacy revision; grade A.
    Steady,
    /// It negotiates an older revision (2025-06-18): a *protocol* alert (and drift: a supported
    /// version was dropped).
    OlderProtocol,
    /// It accepts a foreign `Origin` (no DNS-rebinding guard): the *grade* falls.
    OriginOpen,
    /// It wants a bearer token: an *auth* alert (none → required), and degraded. The next stage
    /// is `Steady` again (auth back to none).
    Gated,
}

impl Stage for ShiftStage {
    const ALL: &'static [ShiftStage] = &[
        ShiftStage::Steady,
        ShiftStage::OlderProtocol,
        ShiftStage::OriginOpen,
        ShiftStage::Gated,
    ];
    const FIRST: ShiftStage = ShiftStage::Steady;
}

/// A server's stage switch: by default it follows the clock, one stage every `every`; `force`
/// pins a stage.
#[derive(Debug)]
pub struct StageSwitch<S: Stage> {
    started: Instant,
    every: Duration,
    forced: Mutex<Option<S>>,
}

/// The `drifting` server's switch.
pub type DriftSwitch = StageSwitch<DriftStage>;
/// The `shifting` server's switch.
pub type ShiftSwitch = StageSwitch<ShiftStage>;

impl<S: Stage> StageSwitch<S> {
    pub fn new(every: Duration) -> StageSwitch<S> {
        StageSwitch {
            started: Instant::now(),
            every,
            forced: Mutex::new(None),
        }
    }

    /// The stage now.
    pub fn stage(&self) -> S {
        match *self.forced.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(s) => s,
            None => stage_at(self.started.elapsed(), self.every),
        }
    }

    /// Pins a stage; `None` follows the clock again.
    pub fn force(&self, stage: Option<S>) {
        *self.forced.lock().unwrap_or_else(|p| p.into_inner()) = stage;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn flaky_cycle() {
        assert!(flaky_up_at(S(0), S(30), S(30)));
        assert!(flaky_up_at(S(29), S(30), S(30)));
        assert!(!flaky_up_at(S(30), S(30), S(30)));
        assert!(!flaky_up_at(S(59), S(30), S(30)));
        assert!(flaky_up_at(S(60), S(30), S(30)));
        assert!(flaky_up_at(S(5), S(0), S(0)));
        assert!(!flaky_up_at(S(5), S(0), S(10)));
    }

    #[test]
    fn drift_cycle() {
        assert_eq!(drift_stage_at(S(0), S(120)), DriftStage::Original);
        assert_eq!(drift_stage_at(S(120), S(120)), DriftStage::Reworded);
        assert_eq!(drift_stage_at(S(240), S(120)), DriftStage::ParameterAdded);
        assert_eq!(drift_stage_at(S(360), S(120)), DriftStage::Original);
        assert_eq!(drift_stage_at(S(0), Duration::ZERO), DriftStage::Original);
        assert_eq!(stage_at::<ShiftStage>(S(45), S(15)), ShiftStage::Gated);
        assert_eq!(stage_at::<ShiftStage>(S(60), S(15)), ShiftStage::Steady);
    }

    #[tokio::test(start_paused = true)]
    async fn switches_follow_the_clock_until_forced() {
        let flaky = FlakySwitch::new(S(30), S(30));
        assert!(flaky.is_up());
        tokio::time::advance(S(31)).await;
        assert!(!flaky.is_up());
        flaky.force(Some(true));
        assert!(flaky.is_up());
        flaky.force(None);
        assert!(!flaky.is_up());

        let drift = DriftSwitch::new(S(120));
        assert_eq!(drift.stage(), DriftStage::Original);
        tokio::time::advance(S(121)).await;
        assert_eq!(drift.stage(), DriftStage::Reworded);
        drift.force(Some(DriftStage::ParameterAdded));
        assert_eq!(drift.stage(), DriftStage::ParameterAdded);
    }
}
