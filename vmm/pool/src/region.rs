//! The per-region state machine: `dirty → scrubbing → clean → leased →
//! dirty`.
//!
//! It is kept free of memory and I/O so every transition, legal or not, is
//! unit-tested. The one invariant that matters: a region is leased only
//! from `clean`, and it reaches `clean` only from `scrubbing`, i.e. after a
//! completed scrub. Every other path leads back to `dirty`.

use serde::Serialize;

/// Where a region is in its life cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum State {
    /// Contents unknown (fresh, returned by a client, or a scrub failed).
    Dirty,
    /// The scrubber is writing zeros over it; nobody else touches it.
    Scrubbing,
    /// Every byte is known zero; ready to lease.
    Clean,
    /// A client holds it.
    Leased {
        /// The lease id.
        lease: u64,
    },
}

impl State {
    /// Short name for logs and status.
    pub fn name(self) -> &'static str {
        match self {
            State::Dirty => "dirty",
            State::Scrubbing => "scrubbing",
            State::Clean => "clean",
            State::Leased { .. } => "leased",
        }
    }
}

/// A transition that the state machine does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("region {region}: cannot {action} while {from}")]
pub struct BadTransition {
    /// Region index.
    pub region: usize,
    /// What was attempted.
    pub action: &'static str,
    /// The state it was in.
    pub from: &'static str,
}

/// One region's state and history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    index: usize,
    state: State,
    /// Completed scrubs.
    scrubs: u64,
    /// Leases handed out.
    leases: u64,
}

impl Region {
    /// A new region: dirty, because nothing about its contents is known
    /// until the pool itself has scrubbed it.
    pub fn new(index: usize) -> Self {
        Region {
            index,
            state: State::Dirty,
            scrubs: 0,
            leases: 0,
        }
    }

    /// Region index.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Completed scrubs.
    pub fn scrubs(&self) -> u64 {
        self.scrubs
    }

    /// Leases handed out.
    pub fn leases(&self) -> u64 {
        self.leases
    }

    fn bad(&self, action: &'static str) -> BadTransition {
        BadTransition {
            region: self.index,
            action,
            from: self.state.name(),
        }
    }

    /// dirty → scrubbing.
    pub fn begin_scrub(&mut self) -> Result<(), BadTransition> {
        match self.state {
            State::Dirty => {
                self.state = State::Scrubbing;
                Ok(())
            }
            _ => Err(self.bad("begin a scrub")),
        }
    }

    /// scrubbing → clean: the scrub wrote (and, if asked, verified) every
    /// byte.
    pub fn finish_scrub(&mut self) -> Result<(), BadTransition> {
        match self.state {
            State::Scrubbing => {
                self.state = State::Clean;
                self.scrubs += 1;
                Ok(())
            }
            _ => Err(self.bad("finish a scrub")),
        }
    }

    /// scrubbing → dirty: the scrub failed or found a non-zero byte.
    pub fn fail_scrub(&mut self) -> Result<(), BadTransition> {
        match self.state {
            State::Scrubbing => {
                self.state = State::Dirty;
                Ok(())
            }
            _ => Err(self.bad("fail a scrub")),
        }
    }

    /// clean → leased.
    pub fn lease(&mut self, lease: u64) -> Result<(), BadTransition> {
        match self.state {
            State::Clean => {
                self.state = State::Leased { lease };
                self.leases += 1;
                Ok(())
            }
            _ => Err(self.bad("lease")),
        }
    }

    /// leased → dirty: the lease `lease` ended, however it ended.
    pub fn release(&mut self, lease: u64) -> Result<(), BadTransition> {
        match self.state {
            State::Leased { lease: l } if l == lease => {
                self.state = State::Dirty;
                Ok(())
            }
            _ => Err(self.bad("release a lease it does not hold")),
        }
    }

    /// Any state → dirty, for memory that was replaced (retired) or whose
    /// contents can no longer be vouched for. Never fails: it only ever
    /// takes trust away.
    pub fn distrust(&mut self) {
        self.state = State::Dirty;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_cycle() {
        let mut r = Region::new(3);
        assert_eq!(r.state(), State::Dirty);
        r.begin_scrub().unwrap();
        r.finish_scrub().unwrap();
        assert_eq!(r.state(), State::Clean);
        r.lease(7).unwrap();
        assert_eq!(r.state(), State::Leased { lease: 7 });
        r.release(7).unwrap();
        assert_eq!(r.state(), State::Dirty);
        assert_eq!((r.scrubs(), r.leases()), (1, 1));
    }

    /// Every action from every state: only the arrows of the diagram are
    /// allowed; in particular nothing but a finished scrub makes a region
    /// clean and nothing but clean can be leased.
    #[test]
    fn only_the_diagram_is_allowed() {
        type Act = fn(&mut Region) -> Result<(), BadTransition>;
        let acts: [(&str, Act); 5] = [
            ("begin", |r| r.begin_scrub()),
            ("finish", |r| r.finish_scrub()),
            ("fail", |r| r.fail_scrub()),
            ("lease", |r| r.lease(9)),
            ("release", |r| r.release(9)),
        ];
        let states = [
            State::Dirty,
            State::Scrubbing,
            State::Clean,
            State::Leased { lease: 9 },
        ];
        for from in states {
            for (name, act) in acts {
                let mut r = Region::new(0);
                r.state = from;
                let res = act(&mut r);
                let expected = match (from, name) {
                    (State::Dirty, "begin") => Some(State::Scrubbing),
                    (State::Scrubbing, "finish") => Some(State::Clean),
                    (State::Scrubbing, "fail") => Some(State::Dirty),
                    (State::Clean, "lease") => Some(State::Leased { lease: 9 }),
                    (State::Leased { .. }, "release") => Some(State::Dirty),
                    _ => None,
                };
                match expected {
                    Some(to) => {
                        assert!(res.is_ok(), "{from:?} {name}");
                        assert_eq!(r.state(), to, "{from:?} {name}");
                    }
                    None => {
                        let e = res.unwrap_err();
                        assert_eq!(r.state(), from, "{from:?} {name} must not move");
                        assert!(e.to_string().contains(from.name()), "{e}");
                    }
                }
            }
        }
    }

    #[test]
    fn release_of_another_lease_is_refused() {
        let mut r = Region::new(0);
        r.begin_scrub().unwrap();
        r.finish_scrub().unwrap();
        r.lease(1).unwrap();
        assert!(r.release(2).is_err());
        assert_eq!(r.state(), State::Leased { lease: 1 });
    }

    #[test]
    fn distrust_always_lands_dirty() {
        for s in [
            State::Dirty,
            State::Scrubbing,
            State::Clean,
            State::Leased { lease: 1 },
        ] {
            let mut r = Region::new(0);
            r.state = s;
            r.distrust();
            assert_eq!(r.state(), State::Dirty);
        }
    }
}
