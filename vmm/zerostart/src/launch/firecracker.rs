//! Firecracker: the hint on the guest kernel's command line, carried in the
//! `boot-source.boot_args` of Firecracker's `--config-file` JSON.
//!
//! Firecracker on x86_64 has one boot path, the one this module serves: it
//! loads an ELF kernel itself (no firmware, no bzImage) and passes
//! `boot_args` to it as the kernel command line, so the hint travels in its
//! text form (docs/hint-abi.md "Text form", transport (d)). The launcher
//! parses the user's config ([`FcConfig::parse`]), refuses what would make
//! the hint dishonest or what it cannot serve, derives the hint from
//! Firecracker's guest layout ([`ram`], [`writes`], [`guest_layout`]), adds
//! ` prezero.hint=<text>` to `boot_args` ([`with_hint`]) and hands
//! Firecracker the rewritten JSON as its `--config-file`
//! ([`check_args`], [`args_with_config`]).
//!
//! Every fact about Firecracker here is from its source at tag v1.16.1
//! (paths relative to the firecracker repository; linux-loader v0.13.2 is
//! the version it pins) and is cited where it is used.
//!
//! # Guest memory: why the pool cannot back it
//!
//! Firecracker allocates guest RAM itself, with no option to take it from a
//! file at boot: `VmResources::allocate_memory_regions`
//! (`src/vmm/src/resources.rs`) maps every region `MAP_PRIVATE |
//! MAP_ANONYMOUS` (plus `MAP_HUGETLB | MAP_HUGE_2MB` with `machine-config`
//! `huge_pages: "2M"`) through `vstate::memory::anonymous`, or, only when a
//! vhost-user block device is configured, a fresh memfd of its own
//! (`memory::memfd_backed`, `MAP_SHARED`). So `zerostart pool` cannot hand
//! it pre-zeroed pages, and `--memory source=pool|prefault` is meaningless
//! for it. The hint stays honest all the same: fresh anonymous or memfd
//! memory reads as zero, and nothing but the writes listed in [`writes`]
//! touches it before the first instruction. What is lost is the host side
//! of the saving: the host kernel still zeroes each page when the guest
//! first touches it; the guest side (not zeroing again what is zero) holds.
//!
//! The smallest upstreamable change that lets the pool back Firecracker: a
//! boot-time memory file option, e.g. `machine-config` `"mem_file_path":
//! "/proc/self/fd/N"` (a path, so an inherited descriptor works too), that
//! `allocate_memory_regions` opens and passes to the `memory::create(regions,
//! MAP_SHARED | huge_pages.mmap_flags(), Some(file), ..)` call that
//! `memfd_backed` already makes with its own memfd; `create` already lays
//! the regions out back to back from file offset 0, exactly as [`ram`]'s
//! `file_offset`s say. It must map `MAP_SHARED`: snapshot restore's
//! `mem_backend` (`backend_type: "File"`, `src/vmm/src/persist.rs` →
//! `memory::snapshot_file`) maps its file `MAP_PRIVATE`, a copy-on-write
//! mapping whose first guest write to each page would land on a fresh
//! anonymous page, so reusing it would not give the guest the pool's pages.
//!
//! # What the launcher refuses, and why
//!
//! In the config ([`FcConfig::parse`]): no `machine-config.mem_size_mib`
//! (the launcher must know guest RAM exactly; Firecracker's implicit
//! default, `DEFAULT_MEM_SIZE_MIB` = 128 in
//! `src/vmm/src/vmm_config/machine_config.rs`, is a release detail), and
//! `machine-config.gdb_socket_path` (a gdb-enabled build stops before the
//! first instruction and lets the debugger write guest RAM: `gdb_thread`
//! with the kernel's entry, `src/vmm/src/builder.rs`), and `memory-hotplug`
//! or `pmem` beside more than 255 GiB of RAM (their memory and RAM's third
//! region would share the space from 512 GiB; see [`writes`]). The config file
//! has no snapshot or restore key to refuse: `VmmConfig`
//! (`src/vmm/src/resources.rs`) holds only boot-time device and machine
//! settings, snapshot load exists only as the API's `PUT /snapshot/load`,
//! and a `--config-file` VM is built and booted at start-up
//! (`build_microvm_from_json`, `src/firecracker/src/main.rs`), before any
//! API request, so a restore can never replace the booted guest's RAM.
//!
//! In the argv ([`check_args`]): no `--config-file` (the VM would be
//! configured over the API after start, where the launcher cannot add the
//! hint), and what only prints and exits (`--help`, `-h`, `--version`,
//! `--snapshot-version`, `--describe-snapshot`): no guest to hint. Fine as
//! they are: `--api-sock` (API requests reach a VM that is already booted:
//! none writes its RAM before the first instruction), `--no-api`,
//! `--metadata` (MMDS data lives in Firecracker's memory, not the guest's),
//! `--boot-timer`, `--enable-pci` and the logging, metrics and seccomp
//! options.

use serde_json::Value;

use super::layout::{self, RamRange};

/// Firecracker's binary, looked up on PATH.
pub const DEFAULT_BINARY: &str = "firecracker";

/// The command line Firecracker gives the kernel when `boot_args` is absent
/// (`DEFAULT_KERNEL_CMDLINE`, `src/vmm/src/vmm_config/boot_source.rs`): the
/// hint is added to it, so a config without `boot_args` boots exactly as
/// before plus the hint.
pub const DEFAULT_BOOT_ARGS: &str = "reboot=k panic=1 nomodule 8250.nr_uarts=0 i8042.noaux \
                                     i8042.nomux i8042.dumbkbd swiotlb=noforce";

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// End of the first RAM region: `MMIO32_MEM_START` = `FIRST_ADDR_PAST_32BITS`
/// minus `MMIO32_MEM_SIZE`, 4 GiB less 1 GiB (`src/vmm/src/arch/x86_64/layout.rs`),
/// where the 32-bit MMIO gap (devices, PCIe MMCONFIG, IOAPIC, LAPIC) begins.
pub const MMIO32_START: u64 = 3 * GIB;

/// Start of the 64-bit MMIO gap, `MMIO64_MEM_START` (256 GiB): RAM from
/// 4 GiB runs up to here.
pub const MMIO64_START: u64 = 256 * GIB;

/// First address past the 64-bit MMIO gap, `FIRST_ADDR_PAST_64BITS_MMIO` =
/// `MMIO64_MEM_START + MMIO64_MEM_SIZE` (512 GiB): the rest of RAM.
pub const PAST_MMIO64_START: u64 = 512 * GIB;

/// Room left around the initrd beyond its own pages: Firecracker puts it
/// exactly at the top of the first RAM region, but the hint leaves out its
/// size rounded up to 2 MiB plus this, as for cloud-hypervisor's
/// initramfs, so a release that moves it by a few pages cannot make the
/// hint cover it.
pub const INITRD_MARGIN: u64 = 2 * MIB;

/// Firecracker's guest RAM layout on x86_64 for `mem_bytes`
/// (`arch_memory_regions`, `src/vmm/src/arch/x86_64/mod.rs`, with
/// `arch_memory_regions_with_gap`, `src/vmm/src/arch/mod.rs`): RAM from 0 up
/// to [`MMIO32_START`] (3 GiB); the rest from `FIRST_ADDR_PAST_32BITS`
/// (4 GiB) up to [`MMIO64_START`] (256 GiB); what is left from
/// [`PAST_MMIO64_START`] (512 GiB). `file_offset` is each region's offset
/// in one file holding all of RAM in this order, as `memory::create`
/// (`src/vmm/src/vstate/memory.rs`) lays regions out in a memfd or a
/// snapshot's memory file.
pub fn ram(mem_bytes: u64) -> Vec<RamRange> {
    let windows = [
        (0, MMIO32_START),
        (layout::HIGH_RAM_START, MMIO64_START),
        (PAST_MMIO64_START, u64::MAX),
    ];
    let mut out = Vec::new();
    let mut left = mem_bytes;
    let mut file_offset = 0;
    for (start, end) in windows {
        if left == 0 {
            break;
        }
        let len = left.min(end - start);
        out.push(RamRange {
            gpa: start,
            len,
            file_offset,
        });
        file_offset += len;
        left -= len;
    }
    out
}

/// What Firecracker writes into guest RAM at or above 1 MiB (`HIMEM_START`,
/// `src/vmm/src/arch/x86_64/layout.rs`, the lowest address linux-loader
/// lets an ELF kernel's entry have) before the guest's first instruction,
/// as `(start, len)` ranges to leave out of the hint
/// ([`layout::hint_ranges`]); `ram_low_end` is the end of the first RAM
/// region (`ram(..)[0].len`).
///
/// - The kernel: an ELF64 loaded segment by segment at each `PT_LOAD`'s
///   physical address (`load_kernel` calls linux-loader's `Elf::load` with
///   no offset; linux-loader v0.13.2 `src/loader/elf/mod.rs` copies
///   `p_filesz` bytes to `p_paddr`). The ranges come from
///   [`layout::elf_load_segments`], which takes `max(p_memsz, p_filesz)`: a
///   superset (the bss is the kernel's to clear, and the kernel reserves its
///   image anyway). x86_64 Firecracker has no bzImage loader, so anything
///   else is refused ([`FcError::KernelNotElf`]), as Firecracker would.
/// - The initrd, `initrd_bytes` long: `initrd_load_addr`
///   (`src/vmm/src/arch/x86_64/mod.rs`) puts it at the top of the first RAM
///   region, `align_down(ram_low_end - initrd_bytes, 4096)`, and
///   `InitrdConfig::from_file` (`src/vmm/src/initrd.rs`) copies it there.
///   Left out: its size rounded up to 2 MiB plus [`INITRD_MARGIN`] below
///   `ram_low_end`. One larger than that region is refused, as Firecracker
///   refuses it (`InitrdError::Address`).
///
/// Nothing else: every other structure lies below 1 MiB, under the
/// launcher's 32 MiB [`layout::HINT_FLOOR`]: the boot GDT 0x500 and IDT
/// 0x520 and the page tables 0x9000-0xbfff (`src/vmm/src/arch/x86_64/
/// regs.rs`), the PVH start info 0x6000 and module list 0x6040, the zero
/// page / PVH memory map 0x7000, the boot stack below 0x8ff0, the command
/// line 0x20000 (`layout.rs`: `PVH_INFO_START`, `MODLIST_START`,
/// `ZERO_PAGE_START`, `MEMMAP_START`, `BOOT_STACK_POINTER`,
/// `CMDLINE_START`), and the MP table, ACPI tables, VMGenID and VMClock
/// pages, all allocated from `system_memory` = [`SYSTEM_MEM_START`
/// 0x9fc00, `RSDP_ADDR` 0xe0000) (`src/vmm/src/vstate/resources.rs`), with
/// the RSDP at 0xe0000. KVM's TSS (`KVM_TSS_ADDRESS` 0xfffbd000) is in the
/// 32-bit MMIO gap, not RAM. The virtio-mem hotplug region and pmem
/// devices get guest-physical space from `past_mmio64_memory`, an
/// allocator of [`PAST_MMIO64_START`, +512 GiB) that does not know about
/// RAM (`src/vmm/src/builder.rs` `allocate_virtio_mem_address`,
/// `src/vmm/src/devices/virtio/pmem/device.rs`): outside [`ram`] as long
/// as RAM ends below 256 GiB, which [`FcConfig::parse`] requires of a
/// config that has them.
pub fn writes(
    ram_low_end: u64,
    kernel_image: &[u8],
    initrd_bytes: u64,
) -> Result<Vec<(u64, u64)>, FcError> {
    let segments = layout::elf_load_segments(kernel_image).ok_or(FcError::KernelNotElf)?;
    let mut out: Vec<(u64, u64)> = segments.iter().map(|&(s, e)| (s, e - s)).collect();
    if initrd_bytes > 0 {
        if initrd_bytes > ram_low_end {
            return Err(FcError::InitrdTooLarge {
                initrd: initrd_bytes,
                low: ram_low_end,
            });
        }
        let top = (initrd_bytes.next_multiple_of(2 * MIB) + INITRD_MARGIN).min(ram_low_end);
        out.push((ram_low_end - top, top));
    }
    Ok(out)
}

/// Guest RAM of a Firecracker VM and the hint it allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestLayout {
    /// [`ram`] of the config's `mem_size_mib`.
    pub ram: Vec<RamRange>,
    /// [`layout::hint_ranges`] of that RAM without [`writes`]: what the
    /// guest may be told is zero.
    pub hint_ranges: Vec<(u64, u64)>,
}

/// The [`GuestLayout`] of the VM `cfg` describes. `kernel_image` is the
/// file at `kernel_image_path`, `initrd_bytes` the size of the one at
/// `initrd_path` (0 without one). Relative paths in the config are
/// Firecracker's to open relative to its working directory, which it
/// inherits from the launcher, so the launcher reads the same files.
pub fn guest_layout(
    cfg: &FcConfig,
    kernel_image: &[u8],
    initrd_bytes: u64,
) -> Result<GuestLayout, FcError> {
    let ram = ram(cfg.mem_bytes());
    let w = writes(ram[0].len, kernel_image, initrd_bytes)?;
    let hint_ranges = layout::hint_ranges(&ram, &w);
    Ok(GuestLayout { ram, hint_ranges })
}

/// Why the launcher cannot run Firecracker as asked; every message is one
/// line naming the problem and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FcError {
    /// The `--config-file` is not JSON (serde_json's message, one line).
    #[error("firecracker --config-file is not valid JSON: {0}; fix the file")]
    Json(String),
    /// A key that Firecracker or the launcher needs is absent.
    #[error("firecracker --config-file has no {key}; {fix}")]
    Missing {
        /// The key, dotted (`machine-config.mem_size_mib`).
        key: &'static str,
        /// What to add.
        fix: &'static str,
    },
    /// A key whose value has the wrong type or range.
    #[error("firecracker --config-file {key} {problem}; {fix}")]
    Invalid {
        /// The key, dotted.
        key: &'static str,
        /// What is wrong with it.
        problem: String,
        /// What it must be.
        fix: &'static str,
    },
    /// A config key or argument that would make the hint dishonest or that
    /// the launcher cannot serve.
    #[error("firecracker {what} conflicts with zerostart launch: {why}; {fix}")]
    Conflict {
        /// The key or argument.
        what: String,
        /// Why.
        why: &'static str,
        /// The fix.
        fix: &'static str,
    },
    /// The argv has no `--config-file`.
    #[error("firecracker needs --config-file PATH with zerostart launch: the launcher adds the hint to its boot-source.boot_args, and a VM configured over the API after start cannot get it; write the VM's configuration to a JSON file and pass --config-file")]
    NoConfigFile,
    /// The kernel is not an ELF64 image.
    #[error("firecracker boot-source.kernel_image_path is not an ELF64 kernel: Firecracker on x86_64 loads only an uncompressed ELF vmlinux, not a bzImage; pass the kernel build's vmlinux")]
    KernelNotElf,
    /// The initrd does not fit below the 32-bit MMIO gap.
    #[error("firecracker boot-source.initrd_path has {initrd} bytes, more than the {low} bytes of guest RAM below 3 GiB where Firecracker puts it; raise machine-config.mem_size_mib or shrink the initrd")]
    InitrdTooLarge {
        /// Initrd bytes.
        initrd: u64,
        /// Bytes of the first RAM region.
        low: u64,
    },
    /// `boot_args` the hint cannot be added to.
    #[error("firecracker boot-source.boot_args \"{line}\" cannot take the hint: {why}")]
    BootArgs {
        /// The line (escaped to one line).
        line: String,
        /// The reason and the fix.
        why: String,
    },
    /// The hint's text does not fit (a launcher bug: it trims the hint to
    /// [`text_budget`] first).
    #[error("internal: the hint's text has {len} characters, more than the {budget} that boot-source.boot_args has left after Firecracker's own additions; please report this")]
    TextTooLong {
        /// Characters of the text.
        len: usize,
        /// What [`text_budget`] allows.
        budget: usize,
    },
    /// `--memory size=` is not the config's `mem_size_mib`.
    #[error("--memory size={size} differs from firecracker machine-config.mem_size_mib {mib} ({mib_bytes} bytes): Firecracker allocates mem_size_mib itself and the hint is derived from it; make them equal")]
    SizeMismatch {
        /// `--memory size=` bytes.
        size: u64,
        /// The config's MiB.
        mib: u64,
        /// The same in bytes.
        mib_bytes: u64,
    },
}

/// The user's `--config-file` JSON, kept whole as a [`Value`] so that every
/// key the launcher does not know (devices, logger, metrics, keys of a
/// newer Firecracker) goes to Firecracker unchanged; the few keys the
/// launcher needs are checked once, in [`FcConfig::parse`].
#[derive(Debug, Clone, PartialEq)]
pub struct FcConfig {
    doc: Value,
    mem_size_mib: u64,
    kernel_image_path: String,
    initrd_path: Option<String>,
    boot_args: Option<String>,
}

/// `doc[a][b]`, `None` when absent or JSON `null` (Firecracker's serde
/// reads an `Option` field given as `null` as absent).
fn field<'a>(doc: &'a Value, a: &str, b: &str) -> Option<&'a Value> {
    doc.get(a)?.get(b).filter(|v| !v.is_null())
}

/// An optional string field: absent or `null` is `None`.
fn opt_str(doc: &Value, a: &str, key: &'static str, b: &str) -> Result<Option<String>, FcError> {
    match field(doc, a, b) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(FcError::Invalid {
            key,
            problem: format!("is {}, not a string", kind(v)),
            fix: "give it as a JSON string, or leave it out",
        }),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl FcConfig {
    /// Parses Firecracker's `--config-file` JSON (`VmmConfig`,
    /// `src/vmm/src/resources.rs`, kebab-case sections) and checks what the
    /// launcher relies on: `boot-source.kernel_image_path` (a string; the
    /// kernel it loads), `boot-source.initrd_path` and `boot_args` (strings
    /// or absent), `machine-config.mem_size_mib` (a whole number of MiB
    /// above 0), and refuses `machine-config.gdb_socket_path` and
    /// `memory-hotplug`/`pmem` beside more than 255 GiB (see the module's
    /// refusals). Unknown keys are kept, not judged: Firecracker
    /// refuses the ones it does not know in sections it parses strictly.
    pub fn parse(text: &str) -> Result<FcConfig, FcError> {
        let doc: Value = serde_json::from_str(text).map_err(|e| FcError::Json(e.to_string()))?;
        if !doc.is_object() {
            return Err(FcError::Invalid {
                key: "(top level)",
                problem: format!("is {}", kind(&doc)),
                fix: "Firecracker's configuration is one JSON object with \"boot-source\" and \"machine-config\"",
            });
        }
        match doc.get("boot-source") {
            Some(Value::Object(_)) => {}
            None | Some(Value::Null) => {
                return Err(FcError::Missing {
                    key: "boot-source",
                    fix: "add \"boot-source\": {\"kernel_image_path\": \"vmlinux\", \"boot_args\": \"...\"}",
                })
            }
            Some(v) => {
                return Err(FcError::Invalid {
                    key: "boot-source",
                    problem: format!("is {}, not an object", kind(v)),
                    fix: "give it as {\"kernel_image_path\": \"vmlinux\", ...}",
                })
            }
        }
        let kernel_image_path = match field(&doc, "boot-source", "kernel_image_path") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            None => {
                return Err(FcError::Missing {
                    key: "boot-source.kernel_image_path",
                    fix: "add the path of the guest's ELF vmlinux",
                })
            }
            Some(v) => {
                return Err(FcError::Invalid {
                    key: "boot-source.kernel_image_path",
                    problem: match v {
                        Value::String(_) => "is empty".to_string(),
                        v => format!("is {}, not a string", kind(v)),
                    },
                    fix: "give the path of the guest's ELF vmlinux",
                })
            }
        };
        let initrd_path = opt_str(
            &doc,
            "boot-source",
            "boot-source.initrd_path",
            "initrd_path",
        )?;
        let boot_args = opt_str(&doc, "boot-source", "boot-source.boot_args", "boot_args")?;
        let mem_fix = "add \"machine-config\": {\"vcpu_count\": N, \"mem_size_mib\": M} with M the --memory size in MiB: the launcher derives the hint from it and Firecracker's implicit default is a release detail";
        let mem = match doc.get("machine-config") {
            None | Some(Value::Null) => {
                return Err(FcError::Missing {
                    key: "machine-config.mem_size_mib",
                    fix: mem_fix,
                })
            }
            Some(Value::Object(_)) => field(&doc, "machine-config", "mem_size_mib"),
            Some(v) => {
                return Err(FcError::Invalid {
                    key: "machine-config",
                    problem: format!("is {}, not an object", kind(v)),
                    fix: mem_fix,
                })
            }
        };
        let mem_size_mib = match mem {
            None => {
                return Err(FcError::Missing {
                    key: "machine-config.mem_size_mib",
                    fix: mem_fix,
                })
            }
            Some(v) => match v.as_u64() {
                // Bytes must fit in u64 (Firecracker's usize on x86_64).
                Some(m) if m > 0 && m <= u64::MAX >> 20 => m,
                _ => {
                    return Err(FcError::Invalid {
                        key: "machine-config.mem_size_mib",
                        problem: format!("is {v}"),
                        fix: "give guest RAM as a whole number of MiB above 0",
                    })
                }
            },
        };
        if field(&doc, "machine-config", "gdb_socket_path").is_some() {
            return Err(FcError::Conflict {
                what: "machine-config.gdb_socket_path".into(),
                why: "a gdb-enabled Firecracker stops before the first instruction and lets the debugger write guest RAM, so no hint can hold",
                fix: "remove it",
            });
        }
        let has = |k: &str| match doc.get(k) {
            None | Some(Value::Null) => false,
            Some(Value::Array(a)) => !a.is_empty(),
            Some(_) => true,
        };
        if mem_size_mib << 20 > MMIO64_START - layout::HIGH_RAM_START + MMIO32_START
            && (has("memory-hotplug") || has("pmem"))
        {
            return Err(FcError::Conflict {
                what: "memory-hotplug/pmem with machine-config.mem_size_mib above 255 GiB".into(),
                why: "Firecracker places their memory from 512 GiB, where RAM beyond 255 GiB goes too, so the hint could cover pages that are not RAM's",
                fix: "keep mem_size_mib at 261120 (255 GiB) or less, or remove them",
            });
        }
        Ok(FcConfig {
            doc,
            mem_size_mib,
            kernel_image_path,
            initrd_path,
            boot_args,
        })
    }

    /// The whole document, as parsed.
    pub fn json(&self) -> &Value {
        &self.doc
    }

    /// `machine-config.mem_size_mib`: guest RAM in MiB, which Firecracker
    /// allocates itself.
    pub fn mem_size_mib(&self) -> u64 {
        self.mem_size_mib
    }

    /// Guest RAM in bytes (`mem_size_mib` MiB), the size [`ram`] lays out.
    pub fn mem_bytes(&self) -> u64 {
        self.mem_size_mib << 20
    }

    /// `boot-source.kernel_image_path`: the ELF kernel whose segments
    /// [`writes`] leaves out of the hint.
    pub fn kernel_image_path(&self) -> &str {
        &self.kernel_image_path
    }

    /// `boot-source.initrd_path`, whose size decides what [`writes`] leaves
    /// out at the top of low RAM.
    pub fn initrd_path(&self) -> Option<&str> {
        self.initrd_path.as_deref()
    }

    /// `boot-source.boot_args` as written (`None`: absent or `null`).
    pub fn boot_args(&self) -> Option<&str> {
        self.boot_args.as_deref()
    }

    /// The line Firecracker starts from: `boot_args`, or
    /// [`DEFAULT_BOOT_ARGS`] without it (`BootConfig::new`,
    /// `src/vmm/src/vmm_config/boot_source.rs`).
    pub fn effective_boot_args(&self) -> &str {
        self.boot_args.as_deref().unwrap_or(DEFAULT_BOOT_ARGS)
    }

    /// The most characters Firecracker itself adds to the kernel command
    /// line for this config (`build_microvm_for_boot`,
    /// `src/vmm/src/builder.rs`), each with its separating space:
    /// `pci=off` (absent only with `--enable-pci`); per virtio device over
    /// MMIO (each of `drives`, `network-interfaces`, `pmem`, and `vsock`,
    /// `balloon`, `entropy`, `memory-hotplug`) a
    /// `virtio_mmio.device=4K@0x<addr>:<irq>` (`add_virtio_device_to_cmdline`,
    /// `src/vmm/src/device_manager/mmio.rs`; linux-loader's format; the
    /// address is in the 32-bit gap, 8 hex digits, the IRQ a legacy GSI
    /// 5-23); for a root drive `root=PARTUUID=<partuuid>` or `root=/dev/vda`
    /// and `ro`/`rw`; for a root pmem device `root=/dev/pmem<i>` and
    /// `ro`/`rw`. Firecracker builds the line in a `Cmdline` of
    /// `CMDLINE_MAX_SIZE` (2048, NUL included) and refuses to boot when it
    /// overflows, so the hint must leave this room.
    fn firecracker_additions(&self) -> usize {
        const MMIO_DEVICE: usize = "virtio_mmio.device=4K@0xffffffff:23".len();
        let d = &self.doc;
        let list = |k: &str| d.get(k).and_then(Value::as_array);
        let count = |k: &str| list(k).map_or(0, Vec::len);
        let one = |k: &str| usize::from(d.get(k).is_some_and(|v| !v.is_null()));
        let devices = count("drives")
            + count("network-interfaces")
            + count("pmem")
            + one("vsock")
            + one("balloon")
            + one("entropy")
            + one("memory-hotplug");
        let mut n = " pci=off".len() + devices * (1 + MMIO_DEVICE);
        let is_true = |v: &Value, k: &str| v.get(k).and_then(Value::as_bool) == Some(true);
        for drive in list("drives").into_iter().flatten() {
            if is_true(drive, "is_root_device") {
                n += match drive.get("partuuid").and_then(Value::as_str) {
                    Some(p) => " root=PARTUUID=".len() + p.len(),
                    None => " root=/dev/vda".len(),
                } + " ro".len();
            }
        }
        for (i, pmem) in list("pmem").into_iter().flatten().enumerate() {
            if is_true(pmem, "root_device") {
                n += " root=/dev/pmem".len() + i.to_string().len() + " ro".len();
            }
        }
        n
    }
}

/// The escaped one-line form of `s`, for messages.
fn one_line(s: &str) -> String {
    s.escape_debug().to_string()
}

fn boot_args_error(line: &str, e: zerohint::CmdlineError) -> FcError {
    let why = match e {
        zerohint::CmdlineError::HasHint => {
            "the launcher adds the prezero.hint parameter itself; remove it from boot_args"
                .to_string()
        }
        e => format!("{e}; fix boot_args"),
    };
    FcError::BootArgs {
        line: one_line(line),
        why,
    }
}

/// The characters the hint's text may take on this config's kernel command
/// line: what `zerohint::cmdline_text_budget` leaves of the 2047 the kernel
/// reads (`COMMAND_LINE_SIZE` less its NUL, which is also Firecracker's
/// `CMDLINE_MAX_SIZE` less the NUL) after the effective `boot_args` and
/// ` prezero.hint=`, less the most Firecracker adds itself (devices, root,
/// `pci=off`). A `boot_args` the hint cannot be added to (one that already
/// has `prezero.hint`, an open quote, a NUL) is refused here, before any
/// memory is taken, rather than given a budget of 0.
pub fn text_budget(cfg: &FcConfig) -> Result<usize, FcError> {
    let line = cfg.effective_boot_args();
    let budget = zerohint::cmdline_text_budget(line).map_err(|e| boot_args_error(line, e))?;
    Ok(budget.saturating_sub(cfg.firecracker_additions()))
}

/// The config as JSON with ` prezero.hint=<text>` added to
/// `boot-source.boot_args` by `zerohint::cmdline_with_text` (before a `--`
/// token, whose followers are init's; Firecracker's own additions go there
/// too, linux-loader splitting the line at ` -- `), starting from
/// [`FcConfig::effective_boot_args`] so that a config without `boot_args`
/// keeps Firecracker's default line. Every other key and value is
/// unchanged (serde_json without `preserve_order` writes object keys
/// sorted; Firecracker does not care about order). Refuses what
/// [`text_budget`] refuses, and a text longer than it allows.
pub fn with_hint(cfg: &FcConfig, text: &str) -> Result<String, FcError> {
    let budget = text_budget(cfg)?;
    if text.len() > budget {
        return Err(FcError::TextTooLong {
            len: text.len(),
            budget,
        });
    }
    let line = cfg.effective_boot_args();
    let with = zerohint::cmdline_with_text(line, text).map_err(|e| boot_args_error(line, e))?;
    let mut doc = cfg.doc.clone();
    if let Some(Value::Object(boot)) = doc.get_mut("boot-source") {
        boot.insert("boot_args".into(), Value::String(with));
    }
    serde_json::to_string_pretty(&doc).map_err(|e| FcError::Json(e.to_string()))
}

/// `--memory size=` must be the config's `mem_size_mib`: Firecracker
/// allocates that much, and the launcher's hint and accounting use
/// `size`.
pub fn check_size(cfg: &FcConfig, size: u64) -> Result<(), FcError> {
    if size == cfg.mem_bytes() {
        Ok(())
    } else {
        Err(FcError::SizeMismatch {
            size,
            mib: cfg.mem_size_mib,
            mib_bytes: cfg.mem_bytes(),
        })
    }
}

/// The user's Firecracker arguments as far as the launcher cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FcArgs {
    /// The path given with `--config-file`: the launcher reads it, rewrites
    /// it ([`with_hint`]) and passes its own file instead.
    pub config_file: String,
    /// Index of that path in the argv.
    config_at: usize,
    /// Whether `--api-sock` was given: the user wants the API, so the
    /// launcher does not add `--no-api`.
    pub api_sock: bool,
    /// Whether `--no-api` was given already (Firecracker refuses an
    /// argument twice).
    pub no_api: bool,
    /// Index of a `--` separator (Firecracker leaves what follows unparsed),
    /// or the argv's length.
    end: usize,
}

/// Reads the user's Firecracker argv the way Firecracker's parser does
/// (`src/utils/src/arg_parser.rs`: options are `--name`, a value is the
/// next argument and never starts with `--`, no `--name=value` form, each
/// option at most once, everything after a lone `--` is left alone; the
/// options are in `src/firecracker/src/main.rs`) and refuses what the
/// launcher cannot serve (module docs): no `--config-file`, and the options
/// that print and exit without booting a guest.
pub fn check_args(user: &[String]) -> Result<FcArgs, FcError> {
    let end = user.iter().position(|a| a == "--").unwrap_or(user.len());
    let conflict = |what: &str, why, fix| FcError::Conflict {
        what: format!("argument '{}'", one_line(what)),
        why,
        fix,
    };
    let (mut config, mut api_sock, mut no_api) = (None, false, false);
    for (i, a) in user[..end].iter().enumerate() {
        match a.as_str() {
            "--config-file" => {
                if config.is_some() {
                    return Err(conflict(
                        a,
                        "it is given twice (Firecracker refuses that)",
                        "give it once",
                    ));
                }
                match user[..end].get(i + 1) {
                    Some(v) if !v.starts_with("--") => config = Some((v.clone(), i + 1)),
                    _ => {
                        return Err(conflict(
                            a,
                            "it has no path after it",
                            "write --config-file PATH",
                        ))
                    }
                }
            }
            "--api-sock" => api_sock = true,
            "--no-api" => no_api = true,
            "--help" | "-h" | "--version" | "--snapshot-version" | "--describe-snapshot" => {
                return Err(conflict(
                    a,
                    "Firecracker prints and exits without booting a guest, so there is nothing to hint",
                    "run firecracker without the launcher for that",
                ))
            }
            s if s.starts_with("--config-file=") => {
                return Err(conflict(
                    a,
                    "Firecracker's parser has no --option=value form",
                    "write --config-file and its path as two arguments",
                ))
            }
            _ => {}
        }
    }
    let (config_file, config_at) = config.ok_or(FcError::NoConfigFile)?;
    Ok(FcArgs {
        config_file,
        config_at,
        api_sock,
        no_api,
        end,
    })
}

/// The argv Firecracker runs with: the user's, with `--config-file`'s path
/// replaced by `config_path` (the rewritten config, e.g. a sealed memfd as
/// `/proc/self/fd/N`), and `--no-api` added (before a `--` separator) unless
/// the user gave `--no-api` or `--api-sock`: without it every VM would
/// serve its API on Firecracker's default `/run/firecracker.socket`
/// (`DEFAULT_API_SOCK_PATH`, `src/firecracker/src/main.rs`), so a second VM
/// would fail to bind it; `--no-api` requires `--config-file`, which is
/// always there. `parsed` is [`check_args`]'s reading of this `user`.
pub fn args_with_config(user: &[String], parsed: &FcArgs, config_path: &str) -> Vec<String> {
    let mut args = user.to_vec();
    args[parsed.config_at] = config_path.to_string();
    if !parsed.no_api && !parsed.api_sock {
        args.insert(parsed.end, options::vmm_cmd::firecracker::NO_API.into());
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn covers(ranges: &[(u64, u64)], addr: u64) -> bool {
        ranges.iter().any(|&(s, l)| addr >= s && addr < s + l)
    }

    /// A little-endian ELF64 with one PT_LOAD per `(paddr, filesz, memsz)`.
    fn elf(segments: &[(u64, u64, u64)]) -> Vec<u8> {
        let mut b = vec![0u8; 64 + 56 * segments.len()];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&(segments.len() as u16).to_le_bytes());
        for (i, &(paddr, filesz, memsz)) in segments.iter().enumerate() {
            let p = 64 + 56 * i;
            b[p..p + 4].copy_from_slice(&1u32.to_le_bytes());
            b[p + 24..p + 32].copy_from_slice(&paddr.to_le_bytes());
            b[p + 32..p + 40].copy_from_slice(&filesz.to_le_bytes());
            b[p + 40..p + 48].copy_from_slice(&memsz.to_le_bytes());
        }
        b
    }

    fn config(boot_source: &str, extra: &str) -> String {
        format!(
            r#"{{"boot-source": {{{boot_source}}}, "machine-config": {{"vcpu_count": 2, "mem_size_mib": 1024}}{extra}}}"#
        )
    }

    fn cfg(boot_source: &str, extra: &str) -> FcConfig {
        FcConfig::parse(&config(boot_source, extra)).unwrap()
    }

    fn boot_args_of(json: &str) -> String {
        let v: Value = serde_json::from_str(json).unwrap();
        v["boot-source"]["boot_args"].as_str().unwrap().to_string()
    }

    #[test]
    fn layout_small_guests_are_one_region() {
        for size in [128 * MIB, GIB, 3 * GIB] {
            assert_eq!(
                ram(size),
                vec![RamRange {
                    gpa: 0,
                    len: size,
                    file_offset: 0
                }]
            );
        }
    }

    #[test]
    fn layout_past_the_32bit_gap() {
        // 4 GiB: 3 below the gap, 1 from 4 GiB, back to back in the file.
        assert_eq!(
            ram(4 * GIB),
            vec![
                RamRange {
                    gpa: 0,
                    len: 3 * GIB,
                    file_offset: 0
                },
                RamRange {
                    gpa: 4 * GIB,
                    len: GIB,
                    file_offset: 3 * GIB
                },
            ]
        );
        let r = ram(5 * GIB);
        assert_eq!(r[1].len, 2 * GIB);
        assert_eq!(layout::file_offset(&r, 4 * GIB + 7), Some(3 * GIB + 7));
        assert_eq!(layout::file_offset(&r, 3 * GIB), None);
        // The hint: the floor to the gap, and all RAM from 4 GiB.
        let h = layout::hint_ranges(
            &r,
            &writes(r[0].len, &elf(&[(16 * MIB, MIB, MIB)]), 0).unwrap(),
        );
        assert_eq!(h, vec![(32 * MIB, 3 * GIB - 32 * MIB), (4 * GIB, 2 * GIB)]);
    }

    #[test]
    fn layout_past_the_64bit_gap() {
        // 255 GiB fills [0, 3) and [4, 256) GiB exactly.
        let r = ram(255 * GIB);
        assert_eq!(r.len(), 2);
        assert_eq!(r[1].gpa + r[1].len, MMIO64_START);
        // 300 GiB: the last 45 GiB from 512 GiB, after the 64-bit MMIO gap.
        let r = ram(300 * GIB);
        assert_eq!(
            r,
            vec![
                RamRange {
                    gpa: 0,
                    len: 3 * GIB,
                    file_offset: 0
                },
                RamRange {
                    gpa: 4 * GIB,
                    len: 252 * GIB,
                    file_offset: 3 * GIB
                },
                RamRange {
                    gpa: 512 * GIB,
                    len: 45 * GIB,
                    file_offset: 255 * GIB
                },
            ]
        );
        assert_eq!(r.iter().map(|x| x.len).sum::<u64>(), 300 * GIB);
        let h = layout::hint_ranges(&r, &[]);
        assert!(!covers(&h, 256 * GIB) && !covers(&h, 512 * GIB - 1));
        assert!(covers(&h, 512 * GIB) && covers(&h, 557 * GIB - 1));
        assert!(!covers(&h, 557 * GIB));
        assert!(ram(0).is_empty());
    }

    #[test]
    fn kernel_segments_above_the_floor_are_left_out() {
        // A PVH vmlinux: text at 16 MiB, 40 MiB of it (memsz beyond filesz:
        // the bss is left out too), so [16, 56) MiB; a second segment
        // wholly above the floor.
        let k = elf(&[(16 * MIB, 30 * MIB, 40 * MIB), (100 * MIB, 4096, 4096 + 1)]);
        let r = ram(GIB);
        let w = writes(r[0].len, &k, 0).unwrap();
        assert_eq!(
            w,
            vec![(16 * MIB, 40 * MIB), (100 * MIB, 4097)],
            "segments as loaded"
        );
        let h = layout::hint_ranges(&r, &w);
        assert_eq!(
            h,
            vec![
                (56 * MIB, 44 * MIB),
                (100 * MIB + 8192, GIB - 100 * MIB - 8192)
            ]
        );
        for a in [32 * MIB, 56 * MIB - 1, 100 * MIB, 100 * MIB + 4096] {
            assert!(!covers(&h, a), "{a:#x} hinted");
        }
        // A kernel wholly below the floor costs the hint nothing.
        let k = elf(&[(MIB, 20 * MIB, 24 * MIB)]);
        let h = layout::hint_ranges(&r, &writes(r[0].len, &k, 0).unwrap());
        assert_eq!(h, vec![(32 * MIB, GIB - 32 * MIB)]);
    }

    #[test]
    fn a_bzimage_is_refused() {
        let mut bz = vec![0u8; 4096];
        bz[0x202..0x206].copy_from_slice(b"HdrS");
        for image in [&bz[..], &b""[..], &b"\x7fELF"[..]] {
            let e = writes(GIB, image, 0).unwrap_err();
            assert_eq!(e, FcError::KernelNotElf);
            let m = e.to_string();
            assert!(m.contains("vmlinux") && !m.contains('\n'), "{m}");
        }
    }

    #[test]
    fn initrd_region_at_the_top_of_low_ram() {
        let k = elf(&[(16 * MIB, 8 * MIB, 8 * MIB)]);
        for (size, initrd) in [
            (GIB, 3 * MIB),
            (GIB, 5 * MIB + 1),
            (8 * GIB, 100 * MIB + 17),
        ] {
            let r = ram(size);
            let low = r[0].len;
            let w = writes(low, &k, initrd).unwrap();
            // Firecracker's address: the top of the first region, page
            // aligned down (initrd_load_addr).
            let at = (low - initrd) & !4095;
            let (s, l) = *w.last().unwrap();
            assert!(s <= at && at + initrd <= s + l, "{w:?}");
            assert_eq!(s + l, low);
            assert_eq!(l, initrd.next_multiple_of(2 * MIB) + INITRD_MARGIN);
            let h = layout::hint_ranges(&r, &w);
            for a in [at, at + initrd - 1, s] {
                assert!(!covers(&h, a), "initrd byte {a:#x} hinted");
            }
            assert!(covers(&h, s - 1));
        }
        // 3 MiB: 4 + 2 MiB off the top of 1 GiB.
        let r = ram(GIB);
        let w = writes(GIB, &k, 3 * MIB).unwrap();
        assert_eq!(
            layout::hint_ranges(&r, &w),
            vec![(32 * MIB, GIB - 6 * MIB - 32 * MIB)]
        );
        // No initrd, nothing at the top.
        assert_eq!(writes(GIB, &k, 0).unwrap().len(), 1);
        // One that fills low RAM exactly still loads (at 0); one larger
        // is refused, as Firecracker refuses it.
        let w = writes(128 * MIB, &k, 128 * MIB).unwrap();
        assert_eq!(w[1], (0, 128 * MIB));
        let e = writes(128 * MIB, &k, 128 * MIB + 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("mem_size_mib") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn guest_layout_combines_ram_and_writes() {
        let c = cfg(r#""kernel_image_path": "vmlinux""#, "");
        let k = elf(&[(16 * MIB, 40 * MIB, 40 * MIB)]);
        let g = guest_layout(&c, &k, 3 * MIB).unwrap();
        assert_eq!(g.ram, ram(GIB));
        assert_eq!(g.hint_ranges, vec![(56 * MIB, GIB - 6 * MIB - 56 * MIB)]);
        assert_eq!(guest_layout(&c, b"MZ", 0), Err(FcError::KernelNotElf));
    }

    #[test]
    fn boot_args_rewriting() {
        let c = cfg(
            r#""kernel_image_path": "vmlinux", "boot_args": "console=ttyS0 reboot=k""#,
            "",
        );
        let out = with_hint(&c, "ABC").unwrap();
        assert_eq!(
            boot_args_of(&out),
            "console=ttyS0 reboot=k prezero.hint=ABC"
        );
        // Before "--": what follows is init's.
        let c = cfg(
            r#""kernel_image_path": "vmlinux", "boot_args": "quiet -- prezero.hint=x single""#,
            "",
        );
        assert_eq!(
            boot_args_of(&with_hint(&c, "ABC").unwrap()),
            "quiet prezero.hint=ABC -- prezero.hint=x single"
        );
        // Empty boot_args: Firecracker passes an empty line, now the hint.
        let c = cfg(r#""kernel_image_path": "vmlinux", "boot_args": """#, "");
        assert_eq!(
            boot_args_of(&with_hint(&c, "ABC").unwrap()),
            "prezero.hint=ABC"
        );
        // No boot_args (absent or null): Firecracker's default line, kept.
        for bs in [
            r#""kernel_image_path": "vmlinux""#,
            r#""kernel_image_path": "vmlinux", "boot_args": null"#,
        ] {
            let c = cfg(bs, "");
            assert_eq!(c.boot_args(), None);
            assert_eq!(
                boot_args_of(&with_hint(&c, "ABC").unwrap()),
                format!("{DEFAULT_BOOT_ARGS} prezero.hint=ABC")
            );
        }
        // Someone else's hint: a second one would make the kernel refuse
        // both (Duplicate).
        for line in ["prezero.hint=XYZ", "quiet prezero.hint", "a \\\"b"] {
            let c = cfg(
                &format!(r#""kernel_image_path": "vmlinux", "boot_args": "{line}""#),
                "",
            );
            let e = with_hint(&c, "ABC").unwrap_err();
            assert_eq!(text_budget(&c), Err(e.clone()));
            let m = e.to_string();
            assert!(
                m.contains("boot-source.boot_args") && !m.contains('\n'),
                "{m}"
            );
            if line.contains("prezero") {
                assert!(m.contains("prezero.hint parameter itself"), "{m}");
            } else {
                assert!(m.contains("double quotes"), "{m}");
            }
        }
        let c = cfg(
            r#""kernel_image_path": "vmlinux", "boot_args": "a\nprezero.hint=1""#,
            "",
        );
        let m = with_hint(&c, "ABC").unwrap_err().to_string();
        assert!(!m.contains('\n') && m.contains("a\\nprezero"), "{m}");
    }

    #[test]
    fn unknown_keys_survive() {
        let text = r#"{
            "boot-source": {"kernel_image_path": "/k/vmlinux", "initrd_path": "/k/initrd",
                            "boot_args": "console=ttyS0", "x-future": [1, {"y": null}]},
            "machine-config": {"vcpu_count": 2, "mem_size_mib": 2048, "huge_pages": "2M",
                               "smt": false},
            "drives": [{"drive_id": "rootfs", "path_on_host": "/img/root.ext4",
                        "is_root_device": true, "is_read_only": false}],
            "network-interfaces": [{"iface_id": "eth0", "host_dev_name": "tap0"}],
            "logger": {"log_path": "/tmp/fc.log", "level": "Info"},
            "x-vendor": {"big": 18446744073709551615, "neg": -3, "f": 1.5, "s": "é\u0001"}
        }"#;
        let c = FcConfig::parse(text).unwrap();
        assert_eq!(c.kernel_image_path(), "/k/vmlinux");
        assert_eq!(c.initrd_path(), Some("/k/initrd"));
        assert_eq!(c.boot_args(), Some("console=ttyS0"));
        assert_eq!(c.mem_size_mib(), 2048);
        assert_eq!(c.mem_bytes(), 2 * GIB);
        let out: Value = serde_json::from_str(&with_hint(&c, "ABC").unwrap()).unwrap();
        let mut want: Value = serde_json::from_str(text).unwrap();
        want["boot-source"]["boot_args"] = "console=ttyS0 prezero.hint=ABC".into();
        assert_eq!(out, want);
        assert_eq!(&want, FcConfig::parse(&out.to_string()).unwrap().json());
    }

    #[test]
    fn bad_json_and_missing_keys_are_one_line_errors() {
        let ks = r#""kernel_image_path": "vmlinux""#;
        let mc = |m: &str| format!(r#", "machine-config": {{"vcpu_count": 1{m}}}"#);
        for (text, want) in [
            ("{".to_string(), "not valid JSON"),
            ("".to_string(), "not valid JSON"),
            ("[]".to_string(), "(top level) is an array"),
            (
                r#"{"machine-config": {"mem_size_mib": 128}}"#.to_string(),
                "has no boot-source;",
            ),
            (
                r#"{"boot-source": "vmlinux", "machine-config": {"mem_size_mib": 128}}"#
                    .to_string(),
                "boot-source is a string, not an object",
            ),
            (
                format!(
                    r#"{{"boot-source": {{}}{}}}"#,
                    mc(r#", "mem_size_mib": 128"#)
                ),
                "has no boot-source.kernel_image_path",
            ),
            (
                format!(
                    r#"{{"boot-source": {{"kernel_image_path": 5}}{}}}"#,
                    mc(r#", "mem_size_mib": 128"#)
                ),
                "boot-source.kernel_image_path is a number",
            ),
            (
                format!(
                    r#"{{"boot-source": {{"kernel_image_path": ""}}{}}}"#,
                    mc(r#", "mem_size_mib": 128"#)
                ),
                "boot-source.kernel_image_path is empty",
            ),
            (
                format!(
                    r#"{{"boot-source": {{{ks}, "boot_args": 7}}{}}}"#,
                    mc(r#", "mem_size_mib": 128"#)
                ),
                "boot-source.boot_args is a number, not a string",
            ),
            (
                format!(
                    r#"{{"boot-source": {{{ks}, "initrd_path": true}}{}}}"#,
                    mc(r#", "mem_size_mib": 128"#)
                ),
                "boot-source.initrd_path is a boolean",
            ),
            (
                format!(r#"{{"boot-source": {{{ks}}}}}"#),
                "has no machine-config.mem_size_mib",
            ),
            (
                format!(r#"{{"boot-source": {{{ks}}}{}}}"#, mc("")),
                "has no machine-config.mem_size_mib",
            ),
            (
                format!(r#"{{"boot-source": {{{ks}}}, "machine-config": 128}}"#),
                "machine-config is a number",
            ),
            (
                format!(
                    r#"{{"boot-source": {{{ks}}}{}}}"#,
                    mc(r#", "mem_size_mib": 0"#)
                ),
                "mem_size_mib is 0",
            ),
            (
                format!(
                    r#"{{"boot-source": {{{ks}}}{}}}"#,
                    mc(r#", "mem_size_mib": "128""#)
                ),
                "mem_size_mib is \"128\"",
            ),
            (
                format!(
                    r#"{{"boot-source": {{{ks}}}{}}}"#,
                    mc(r#", "mem_size_mib": 1.5"#)
                ),
                "mem_size_mib is 1.5",
            ),
            (
                format!(
                    r#"{{"boot-source": {{{ks}}}{}}}"#,
                    mc(r#", "mem_size_mib": -1"#)
                ),
                "mem_size_mib is -1",
            ),
            (
                format!(
                    r#"{{"boot-source": {{{ks}}}{}}}"#,
                    mc(r#", "mem_size_mib": 128, "gdb_socket_path": "/tmp/gdb""#)
                ),
                "machine-config.gdb_socket_path conflicts",
            ),
        ] {
            let e = FcConfig::parse(&text).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
            assert!(!e.contains('\n'), "{e}");
            assert!(e.contains("; "), "no fix in: {e}");
        }
        // virtio-mem / pmem memory starts at 512 GiB: only below 255 GiB of RAM.
        let big = |mib: u64, extra: &str| {
            format!(
                r#"{{"boot-source": {{{ks}}}, "machine-config": {{"mem_size_mib": {mib}}}{extra}}}"#
            )
        };
        let hot = r#", "memory-hotplug": {"total_size_mib": 1024}"#;
        let pmem = r#", "pmem": [{"id": "p", "path_on_host": "/p"}]"#;
        for extra in [hot, pmem] {
            assert!(FcConfig::parse(&big(255 << 10, extra)).is_ok());
            let e = FcConfig::parse(&big((255 << 10) + 1, extra))
                .unwrap_err()
                .to_string();
            assert!(e.contains("255 GiB") && !e.contains('\n'), "{e}");
        }
        assert!(FcConfig::parse(&big(300 << 10, r#", "pmem": []"#)).is_ok());
        // null gdb_socket_path is no debugger.
        let ok = format!(
            r#"{{"boot-source": {{{ks}}}{}}}"#,
            mc(r#", "mem_size_mib": 128, "gdb_socket_path": null"#)
        );
        assert_eq!(FcConfig::parse(&ok).unwrap().mem_size_mib(), 128);
    }

    #[test]
    fn the_budget_leaves_room_for_firecrackers_additions() {
        let budget = |bs: &str, extra: &str| text_budget(&cfg(bs, extra)).unwrap();
        let k = r#""kernel_image_path": "vmlinux", "boot_args": "console=ttyS0""#;
        let base = 2047 - "console=ttyS0 prezero.hint=".len();
        assert_eq!(budget(k, ""), base - " pci=off".len());
        // A root drive without partuuid and a tap: two MMIO devices,
        // root=/dev/vda rw.
        let dev = 1 + "virtio_mmio.device=4K@0xc0001000:23".len();
        let extra = r#", "drives": [{"drive_id": "r", "is_root_device": true, "is_read_only": false}],
                        "network-interfaces": [{"iface_id": "eth0", "host_dev_name": "tap0"}]"#;
        assert_eq!(
            budget(k, extra),
            base - " pci=off".len() - 2 * dev - " root=/dev/vda rw".len()
        );
        let extra = r#", "drives": [{"drive_id": "r", "is_root_device": true, "partuuid": "0eaa91a0-01"},
                                    {"drive_id": "d", "is_root_device": false}],
                        "vsock": {"guest_cid": 3, "uds_path": "/v"}, "balloon": null,
                        "pmem": [{"id": "p0", "path_on_host": "/p"}, {"id": "p1", "path_on_host": "/q", "root_device": true}]"#;
        assert_eq!(
            budget(k, extra),
            base - " pci=off".len()
                - 5 * dev
                - " root=PARTUUID=0eaa91a0-01 ro".len()
                - " root=/dev/pmem1 ro".len()
        );
        // Without boot_args the default line is the base.
        assert_eq!(
            budget(r#""kernel_image_path": "vmlinux""#, ""),
            2047 - DEFAULT_BOOT_ARGS.len() - " prezero.hint=".len() - " pci=off".len()
        );
        // A text of exactly the budget plus Firecracker's most (root
        // drive, MMIO devices at the longest address and IRQ) is exactly
        // the kernel's 2047.
        let c = cfg(
            k,
            r#", "drives": [{"drive_id": "r", "is_root_device": true}]"#,
        );
        let b = text_budget(&c).unwrap();
        let text = "A".repeat(b);
        let line = boot_args_of(&with_hint(&c, &text).unwrap())
            + " pci=off root=/dev/vda ro virtio_mmio.device=4K@0xeebff000:23";
        assert_eq!(line.len(), zerohint::CMDLINE_MAX);
        let e = with_hint(&c, &format!("{text}A")).unwrap_err().to_string();
        assert!(e.contains("internal") && !e.contains('\n'), "{e}");
        // A line too long for any hint has a budget of 0, not an error.
        let long = format!(
            r#""kernel_image_path": "v", "boot_args": "{}""#,
            "x".repeat(2100)
        );
        assert_eq!(budget(&long, ""), 0);
    }

    #[test]
    fn argv_checks_and_rewrite() {
        let user = s(&["--config-file", "vm.json", "--level", "Debug"]);
        let a = check_args(&user).unwrap();
        assert_eq!(a.config_file, "vm.json");
        assert!(!a.api_sock && !a.no_api);
        assert_eq!(
            args_with_config(&user, &a, "/proc/self/fd/9"),
            s(&[
                "--config-file",
                "/proc/self/fd/9",
                "--level",
                "Debug",
                "--no-api"
            ])
        );
        // The user's API socket stays on; their --no-api is not doubled.
        for user in [
            s(&["--api-sock", "/tmp/fc.sock", "--config-file", "c.json"]),
            s(&[
                "--no-api",
                "--config-file",
                "c.json",
                "--metadata",
                "m.json",
            ]),
        ] {
            let a = check_args(&user).unwrap();
            let out = args_with_config(&user, &a, "/proc/self/fd/9");
            assert_eq!(out.len(), user.len());
            assert_eq!(
                out.iter().filter(|x| *x == "--no-api").count(),
                usize::from(a.no_api)
            );
            assert!(out.contains(&"/proc/self/fd/9".to_string()));
        }
        // Before a "--" separator: what follows it Firecracker never parses.
        let user = s(&["--config-file", "c.json", "--", "--config-file", "x"]);
        let a = check_args(&user).unwrap();
        assert_eq!(
            args_with_config(&user, &a, "P"),
            s(&["--config-file", "P", "--no-api", "--", "--config-file", "x"])
        );
        // Refusals.
        let e = check_args(&s(&["--api-sock", "/s"])).unwrap_err();
        assert_eq!(e, FcError::NoConfigFile);
        let e = check_args(&s(&["--", "--config-file", "c.json"])).unwrap_err();
        assert_eq!(e, FcError::NoConfigFile);
        for (bad, want) in [
            (vec!["--config-file=c.json"], "two arguments"),
            (vec!["--config-file"], "no path"),
            (vec!["--config-file", "--no-api"], "no path"),
            (vec!["--config-file", "a", "--config-file", "b"], "twice"),
            (vec!["--config-file", "a", "--help"], "prints and exits"),
            (vec!["-h", "--config-file", "a"], "prints and exits"),
            (vec!["--config-file", "a", "--version"], "prints and exits"),
            (
                vec!["--config-file", "a", "--snapshot-version"],
                "prints and exits",
            ),
            (
                vec!["--describe-snapshot", "s", "--config-file", "a"],
                "prints and exits",
            ),
        ] {
            let e = check_args(&s(&bad)).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("conflicts"), "{bad:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let m = FcError::NoConfigFile.to_string();
        assert!(m.contains("--config-file") && !m.contains('\n'));
    }

    #[test]
    fn memory_size_must_match() {
        let c = cfg(r#""kernel_image_path": "vmlinux""#, "");
        assert_eq!(check_size(&c, GIB), Ok(()));
        let e = check_size(&c, 2 * GIB).unwrap_err().to_string();
        assert!(e.contains("mem_size_mib 1024") && !e.contains('\n'), "{e}");
    }
}
