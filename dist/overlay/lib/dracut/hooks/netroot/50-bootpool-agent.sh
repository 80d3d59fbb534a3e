#!/bin/sh
# bootpool's addition for dracut (dist/overlay/ in bootpool's repository, handed as a second
# initrd; docs/swarm.md, "In the initrd"; docs/pools.yaml.5, `nbd`). dracut's /sbin/netroot
# sources every *.sh of this hook folder once the interface is up and before it runs the
# root's handler: for `root=nbd:127.0.0.1:root` that is nbdroot, whose nbd-client then
# attaches /dev/nbd0 to the client agent. With `bootpool.blocks=` on the command line this
# starts the agent (/bootpool/agent.sh) and returns once it listens on 127.0.0.1:10809;
# without it, nothing. Sourced, so it ends without `exit`; a failure is said on the console
# and nbdroot's own then follows.

. "${BOOTPOOL_ADDITION:-/bootpool}/agent.sh"
bootpool_agent || :
