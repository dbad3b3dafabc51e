//! What each `--net` becomes: its MAC and its backend (vhost-net or the
//! user-space path), decided once from the options and the host.
//!
//! Why a module of its own: both zerostart's own VMM (`builder`) and the
//! launcher (`launch`, which maps `--net` onto QEMU and cloud-hypervisor)
//! plan the same devices by the same rule; here neither imports the other
//! (builder reads the CLI's types, the CLI holds the launcher's).

/// A `--net` that cannot be planned; every message names the fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--net vhost=on` without the kernel backend.
    #[error("--net tap={0},vhost=on: {dev} does not exist; load the module (modprobe vhost_net) or use vhost=off", dev = devices::virtio::vhost::VHOST_NET_DEV)]
    NoVhostNet(String),
    /// Two `--net` with one tap.
    #[error("--net tap={0} is given twice; give each device its own tap")]
    TapTwice(String),
    /// Two `--net` with one MAC.
    #[error("--net mac={0} is given to two devices; give each its own MAC")]
    MacTwice(String),
}

/// One `--net` with its MAC and backend decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetPlan {
    /// The host tap.
    pub tap: String,
    /// The guest's MAC (given, or [`options::default_mac`] of the index).
    pub mac: [u8; 6],
    /// vhost-net (true) or the user-space path.
    pub vhost: bool,
}

/// Decides MAC and backend of each `--net` (`vhost_present`: whether
/// `/dev/vhost-net` exists): `vhost=on` needs it, unset uses it when
/// present. Each tap and MAC at most once.
pub fn plan_nets(nets: &[options::NetConfig], vhost_present: bool) -> Result<Vec<NetPlan>, Error> {
    let mut out: Vec<NetPlan> = Vec::new();
    for (i, n) in nets.iter().enumerate() {
        let vhost = match n.vhost {
            Some(true) if !vhost_present => return Err(Error::NoVhostNet(n.tap.clone())),
            Some(v) => v,
            None => vhost_present,
        };
        let mac = n.mac.unwrap_or_else(|| options::default_mac(i));
        if out.iter().any(|o| o.tap == n.tap) {
            return Err(Error::TapTwice(n.tap.clone()));
        }
        if out.iter().any(|o| o.mac == mac) {
            return Err(Error::MacTwice(options::format_mac(&mac)));
        }
        out.push(NetPlan {
            tap: n.tap.clone(),
            mac,
            vhost,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `--net` backend rule: vhost when /dev/vhost-net exists unless
    /// vhost=off; vhost=on without it is an error; MACs from the index.
    #[test]
    fn net_backend_and_mac_rule() {
        let n = |s: &str| options::net(s).unwrap();
        let p = plan_nets(&[n("tap=a"), n("tap=b,vhost=off")], true).unwrap();
        assert_eq!((p[0].vhost, p[1].vhost), (true, false));
        assert_eq!(p[0].mac, options::default_mac(0));
        assert_eq!(p[1].mac, options::default_mac(1));
        let p = plan_nets(&[n("tap=a")], false).unwrap();
        assert!(!p[0].vhost, "no /dev/vhost-net: the user-space path");
        let e = plan_nets(&[n("tap=a,vhost=on")], false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("modprobe vhost_net") && e.contains("vhost=off"),
            "{e}"
        );
        // An explicit MAC equal to another device's default one.
        let e = plan_nets(&[n("tap=a"), n("tap=b,mac=0a:5a:53:00:00:00")], false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("two devices"), "{e}");
    }
}
