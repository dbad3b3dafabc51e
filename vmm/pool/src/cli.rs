//! `zerostart pool serve|status|lease`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, Subcommand};

use crate::daemon::{Config, Daemon};
use crate::memory::{first_nonzero, Fault};
use crate::{Error, PageSize};

use options::DEFAULT_POOL_SOCKET;

/// `zerostart pool ...`.
#[derive(Debug, Args)]
pub struct PoolArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: PoolCommand,
}

/// Pool subcommands.
#[derive(Debug, Subcommand)]
pub enum PoolCommand {
    /// Run the daemon: keep --size bytes of hugepage memory zeroed and
    /// lease it in --region-size pieces.
    Serve(ServeArgs),
    /// Show pool size, clean/dirty/scrubbing/leased bytes and scrub speed.
    Status(StatusArgs),
    /// Lease a region and check every byte reads zero (an operator's
    /// check; tests also fill it with a pattern and hold it).
    Lease(LeaseArgs),
}

/// `zerostart pool serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Unix socket to serve (created mode 0600; 0660 with --socket-group).
    #[arg(long, default_value = DEFAULT_POOL_SOCKET)]
    pub socket: PathBuf,
    /// A group whose members may lease too (the socket becomes 0660 and
    /// theirs): the user libvirt or Kata runs QEMU as, so it needs no root.
    #[arg(long, value_name = "GROUP")]
    pub socket_group: Option<String>,
    /// Total pool memory (K/M/G/T suffixes).
    #[arg(long, default_value = "4G", value_parser = hostmem::parse_size)]
    pub size: u64,
    /// Size of each region = the largest lease.
    #[arg(long, default_value = "1G", value_parser = hostmem::parse_size)]
    pub region_size: u64,
    /// Regions of several sizes instead of --size/--region-size: a comma
    /// list of SIZE or COUNTxSIZE, e.g. 4x1G,2x3G,5G (a fleet of 1, 3 and
    /// 5 GiB guests). Each lease takes the smallest clean region that
    /// holds it, so a guest holds what it needs, not a whole large region.
    #[arg(long, value_name = "LIST", value_parser = parse_regions, conflicts_with_all = ["size", "region_size"])]
    pub regions: Option<RegionList>,
    /// Page size: 2M, 1G (hugetlb) or 4K (shmem; test/fallback mode).
    #[arg(long, default_value = "2M")]
    pub page: String,
    /// Use named files in this hugetlbfs directory instead of memfds
    /// (their old contents are scrubbed at start like any dirty region).
    #[arg(long, value_name = "DIR")]
    pub hugetlbfs: Option<PathBuf>,
    /// After every scrub, read every byte back before marking it clean.
    #[arg(long)]
    pub verify: bool,
    /// Zeroing threads (0 = all CPUs).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Zeroing backend (auto or a prezero backend name).
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// Serve Prometheus metrics at http://HOST:PORT/metrics (region and
    /// byte counts by state, leases, lease latency, scrub bytes, seconds
    /// and CPU seconds, retired regions, failed scrubs). Port 0 picks a
    /// free one (printed at start).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics: Option<String>,
    /// Cap the background fill/scrub at this many bytes per second (K/M/G
    /// suffixes: 2G = 2 GiB/s). Memory bandwidth is not governed by CPU
    /// priority, so this is what protects memory-bound neighbours.
    #[arg(long, value_name = "BYTES_PER_S", value_parser = hostmem::parse_size)]
    pub scrub_bandwidth: Option<u64>,
    /// Priority of the background fill/scrub: idle (SCHED_IDLE, else nice
    /// 19) or normal.
    #[arg(long, default_value = "idle")]
    pub scrub_priority: String,
    /// Regions filled or replaced at once, one scrubber thread each (the
    /// kernel zeroes a region's pages on one thread). 0 = one per
    /// --threads (all CPUs by default), at most one per region, and one
    /// under --scrub-bandwidth, whose cap N scrubbers would share.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub scrubbers: usize,
}

/// The sizes `--regions` lists, one per region, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionList(pub Vec<u64>);

/// Parses `--regions`: `SIZE` or `COUNTxSIZE`, comma separated.
pub fn parse_regions(s: &str) -> Result<RegionList, String> {
    let mut out = Vec::new();
    for item in s.split(',') {
        let item = item.trim();
        let (count, size) = match item.split_once(['x', 'X']) {
            Some((n, size)) => (
                n.trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| (1..=crate::daemon::MAX_REGIONS).contains(&n))
                    .ok_or_else(|| {
                        format!(
                            "{item:?}: the count before x must be 1 to {}; write e.g. 4x1G",
                            crate::daemon::MAX_REGIONS
                        )
                    })?,
                size,
            ),
            None => (1, item),
        };
        let bytes = hostmem::parse_size(size).map_err(|_| {
            format!("{item:?}: {size:?} is not a size; write SIZE or COUNTxSIZE, e.g. 4x1G,2x3G,5G")
        })?;
        if out.len() + count > crate::daemon::MAX_REGIONS {
            return Err(format!(
                "more than {} regions; use fewer, larger regions",
                crate::daemon::MAX_REGIONS
            ));
        }
        out.extend(std::iter::repeat_n(bytes, count));
    }
    Ok(RegionList(out))
}

/// Resolves `--metrics HOST:PORT` to one address.
fn metrics_addr(v: &str) -> Result<std::net::SocketAddr, Error> {
    use std::net::ToSocketAddrs;
    let bad = |why: String| Error::BadValue {
        key: "metrics",
        value: v.to_string(),
        fix: format!("{why}; write HOST:PORT, e.g. 127.0.0.1:9464"),
    };
    v.to_socket_addrs()
        .map_err(|e| bad(e.to_string()))?
        .next()
        .ok_or_else(|| bad("the host has no address".into()))
}

/// `zerostart pool status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Socket of the daemon.
    #[arg(long, default_value = DEFAULT_POOL_SOCKET)]
    pub socket: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Wait until every region is clean (none dirty, scrubbing or leased),
    /// then print the status. A socket that does not answer yet is asked
    /// again: scripts start the daemon in the background and wait at once.
    /// Fails with one line after --timeout.
    #[arg(long)]
    pub wait_clean: bool,
    /// Seconds --wait-clean waits at most.
    #[arg(long, default_value_t = 300, requires = "wait_clean")]
    pub timeout: u64,
}

/// `zerostart pool lease`.
#[derive(Debug, Args)]
pub struct LeaseArgs {
    /// Socket of the daemon.
    #[arg(long, default_value = DEFAULT_POOL_SOCKET)]
    pub socket: PathBuf,
    /// Bytes to lease.
    #[arg(long, default_value = "2M", value_parser = hostmem::parse_size)]
    pub bytes: u64,
    /// Page size to ask for.
    #[arg(long, default_value = "2M")]
    pub page: String,
    /// NUMA node the memory must be on (default: any).
    #[arg(long)]
    pub node: Option<usize>,
    /// Take up to N whole regions for a lease larger than one (default:
    /// one region); they are mapped as one range.
    #[arg(long, value_name = "N")]
    pub pieces: Option<usize>,
    /// After the check, fill the lease with this byte (tests: a pattern a
    /// later lease must never see).
    #[arg(long, value_parser = parse_byte)]
    pub fill: Option<u8>,
    /// Keep the lease until killed or stdin closes.
    #[arg(long)]
    pub hold: bool,
    /// Test only: hand a copy of the fd to a `sleep` child that outlives
    /// the lease (the daemon must retire the region).
    #[arg(long, hide = true)]
    pub test_leak_fd: bool,
    /// Test only: map the lease a second time, drop the `Lease` while that
    /// mapping lives on (the lease must last until this process exits).
    #[arg(long, hide = true)]
    pub test_drop_while_mapped: bool,
}

fn parse_byte(s: &str) -> Result<u8, String> {
    let r = match s.strip_prefix("0x") {
        Some(h) => u8::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("'{s}' is not a byte; write e.g. 0xa5"))
}

/// `--socket-group`: a group name (or a numeric gid) known to this host.
fn group_id(name: &str) -> Result<u32, Error> {
    if let Ok(gid) = name.parse::<u32>() {
        return Ok(gid);
    }
    match nix::unistd::Group::from_name(name) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        _ => Err(Error::BadValue {
            key: "socket-group",
            value: name.to_string(),
            fix:
                "name a group this host has (getent group NAME), e.g. the one libvirt runs QEMU as"
                    .into(),
        }),
    }
}

/// Runs a pool subcommand.
pub fn run(args: &PoolArgs) -> Result<(), Error> {
    match &args.command {
        PoolCommand::Serve(a) => serve(a),
        PoolCommand::Status(a) => status(a),
        PoolCommand::Lease(a) => lease(a),
    }
}

fn serve(a: &ServeArgs) -> Result<(), Error> {
    let fault = Fault::from_env()?;
    let config = Config {
        socket: a.socket.clone(),
        size: a.size,
        region_bytes: a.region_size,
        regions: Vec::new(),
        page: a.page.parse()?,
        hugetlbfs: a.hugetlbfs.clone(),
        verify: a.verify,
        threads: a.threads,
        backend: a
            .backend
            .parse()
            .map_err(|e: prezero::Error| Error::BadValue {
                key: "backend",
                value: a.backend.clone(),
                fix: e.to_string(),
            })?,
        fault,
    };
    let config = match &a.regions {
        Some(RegionList(sizes)) => config.with_regions(sizes.clone()),
        None => config,
    };
    // SIGTERM/SIGINT end the daemon cleanly (socket removed); blocked here
    // so every daemon thread inherits the mask and this thread takes them.
    use nix::sys::signal::{SigSet, Signal};
    let mut sigs = SigSet::empty();
    sigs.add(Signal::SIGTERM);
    sigs.add(Signal::SIGINT);
    sigs.thread_block()
        .map_err(|e| Error::io("blocking SIGTERM/SIGINT", e.into()))?;
    let ops = crate::daemon::Ops {
        metrics: a.metrics.as_deref().map(metrics_addr).transpose()?,
        scrub_bandwidth: a.scrub_bandwidth,
        scrub_priority: a.scrub_priority.parse()?,
        fill_progress: true,
        socket_group: a.socket_group.as_deref().map(group_id).transpose()?,
        scrubbers: a.scrubbers,
    };
    let d = Daemon::start_with(config.clone(), ops)?;
    if let Some(addr) = d.metrics_addr() {
        eprintln!("zerostart pool: metrics at http://{addr}/metrics");
    }
    eprintln!(
        "zerostart pool: serving {} ({} pages) on {}, {} scrubber(s){}",
        describe_regions(&config.region_sizes()),
        config.page,
        config.socket.display(),
        d.scrubbers(),
        if config.verify {
            ", verified scrubs"
        } else {
            ""
        }
    );
    let sig = sigs
        .wait()
        .map_err(|e| Error::io("waiting for SIGTERM/SIGINT", e.into()))?;
    eprintln!("zerostart pool: {sig}: stopping (leased memory stays with its clients)");
    drop(d);
    Ok(())
}

/// "4 regions of 1073741824 bytes", or by size for several sizes:
/// "6 regions: 4 of 1073741824 bytes, 2 of 3221225472 bytes".
pub fn describe_regions(sizes: &[u64]) -> String {
    let by = crate::proto::RegionSize::group(sizes.iter().map(|&b| (b, false)));
    match by.as_slice() {
        [one] => format!("{} regions of {} bytes", one.regions, one.bytes),
        _ => format!(
            "{} regions: {}",
            sizes.len(),
            by.iter()
                .map(|c| format!("{} of {} bytes", c.regions, c.bytes))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
}

/// How often --wait-clean asks the daemon.
const WAIT_CLEAN_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// Asks the daemon until every byte is clean or `timeout` has passed. Why
/// here and not in each script: the test scripts had four shell loops that
/// scraped `clean_bytes` out of the JSON, each with its own bound.
fn wait_clean(
    socket: &std::path::Path,
    timeout: std::time::Duration,
) -> Result<crate::proto::Status, Error> {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match crate::client::status(socket) {
            Ok(s) if s.clean_bytes == s.size_bytes => return Ok(s),
            Ok(s) => format!(
                "clean {} of {} bytes (dirty {}, scrubbing {}, leased {})",
                s.clean_bytes, s.size_bytes, s.dirty_bytes, s.scrubbing_bytes, s.leased_bytes
            ),
            // Not listening yet (or any more): ask again until the deadline.
            Err(e @ (Error::Connect { .. } | Error::Io { .. } | Error::Protocol(_))) => {
                e.to_string()
            }
            Err(e) => return Err(e),
        };
        if Instant::now() >= deadline {
            return Err(Error::NotClean {
                socket: socket.to_path_buf(),
                secs: timeout.as_secs(),
                last,
            });
        }
        std::thread::sleep(WAIT_CLEAN_POLL);
    }
}

fn status(a: &StatusArgs) -> Result<(), Error> {
    let s = if a.wait_clean {
        wait_clean(&a.socket, std::time::Duration::from_secs(a.timeout))?
    } else {
        crate::client::status(&a.socket)?
    };
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&s).expect("status serializes")
        );
        return Ok(());
    }
    let sizes = s.region_sizes();
    let regions = match sizes.as_slice() {
        [one] => format!("{} regions of {}", one.regions, gib(one.bytes)),
        _ => format!(
            "{} regions ({})",
            s.regions,
            sizes
                .iter()
                .map(|c| format!("{} of {}, {} clean", c.regions, gib(c.bytes), c.clean))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    };
    println!(
        "pool {} (pid {}): {} in {regions}, {} pages, backing {}",
        a.socket.display(),
        s.pid,
        gib(s.size_bytes),
        s.page,
        s.backing
    );
    println!(
        "  clean {}  dirty {}  scrubbing {}  leased {}",
        gib(s.clean_bytes),
        gib(s.dirty_bytes),
        gib(s.scrubbing_bytes),
        gib(s.leased_bytes)
    );
    println!(
        "  scrub: {:.1} GiB/s last, {:.1} GiB/s average, {} scrubbed, backend {}, verify {}",
        s.scrub_gib_s_last,
        s.scrub_gib_s_avg,
        gib(s.scrubbed_bytes),
        s.backend,
        if s.verify { "on" } else { "off" }
    );
    println!(
        "  leases {}  retired regions {}  failed scrubs {}",
        s.leases_total, s.retired_total, s.scrub_failures
    );
    Ok(())
}

fn lease(a: &LeaseArgs) -> Result<(), Error> {
    let bytes = a.bytes;
    let page: PageSize = a.page.parse()?;
    let t0 = Instant::now();
    let l = match a.pieces {
        None => crate::client::lease_on_node(&a.socket, bytes, page, a.node)?,
        Some(n) => crate::client::lease_pieces(&a.socket, bytes, page, a.node, n)?,
    };
    let mut m = l.map(false)?;
    let leased_ms = t0.elapsed().as_secs_f64() * 1e3;
    if let Some(off) = first_nonzero(m.as_slice(), 0) {
        return Err(Error::NotZero {
            lease: l.id(),
            offset: off as u64,
            value: m.as_slice()[off],
        });
    }
    if let Some(b) = a.fill {
        m.as_mut_slice().fill(b);
    }
    let mut child = None;
    if a.test_leak_fd {
        use std::os::fd::AsFd;
        let dup = l
            .fd()
            .try_clone_to_owned()
            .map_err(|e| Error::io("dup of the lease fd", e))?;
        let _ = dup.as_fd();
        child = Some(
            std::process::Command::new("sleep")
                .arg("600")
                .stdin(std::process::Stdio::from(dup))
                .stdout(std::process::Stdio::null())
                .spawn()
                .map_err(|e| Error::io("starting the fd-holding child", e))?,
        );
    }
    let identity = |fd: std::os::fd::BorrowedFd<'_>| {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd, zeroed buffer.
        unsafe { libc::fstat(std::os::fd::AsRawFd::as_raw_fd(&fd), &mut st) };
        (st.st_dev, st.st_ino)
    };
    let (dev, ino) = identity(l.fd());
    let pieces: Vec<serde_json::Value> = l
        .pieces()
        .into_iter()
        .map(|(fd, p)| {
            let (dev, ino) = identity(fd);
            serde_json::json!({"region": p.region, "len": p.len, "dev": dev, "inode": ino})
        })
        .collect();
    println!(
        "{}",
        serde_json::json!({
            "lease": l.id(),
            "region": l.info().region,
            "node": l.info().node,
            "bytes": l.len(),
            "page": l.page(),
            "verified_by_pool": l.info().verified,
            "checked_zero_bytes": l.len(),
            "filled": a.fill,
            "inode": ino,
            "dev": dev,
            "lease_and_map_ms": leased_ms,
            "holder_pid": child.as_ref().map(|c| c.id()),
            "pieces": pieces,
        })
    );
    let _ = std::io::stdout().flush();
    if a.test_drop_while_mapped {
        // A second shared mapping of the lease's file, deliberately never
        // unmapped: the process exit does it, and only then may the lease
        // end.
        hostmem::Mapping::file(l.fd(), l.offset(), l.len() as usize)
            .map()
            .map_err(|e| Error::io("test mapping of the lease", e.into()))?
            .leak();
        drop(m);
        drop(l);
        println!("dropped");
        let _ = std::io::stdout().flush();
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        return Ok(());
    }
    if a.hold {
        // Until killed or stdin closes.
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
    }
    drop(m);
    drop(l);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    const G: u64 = 1 << 30;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: PoolCommand,
    }

    fn serve(args: &[&str]) -> Result<ServeArgs, String> {
        let argv = ["pool", "serve"].iter().chain(args);
        match Cli::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .command
        {
            PoolCommand::Serve(a) => Ok(a),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_list_of_regions_parses_in_order() {
        assert_eq!(parse_regions("1G"), Ok(RegionList(vec![G])));
        assert_eq!(
            parse_regions("2x1G, 3G,1X5G"),
            Ok(RegionList(vec![G, G, 3 * G, 5 * G]))
        );
        for (bad, says) in [
            ("", "is not a size"),
            ("1G,", "is not a size"),
            ("0x1G", "the count before x must be 1 to 4096"),
            ("x1G", "the count before x must be 1 to 4096"),
            ("2x", "is not a size"),
            ("4097x2M", "the count before x must be 1 to 4096"),
            ("4000x2M,100x2M", "more than 4096 regions"),
            ("1Q", "write SIZE or COUNTxSIZE"),
        ] {
            let e = parse_regions(bad).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }

    #[test]
    fn regions_exclude_size_and_region_size() {
        let a = serve(&["--regions", "2x1G,3G"]).unwrap();
        assert_eq!(a.regions, Some(RegionList(vec![G, G, 3 * G])));
        for other in [["--size", "8G"], ["--region-size", "2G"]] {
            let e = serve(&["--regions", "1G", other[0], other[1]]).unwrap_err();
            assert!(e.contains("cannot be used with"), "{e}");
        }
    }

    #[test]
    fn regions_are_described_by_size() {
        assert_eq!(describe_regions(&[G; 4]), "4 regions of 1073741824 bytes");
        assert_eq!(
            describe_regions(&[3 * G, G, G]),
            "3 regions: 2 of 1073741824 bytes, 1 of 3221225472 bytes"
        );
    }
}
