//! Raw mode for the serial console's terminal.
//!
//! With `--serial tty` and stdin a terminal, the guest's console should get
//! every key as typed: no line buffering, no local echo (the guest echoes),
//! and Ctrl-C / Ctrl-Z go to the guest instead of stopping zerostart
//! (vmm-sys-util's raw mode, as Firecracker and cloud-hypervisor do). The
//! terminal must come back exactly as it was however the run ends, so the
//! full `termios` is saved and put back by [`RawStdin`]'s `Drop` (normal
//! exit, error, guest crash, SIGINT/SIGTERM/SIGHUP — all of which return
//! through `run` — and a VMM panic, which unwinds through it). Only SIGKILL
//! leaves the terminal raw (`stty sane` fixes it). When stdin is not a
//! terminal nothing is touched.

use std::io::IsTerminal;

use vmm_sys_util::terminal::Terminal;

/// Stdin in raw mode; restores the saved terminal settings when dropped.
pub struct RawStdin {
    saved: libc::termios,
}

impl RawStdin {
    /// Puts stdin in raw mode if it is a terminal (`Ok(None)`, nothing
    /// changed, if it is not).
    pub fn enter() -> Result<Option<RawStdin>, vmm_sys_util::errno::Error> {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return Ok(None);
        }
        // SAFETY: tcgetattr fills the zeroed struct for a valid fd.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        if unsafe { libc::tcgetattr(libc::STDIN_FILENO, &mut saved) } != 0 {
            return vmm_sys_util::errno::errno_result();
        }
        // From here on the guard exists, so a failure below still restores.
        let guard = RawStdin { saved };
        stdin.lock().set_raw_mode()?;
        Ok(Some(guard))
    }
}

impl Drop for RawStdin {
    fn drop(&mut self) {
        // TCSADRAIN: let the guest's last output reach the terminal first.
        // SAFETY: tcsetattr with the settings tcgetattr returned.
        if unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSADRAIN, &self.saved) } != 0 {
            eprintln!(
                "zerostart: warning: could not restore the terminal settings ({}); run `stty sane`",
                std::io::Error::last_os_error()
            );
        }
    }
}
