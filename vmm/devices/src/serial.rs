//! COM1: a 16550 UART from vm-superio, interrupting through an eventfd.

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vm_superio::serial::NoEvents;
use vm_superio::{Serial, Trigger};
use vmm_sys_util::eventfd::EventFd;

use crate::{ExitRequest, PioDevice};

/// First port of COM1.
pub const COM1_BASE: u16 = 0x3f8;
/// Number of ports of a 16550.
pub const COM1_LEN: u16 = 8;
/// The legacy interrupt line of COM1 (ISA IRQ 4); the VMM registers
/// [`SerialDevice::interrupt_evt`] as an irqfd on this GSI.
pub const COM1_GSI: u32 = 4;

/// Where guest console output goes.
pub enum SerialOutput {
    /// The VMM's standard output.
    Stdout,
    /// Discard (benchmarks that only want the timeline).
    Sink,
    /// Any writer, e.g. a log file.
    Writer(Box<dyn Write + Send>),
}

impl SerialOutput {
    fn into_writer(self) -> Box<dyn Write + Send> {
        match self {
            SerialOutput::Stdout => Box::new(io::stdout()),
            SerialOutput::Sink => Box::new(io::sink()),
            SerialOutput::Writer(w) => w,
        }
    }
}

/// vm-superio's `Trigger` for an eventfd (a newtype because both are foreign).
struct EventFdTrigger(EventFd);

impl Trigger for EventFdTrigger {
    type E = io::Error;
    fn trigger(&self) -> io::Result<()> {
        self.0.write(1)
    }
}

/// Wraps the output to remember when the guest printed its first byte, the
/// "first console output" point of the boot timeline, and to give up on an
/// output nobody reads once the VM is stopping.
struct TimedWriter {
    inner: Box<dyn Write + Send>,
    first: Arc<OnceLock<Instant>>,
    /// The VM's stop flag. A write to a pipe whose reader stopped reading
    /// blocks the vCPU thread in the kernel; the VMM's kick signal interrupts
    /// it (EINTR), but vm-superio's `write_all` would retry forever, and the
    /// vCPU would never see the stop. So an interrupted write fails once the
    /// VM is stopping, and that output is dropped.
    stop: Arc<AtomicBool>,
}

impl Write for TimedWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !buf.is_empty() {
            self.first.get_or_init(Instant::now);
        }
        match self.inner.write(buf) {
            Err(e)
                if e.kind() == io::ErrorKind::Interrupted && self.stop.load(Ordering::Acquire) =>
            {
                Err(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "the VM is stopping; serial output dropped",
                ))
            }
            r => r,
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The COM1 serial port.
pub struct SerialDevice {
    uart: Serial<EventFdTrigger, NoEvents, TimedWriter>,
    first_output: Arc<OnceLock<Instant>>,
    /// Output or interrupt failures, counted instead of stopping the guest
    /// (a closed stdout must not kill a VM that is otherwise fine).
    errors: Arc<AtomicU64>,
}

impl std::fmt::Debug for SerialDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SerialDevice")
            .field("first_output", &self.first_output.get())
            .field("errors", &self.errors.load(Ordering::Relaxed))
            .finish()
    }
}

impl SerialDevice {
    /// A UART writing guest output to `out`. Its interrupt eventfd is
    /// created here; register it with `KVM_IRQFD` on [`COM1_GSI`].
    pub fn new(out: SerialOutput) -> io::Result<Self> {
        Self::with_stop(out, Arc::new(AtomicBool::new(false)))
    }

    /// As [`SerialDevice::new`], giving up on a blocked output write once
    /// `stop` (the VM's stop flag, set before the vCPUs are kicked) is set.
    pub fn with_stop(out: SerialOutput, stop: Arc<AtomicBool>) -> io::Result<Self> {
        let evt = EventFd::new(libc::EFD_NONBLOCK)?;
        let first = Arc::new(OnceLock::new());
        let w = TimedWriter {
            inner: out.into_writer(),
            first: first.clone(),
            stop,
        };
        Ok(SerialDevice {
            uart: Serial::new(EventFdTrigger(evt), w),
            first_output: first,
            errors: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The eventfd the UART signals when it raises its interrupt.
    pub fn interrupt_evt(&self) -> &EventFd {
        &self.uart.interrupt_evt().0
    }

    /// When the guest wrote its first output byte, if it has.
    pub fn first_output(&self) -> Option<Instant> {
        self.first_output.get().copied()
    }

    /// Output or interrupt errors seen so far.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Queues bytes for the guest to read (console input). Returns how many
    /// fit in the receive FIFO.
    pub fn enqueue_input(&mut self, bytes: &[u8]) -> usize {
        match self.uart.enqueue_raw_bytes(bytes) {
            Ok(n) => n,
            Err(vm_superio::serial::Error::FullFifo) => 0,
            Err(_) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                0
            }
        }
    }

    /// Starts a thread forwarding the VMM's stdin to the guest, but only
    /// when stdin is a terminal: under CI or a pipe the guest must not
    /// consume the harness's input. Returns `None` when not started.
    ///
    /// The terminal mode is the caller's business (zerostart puts it in raw
    /// mode for the run and restores it); the thread ends at EOF.
    pub fn spawn_stdin_thread(dev: Arc<Mutex<SerialDevice>>) -> Option<JoinHandle<()>> {
        // SAFETY: isatty only inspects the descriptor.
        if unsafe { libc::isatty(libc::STDIN_FILENO) } != 1 {
            return None;
        }
        std::thread::Builder::new()
            .name("serial-stdin".into())
            .spawn(move || {
                let mut buf = [0u8; 64];
                let mut stdin = io::stdin();
                while let Ok(n) = stdin.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let mut rest = &buf[..n];
                    while !rest.is_empty() {
                        let Ok(mut d) = dev.lock() else { return };
                        let k = d.enqueue_input(rest);
                        drop(d);
                        rest = &rest[k..];
                        if k == 0 {
                            // FIFO full: the guest has not drained it yet.
                            std::thread::sleep(Duration::from_millis(5));
                        }
                    }
                }
            })
            .ok()
    }
}

impl PioDevice for SerialDevice {
    fn read(&mut self, _base: u16, offset: u16, data: &mut [u8]) {
        // The UART has byte registers; wider reads get the register in the
        // low byte, like real hardware on an 8-bit ISA bus returns 0xff for
        // the rest.
        data.fill(0xff);
        if let (Some(first), Ok(off)) = (data.first_mut(), u8::try_from(offset)) {
            *first = self.uart.read(off);
        }
    }

    fn write(&mut self, _base: u16, offset: u16, data: &[u8]) -> Option<ExitRequest> {
        if let (Some(&v), Ok(off)) = (data.first(), u8::try_from(offset)) {
            if self.uart.write(off, v).is_err() {
                self.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_util::Shared;

    const THR: u16 = 0;
    const IER: u16 = 1;
    const IIR: u16 = 2;
    const LCR: u16 = 3;
    const LSR: u16 = 5;

    fn rd(d: &mut SerialDevice, off: u16) -> u8 {
        let mut b = [0u8];
        d.read(COM1_BASE, off, &mut b);
        b[0]
    }

    #[test]
    fn output_reaches_writer_and_first_byte_is_timestamped() {
        let out = Shared::default();
        let mut d = SerialDevice::new(SerialOutput::Writer(Box::new(out.clone()))).unwrap();
        assert!(d.first_output().is_none());
        let before = Instant::now();
        for b in b"hi\n" {
            assert_eq!(d.write(COM1_BASE, THR, &[*b]), None);
        }
        assert_eq!(&*out.0.lock().unwrap(), b"hi\n");
        let t = d.first_output().unwrap();
        assert!(t >= before);
        // The timestamp is the FIRST byte's and does not move.
        d.write(COM1_BASE, THR, b"x");
        assert_eq!(d.first_output(), Some(t));
    }

    #[test]
    fn registers_behave_like_a_16550() {
        let mut d = SerialDevice::new(SerialOutput::Sink).unwrap();
        // Transmitter empty and holding register empty after reset.
        assert_eq!(rd(&mut d, LSR) & 0x60, 0x60);
        // No interrupt pending.
        assert_eq!(rd(&mut d, IIR) & 1, 1);
        // Scratch register round-trips; LCR round-trips.
        d.write(COM1_BASE, 7, &[0xa5]);
        assert_eq!(rd(&mut d, 7), 0xa5);
        d.write(COM1_BASE, LCR, &[0x03]);
        assert_eq!(rd(&mut d, LCR), 0x03);
        // Wide and out-of-range accesses don't panic.
        let mut w = [0u8; 4];
        d.read(COM1_BASE, 0xffff, &mut w);
        d.write(COM1_BASE, 0xffff, &[1, 2, 3, 4]);
        d.write(COM1_BASE, 0, &[]);
        d.read(COM1_BASE, 0, &mut []);
    }

    #[test]
    fn thr_empty_interrupt_fires_the_eventfd() {
        let mut d = SerialDevice::new(SerialOutput::Sink).unwrap();
        // Nothing pending before the guest enables interrupts.
        assert!(d.interrupt_evt().read().is_err());
        // Enable the THR-empty interrupt, then transmit.
        d.write(COM1_BASE, IER, &[0x02]);
        d.write(COM1_BASE, THR, b"a");
        assert!(d.interrupt_evt().read().unwrap() >= 1);
        assert_eq!(rd(&mut d, IIR) & 0x0f, 0x02);
    }

    #[test]
    fn input_is_readable_and_raises_rda() {
        let mut d = SerialDevice::new(SerialOutput::Sink).unwrap();
        d.write(COM1_BASE, IER, &[0x01]);
        assert_eq!(d.enqueue_input(b"ok"), 2);
        assert!(d.interrupt_evt().read().unwrap() >= 1);
        assert_eq!(rd(&mut d, LSR) & 1, 1);
        assert_eq!(rd(&mut d, 0), b'o');
        assert_eq!(rd(&mut d, 0), b'k');
        assert_eq!(rd(&mut d, LSR) & 1, 0);
        // A full FIFO takes what fits and then nothing, without error.
        let big = vec![b'z'; 1000];
        let n = d.enqueue_input(&big);
        assert!(n > 0 && n < 1000);
        assert_eq!(d.enqueue_input(b"more"), 0);
        assert_eq!(d.errors(), 0);
    }

    #[test]
    fn broken_output_is_counted_not_fatal() {
        struct Broken;
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::from(io::ErrorKind::BrokenPipe))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut d = SerialDevice::new(SerialOutput::Writer(Box::new(Broken))).unwrap();
        assert_eq!(d.write(COM1_BASE, THR, b"a"), None);
        assert_eq!(d.errors(), 1);
    }
}
