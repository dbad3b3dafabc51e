//! Line output on COM1, buffered so a line costs one system call.

use core::fmt::{self, Write};

use crate::cpu;

/// Collects a line; flushes to COM1 when full and at the end.
struct LineBuf {
    buf: [u8; 256],
    len: usize,
}

impl LineBuf {
    fn flush(&mut self) {
        cpu::serial_write(&self.buf[..self.len]);
        self.len = 0;
    }
}

impl Write for LineBuf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for &b in s.as_bytes() {
            if self.len == self.buf.len() {
                self.flush();
            }
            self.buf[self.len] = b;
            self.len += 1;
        }
        Ok(())
    }
}

/// Prints `args` and a newline, unprefixed.
pub fn raw_line(args: fmt::Arguments<'_>) {
    let mut l = LineBuf {
        buf: [0; 256],
        len: 0,
    };
    let _ = l.write_fmt(args);
    let _ = l.write_str("\n");
    l.flush();
}

/// Prints one informational line, `ZSPROBE: <args>`.
pub fn line(args: fmt::Arguments<'_>) {
    raw_line(format_args!("{}{args}", probe_check::LINE_PREFIX));
}
