#!/usr/bin/env bash
# Builds the zerostart test guest's root filesystem: Debian (suite below)
# from the Debian registry with mmdebstrap, the packages in `packages`,
# systemd-networkd on DHCP, and the workload zsapp (zsapp.c) run by
# zsapp.service once the system is up. The stock Debian cloud kernel and
# its initrd are taken out of the image's /boot: that is the kernel users
# run today, which the real-VM tests compare against.
#
# Output: $ZEROSTART_CACHE/rootfs/<hash>/{rootfs.ext4,vmlinuz,initrd.img,
# manifest.txt}, where <hash> covers the suite, the mirror, `packages`,
# zsapp.c and this script (the unit files are written here). manifest.txt
# lists every installed package with its version: the registry moves, so
# two builds with the same hash may differ in versions; the manifest says
# which ones a run used. The last line printed is the output dir; a second
# run with the same inputs only prints it.
#
# Why mmdebstrap and not debootstrap: one command installs the package list
# with apt's resolver (debootstrap cannot take a kernel and its initrd
# tools in one pass), and it needs no chroot set-up by hand.
#
# Usage: build.sh            build (or reuse) the image
#        build.sh --print    print the output dir; exit 1 if not built
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${ZEROSTART_CACHE:-$HOME/.cache/zerostart}/rootfs"
SUITE="${ZEROSTART_ROOTFS_SUITE:-trixie}"
MIRROR="${ZEROSTART_ROOTFS_MIRROR:-http://deb.debian.org/debian}"
# The image's size: the installed system is ~600 MiB; the rest is room for
# the disk tests' writes. The file is sparse.
SIZE="${ZEROSTART_ROOTFS_SIZE:-2G}"

die() { echo "guest-rootfs: $*" >&2; exit 1; }
log() { echo "guest-rootfs: $*" >&2; }

packages() { sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$HERE/packages" | tr -d ' \t'; }

HASH="$({
	echo "$SUITE $MIRROR $SIZE"
	sha256sum "$HERE/build.sh" "$HERE/packages" "$HERE/zsapp.c" | sed "s|$HERE/||"
} | sha256sum | cut -c1-16)"
OUT="$CACHE/$HASH"
done_() { [ -f "$OUT/rootfs.ext4" ] && [ -f "$OUT/vmlinuz" ] && [ -f "$OUT/initrd.img" ]; }
if [ "${1:-}" = --print ]; then
	done_ || exit 1
	echo "$OUT"; exit 0
fi
[ -z "${1:-}" ] || die "unknown argument '$1' (use no argument or --print)"
if done_; then
	log "up to date"
	echo "$OUT"; exit 0
fi

[ "$(id -u)" -eq 0 ] || die "needs root (mmdebstrap in root mode, files owned by root in the image); run it as root"
need=()
for p in mmdebstrap e2fsprogs gcc libc6-dev debian-archive-keyring; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
	log "installing ${need[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
		die "could not install ${need[*]}; install them with apt-get and re-run"
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.build.lock"
flock 9
if done_; then
	log "up to date (built by another run meanwhile)"
	echo "$OUT"; exit 0
fi

WORK="$(mktemp -d "$CACHE/.work.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
ROOT="$WORK/root"
mkdir -p "$ROOT"

gcc -O2 -static -Wall -Werror -o "$WORK/zsapp" "$HERE/zsapp.c" || die "cannot build zsapp (gcc, libc6-dev)"

# The guest's own configuration, written into the tree before the image
# is made. Units report boot phases on the kernel log (zsapp phase NAME).
customize() {
	local r="$1"
	echo zsguest >"$r/etc/hostname"
	printf '127.0.0.1 localhost\n127.0.1.1 zsguest\n' >"$r/etc/hosts"
	echo 'LABEL=zsroot / ext4 defaults,errors=remount-ro 0 1' >"$r/etc/fstab"
	# A test image on a serial console: root without a password.
	sed -i 's/^root:[^:]*:/root::/' "$r/etc/shadow"
	install -m 0755 "$WORK/zsapp" "$r/usr/local/bin/zsapp"

	mkdir -p "$r/etc/systemd/network"
	cat >"$r/etc/systemd/network/10-zsguest.network" <<-'EOF'
	[Match]
	Name=en* eth*

	[Network]
	DHCP=yes
	EOF

	local u="$r/etc/systemd/system"
	cat >"$u/zsphase-userspace.service" <<-'EOF'
	[Unit]
	Description=zerostart phase: userspace_started
	DefaultDependencies=no
	Before=sysinit.target

	[Service]
	Type=oneshot
	StandardOutput=journal+console
	ExecStart=/usr/local/bin/zsapp phase userspace_started

	[Install]
	WantedBy=sysinit.target
	EOF
	cat >"$u/zsphase-multiuser.service" <<-'EOF'
	[Unit]
	Description=zerostart phase: multi_user_reached
	After=multi-user.target

	[Service]
	Type=oneshot
	StandardOutput=journal+console
	ExecStart=/usr/local/bin/zsapp phase multi_user_reached

	[Install]
	WantedBy=multi-user.target
	EOF
	cat >"$u/zsphase-network.service" <<-'EOF'
	[Unit]
	Description=zerostart phase: network_up (the default gateway answers a ping)
	Wants=network-online.target
	After=network-online.target

	[Service]
	Type=oneshot
	StandardOutput=journal+console
	ExecStart=/bin/sh -c 'gw=$$(ip -4 route show default | cut -d" " -f3); ping -c1 -W10 "$$gw" >/dev/null && exec /usr/local/bin/zsapp phase network_up'

	[Install]
	WantedBy=multi-user.target
	EOF
	cat >"$u/zsapp.service" <<-'EOF'
	[Unit]
	Description=zerostart test workload (touches 75% of RAM, reports app_ready)
	Wants=network-online.target
	After=network-online.target multi-user.target zsphase-multiuser.service

	[Service]
	Type=oneshot
	StandardOutput=journal+console
	ExecStart=/usr/local/bin/zsapp

	[Install]
	WantedBy=multi-user.target
	EOF
	systemctl --root="$r" enable -q systemd-networkd systemd-resolved \
		zsphase-userspace zsphase-multiuser zsphase-network zsapp
	systemctl --root="$r" set-default -q multi-user.target
	# Not part of a cloud VM's boot to its app, and each costs seconds
	# under TCG: timers for apt, man-db, e2scrub, fstrim; time sync.
	systemctl --root="$r" mask -q apt-daily.timer apt-daily-upgrade.timer \
		man-db.timer e2scrub_all.timer fstrim.timer systemd-timesyncd.service 2>/dev/null || true
}

log "mmdebstrap $SUITE from $MIRROR: $(packages | tr '\n' ' ')"
t0=$SECONDS
mmdebstrap --quiet --mode=root --variant=apt --format=directory \
	--include="$(packages | paste -sd, -)" \
	--aptopt='Acquire::Retries "3"' \
	--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	"$SUITE" "$ROOT" "$MIRROR" >"$WORK/mmdebstrap.log" 2>&1 ||
	{ tail -20 "$WORK/mmdebstrap.log" >&2; die "mmdebstrap failed (network to $MIRROR? see above)"; }
log "bootstrapped in $((SECONDS - t0)) s"
customize "$ROOT"

mkdir -p "$WORK/out"
kver="$(ls "$ROOT/lib/modules" | sort -V | tail -1)"
[ -n "$kver" ] && [ -f "$ROOT/boot/vmlinuz-$kver" ] && [ -f "$ROOT/boot/initrd.img-$kver" ] ||
	die "no kernel and initrd in the image's /boot (is linux-image-cloud-amd64 in packages?)"
cp "$ROOT/boot/vmlinuz-$kver" "$WORK/out/vmlinuz"
cp "$ROOT/boot/initrd.img-$kver" "$WORK/out/initrd.img"
chroot "$ROOT" dpkg-query -W -f='${Package} ${Version}\n' >"$WORK/out/manifest.txt"
echo "kernel $kver" >>"$WORK/out/manifest.txt"
rm -rf "$ROOT/var/cache/apt/archives/"*.deb "$ROOT/var/lib/apt/lists/"*
mkfs.ext4 -q -F -L zsroot -E root_owner=0:0 -d "$ROOT" "$WORK/out/rootfs.ext4" "$SIZE" ||
	die "mkfs.ext4 -d failed (e2fsprogs >= 1.43 needed)"
rm -rf "$OUT" && mv "$WORK/out" "$OUT"
log "built in $((SECONDS - t0)) s: $(du -h --apparent-size "$OUT/rootfs.ext4" | cut -f1) image, kernel $kver"
echo "$OUT"
