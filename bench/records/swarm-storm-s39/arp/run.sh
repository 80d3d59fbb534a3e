#!/bin/bash
# $1 = label, $2 = "low" to put the machine's default ARP limits back once the storm raised them
cd /work/wt-swarm39
O=/work/s39-out/repro
echo "start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg) fulls $(tail -n +2 /proc/net/stat/arp_cache | python3 -c "import sys; print(sum(int(l.split()[12],16) for l in sys.stdin))")" > $O/$1.meta
/tmp/s39-a/bootpool storm --config $O/pools-4x250mbit.yaml --root nbd --clients ${N:-120} --tftp-loader --client-link 100mbit --server-links 4x250mbit --think-scale 0.2 --label $1 --json $O/$1.json --swarm /tmp/s39-a/bootpool-agent > $O/$1.txt 2> $O/$1.log &
P=$!
if [ "$2" = low ]; then
  for i in $(seq 1 100); do
    v=$(cat /proc/sys/net/ipv4/neigh/default/gc_thresh3)
    if [ "$v" != 1024 ]; then echo "raised to $v after $i polls" >> $O/$1.meta; echo 512 > /proc/sys/net/ipv4/neigh/default/gc_thresh2; echo 1024 > /proc/sys/net/ipv4/neigh/default/gc_thresh3; break; fi
    sleep 0.1
  done
fi
sleep 3; echo "during: $(cat /proc/sys/net/ipv4/neigh/default/gc_thresh2) $(cat /proc/sys/net/ipv4/neigh/default/gc_thresh3)" >> $O/$1.meta
wait $P
echo "rc $? end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg) fulls $(tail -n +2 /proc/net/stat/arp_cache | python3 -c "import sys; print(sum(int(l.split()[12],16) for l in sys.stdin))") after: $(cat /proc/sys/net/ipv4/neigh/default/gc_thresh2) $(cat /proc/sys/net/ipv4/neigh/default/gc_thresh3)" >> $O/$1.meta
