//! Just enough of an i8042 keyboard controller for Linux to probe it quickly
//! and to reset through it.
//!
//! vm-superio's `I8042Device` handles the reset command but answers every
//! read with 0, so Linux's controller self-test and CTR read each wait for a
//! reply that never comes (half a second apiece of polling) before giving up.
//! A boot-time tool cannot afford that, so this model answers the controller
//! commands Linux's `i8042` driver issues during probe, acknowledges keyboard
//! commands, and reports "no AUX port" immediately. Pair it with the kernel
//! options `i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd`, as Firecracker
//! does, to skip the keyboard's own probe entirely.

use std::collections::VecDeque;

use vmm_sys_util::eventfd::EventFd;

use crate::{ExitRequest, PioDevice};

/// Data port.
pub const DATA_PORT: u16 = 0x60;
/// Status (read) / command (write) port.
pub const COMMAND_PORT: u16 = 0x64;

// Status register bits.
const SR_OUTPUT_FULL: u8 = 0x01;
const SR_SYSTEM_FLAG: u8 = 0x04;
const SR_LAST_WAS_COMMAND: u8 = 0x08;
const SR_KBD_UNLOCKED: u8 = 0x10;

// Controller commands (port 0x64).
const CMD_READ_CTR: u8 = 0x20;
const CMD_WRITE_CTR: u8 = 0x60;
const CMD_AUX_TEST: u8 = 0xa9;
const CMD_SELF_TEST: u8 = 0xaa;
const CMD_KBD_TEST: u8 = 0xab;
const CMD_READ_OUTPORT: u8 = 0xd0;
const CMD_WRITE_OUTPORT: u8 = 0xd1;
const CMD_AUX_LOOP: u8 = 0xd3;
const CMD_AUX_SEND: u8 = 0xd4;
const CMD_RESET_CPU: u8 = 0xfe;

// Keyboard commands (port 0x60) with non-trivial replies.
const KBD_GET_ID: u8 = 0xf2;
const KBD_RESET: u8 = 0xff;
const KBD_ACK: u8 = 0xfa;

/// Bit 0 of the controller configuration byte: keyboard interrupt enabled.
const CTR_KBD_INT: u8 = 0x01;

/// What the next write to the data port means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    /// A byte for the keyboard.
    Keyboard,
    /// The new controller configuration byte.
    Ctr,
    /// The new output port value (ignored).
    OutPort,
    /// A byte for the AUX loopback test.
    AuxLoop,
    /// A byte for the (absent) AUX device.
    AuxSend,
}

/// The i8042 at ports 0x60 and 0x64.
///
/// Insert it on the bus twice (0x60 len 1 and 0x64 len 1) with the same
/// `Arc`; ports 0x61..0x63 belong to other legacy devices.
#[derive(Debug)]
pub struct I8042Device {
    out: VecDeque<u8>,
    ctr: u8,
    pending: Pending,
    last_was_command: bool,
    kbd_evt: Option<EventFd>,
}

impl Default for I8042Device {
    fn default() -> Self {
        Self::new()
    }
}

impl I8042Device {
    /// A controller with keyboard interrupts disabled and nothing queued.
    pub fn new() -> Self {
        I8042Device {
            out: VecDeque::new(),
            // Keyboard interrupt on, system flag, translation: what firmware
            // leaves behind.
            ctr: 0x45,
            pending: Pending::Keyboard,
            last_was_command: false,
            kbd_evt: None,
        }
    }

    /// Also signal `evt` (register it as an irqfd on GSI 1) when a keyboard
    /// reply is queued and the guest enabled keyboard interrupts. Without it
    /// the guest must poll, which Linux does during probe anyway.
    pub fn with_kbd_interrupt(mut self, evt: EventFd) -> Self {
        self.kbd_evt = Some(evt);
        self
    }

    fn status(&self) -> u8 {
        let mut s = SR_SYSTEM_FLAG | SR_KBD_UNLOCKED;
        if !self.out.is_empty() {
            s |= SR_OUTPUT_FULL;
        }
        if self.last_was_command {
            s |= SR_LAST_WAS_COMMAND;
        }
        s
    }

    /// Queues a reply. The buffer is bounded: a guest hammering commands
    /// without reading gets its oldest replies dropped, not unbounded memory.
    fn push(&mut self, b: u8) {
        if self.out.len() >= 16 {
            self.out.pop_front();
        }
        self.out.push_back(b);
    }

    fn push_kbd(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.push(b);
        }
        if self.ctr & CTR_KBD_INT != 0 {
            if let Some(e) = &self.kbd_evt {
                // An interrupt that cannot be delivered only costs the guest a
                // poll; never fail the access for it.
                let _ = e.write(1);
            }
        }
    }

    fn command(&mut self, cmd: u8) -> Option<ExitRequest> {
        self.last_was_command = true;
        self.pending = Pending::Keyboard;
        match cmd {
            CMD_READ_CTR => self.push(self.ctr),
            CMD_WRITE_CTR => self.pending = Pending::Ctr,
            CMD_SELF_TEST => self.push(0x55),
            CMD_KBD_TEST => self.push(0x00),
            // "Clock line stuck low": Linux concludes there is no AUX port
            // without waiting for a timeout.
            CMD_AUX_TEST => self.push(0x01),
            CMD_READ_OUTPORT => self.push(0x01),
            CMD_WRITE_OUTPORT => self.pending = Pending::OutPort,
            CMD_AUX_LOOP => self.pending = Pending::AuxLoop,
            CMD_AUX_SEND => self.pending = Pending::AuxSend,
            CMD_RESET_CPU => return Some(ExitRequest::Reset("i8042 reset")),
            // Enable/disable ports (0xa7, 0xa8, 0xad, 0xae) and the rest
            // need no reply.
            _ => {}
        }
        None
    }

    fn data(&mut self, b: u8) {
        self.last_was_command = false;
        match std::mem::replace(&mut self.pending, Pending::Keyboard) {
            Pending::Ctr => self.ctr = b,
            // Not echoed: the loopback "fails", so Linux runs the AUX test,
            // which says there is no port.
            Pending::OutPort | Pending::AuxLoop | Pending::AuxSend => {}
            Pending::Keyboard => match b {
                KBD_RESET => self.push_kbd(&[KBD_ACK, 0xaa]),
                KBD_GET_ID => self.push_kbd(&[KBD_ACK, 0xab, 0x83]),
                _ => self.push_kbd(&[KBD_ACK]),
            },
        }
    }
}

impl PioDevice for I8042Device {
    fn read(&mut self, base: u16, offset: u16, data: &mut [u8]) {
        let v = match base + offset {
            DATA_PORT => self.out.pop_front().unwrap_or(0),
            COMMAND_PORT => self.status(),
            _ => 0xff,
        };
        data.fill(0);
        if let Some(f) = data.first_mut() {
            *f = v;
        }
    }

    fn write(&mut self, base: u16, offset: u16, data: &[u8]) -> Option<ExitRequest> {
        let &b = data.first()?;
        match base.wrapping_add(offset) {
            COMMAND_PORT => self.command(b),
            DATA_PORT => {
                self.data(b);
                None
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(d: &mut I8042Device, c: u8) -> Option<ExitRequest> {
        d.write(COMMAND_PORT, 0, &[c])
    }
    fn status(d: &mut I8042Device) -> u8 {
        let mut b = [0u8];
        d.read(COMMAND_PORT, 0, &mut b);
        b[0]
    }
    fn data(d: &mut I8042Device) -> u8 {
        let mut b = [0u8];
        d.read(DATA_PORT, 0, &mut b);
        b[0]
    }

    #[test]
    fn reset_command_requests_reset() {
        let mut d = I8042Device::new();
        assert_eq!(cmd(&mut d, 0xfe), Some(ExitRequest::Reset("i8042 reset")));
        // 0xfe on the data port is a keyboard byte, not a reset.
        assert_eq!(d.write(DATA_PORT, 0, &[0xfe]), None);
        // Reset needs the input buffer empty bit clear, which it always is.
        assert_eq!(status(&mut d) & 0x02, 0);
    }

    #[test]
    fn linux_probe_sequence_gets_answers() {
        let mut d = I8042Device::new();
        // i8042_flush: nothing to read.
        assert_eq!(status(&mut d) & SR_OUTPUT_FULL, 0);
        cmd(&mut d, CMD_SELF_TEST);
        assert_eq!(status(&mut d) & SR_OUTPUT_FULL, 1);
        assert_eq!(data(&mut d), 0x55);
        assert_eq!(status(&mut d) & SR_OUTPUT_FULL, 0);
        cmd(&mut d, CMD_READ_CTR);
        assert_eq!(data(&mut d), 0x45);
        cmd(&mut d, CMD_WRITE_CTR);
        d.write(DATA_PORT, 0, &[0x47]);
        cmd(&mut d, CMD_READ_CTR);
        assert_eq!(data(&mut d), 0x47);
        // AUX loop is not echoed, AUX test says "no port".
        cmd(&mut d, CMD_AUX_LOOP);
        d.write(DATA_PORT, 0, &[0x5a]);
        assert_eq!(status(&mut d) & SR_OUTPUT_FULL, 0);
        cmd(&mut d, CMD_AUX_TEST);
        assert_eq!(data(&mut d), 0x01);
        // Keyboard replies.
        d.write(DATA_PORT, 0, &[KBD_GET_ID]);
        assert_eq!(
            [data(&mut d), data(&mut d), data(&mut d)],
            [0xfa, 0xab, 0x83]
        );
        d.write(DATA_PORT, 0, &[0xed]);
        assert_eq!(data(&mut d), 0xfa);
        // Empty buffer reads 0 and does not panic.
        assert_eq!(data(&mut d), 0);
    }

    #[test]
    fn keyboard_reply_fires_irq_when_enabled() {
        let evt = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let mut d = I8042Device::new().with_kbd_interrupt(evt.try_clone().unwrap());
        d.write(DATA_PORT, 0, &[KBD_RESET]);
        assert_eq!(evt.read().unwrap(), 1);
        cmd(&mut d, CMD_WRITE_CTR);
        d.write(DATA_PORT, 0, &[0x44]);
        d.write(DATA_PORT, 0, &[KBD_RESET]);
        assert!(evt.read().is_err(), "interrupt disabled in CTR");
    }

    #[test]
    fn output_buffer_is_bounded() {
        let mut d = I8042Device::new();
        for _ in 0..1000 {
            cmd(&mut d, CMD_SELF_TEST);
        }
        assert_eq!(d.out.len(), 16);
        d.write(COMMAND_PORT, 0, &[]);
        let mut w = [0u8; 4];
        d.read(COMMAND_PORT, 0, &mut w);
        assert_eq!(w[1..], [0, 0, 0]);
    }
}
