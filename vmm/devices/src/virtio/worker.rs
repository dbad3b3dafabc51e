//! A device's own thread (its I/O thread, the tap RX worker, the vhost
//! call relay) and how teardown stops it: an eventfd the thread polls,
//! then a bounded join, so guest RAM is unmapped only after the thread is
//! gone.

use std::os::fd::{AsRawFd, RawFd};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// A running device thread.
pub struct Worker {
    stop: EventFd,
    handle: Option<JoinHandle<()>>,
}

impl Worker {
    /// Runs `f` on a thread named `name`; `f` gets the stop eventfd's
    /// descriptor to poll next to its own and returns when it is readable.
    pub fn spawn(name: String, f: impl FnOnce(RawFd) + Send + 'static) -> std::io::Result<Worker> {
        Self::spawn_with(EventFd::new(EFD_NONBLOCK)?, name, f)
    }

    /// As [`Worker::spawn`], with a stop eventfd the caller made, so it
    /// can register a copy where the thread will wait (an event manager
    /// built before the thread starts) and see any error there itself.
    pub fn spawn_with(
        stop: EventFd,
        name: String,
        f: impl FnOnce(RawFd) + Send + 'static,
    ) -> std::io::Result<Worker> {
        let fd = stop.try_clone()?;
        let handle = std::thread::Builder::new().name(name).spawn(move || {
            f(fd.as_raw_fd());
            drop(fd);
        })?;
        Ok(Worker {
            stop,
            handle: Some(handle),
        })
    }

    /// Asks the thread to end and waits up to `timeout`; false if it is
    /// still running (the caller must then keep guest RAM mapped).
    pub fn stop(&mut self, timeout: Duration) -> bool {
        let _ = self.stop.write(1);
        let Some(h) = self.handle.take() else {
            return true;
        };
        let deadline = Instant::now() + timeout;
        while !h.is_finished() {
            if Instant::now() >= deadline {
                self.handle = Some(h);
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = h.join();
        true
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.stop.write(1);
    }
}
