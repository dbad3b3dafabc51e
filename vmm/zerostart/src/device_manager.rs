//! The VM's devices (a small Firecracker-style device manager): the
//! legacy port-I/O devices every VM gets, the plan's virtio-mmio devices
//! (each in its window, with its irqfd and ioeventfds) and, for a
//! firmware boot, fw_cfg with the platform registers EDK2 needs. The
//! builder's recipe makes one and attaches in order; the built VM keeps
//! the buses and the handles the vCPUs and the supervisor use.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use devices::virtio::vhost::{VhostNet, VhostVsock};
use devices::virtio::{
    mmio, spawn_io_thread, Block, MmioBus, MmioDevice, MmioTransport, Net, Tap, VirtioDevice,
    Worker,
};
use devices::{
    BootTimer, I8042Device, PioBus, SerialDevice, SerialOutput, COM1_BASE, COM1_GSI, COM1_LEN,
    I8042_COMMAND_PORT, I8042_DATA_PORT, TIMER_PORT,
};
use guestmem::GuestMemory;
use kvm_ioctls::{IoEventAddress, VmFd};
use vmm_sys_util::eventfd::EventFd;

use crate::cli::SerialOpt;
use crate::guest_memory::GuestRam;
use crate::netplan::NetPlan;
use crate::vstate::{self, kvm_err};

/// Why a device could not be attached; every message names the problem
/// and the fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Serial output file.
    #[error("cannot open serial output file {path}: {err}; check --serial file=PATH")]
    SerialFile {
        /// Path.
        path: PathBuf,
        /// Cause.
        err: std::io::Error,
    },
    /// Device setup.
    #[error("setting up devices: {0}")]
    Devices(String),
    /// A KVM registration (irqfd, ioeventfd).
    #[error(transparent)]
    Kvm(#[from] vstate::Error),
    /// More virtio devices than GSIs for them.
    #[error("{0} virtio devices given (--disk, --net, --vsock), at most {max} fit (one IOAPIC pin each); attach fewer", max = mmio::MAX_DEVICES)]
    TooMany(usize),
    /// A `--disk` image.
    #[error(transparent)]
    Disk(#[from] devices::virtio::BlockError),
    /// A `--net` tap.
    #[error(transparent)]
    Tap(#[from] devices::virtio::TapError),
    /// A vhost backend (`--net ... vhost=on`, `--vsock`).
    #[error(transparent)]
    Vhost(#[from] devices::virtio::vhost::VhostError),
}

fn dev(e: devices::Error) -> Error {
    Error::Devices(e.to_string())
}

/// What the legacy devices take from the options.
#[derive(Debug, Clone, Copy)]
pub struct LegacyConfig<'a> {
    /// Where COM1's output goes.
    pub serial: &'a SerialOpt,
    /// `--acpi on`: the ACPI PM register (poweroff).
    pub acpi: bool,
    /// `--debugcon FILE`.
    pub debugcon: Option<&'a Path>,
}

/// The plan's virtio devices, attached in this order (`/dev/vda` and
/// `eth0` first): one virtio-blk per disk, one virtio-net per net, then
/// vhost-vsock.
#[derive(Debug, Clone, Copy)]
pub struct VirtioConfig<'a> {
    /// `--disk`s.
    pub disks: &'a [options::DiskConfig],
    /// `--net`s, backend decided.
    pub nets: &'a [NetPlan],
    /// `--vsock`.
    pub vsock: Option<&'a options::VsockConfig>,
}

/// The plan's virtio devices with their backing files open: each tap and
/// disk is opened once, by `builder::plan` (so a bad one fails before any
/// memory is mapped), and handed to [`DeviceManager::attach_virtio`].
pub struct DeviceList {
    disks: Vec<(options::DiskConfig, Block)>,
    nets: Vec<(NetPlan, Tap)>,
    vsock: Option<options::VsockConfig>,
}

impl DeviceList {
    /// Opens `cfg`'s taps (attached now, so a missing or busy tap fails
    /// before any memory is mapped), then its disk images.
    pub fn open(cfg: &VirtioConfig<'_>) -> Result<Self, Error> {
        let nets = cfg
            .nets
            .iter()
            .map(|n| Ok((n.clone(), Tap::open(&n.tap)?)))
            .collect::<Result<Vec<_>, Error>>()?;
        let disks = cfg
            .disks
            .iter()
            .map(|d| Ok((d.clone(), Block::open(&d.path, d.readonly)?)))
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(DeviceList {
            disks,
            nets,
            vsock: cfg.vsock.cloned(),
        })
    }

    /// How many virtio-mmio windows these take.
    fn count(&self) -> usize {
        self.disks.len() + self.nets.len() + usize::from(self.vsock.is_some())
    }
}

/// Where a virtio-mmio device sits, in both of the forms Linux reads: an
/// ACPI DSDT device (with `--acpi on`) or a `virtio_mmio.device=` entry on
/// the command line (with `--acpi off`). Only one form is given to a guest,
/// so a device is never probed twice.
struct VirtioPlacement {
    acpi: arch::acpi::VirtioMmio,
    cmdline: String,
}

/// The VM's devices and buses.
pub struct DeviceManager {
    /// Port-I/O devices.
    pub pio: PioBus,
    /// MMIO devices (the virtio-mmio windows).
    pub mmio: MmioBus,
    /// COM1.
    pub serial: Arc<Mutex<SerialDevice>>,
    /// Boot-timer port.
    pub timer: Arc<Mutex<BootTimer>>,
    /// Device threads (I/O threads, tap RX, vhost call relays): stopped
    /// before guest RAM goes.
    pub workers: Vec<Worker>,
    placed: Vec<VirtioPlacement>,
}

impl DeviceManager {
    /// The legacy devices: COM1 (with its irqfd), i8042, the boot timer,
    /// the ACPI PM register (with `--acpi on`), CMOS and the debug console
    /// (with `--debugcon`). `stop` is the VM's: COM1 gives up on an output
    /// nobody reads once it is set (see `SerialDevice::with_stop`).
    pub fn with_legacy(
        vm_fd: &VmFd,
        cfg: &LegacyConfig<'_>,
        stop: Arc<AtomicBool>,
    ) -> Result<Self, Error> {
        let serial = SerialDevice::with_stop(serial_output(cfg.serial)?, stop)
            .map_err(|e| Error::Devices(format!("serial: {e}")))?;
        vm_fd
            .register_irqfd(serial.interrupt_evt(), COM1_GSI)
            .map_err(kvm_err("KVM_IRQFD (serial)"))?;
        let serial = Arc::new(Mutex::new(serial));
        let i8042 = Arc::new(Mutex::new(I8042Device::new()));
        let timer = Arc::new(Mutex::new(BootTimer::new()));
        let mut bus = PioBus::new();
        bus.insert(COM1_BASE, COM1_LEN, serial.clone())
            .map_err(dev)?;
        bus.insert(I8042_DATA_PORT, 1, i8042.clone()).map_err(dev)?;
        bus.insert(I8042_COMMAND_PORT, 1, i8042).map_err(dev)?;
        bus.insert(TIMER_PORT, 4, timer.clone()).map_err(dev)?;
        if cfg.acpi {
            bus.insert(
                arch::acpi::PM_PORT,
                1,
                Arc::new(Mutex::new(devices::AcpiPm)),
            )
            .map_err(dev)?;
        }
        bus.insert(
            devices::CMOS_PORT,
            devices::CMOS_LEN,
            Arc::new(Mutex::new(devices::Cmos::new())),
        )
        .map_err(dev)?;
        if let Some(p) = cfg.debugcon {
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|err| {
                    Error::Devices(format!(
                        "cannot open --debugcon file {}: {err}; check the path",
                        p.display()
                    ))
                })?;
            let con = devices::Debugcon::new(Box::new(f));
            bus.insert(devices::DEBUGCON_PORT, 1, Arc::new(Mutex::new(con)))
                .map_err(dev)?;
        }
        Ok(DeviceManager {
            pio: bus,
            mmio: MmioBus::new(),
            serial,
            timer,
            workers: Vec::new(),
            placed: Vec::new(),
        })
    }

    /// The virtio-mmio devices of `list`, in its order. Each gets its 4 KiB
    /// window in the MMIO hole, a GSI driven by an irqfd (as COM1's), and
    /// a kernel command-line entry that tells Linux where it is
    /// (docs/vmm.md, "virtio devices"). Every queue's `QueueNotify` is a
    /// KVM ioeventfd: a vhost device's are read by the kernel's worker
    /// (plus a relay thread for its interrupts); a device the VMM runs
    /// (virtio-blk, user-space virtio-net) gets an I/O thread that serves
    /// them, so no request runs on a vCPU, and a user-space net device an
    /// RX thread too. Nothing here writes guest RAM (docs/security.md,
    /// section 4).
    pub fn attach_virtio(
        &mut self,
        vm_fd: &VmFd,
        ram: &GuestRam,
        list: DeviceList,
    ) -> Result<(), Error> {
        let total = list.count();
        let mem = ram.memory();
        for (i, (d, blk)) in list.disks.into_iter().enumerate() {
            let dev_err =
                |e: std::io::Error| Error::Devices(format!("virtio-blk {}: {e}", d.path.display()));
            let t = MmioTransport::new(blk, mem.clone()).map_err(dev_err)?;
            let (io, kicks) =
                spawn_io_thread(t.runner(), format!("zs-blk{i}-io")).map_err(dev_err)?;
            self.workers.push(io);
            self.place(
                vm_fd,
                t,
                &kicks,
                ["KVM_IRQFD (virtio-blk)", "KVM_IOEVENTFD (virtio-blk)"],
                total,
                dev_err,
            )?;
        }
        let shared = Arc::new(mem.clone());
        for (i, (nc, tap)) in list.nets.into_iter().enumerate() {
            let dev_err =
                |e: std::io::Error| Error::Devices(format!("virtio-net tap={}: {e}", nc.tap));
            if nc.vhost {
                let t =
                    MmioTransport::new(VhostNet::new(shared.clone(), tap, nc.mac)?, mem.clone())
                        .map_err(dev_err)?;
                self.workers.push(
                    t.device()
                        .spawn_relay(format!("zs-vhost-net{i}"), t.interrupt())
                        .map_err(dev_err)?,
                );
                let kicks = cloned(t.device().kick_fds()).map_err(dev_err)?;
                self.place(
                    vm_fd,
                    t,
                    &kicks,
                    ["KVM_IRQFD (vhost-net)", "KVM_IOEVENTFD (vhost-net kick)"],
                    total,
                    dev_err,
                )?;
            } else {
                let t = MmioTransport::new(Net::new(tap, nc.mac).map_err(dev_err)?, mem.clone())
                    .map_err(dev_err)?;
                self.workers.push(
                    devices::virtio::net::spawn_rx_worker(t.runner(), format!("zs-net{i}-rx"))
                        .map_err(dev_err)?,
                );
                let (io, kicks) =
                    spawn_io_thread(t.runner(), format!("zs-net{i}-io")).map_err(dev_err)?;
                self.workers.push(io);
                self.place(
                    vm_fd,
                    t,
                    &kicks,
                    ["KVM_IRQFD (virtio-net)", "KVM_IOEVENTFD (virtio-net)"],
                    total,
                    dev_err,
                )?;
            }
        }
        if let Some(v) = list.vsock {
            let dev_err =
                |e: std::io::Error| Error::Devices(format!("vhost-vsock cid={}: {e}", v.cid));
            let t = MmioTransport::new(VhostVsock::new(shared.clone(), v.cid)?, mem.clone())
                .map_err(dev_err)?;
            self.workers.push(
                t.device()
                    .spawn_relay("zs-vhost-vsock".into(), t.interrupt())
                    .map_err(dev_err)?,
            );
            let kicks = cloned(t.device().kick_fds()).map_err(dev_err)?;
            self.place(
                vm_fd,
                t,
                &kicks,
                [
                    "KVM_IRQFD (vhost-vsock)",
                    "KVM_IOEVENTFD (vhost-vsock kick)",
                ],
                total,
                dev_err,
            )?;
        }
        Ok(())
    }

    /// Puts transport `t` in the next virtio-mmio window: its interrupt
    /// as an irqfd on the window's GSI, the window on the MMIO bus, and
    /// queue `q`'s notify as a KVM ioeventfd on `kicks[q]` (the guest's
    /// 32-bit write of `q` to the window's QueueNotify signals it inside
    /// KVM, with no exit to this process). `irqfd` and `ioeventfd` name
    /// the calls in errors; `total` is the count a full window table
    /// reports.
    fn place<D>(
        &mut self,
        vm_fd: &VmFd,
        t: MmioTransport<GuestMemory, D>,
        kicks: &[EventFd],
        [irqfd, ioeventfd]: [&'static str; 2],
        total: usize,
        dev_err: impl Fn(std::io::Error) -> Error,
    ) -> Result<(), Error>
    where
        D: VirtioDevice<GuestMemory> + 'static,
        MmioTransport<GuestMemory, D>: MmioDevice,
    {
        let (base, gsi, entry) = mmio::placement(self.placed.len()).ok_or(Error::TooMany(total))?;
        let irq = t.interrupt_evt().try_clone().map_err(dev_err)?;
        vm_fd.register_irqfd(&irq, gsi).map_err(kvm_err(irqfd))?;
        let t: Arc<Mutex<dyn MmioDevice>> = Arc::new(Mutex::new(t));
        self.mmio
            .insert(base, mmio::MMIO_WINDOW, t)
            .map_err(|e| Error::Devices(e.to_string()))?;
        self.placed.push(VirtioPlacement {
            acpi: arch::acpi::VirtioMmio {
                base: base as u32,
                size: mmio::MMIO_WINDOW as u32,
                gsi,
            },
            cmdline: entry,
        });
        for (q, evt) in kicks.iter().enumerate() {
            vm_fd
                .register_ioevent(
                    evt,
                    &IoEventAddress::Mmio(base + mmio::reg::QUEUE_NOTIFY),
                    q as u32,
                )
                .map_err(kvm_err(ioeventfd))?;
        }
        Ok(())
    }

    /// fw_cfg (selector and DMA ports) and the platform registers EDK2
    /// needs, for a firmware boot.
    pub fn attach_fw_cfg(&mut self, fw_cfg: crate::firmware::FwCfgDevice) -> Result<(), Error> {
        use devices::fw_cfg::{
            FW_CFG_PORT_DMA, FW_CFG_PORT_DMA_LEN, FW_CFG_PORT_SEL, FW_CFG_PORT_SEL_LEN,
        };
        let fw_cfg = Arc::new(Mutex::new(fw_cfg));
        self.pio
            .insert(FW_CFG_PORT_SEL, FW_CFG_PORT_SEL_LEN, fw_cfg.clone())
            .map_err(dev)?;
        self.pio
            .insert(FW_CFG_PORT_DMA, FW_CFG_PORT_DMA_LEN, fw_cfg)
            .map_err(dev)?;
        devices::fw_platform::insert(&mut self.pio).map_err(dev)
    }

    /// The virtio devices as ACPI DSDT devices (for `--acpi on`).
    pub fn acpi_devices(&self) -> Vec<arch::acpi::VirtioMmio> {
        self.placed.iter().map(|p| p.acpi).collect()
    }

    /// The kernel command line: `base`, then, without ACPI, one
    /// `virtio_mmio.device=` entry per virtio device. With ACPI the
    /// devices are DSDT devices only: a hardware-reduced FADT gives
    /// command-line devices' IRQs no I/O APIC route (see arch::acpi).
    pub fn cmdline(&self, base: &str, acpi: bool) -> String {
        [base]
            .into_iter()
            .chain(
                self.placed
                    .iter()
                    .filter(|_| !acpi)
                    .map(|p| p.cmdline.as_str()),
            )
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// How many virtio devices are attached.
    #[cfg(test)]
    pub fn virtio_count(&self) -> usize {
        self.placed.len()
    }
}

/// Copies of a vhost device's kick eventfds, only for registering: they
/// stay registered with KVM through the device's own copies.
fn cloned(fds: Vec<&EventFd>) -> std::io::Result<Vec<EventFd>> {
    fds.into_iter().map(|k| k.try_clone()).collect()
}

fn serial_output(s: &SerialOpt) -> Result<SerialOutput, Error> {
    Ok(match s {
        SerialOpt::Tty => SerialOutput::Stdout,
        SerialOpt::Off => SerialOutput::Sink,
        SerialOpt::File(p) => SerialOutput::Writer(Box::new(
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|err| Error::SerialFile {
                    path: p.clone(),
                    err,
                })?,
        )),
    })
}
