//! A host tap interface opened for a virtio-net device: `IFF_TAP |
//! IFF_NO_PI | IFF_VNET_HDR`, a 12-byte `virtio_net_hdr_v1` in front of
//! every frame (what a virtio 1.x driver puts there, so the user-space
//! path and vhost-net pass the header through unchanged), every offload
//! off (`TUNSETOFFLOAD 0`: the device offers none, so the tap must not
//! hand it GSO or partial-checksum frames).
//!
//! Hand-written on libc's ioctls rather than a crate: the published tap
//! crates (`tun`, `tun-tap`) open TUN or plain TAP devices for user-space
//! networking and expose neither `IFF_VNET_HDR`, `TUNSETVNETHDRSZ` nor
//! `TUNSETOFFLOAD`, which a virtio backend needs; Firecracker and
//! cloud-hypervisor each keep their own ~100 lines for the same reason.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

/// Size of `struct virtio_net_hdr_v1` (with `num_buffers`): the header in
/// front of every frame of a virtio 1.x device.
pub const VNET_HDR_LEN: usize = 12;

/// Opening a tap; each message names the problem and the fix.
#[derive(Debug, thiserror::Error)]
pub enum TapError {
    /// No interface of that name.
    #[error("--net tap={0}: no such network interface; create it first (ip tuntap add {0} mode tap && ip link set {0} up)")]
    NoSuchInterface(String),
    /// `/dev/net/tun` missing or not permitted.
    #[error("--net tap={name}: cannot open /dev/net/tun: {err}; load the tun module (modprobe tun) and run as root or with CAP_NET_ADMIN")]
    OpenTun {
        /// Interface.
        name: String,
        /// Cause.
        err: io::Error,
    },
    /// `TUNSETIFF` refused.
    #[error("--net tap={name}: cannot attach to the interface: {err}; it must be a tap (ip tuntap add {name} mode tap), not used by another process, and owned by this user (ip tuntap add ... user $USER) or run as root")]
    Attach {
        /// Interface.
        name: String,
        /// Cause.
        err: io::Error,
    },
    /// A later configuration ioctl refused.
    #[error(
        "--net tap={name}: {what} failed: {err}; the tap driver is too old for virtio headers"
    )]
    Configure {
        /// Interface.
        name: String,
        /// Which ioctl.
        what: &'static str,
        /// Cause.
        err: io::Error,
    },
}

/// An open tap queue, non-blocking.
#[derive(Debug)]
pub struct Tap {
    file: File,
    name: String,
}

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

impl Tap {
    /// Opens the existing tap interface `name` (an interface that does
    /// not exist is an error, not silently created: a tap the VMM makes
    /// is on no bridge, and the guest would have no network without
    /// saying so).
    pub fn open(name: &str) -> Result<Tap, TapError> {
        let cname = std::ffi::CString::new(name)
            .map_err(|_| TapError::NoSuchInterface(name.to_string()))?;
        // SAFETY: a valid NUL-terminated string.
        if name.len() >= libc::IFNAMSIZ || unsafe { libc::if_nametoindex(cname.as_ptr()) } == 0 {
            return Err(TapError::NoSuchInterface(name.to_string()));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")
            .map_err(|err| TapError::OpenTun {
                name: name.to_string(),
                err,
            })?;
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            flags: (libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR) as libc::c_short,
            _pad: [0; 22],
        };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: TUNSETIFF reads and writes a `struct ifreq`, which
        // `IfReq` lays out (40 bytes); the fd is ours.
        if unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut req) } < 0 {
            return Err(TapError::Attach {
                name: name.to_string(),
                err: io::Error::last_os_error(),
            });
        }
        let tap = Tap {
            file,
            name: name.to_string(),
        };
        let hdr = VNET_HDR_LEN as libc::c_int;
        // SAFETY: TUNSETVNETHDRSZ reads an int.
        tap.check("TUNSETVNETHDRSZ", unsafe {
            libc::ioctl(tap.file.as_raw_fd(), libc::TUNSETVNETHDRSZ, &hdr)
        })?;
        // SAFETY: TUNSETOFFLOAD takes an unsigned long by value.
        tap.check("TUNSETOFFLOAD", unsafe {
            libc::ioctl(
                tap.file.as_raw_fd(),
                libc::TUNSETOFFLOAD,
                0 as libc::c_ulong,
            )
        })?;
        Ok(tap)
    }

    fn check(&self, what: &'static str, ret: libc::c_int) -> Result<(), TapError> {
        if ret < 0 {
            return Err(TapError::Configure {
                name: self.name.clone(),
                what,
                err: io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The file, for vhost-net's `VHOST_NET_SET_BACKEND`.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Reads one frame (with its virtio header); `WouldBlock` when none
    /// is queued.
    pub fn read_frame(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: writes at most buf.len() bytes into buf.
        let n = unsafe { libc::read(self.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// Writes one frame (with its virtio header), gathered from `bufs`.
    pub fn write_frame(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        // SAFETY: IoSlice is ABI-compatible with iovec; the kernel only
        // reads the slices.
        let n = unsafe {
            libc::writev(
                self.as_raw_fd(),
                bufs.as_ptr().cast(),
                bufs.len().min(libc::c_int::MAX as usize) as libc::c_int,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

impl AsRawFd for Tap {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}
