#!/usr/bin/env bash
# mkesp.sh KERNEL INITRD CMDLINE OUT: a raw disk image whose one partition
# (MBR, type 0xEF) is an EFI system partition holding a unified kernel
# image (systemd-stub + KERNEL + INITRD + CMDLINE) at /EFI/BOOT/BOOTX64.EFI.
#
# Why: cloud-hypervisor cannot hand its firmware a kernel over fw_cfg (it
# refuses --firmware beside --kernel), so a firmware boot there takes the
# kernel from a disk, as every cloud image does. CLOUDHV.fd (and OVMF.fd)
# boot this disk's removable-media path with no boot entries, no shell and
# no command line from outside: everything the guest needs is in the UKI.
#
# Needs systemd-boot-efi (the stub), dosfstools and mtools (ci/install-deps.sh).
set -euo pipefail
die() { echo "mkesp: $*" >&2; exit 1; }
[ $# -eq 4 ] || die "usage: mkesp.sh KERNEL INITRD CMDLINE OUT"
kernel=$1 initrd=$2 cmdline=$3 out=$4
STUB=${ZEROSTART_UKI_STUB:-/usr/lib/systemd/boot/efi/linuxx64.efi.stub}
[ -f "$kernel" ] || die "$kernel: no such kernel image; build it first (make kernel)"
[ -f "$initrd" ] || die "$initrd: no such initramfs"
[ -f "$STUB" ] || die "$STUB missing; install systemd-boot-efi (bash ci/install-deps.sh)"
for t in objcopy mkfs.vfat mmd mcopy; do
	command -v "$t" >/dev/null || die "$t not found; install binutils, dosfstools and mtools (bash ci/install-deps.sh)"
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%s' "$cmdline" >"$tmp/cmdline"
printf 'ID=zerostart\nPRETTY_NAME="zerostart test guest"\n' >"$tmp/osrel"
# Sections after the stub's own (which end below 0x20000), each at a MiB
# boundary past the one before: systemd-stub 252 finds them by name and
# needs their VMAs not to overlap.
mib=$((1 << 20))
align() { echo $(((($1) + mib - 1) / mib * mib)); }
ksize=$(stat -c %s "$kernel")
kvma=$((0x2000000))
ivma=$(align $((kvma + ksize)))
objcopy \
	--add-section .osrel="$tmp/osrel" --change-section-vma .osrel=0x20000 \
	--add-section .cmdline="$tmp/cmdline" --change-section-vma .cmdline=0x30000 \
	--add-section .linux="$kernel" --change-section-vma .linux="$(printf '%#x' $kvma)" \
	--add-section .initrd="$initrd" --change-section-vma .initrd="$(printf '%#x' "$ivma")" \
	"$STUB" "$tmp/BOOTX64.EFI"

# The partition: FAT with room to spare, at 1 MiB (2048 sectors).
usize=$(stat -c %s "$tmp/BOOTX64.EFI")
part_mib=$(($(align $((usize + usize / 8))) / mib + 4))
mkfs.vfat -C -n ZS-ESP "$tmp/part.img" $((part_mib * 1024)) >/dev/null
mmd -i "$tmp/part.img" ::/EFI ::/EFI/BOOT
mcopy -i "$tmp/part.img" "$tmp/BOOTX64.EFI" ::/EFI/BOOT/BOOTX64.EFI
# The MBR: one partition entry (type 0xEF, LBA 2048, the partition's size).
python3 - "$tmp/mbr" $((part_mib * 2048)) <<'EOF'
import struct, sys
path, sectors = sys.argv[1], int(sys.argv[2])
mbr = bytearray(1 << 20)
mbr[446:462] = struct.pack("<B3sB3sII", 0, b"\xfe\xff\xff", 0xEF, b"\xfe\xff\xff", 2048, sectors)
mbr[510:512] = b"\x55\xaa"
open(path, "wb").write(mbr)
EOF
cat "$tmp/mbr" "$tmp/part.img" >"$out.tmp"
mv "$out.tmp" "$out"
echo "mkesp: $out ($((($(stat -c %s "$out") + mib - 1) / mib)) MiB; UKI $((usize / 1024)) KiB: $(basename "$kernel") + $(basename "$initrd"), cmdline '$cmdline')"
