//! A minimal MC146818 CMOS RTC at ports 0x70/0x71.
//!
//! Without one, every read of the unclaimed ports returns 0xff: the
//! "update in progress" bit stays set and Linux's `rtc_cmos` probe (which
//! x86 registers unconditionally when there is no ACPI) polls for seconds
//! before giving up — about 15 s under nested virtualization. This device
//! answers with the host's UTC time in BCD, 24-hour mode, never updating,
//! and ignores writes except the register index. No alarm, no periodic
//! interrupt, no NVRAM.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::{ExitRequest, PioDevice};

/// Index port (bit 7 of the written value is the NMI mask, ignored).
pub const CMOS_PORT: u16 = 0x70;
/// Number of ports (index, data).
pub const CMOS_LEN: u16 = 2;

const REG_SECONDS: u8 = 0x00;
const REG_MINUTES: u8 = 0x02;
const REG_HOURS: u8 = 0x04;
const REG_WEEKDAY: u8 = 0x06;
const REG_DAY: u8 = 0x07;
const REG_MONTH: u8 = 0x08;
const REG_YEAR: u8 = 0x09;
const REG_STATUS_A: u8 = 0x0a;
const REG_STATUS_B: u8 = 0x0b;
const REG_STATUS_D: u8 = 0x0d;
const REG_CENTURY: u8 = 0x32;
/// Status A: 32.768 kHz time base, 1024 Hz rate, update not in progress.
const STATUS_A: u8 = 0x26;
/// Status B: 24-hour mode, BCD, no interrupts.
const STATUS_B: u8 = 0x02;
/// Status D: battery good (valid RAM and time).
const STATUS_D: u8 = 0x80;

/// The CMOS RTC.
#[derive(Debug, Default)]
pub struct Cmos {
    index: u8,
}

fn bcd(v: u64) -> u8 {
    (((v / 10) % 10) << 4 | (v % 10)) as u8
}

/// Civil date from days since 1970-01-01 (Howard Hinnant's algorithm):
/// `(year, month 1..=12, day 1..=31)`.
fn civil(days: i64) -> (i64, u64, u64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u64;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u64;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

impl Cmos {
    /// A CMOS RTC reading the host clock.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register `reg` at `secs` seconds since the Unix epoch.
    pub fn register_at(reg: u8, secs: u64) -> u8 {
        let days = (secs / 86_400) as i64;
        let (year, month, day) = civil(days);
        let tod = secs % 86_400;
        match reg {
            REG_SECONDS => bcd(tod % 60),
            REG_MINUTES => bcd(tod / 60 % 60),
            REG_HOURS => bcd(tod / 3600),
            // 1 = Sunday; 1970-01-01 was a Thursday.
            REG_WEEKDAY => bcd(((days + 4).rem_euclid(7) + 1) as u64),
            REG_DAY => bcd(day),
            REG_MONTH => bcd(month),
            REG_YEAR => bcd(year.rem_euclid(100) as u64),
            REG_CENTURY => bcd((year / 100) as u64),
            REG_STATUS_A => STATUS_A,
            REG_STATUS_B => STATUS_B,
            REG_STATUS_D => STATUS_D,
            _ => 0,
        }
    }
}

impl PioDevice for Cmos {
    fn read(&mut self, _base: u16, offset: u16, data: &mut [u8]) {
        let v = if offset == 1 {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            Cmos::register_at(self.index, now)
        } else {
            self.index
        };
        data.fill(0);
        if let Some(b) = data.first_mut() {
            *b = v;
        }
    }

    fn write(&mut self, _base: u16, offset: u16, data: &[u8]) -> Option<ExitRequest> {
        if offset == 0 {
            if let Some(&b) = data.first() {
                self.index = b & 0x7f;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        // 2026-11-21 06:30:59 UTC, a Saturday.
        let t = 1_795_242_659;
        let r = |reg| Cmos::register_at(reg, t);
        assert_eq!(
            (r(REG_YEAR), r(REG_CENTURY), r(REG_MONTH), r(REG_DAY)),
            (0x26, 0x20, 0x11, 0x21)
        );
        assert_eq!(
            (r(REG_HOURS), r(REG_MINUTES), r(REG_SECONDS)),
            (0x06, 0x30, 0x59)
        );
        assert_eq!(r(REG_WEEKDAY), 7);
        // Epoch and a leap day.
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(11_016), (2000, 2, 29));
        assert_eq!(Cmos::register_at(REG_WEEKDAY, 0), 5);
    }

    #[test]
    fn status_registers_never_busy() {
        assert_eq!(Cmos::register_at(REG_STATUS_A, 0) & 0x80, 0);
        assert_eq!(Cmos::register_at(REG_STATUS_D, 0), 0x80);
    }

    #[test]
    fn index_then_data() {
        let mut c = Cmos::new();
        c.write(CMOS_PORT, 0, &[0x80 | REG_STATUS_B]);
        let mut b = [0xffu8; 1];
        c.read(CMOS_PORT, 1, &mut b);
        assert_eq!(b[0], STATUS_B);
        c.read(CMOS_PORT, 0, &mut b);
        assert_eq!(b[0], REG_STATUS_B);
    }
}
