#!/usr/bin/env bash
# Builds the zerostart guest kernel: Debian's linux-source-6.12 (pinned in
# source.lock) + the patches in `series` + config/zerostart.config, with
# CONFIG_ZEROSTART_PREZERO=y (bzImage), and with
# ZEROSTART_KERNEL_VARIANTS="y n" also =n (bzImage-noprezero), the series-off
# baseline that only the kernel measurements boot (make bench-kernel asks
# for it; every test boots bzImage, so make demo builds one image, about 9
# of a cold build's 17 minutes here), and with "kasan" the series under
# generic KASAN (bzImage-kasan, in its own build dir: other compiler flags
# for every file), which make test-kernel-kasan boots, and make
# test-kernel where --kept finds that build dir.
#
# Lines: `--line 6.12` (the default) or `--line 7.3` (Debian's
# linux-source-7.3 from trixie-backports), each a sibling directory <line>/
# with the same layout: source.lock, series, patches/, line.config,
# README.md. Every line shares this script and
# config/zerostart.config; a line may add options in <line>/line.config
# (merged after the shared fragment, checked the same way). A line other
# than the default keeps its tree, build dir, apt lists and lock under
# $ZEROSTART_CACHE/kernel/<line>/, so a 7.3 build never resets or waits
# for the 6.12 tree.
#
# Output: $ZEROSTART_CACHE/kernel/<hash>/bzImage{,-noprezero}, where <hash>
# covers the source version, the series, the config fragment and this
# script. The last line printed is that directory. A second run with the
# same inputs and variants does nothing but print it; asking for a variant
# the directory lacks builds only that one into it.
#
# Why a private apt lists dir and a trixie-only sources file: the machine is
# bookworm; we need trixie's 6.12 source package without upgrading anything.
#
# Why one persistent git tree + one persistent build dir (O=): patches are
# applied with `git am` (so checkpatch and format-patch work on the result)
# and only files the series touches get new mtimes, so rebuilds are
# incremental; ccache makes switching between the two variants cheap.
#
# Usage: build.sh [--line L] fetch, unpack, apply series, build both images
#        build.sh --dev      build the tree as it is (no re-apply): for
#                            working on the series inside the cache tree
#        build.sh --print    print the output dir for the current inputs
#                            (exit 1 if its bzImage is not built yet)
#        build.sh --kept     build only the asked-for variants whose build
#                            dir this machine keeps (make test-kernel: the
#                            KASAN image where make test-kernel-kasan built
#                            it once; a cold one, 12 to 15 minutes, does
#                            not fit a fresh machine's make test), nothing
#                            if none
#
# ZEROSTART_KERNEL_DEV_ROOT=dir (with --dev): build dir/src/linux-<version>
# (e.g. a `git worktree` of the cache tree) in dir/build, output in dir/out,
# so that work on the series is not reset by a plain build.sh run at the
# same time (make test-kernel, e2e tests). The layout keeps the relative
# path from build dir to source the same, so ccache hits.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${ZEROSTART_CACHE:-$HOME/.cache/zerostart}/kernel"
FRAGMENT="$SCRIPT_DIR/config/zerostart.config"

die() { echo "guest-kernel build: $*" >&2; exit 1; }
log() { echo "guest-kernel build: $*" >&2; }

DEFAULT_LINE=6.12
LINE="$DEFAULT_LINE"
MODE=build
KEPT=0
while [ $# -gt 0 ]; do
	case "$1" in
	--line) [ $# -ge 2 ] || die "--line needs a value (6.12 or 7.3)"; LINE="$2"; shift 2 ;;
	--line=*) LINE="${1#--line=}"; shift ;;
	--dev|--print|--configure) MODE="$1"; shift ;;
	--kept) KEPT=1; shift ;;
	*) die "unknown argument '$1'; use [--line 6.12|7.3] [--dev|--print|--configure|--kept]" ;;
	esac
done
# HERE: the line's directory (source.lock, series, patches/, line.config).
# LROOT: where the line keeps tree, build dir and apt lists in the cache.
# Every line is a sibling directory with the same layout; the default
# line keeps its tree and build dir at the cache's top (where it always
# was), so moving its files here did not cost a cold kernel build.
HERE="$SCRIPT_DIR/$LINE"
[ -f "$HERE/source.lock" ] || die "no line '$LINE' (missing $HERE/source.lock); lines:$(cd "$SCRIPT_DIR" && for d in */source.lock; do [ -f "$d" ] && printf ' %s' "${d%/source.lock}"; done)"
if [ "$LINE" = "$DEFAULT_LINE" ]; then
	LROOT="$CACHE"
else
	LROOT="$CACHE/$LINE"
fi
LINE_FRAGMENT=
NOT_IN_LINE=
if [ -f "$HERE/line.config" ]; then
	LINE_FRAGMENT="$HERE/line.config"
	# "# not-in-line: CONFIG_X reason": the shared fragment names an
	# option this line's kernel does not have; its check is skipped.
	NOT_IN_LINE="$(sed -nE 's/^# not-in-line: (CONFIG_[A-Za-z0-9_]+).*/\1/p' "$LINE_FRAGMENT" | tr '\n' ' ')"
fi
# shellcheck source=source.lock
. "$HERE/source.lock"

# ---------------------------------------------------------------- inputs
inputs_hash() {
	{
		echo "$VERSION $DEB_SHA256"
		sha256sum "$SCRIPT_DIR/build.sh" "$FRAGMENT" "$HERE/series" ${LINE_FRAGMENT:+"$LINE_FRAGMENT"}
		while read -r p; do
			case "$p" in ''|'#'*) continue ;; esac
			sha256sum "$HERE/$p"
		done <"$HERE/series"
	} | sed "s|$SCRIPT_DIR/||" | sha256sum | cut -c1-16
}

[ -f "$HERE/series" ] || die "missing $HERE/series (list of patches, one per line)"
HASH="$(inputs_hash)"
OUT="$CACHE/$HASH"
if [ "$MODE" = "--print" ]; then
	[ -f "$OUT/bzImage" ] || exit 1
	echo "$OUT"; exit 0
fi
# The image file of each variant: y is the series (what every test boots),
# n the same tree and config with the option off (make bench-kernel's
# baseline), kasan the series with generic KASAN (test-kernel's sanitizer
# boots).
VARIANTS="${ZEROSTART_KERNEL_VARIANTS:-y}"
variant_image() {
	case "$1" in
	y) echo bzImage ;;
	n) echo bzImage-noprezero ;;
	kasan) echo bzImage-kasan ;;
	*) die "ZEROSTART_KERNEL_VARIANTS: unknown variant '$1' (use y, n, kasan or a list: \"y n\")" ;;
	esac
}
for v in $VARIANTS; do variant_image "$v" >/dev/null; done
# The build dir of a variant: kasan changes the flags of every object, so
# it keeps its own (switching one dir between them would rebuild each time).
# (BUILD is set below; before that, the line's own build dir.)
variant_build() {
	local b="${BUILD:-$LROOT/build}"
	case "$1" in kasan) echo "$b-kasan" ;; *) echo "$b" ;; esac
}
if [ "$KEPT" = 1 ]; then
	[ "$MODE" = build ] || die "--kept goes with a plain build, not $MODE"
	kept=
	for v in $VARIANTS; do
		if [ -f "$(variant_build "$v")/.config" ]; then
			kept="$kept $v"
		else
			log "variant $v: no build dir kept here ($(variant_build "$v")), not built; a first build of it is ZEROSTART_KERNEL_VARIANTS=$v build.sh${LINE:+ --line $LINE}"
		fi
	done
	[ -n "$kept" ] || exit 0
	VARIANTS="${kept# }"
fi
# The asked-for variants that $OUT does not hold yet.
missing_variants() {
	local v
	for v in $VARIANTS; do [ -f "$OUT/$(variant_image "$v")" ] || printf '%s ' "$v"; done
}
if [ "$MODE" = build ] && [ -z "$(missing_variants)" ]; then
	log "up to date"
	echo "$OUT"; exit 0
fi

# One builder at a time on the shared tree and build dir: test-kernel,
# test-nested-host and test-firmware-boot all call this script, and two of them applying
# the series or running Kbuild in one O= dir at once corrupt each other's
# work. A --dev build in its own ZEROSTART_KERNEL_DEV_ROOT needs no lock.
mkdir -p "$CACHE" "$LROOT"
if [ "$MODE" != --dev ] || [ -z "${ZEROSTART_KERNEL_DEV_ROOT:-}" ]; then
	exec 9>"$LROOT/.build.lock"
	if ! flock -n 9; then
		log "waiting for another kernel build (lock $LROOT/.build.lock)"
		flock 9
	fi
	# The other builder may have built exactly these inputs meanwhile.
	if [ "$MODE" = build ] && [ -z "$(missing_variants)" ]; then
		log "up to date"
		echo "$OUT"; exit 0
	fi
fi

# ---------------------------------------------------------------- host tools
need=()
for p in ccache flex bison bc libelf-dev libssl-dev build-essential xz-utils git perl; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
	log "installing ${need[*]}"
	SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
		die "could not install ${need[*]}; install them with apt-get and re-run"
fi

# ---------------------------------------------------------------- fetch
DL="$LROOT/dl"
mkdir -p "$DL/lists/partial"
deb_ok() { [ -f "$DL/$DEB" ] && echo "$DEB_SHA256  $DL/$DEB" | sha256sum -c --status; }
if ! deb_ok; then
	rm -f "$DL/$DEB"
	echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR $SUITE main" >"$DL/sources.list"
	APT=(apt-get -qq -o "Dir::State::Lists=$DL/lists" -o "Dir::Etc::SourceList=$DL/sources.list"
		-o Dir::Etc::SourceParts=/dev/null -o APT::Sandbox::User=root)
	log "fetching $PACKAGE=$VERSION from $SUITE (private apt lists, machine not upgraded)"
	"${APT[@]}" update || die "apt-get update for $SUITE failed (network? keyring?)"
	(cd "$DL" && "${APT[@]}" download "$PACKAGE=$VERSION") ||
		die "$PACKAGE=$VERSION is no longer on $MIRROR; bump VERSION and DEB_SHA256 in source.lock"
	deb_ok || die "$DEB checksum mismatch: expected $DEB_SHA256 (source.lock)"
fi

# ---------------------------------------------------------------- unpack + git
SRC="$LROOT/src/linux-$VERSION"
GIT=(git -C "$SRC" -c user.name=zerostart -c user.email=zerostart@localhost
	-c core.autocrlf=false -c advice.detachedHead=false)
if ! "${GIT[@]}" rev-parse -q --verify refs/tags/pristine >/dev/null 2>&1; then
	log "unpacking $TARBALL into $SRC"
	rm -rf "$SRC.tmp" && mkdir -p "$SRC.tmp"
	dpkg-deb --fsys-tarfile "$DL/$DEB" | tar -xO "./$TARBALL" | tar -xJ -C "$SRC.tmp" --strip-components=1
	git -C "$SRC.tmp" init -q -b zerostart
	git -C "$SRC.tmp" add -A -f . >/dev/null
	git -C "$SRC.tmp" -c user.name=zerostart -c user.email=zerostart@localhost \
		commit -q -m "Linux $VERSION (Debian $PACKAGE, pristine)"
	git -C "$SRC.tmp" tag pristine
	rm -rf "$SRC" && mv "$SRC.tmp" "$SRC"
fi

if [ "$MODE" = --dev ] && [ -n "${ZEROSTART_KERNEL_DEV_ROOT:-}" ]; then
	DEV_ROOT="$ZEROSTART_KERNEL_DEV_ROOT"
	SRC="$DEV_ROOT/src/linux-$VERSION"
	GIT=(git -C "$SRC")
	[ -f "$SRC/Makefile" ] || die "ZEROSTART_KERNEL_DEV_ROOT: no kernel tree at $SRC (git -C <cache tree> worktree add $SRC)"
fi

# ---------------------------------------------------------------- apply series
if [ "$MODE" != --dev ] && [ "$MODE" != --configure ]; then
	SERIES_ID="$(sha256sum "$HERE/series" | cut -c1-16)-$HASH"
	if [ "$(cat "$SRC/.git/zerostart-applied" 2>/dev/null)" != "$SERIES_ID" ] ||
		[ -n "$("${GIT[@]}" status --porcelain --untracked-files=no)" ]; then
		log "applying series to pristine tree"
		"${GIT[@]}" am --abort >/dev/null 2>&1 || true
		"${GIT[@]}" checkout -q -f -B zerostart pristine
		while read -r p; do
			case "$p" in ''|'#'*) continue ;; esac
			"${GIT[@]}" am -q --keep-cr "$HERE/$p" || die "patch $p does not apply to $VERSION"
		done <"$HERE/series"
		echo "$SERIES_ID" >"$SRC/.git/zerostart-applied"
	fi
fi

# ---------------------------------------------------------------- configure
BUILD="${DEV_ROOT:-$LROOT}/build"
mkdir -p "$BUILD"
# CCACHE_DEPEND: ccache's depend mode. By default a miss runs the
# preprocessor once for ccache's hash and again inside the compile; depend
# mode hashes the source and the headers Kbuild's -Wp,-MMD depfile names,
# so a miss costs one compile. Measured on a cold build of mm/ and kernel/
# (309 objects, -j3, 2-core AMD EPYC, 2026-12-06): gcc alone 200 CPU-s,
# ccache's default 263, depend mode 194; a rerun hits all 309 directly
# (4 s). A first build is all misses (a newcomer's make demo, whose long
# pole this image is), and Kbuild already rebuilds only what a config or
# series change touches, so the preprocessor-mode hits given up are few.
export CCACHE_DIR="$CACHE/ccache" CCACHE_BASEDIR="$SRC" CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=5G CCACHE_DEPEND=1
export KBUILD_BUILD_TIMESTAMP="Thu Jan  1 00:00:00 UTC 2026" KBUILD_BUILD_USER=zerostart KBUILD_BUILD_HOST=zerostart
JOBS="${ZEROSTART_KERNEL_JOBS:-$(($(nproc) + 1))}"
KMAKE=(make -s -C "$SRC" CC="ccache gcc" HOSTCC="ccache gcc" -j"$JOBS")

# configure <y|n|kasan>: defconfig + kvm_guest.config + fragment, then the
# variant, generated in a scratch dir; the variant's build dir's .config is
# replaced only when the content changes, so Kbuild stays incremental.
configure() {
	local variant="$1" cfg="${DEV_ROOT:-$LROOT}/cfg"
	local tmp="$cfg/.config" want_series=y
	mkdir -p "$cfg"
	make -s -C "$SRC" O="$cfg" CC="ccache gcc" HOSTCC="ccache gcc" defconfig >/dev/null
	KCONFIG_CONFIG="$tmp" "$SRC/scripts/kconfig/merge_config.sh" -m -O "$cfg" \
		"$tmp" "$SRC/kernel/configs/kvm_guest.config" "$FRAGMENT" ${LINE_FRAGMENT:+"$LINE_FRAGMENT"} >/dev/null
	if [ "$variant" = n ]; then
		"$SRC/scripts/config" --file "$tmp" -d ZEROSTART_PREZERO -d X86_CLEAR_HUGE_NT
		want_series=n
	elif [ "$variant" = kasan ]; then
		"$SRC/scripts/config" --file "$tmp" -e KASAN -e KASAN_GENERIC -e KASAN_INLINE
	fi
	make -s -C "$SRC" O="$cfg" CC="ccache gcc" HOSTCC="ccache gcc" olddefconfig >/dev/null
	# Every option the fragment names must have taken (merge_config only warns).
	local line opt want got
	while read -r line; do
		case "$line" in
		CONFIG_*=*) opt="${line%%=*}"; want="${line#*=}" ;;
		"# CONFIG_"*" is not set") opt="${line#\# }"; opt="${opt%% *}"; want=n ;;
		*) continue ;;
		esac
		case "$opt" in CONFIG_ZEROSTART_PREZERO|CONFIG_X86_CLEAR_HUGE_NT) want="$want_series" ;; esac
		# An option of the shared fragment this line's kernel does not
		# have (renamed or removed upstream), named in line.config.
		if [[ " $NOT_IN_LINE " == *" $opt "* ]]; then
			grep -rqs --include='Kconfig*' "^config ${opt#CONFIG_}\$" "$SRC" &&
				die "config: $LINE_FRAGMENT says $opt is not in $VERSION, but it is; remove the not-in-line line"
			continue
		fi
		case "$opt" in CONFIG_ZEROSTART_*|CONFIG_X86_CLEAR_HUGE_NT*)
			# A tree without the series (pristine baseline) has no such options.
			grep -q "config ${opt#CONFIG_}\$" -r "$SRC/mm/Kconfig" "$SRC/arch/x86/Kconfig" 2>/dev/null || continue
			if [ "$want_series" = n ] && [ "$opt" != CONFIG_ZEROSTART_PREZERO ] && [ "$opt" != CONFIG_X86_CLEAR_HUGE_NT ]; then continue; fi ;;
		esac
		got="$(grep -E "^$opt=|^# $opt is not set" "$tmp" || true)"
		case "$got" in "$opt=$want") ;; "# $opt is not set") [ "$want" = n ] || die "config: $opt is not set, fragment wants $want (check its dependencies)" ;;
		"") [ "$want" = n ] || die "config: $opt missing, fragment wants $want (check its dependencies)" ;;
		*) die "config: got '$got', fragment wants $opt=$want" ;;
		esac
	done < <(cat "$FRAGMENT" ${LINE_FRAGMENT:+"$LINE_FRAGMENT"})
	if [ "$variant" = kasan ] && ! grep -q "^CONFIG_KASAN_GENERIC=y" "$tmp"; then
		die "config: the kasan variant did not get CONFIG_KASAN_GENERIC=y (check its dependencies)"
	fi
	local dir
	dir="$(variant_build "$variant")"
	mkdir -p "$dir"
	cmp -s "$tmp" "$dir/.config" || cp "$tmp" "$dir/.config"
}

build_variant() {
	local variant="$1" dest="$2" dir
	dir="$(variant_build "$variant")"
	log "building $dest (variant $variant) in $dir with -j$JOBS"
	configure "$variant"
	local t0=$SECONDS
	"${KMAKE[@]}" O="$dir" bzImage || die "kernel build failed (variant $variant)"
	log "built in $((SECONDS - t0)) s"
	mkdir -p "$OUT"
	cp "$dir/arch/x86/boot/bzImage" "$OUT/$dest.tmp" && mv "$OUT/$dest.tmp" "$OUT/$dest"
	cp "$dir/.config" "$OUT/config-$dest"
}

if [ "$MODE" = --dev ] || [ "$MODE" = --configure ]; then
	OUT="${DEV_ROOT:+$DEV_ROOT/out}"
	OUT="${OUT:-$LROOT/dev}"
fi
if [ "$MODE" = --configure ]; then
	configure y
	"${KMAKE[@]}" O="$BUILD" prepare
	echo "$BUILD"; exit 0
fi
# A plain build makes only the variants its directory lacks (the option on
# first: that is the image the tests boot); --dev builds every one asked.
[ "$MODE" = build ] && TODO="$(missing_variants)" || TODO="$VARIANTS"
for v in $TODO; do
	build_variant "$v" "$(variant_image "$v")"
done
"${GIT[@]}" log --oneline pristine..HEAD >"$OUT/series.log"
echo "$OUT"
