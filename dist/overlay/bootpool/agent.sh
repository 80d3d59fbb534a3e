#!/bin/sh
# bootpool's addition to stock initrds (dist/overlay/ in bootpool's repository; docs/swarm.md,
# "In the initrd"; docs/pools.yaml.5, `nbd`). Sourced by /scripts/bootpool (initramfs-tools)
# and by dracut's netroot hook /lib/dracut/hooks/netroot/50-bootpool-agent.sh. It defines one
# function:
#
#   bootpool_agent
#
# With `bootpool.blocks=URL1,URL2,...` on the kernel command line (each URL the root's block
# manifest on one server), it brings the network up (initramfs-tools' configure_networking,
# which the nbd script would call next anyway; dracut has brought it up before its netroot
# hooks run) and the loopback interface (klibc's ipconfig, else iproute2's ip), starts the
# agent the addition carries, /bootpool/@bootpool-agent, serving the root on
# 127.0.0.1:10809 as export `root` from those servers, and waits until it listens (it fetches
# and checks the manifest first), so that the nbd script's nbd-client, told
# `nbdroot=127.0.0.1:10809/root`, finds it. The agent is run by the name `@bootpool-agent`
# through PATH, so that its argv[0] starts with `@`: systemd then leaves it running after the
# switch to the real root, and at shutdown. Its log is /run/bootpool/agent.log and its PID
# /run/bootpool/agent.pid (/run is moved into the real root). Without the argument nothing is
# done. With `bootpool.peers=PORT` (a pool with `nbd.peers`, docs/swarm.md) the agent also
# serves its room's peers on PORT and fetches from them. Lines start `bootpool-agent: `.
# For tests, the command line is read from
# $BOOTPOOL_CMDLINE when set (else /proc/cmdline), the agent found in $BOOTPOOL_ADDITION (else
# /bootpool) and the log written under $BOOTPOOL_RUN (else /run). Written for any POSIX sh and
# for klibc's tools (no grep or sed; ip only where ipconfig is missing, as in dracut's).

bootpool_agent_say() {
	echo "bootpool-agent: $*" >/dev/console 2>/dev/null || echo "bootpool-agent: $*"
}

# Whether something listens on 127.0.0.1:10809 (0100007F:2A39, state 0A in /proc/net/tcp).
bootpool_agent_listens() {
	# shellcheck disable=SC2034 # the columns read and not used
	while read -r bp_sl bp_local bp_remote bp_state bp_rest; do
		[ "$bp_local" = 0100007F:2A39 ] && [ "$bp_state" = 0A ] && return 0
	done </proc/net/tcp
	return 1
}

bootpool_agent() {
	bp_blocks=
	bp_peers=
	# shellcheck disable=SC2013
	for bp_x in $(cat "${BOOTPOOL_CMDLINE:-/proc/cmdline}"); do
		case "$bp_x" in
		bootpool.blocks=*) bp_blocks=${bp_x#bootpool.blocks=} ;;
		bootpool.peers=*) bp_peers="--peers 0.0.0.0:${bp_x#bootpool.peers=}" ;;
		esac
	done
	[ -n "$bp_blocks" ] || return 0
	bp_bin=${BOOTPOOL_ADDITION:-/bootpool}
	bp_run=${BOOTPOOL_RUN:-/run}
	if [ ! -x "$bp_bin/@bootpool-agent" ]; then
		bootpool_agent_say "FAILED: bootpool.blocks= is given but this addition carries no agent (server.agent)"
		return 1
	fi
	command -v configure_networking >/dev/null 2>&1 && configure_networking
	# The loopback interface is down in initramfs-tools' initrd. ipconfig writes
	# /run/net-lo.conf, which configure_networking would take for the client's own interface:
	# removed. dracut's has iproute2 (systemd's initrd has brought lo up already; the address
	# added again is refused, quietly).
	if command -v ipconfig >/dev/null 2>&1; then
		ipconfig -t 1 127.0.0.1:::255.0.0.0::lo:none >/dev/null 2>&1
		rm -f /run/net-lo.conf
	elif command -v ip >/dev/null 2>&1; then
		ip link set lo up >/dev/null 2>&1
		ip addr add 127.0.0.1/8 dev lo >/dev/null 2>&1
	fi
	mkdir -p "$bp_run/bootpool"
	bootpool_agent_say "starting from $bp_blocks"
	# shellcheck disable=SC2086 # bp_peers is empty or two words
	PATH="$bp_bin:$PATH" @bootpool-agent --listen 127.0.0.1:10809 --name root $bp_peers "$bp_blocks" \
		</dev/null >>"$bp_run/bootpool/agent.log" 2>&1 &
	echo $! >"$bp_run/bootpool/agent.pid"
	# Up to 90 s: the agent tries the servers for 60 s before it gives up on the manifest.
	bp_i=0
	while ! bootpool_agent_listens; do
		bp_i=$((bp_i + 1))
		if [ "$bp_i" -gt 90 ]; then
			bootpool_agent_say "FAILED: the agent does not listen after 90 s ($bp_run/bootpool/agent.log)"
			return 1
		fi
		sleep 1
	done
	bootpool_agent_say "serving the root on 127.0.0.1:10809"
}
