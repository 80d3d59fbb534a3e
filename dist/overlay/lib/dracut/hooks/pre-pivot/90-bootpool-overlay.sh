#!/bin/sh
# bootpool's addition for dracut (dist/overlay/ in bootpool's repository, handed as a second
# initrd; docs/pools.yaml.5, `overlay`). dracut sources every *.sh of its hook folders at run
# time; at pre-pivot its own scripts have mounted the root at $NEWROOT, read-only, and this
# lays the overlay over it (`bootpool.overlay=` on the command line says which) before the
# switch to it, then writes the homes (`bootpool.homes=`) into its /etc/fstab. Sourced, so
# it ends without `exit`.

. /bootpool/overlay.sh
. /bootpool/homes.sh
bootpool_overlay "${NEWROOT:-/sysroot}" || :
bootpool_homes "${NEWROOT:-/sysroot}" || :
