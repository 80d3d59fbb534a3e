#!/bin/sh
# bootpool's addition to stock initrds (dist/overlay/ in bootpool's repository; docs/homes.md,
# docs/pools.yaml.5, `homes`). Sourced by /scripts/bootpool (initramfs-tools) and by dracut's
# pre-pivot hook after overlay.sh, once the overlay is laid over the root. It defines one
# function:
#
#   bootpool_homes ROOTMNT
#
# With `bootpool.homes=SERVER:EXPORT` on the kernel command line (and the mount options in
# `bootpool.homes.options=`), writes the line
#
#   SERVER:EXPORT /home nfs OPTIONS 0 0
#
# into ROOTMNT/etc/fstab in place of any line the image has for /home, and makes /home if the
# image lacks it. The write lands in the overlay's writable layer: the image is never
# written. The booted system (systemd's fstab generator, or the image's own init) mounts the
# homes once its network is up, with the image's mount.nfs (Debian's nfs-common). Without
# the argument nothing is done. Lines start `bootpool-homes: `. The command line is read from
# $BOOTPOOL_CMDLINE when set (tests), else /proc/cmdline. Written for any POSIX sh and for
# klibc's tools (no grep, sed or mv).

bootpool_homes_say() {
	echo "bootpool-homes: $*" >/dev/console 2>/dev/null || echo "bootpool-homes: $*"
}

bootpool_homes() {
	bp_root=$1
	bp_homes=
	bp_hopts=rw,hard,nofail,_netdev
	# shellcheck disable=SC2013
	for bp_x in $(cat "${BOOTPOOL_CMDLINE:-/proc/cmdline}"); do
		case "$bp_x" in
		bootpool.homes=*) bp_homes=${bp_x#bootpool.homes=} ;;
		bootpool.homes.options=*) bp_hopts=${bp_x#bootpool.homes.options=} ;;
		esac
	done
	[ -n "$bp_homes" ] || return 0
	bp_fstab=$bp_root/etc/fstab
	# The image's lines but those for /home, then the homes'. Read whole before writing:
	# the same file is written back (klibc has no mv).
	bp_keep=
	if [ -e "$bp_fstab" ]; then
		set -f
		while IFS= read -r bp_line || [ -n "$bp_line" ]; do
			# shellcheck disable=SC2086
			set -- $bp_line
			case "${1-}" in
			'#'*) ;;
			*) [ "${2-}" = /home ] && continue ;;
			esac
			bp_keep="$bp_keep$bp_line
"
		done <"$bp_fstab"
		set +f
	fi
	if ! mkdir -p "$bp_root/etc" "$bp_root/home" 2>/dev/null \
		|| ! printf '%s%s /home nfs %s 0 0\n' "$bp_keep" "$bp_homes" "$bp_hopts" \
			>"$bp_fstab" 2>/dev/null; then
		bootpool_homes_say "FAILED: cannot write /etc/fstab (the root is read-only: no overlay); $bp_homes is not mounted at /home"
		return 1
	fi
	bootpool_homes_say "/home is $bp_homes ($bp_hopts), in /etc/fstab"
}
